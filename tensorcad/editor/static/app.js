// tensorcad editor: the page's logic. Plain JavaScript, no build step, nothing fetched
// from anywhere but this server. The server does every count; this file only asks and draws.
"use strict";

const OP_KEY = "tensorcad.op";          // the operating point, kept across visits
const DESIGN_KEY = "tensorcad.design";  // the text being edited, kept across visits
const PRESET_KEY = "tensorcad.preset";
const CELLS = 128;                      // the preview's grid: CELLS x CELLS cells
const DEBOUNCE_MS = 350;

const $ = (id) => document.getElementById(id);

const state = {
  presets: [],
  defaults: {},
  op: { seq: 8192, hardware: null, gpus: null, mfu: null, pricePerGpuHour: null, packing: null },
  described: null,      // the last design the server accepted: inputs, attentions
  attention: 0,
  generation: 0,        // answers to older edits are dropped
  timer: null,
};

// -- talking to the server -----------------------------------------------------

async function call(method, path, body) {
  const init = { method, headers: {} };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  let data;
  try {
    data = await response.json();
  } catch (e) {
    data = { error: `the server answered ${response.status} without JSON`, path: "" };
  }
  return { ok: response.ok, status: response.status, data };
}

// -- numbers as people read them -------------------------------------------------

const int = (x) => Math.round(x).toLocaleString("en-US");
const fixed = (x, digits) => x.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });

function si(x, unit) {
  for (const [prefix, scale] of [["P", 1e15], ["T", 1e12], ["G", 1e9], ["M", 1e6], ["k", 1e3]]) {
    if (Math.abs(x) >= scale) return `${fixed(x / scale, 2)} ${prefix}${unit}`;
  }
  return `${fixed(x, 2)} ${unit}`;
}

// Memory in binary units, as the CLI prints it (tensorcad/format.py).
function binaryBytes(n) {
  for (const [unit, scale] of [["TiB", 2 ** 40], ["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]]) {
    if (Math.abs(n) >= scale) return `${fixed(n / scale, 2)} ${unit}`;
  }
  return `${int(n)} B`;
}

function duration(seconds) {
  if (seconds >= 2 * 86400) return `${fixed(seconds / 86400, 1)} days`;
  if (seconds >= 3600) return `${fixed(seconds / 3600, 1)} hours`;
  if (seconds >= 60) return `${fixed(seconds / 60, 1)} minutes`;
  return `${fixed(seconds, seconds >= 1 ? 1 : 3)} s`;
}

const percent = (x) => `${fixed(100 * x, 1)}%`;

// -- small DOM helpers (text only: nothing the server says is read as HTML) ------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("data-")) node.setAttribute(key, value);
    else node[key] = value;
  }
  for (const child of children) node.append(child instanceof Node ? child : String(child));
  return node;
}

function showError(target, error) {
  const line = $(target);
  line.replaceChildren();
  if (!error) {
    line.hidden = true;
    return;
  }
  const text = error.error || String(error);
  const path = error.path || "";
  if (path && text.startsWith(path + ": ")) {
    line.append(el("b", {}, path), text.slice(path.length));
  } else {
    line.append(text);
  }
  line.dataset.path = path;
  line.hidden = false;
}

function setStatus(text, busy = false) {
  $("status").textContent = text;
  $("status").classList.toggle("busy", busy);
  if (busy) document.body.dataset.state = "busy";
}

function markStale(stale) {
  for (const id of ["readout", "rules", "walkthrough", "preview"]) $(id).classList.toggle("stale", stale);
}

// -- the operating point -----------------------------------------------------------

function storeOp() {
  localStorage.setItem(OP_KEY, JSON.stringify(state.op));
}

function numberOrNull(input, integer) {
  const text = input.value.trim();
  if (text === "") return null;
  const value = Number(text);
  if (!Number.isFinite(value)) return text;            // the engine will say what is wrong
  return integer && Number.isInteger(value) ? value : (integer ? text : value);
}

function readOpForm() {
  state.op.seq = numberOrNull($("seq"), true);
  state.op.hardware = $("hardware").value || null;
  state.op.gpus = numberOrNull($("gpus"), true);
  state.op.mfu = numberOrNull($("mfu"), false);
  state.op.pricePerGpuHour = numberOrNull($("price"), false);
  if ($("pack").checked) {
    // An empty spread is sent as null: a mean alone gets spread 1, as on the command line.
    state.op.packing = { mean: numberOrNull($("docs"), false), spread: numberOrNull($("spread"), false),
                         strategy: $("strategy").value || "stream" };
  } else {
    state.op.packing = null;
  }
}

function defaultDocs() {
  const seq = Number(state.op.seq) || 8192;
  return Math.max(1, Math.round(seq / 8));
}

function writeOpForm() {
  const op = state.op;
  $("seq").value = op.seq ?? "";
  $("hardware").value = op.hardware ?? state.defaults.hardware ?? "";
  $("gpus").value = op.gpus ?? state.defaults.gpus ?? "";
  $("mfu").value = op.mfu ?? state.defaults.mfu ?? "";
  $("price").value = op.pricePerGpuHour ?? state.defaults.pricePerGpuHour ?? "";
  $("pack").checked = op.packing !== null;
  $("docs").value = op.packing ? op.packing.mean : "";
  $("spread").value = op.packing ? op.packing.spread : "";
  $("strategy").value = (op.packing && op.packing.strategy) || "stream";
  showPacking();
}

// The control shows for a design that has a documents input, and whenever a packing
// is set, so that one carried over from another design can always be taken off.
function showPacking() {
  const documents = state.described ? state.described.documents : false;
  const packed = state.op.packing !== null;
  $("packing").hidden = !(documents || packed);
  $("docs").disabled = !packed;
  $("spread").disabled = !packed;
  $("strategy").disabled = !packed;
  let note = "";
  if (packed && !documents) note = "This design has no documents input: the packing changes nothing. Untick to take it off.";
  else if (!packed) note = "Off: one document fills each row.";
  else note = "Training rows hold documents of this mean length (gamma lengths; spread 0 fixed, 1 exponential). Serving stays one document a sequence.";
  $("packing-note").textContent = note;
}

// A stored packing the engine would refuse is dropped when the editor loads.
async function restoreOp() {
  let stored = null;
  try {
    stored = JSON.parse(localStorage.getItem(OP_KEY) || "null");
  } catch (e) {
    stored = null;
  }
  if (!stored || typeof stored !== "object" || Array.isArray(stored)) return;
  const op = Object.assign({}, state.op);
  for (const key of Object.keys(op)) if (key in stored) op[key] = stored[key];
  let answer = await call("POST", "/api/operating-point", { op });
  if (!answer.ok && String(answer.data.path || "").startsWith("op.packing")) {
    $("op-notice").textContent = `Dropped a stored packing the engine refuses (${answer.data.error}).`;
    $("op-notice").hidden = false;
    op.packing = null;
    answer = await call("POST", "/api/operating-point", { op });
  }
  if (!answer.ok) {
    $("op-notice").textContent = `Dropped a stored operating point the engine refuses (${answer.data.error}).`;
    $("op-notice").hidden = false;
    localStorage.removeItem(OP_KEY);
    return;
  }
  state.op = op;
  storeOp();
}

// -- the design --------------------------------------------------------------------

async function loadPreset(name) {
  clearTimeout(state.timer);
  state.generation++;  // an answer still on its way is for the design being replaced
  setStatus(`loading ${name}…`, true);
  const answer = await call("GET", `/api/design?name=${encodeURIComponent(name)}`);
  if (!answer.ok) {
    showError("design-error", answer.data);
    setStatus("the preset could not be loaded");
    document.body.dataset.state = "error";
    return;
  }
  const preset = state.presets.find((p) => p.name === name);
  if (preset) state.op.seq = preset.context;
  $("design").value = JSON.stringify(answer.data.design, null, 2);
  $("preset").value = name;
  localStorage.setItem(PRESET_KEY, name);
  localStorage.setItem(DESIGN_KEY, $("design").value);
  state.attention = 0;
  writeOpForm();
  storeOp();
  await update();
}

function schedule() {
  clearTimeout(state.timer);
  setStatus("checking…", true);
  state.timer = setTimeout(update, DEBOUNCE_MS);
}

// One edit, one round: analyse (which also validates), then the rules and the preview.
async function update() {
  clearTimeout(state.timer);
  const generation = ++state.generation;
  const text = $("design").value;
  const op = state.op;
  setStatus("analysing…", true);
  const started = performance.now();
  const answer = await call("POST", "/api/analyze", { text, op });
  if (generation !== state.generation) return;
  if (!answer.ok) {
    const onOp = String(answer.data.path || "").startsWith("op");
    showError(onOp ? "op-error" : "design-error", answer.data);
    showError(onOp ? "design-error" : "op-error", null);
    $("design").classList.toggle("invalid", !onOp);
    markStale(true);
    setStatus(onOp ? "the operating point is refused" : "the design is refused; your text is kept");
    document.body.dataset.state = "error";
    return;
  }
  showError("design-error", null);
  showError("op-error", null);
  $("design").classList.remove("invalid");
  state.described = answer.data.design;
  if (state.attention >= state.described.attentions.length) state.attention = 0;
  showPacking();
  renderReadout(answer.data.report);
  renderWalkthrough(answer.data.walkthrough);
  renderAttentions();
  const [rules, preview] = await Promise.all([
    call("POST", "/api/rules", { text, op }),
    state.described.attentions.length
      ? call("POST", "/api/preview", { text, op, attention: state.attention, cells: CELLS })
      : Promise.resolve(null),
  ]);
  if (generation !== state.generation) return;
  renderRules(rules);
  renderPreview(preview);
  markStale(false);
  setStatus(`analysed in ${fixed((performance.now() - started) / 1000, 2)} s`);
  document.body.dataset.state = "ready";
}

// -- the readout -------------------------------------------------------------------

function renderReadout(report) {
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
        `${op.packing.mean.toLocaleString("en-US")}-token documents, spread ${op.packing.spread}: the cost counts from this`, "sub packed");
    row("packed attention", "flops.packed.fwdAttention", k.fwdAttention, si(k.fwdAttention, "FLOP"),
        `${fixed(k.keysPerQuery, 1)} keys a query, ${percent(k.attentionShare)} of the forward pass`, "sub packed");
    row("in whole blocks", "flops.packed.blockRatio", k.blockRatio, `${fixed(k.blockRatio, 2)}×`,
        `a kernel computing whole 128 × 128 blocks: ${si(k.fwdAttentionBlocks, "FLOP")} a token`, "sub packed");
    if (k.packing && k.packing.strategy !== "stream") {
      row("padding", "flops.packed.packing.padding", k.packing.padding, percent(k.packing.padding),
          `${k.packing.strategy}: figures per real token; ${percent(k.packing.truncated)} of documents truncated`,
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

// -- rules, walkthrough, attentions ------------------------------------------------

function renderRules(answer) {
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

function renderWalkthrough(steps) {
  $("walkthrough").replaceChildren(...steps.map((s) =>
    el("li", { "data-step": s.step }, el("b", {}, s.title), s.text)));
}

function renderAttentions() {
  const select = $("attention");
  const list = state.described.attentions;
  select.replaceChildren(...list.map((a) =>
    el("option", { value: String(a.index) }, `${a.path} ×${a.layers}: ${a.keeps}`)));
  select.value = String(state.attention);
  $("attention-pick").hidden = list.length < 2;
}

// -- the mask preview ------------------------------------------------------------------

function shade(fraction) {
  // White (nothing kept) to the accent blue (everything kept), linear in the fraction.
  const mix = (from, to) => Math.round(from + (to - from) * fraction);
  return `rgb(${mix(255, 31)}, ${mix(255, 78)}, ${mix(255, 156)})`;
}

function renderPreview(answer) {
  const canvas = $("preview");
  const context = canvas.getContext("2d");
  context.fillStyle = "#fff";
  context.fillRect(0, 0, canvas.width, canvas.height);
  const caption = $("preview-caption");
  if (!answer) {
    caption.textContent = "no attention to preview";
    canvas.dataset.state = "empty";
    return;
  }
  if (!answer.ok) {
    caption.textContent = answer.data.error;
    canvas.dataset.state = "error";
    return;
  }
  const p = answer.data;
  const n = p.cells;
  const edge = (i) => Math.round((i * canvas.width) / n);
  let kept = 0;
  for (let i = 0; i < n; i++) {
    for (let j = 0; j < n; j++) {
      const f = p.fractions[i][j];
      if (f <= 0) continue;
      kept++;
      context.fillStyle = shade(f);
      context.fillRect(edge(j), edge(i), edge(j + 1) - edge(j), edge(i + 1) - edge(i));
    }
  }
  canvas.dataset.state = "drawn";
  canvas.dataset.cells = String(n);
  canvas.dataset.keptCells = String(kept);
  canvas.dataset.sample = p.sample;

  const what = p.sampled
    ? `${p.packing.mean.toLocaleString("en-US")}-token documents, spread ${p.packing.spread}: ${p.documents} documents or pieces`
    : "no packing";
  const exact = p.exact ? "exact counts" : `estimated from every ${p.stride}th query and key`;
  caption.replaceChildren(
    el("b", { id: "preview-sample" }, p.sample), ` of ${int(p.seq)} tokens (${what}). `,
    `${n} × ${n} cells of ${int(p.cellTokens)} tokens; the shade is the fraction of scores kept (${exact}). `,
    `Keeps ${p.keeps}.`);
}

// -- wiring -----------------------------------------------------------------------------

async function start() {
  const presets = await call("GET", "/api/presets");
  state.presets = presets.data.presets;
  state.defaults = presets.data.defaults;
  for (const p of state.presets) $("preset").append(el("option", { value: p.name }, p.name));
  $("hardware").replaceChildren(...presets.data.hardware.map((h) => el("option", { value: h }, h)));
  call("GET", "/api/catalog").then((answer) => { if (answer.ok) $("catalog").textContent = answer.data.text; });

  await restoreOp();
  writeOpForm();

  $("preset").addEventListener("change", () => { if ($("preset").value) loadPreset($("preset").value); });
  $("design").addEventListener("input", () => {
    localStorage.setItem(DESIGN_KEY, $("design").value);
    localStorage.removeItem(PRESET_KEY);
    $("preset").value = "";
    schedule();
  });
  $("op").addEventListener("input", (event) => {
    if (event.target === $("pack") && $("pack").checked) {
      if (!$("docs").value) $("docs").value = defaultDocs();
      if (!$("spread").value) $("spread").value = 1;   // real corpora vary: spread starts at 1
    }
    readOpForm();
    showPacking();
    storeOp();
    schedule();
  });
  $("op").addEventListener("submit", (event) => event.preventDefault());
  $("attention").addEventListener("change", () => {
    state.attention = Number($("attention").value);
    update();
  });

  const initial = await call("GET", "/api/initial");
  const storedText = localStorage.getItem(DESIGN_KEY);
  if (initial.ok && initial.data.design) {
    $("design").value = JSON.stringify(initial.data.design, null, 2);
    // A design opened from the command line is analysed at its own context, as a preset is.
    state.op.seq = initial.data.context;
    writeOpForm();
    storeOp();
    await update();
  } else if (storedText) {
    $("design").value = storedText;
    $("preset").value = localStorage.getItem(PRESET_KEY) || "";
    await update();
  } else {
    await loadPreset("llama-3-8b-documents");
  }
}

document.addEventListener("DOMContentLoaded", start);
