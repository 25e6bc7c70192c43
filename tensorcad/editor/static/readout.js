// The readout, the rules and the walkthrough: the engine's report and diagnostics as tables and
// paragraphs. Each figure keeps its raw value in data-value, for tests to hold to the API.
import { $, binaryBytes, duration, el, fixed, int, percent, si } from "./dom.js";

// -- the readout -------------------------------------------------------------------

export function renderReadout(report) {
  const rows = [];
  const row = (name, field, raw, value, detail = "", cls = "") => rows.push({ name, field, raw, value, detail, cls });
  const section = (name) => rows.push({ section: name });
  const p = report.params, f = report.flops, k = f.packed, t = report.training, s = report.serving;
  const op = report.operatingPoint;

  section("model");
  row("params", "params.total", p.total, int(p.total), `embedding ${int(p.embedding)}, matmul ${int(p.matmul)}`);
  row("forward / token", "flops.fwdPerToken", f.fwdPerToken, si(f.fwdPerToken, "FLOP"), "one document a row");
  row("attention", "flops.fwdAttention", f.fwdAttention, si(f.fwdAttention, "FLOP"),
      `${percent(f.attentionShare)} of the forward pass`, "sub");
  row("keys / query", "flops.keysPerQuery", f.keysPerQuery, fixed(f.keysPerQuery, 1), `at ${int(op.seq)} tokens`, "sub");

  section("training");
  row("train / token", "flops.trainPerToken", f.trainPerToken, si(f.trainPerToken, "FLOP"),
      k ? "one document a row" : "3 × forward; the cost counts from this");
  if (k) {
    row("packed train / token", "flops.packed.trainPerToken", k.trainPerToken, si(k.trainPerToken, "FLOP"),
        `${op.packing.mean.toLocaleString("en-US", { maximumFractionDigits: 0 })}-token documents, spread ${+op.packing.spread.toFixed(2)}: the cost counts from this`, "sub packed");
    row("packed attention", "flops.packed.fwdAttention", k.fwdAttention, si(k.fwdAttention, "FLOP"),
        `${fixed(k.keysPerQuery, 1)} keys a query, ${percent(k.attentionShare)} of the forward pass`, "sub packed");
    row("in whole blocks", "flops.packed.blockRatio", k.blockRatio, `${fixed(k.blockRatio, 2)}×`,
        `a kernel computing whole 128 × 128 blocks: ${si(k.fwdAttentionBlocks, "FLOP")} a token`, "sub packed");
    if (k.packing && k.packing.strategy !== "stream") {
      row("padding", "flops.packed.packing.padding", k.packing.padding, percent(k.packing.padding),
          `${k.packing.strategy}: figures per real token; ${percent(k.packing.truncated)} of documents truncated, ` +
          `${percent(k.packing.tokensDropped)} of tokens dropped`,
          "sub packed");
    }
  }
  row("tokens", "training.tokens", t.tokens, si(t.tokens, ""), op.tokens ? "the budget" : "20 a parameter (Chinchilla)");
  row("time", "training.seconds", t.seconds, duration(t.seconds),
      `${int(op.gpus)} × ${op.hardware} at ${percent(op.mfu)} MFU`);
  const money = (x) => (x >= 100 ? `$${int(x)}` : `$${fixed(x, 2)}`);
  const hours = t.gpuHours >= 100 ? int(t.gpuHours) : fixed(t.gpuHours, 3);
  row("cost", "training.cost", t.cost, money(t.cost), `${hours} GPU-hours at $${op.pricePerGpuHour}/hour`);

  section("serving");
  row("forward / token", "serving.fwdPerToken", s.fwdPerToken, si(s.fwdPerToken, "FLOP"), "one document a sequence");
  if (s.perStream) {
    row("KV cache / stream", "serving.perStream.kvCacheBytes", s.perStream.kvCacheBytes,
        binaryBytes(s.perStream.kvCacheBytes), `${op.serveDtype} at full context`, "sub");
    row("decode / token", "serving.perStream.decodeFlopsPerToken", s.perStream.decodeFlopsPerToken,
        si(s.perStream.decodeFlopsPerToken, "FLOP"), "at full context", "sub");
  }

  const table = $("readout");
  table.replaceChildren(...rows.map((r) => r.section
    ? el("tr", { class: "section" }, el("td", { colSpan: 3 }, r.section))
    : el("tr", { class: r.cls, "data-field": r.field },
        el("td", { class: "name" }, r.name),
        el("td", { class: "value", "data-field": r.field, "data-value": String(r.raw) }, r.value),
        el("td", { class: "detail" }, r.detail))));
}

// -- rules and walkthrough ------------------------------------------------

export function renderRules(answer) {
  const table = $("rules");
  if (!answer || !answer.ok) {
    table.replaceChildren(el("tr", {}, el("td", { class: "none" }, answer ? answer.data.error : "")));
    return;
  }
  const found = answer.data.diagnostics;
  if (!found.length) {
    table.replaceChildren(el("tr", {}, el("td", { class: "none" }, "no findings")));
    return;
  }
  table.replaceChildren(...found.map((d) => el("tr", { "data-rule": d.rule },
    el("td", {}, el("span", { class: `sev ${d.severity}` }, d.severity)),
    el("td", {}, d.rule),
    el("td", { class: "path" }, d.path),
    el("td", {}, d.message))));
}

export function renderWalkthrough(steps) {
  $("walkthrough").replaceChildren(...steps.map((s) =>
    el("li", { "data-step": s.step }, el("b", {}, s.title), s.text)));
}
