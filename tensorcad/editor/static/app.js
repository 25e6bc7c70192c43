// tensorcad editor: the page's logic. Plain JavaScript modules, no build step, nothing fetched
// from anywhere but this server. The server does every count; these files only ask and draw.
import { $, call, el, fixed, int } from "./dom.js";
import { DesignView } from "./design-view.js";
import { renderChart, renderPreview, renderRanks } from "./drawings.js";
import { renderReadout, renderRules, renderWalkthrough } from "./readout.js";

const OP_KEY = "tensorcad.op";          // the operating point, kept across visits
const DESIGN_KEY = "tensorcad.design";  // the text being edited, kept across visits
const PRESET_KEY = "tensorcad.preset";
const CELLS = 128;                      // the preview's grid: CELLS x CELLS cells
const DEBOUNCE_MS = 350;

const state = {
  presets: [],
  defaults: {},
  op: { seq: 8192, hardware: null, gpus: null, mfu: null, pricePerGpuHour: null, packing: null, cp: null },
  maxUpload: 0,         // bytes of a lengths file the server reads
  lengths: null,        // an uploaded lengths file, as the server read it: {name, histogram, summary}
  described: null,      // the last design the server accepted: inputs, attentions
  attention: 0,
  generation: 0,        // answers to older edits are dropped
  timer: null,
  view: null,           // the design view (tree, inspector, history)
};

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
  for (const id of ["readout", "rules", "walkthrough", "preview", "blocks", "chart-box", "ranks"]) $(id).classList.toggle("stale", stale);
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
  if ($("pack").checked && state.lengths) {
    // A lengths file replaces the mean and spread: the engine reads both off the histogram.
    state.op.packing = { lengths: state.lengths.histogram, strategy: $("strategy").value || "stream" };
  } else if ($("pack").checked) {
    // An empty spread is sent as null: a mean alone gets spread 1, as on the command line.
    state.op.packing = { mean: numberOrNull($("docs"), false), spread: numberOrNull($("spread"), false),
                         strategy: $("strategy").value || "stream" };
  } else {
    state.op.packing = null;
  }
  const size = $("cp-size").value;
  state.op.cp = size ? { size: Number(size), shard: $("cp-shard").value } : null;
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
  const lengths = op.packing && op.packing.lengths ? state.lengths : null;
  $("docs").value = lengths ? fixed(lengths.summary.mean, 0).replace(/,/g, "") : (op.packing ? op.packing.mean ?? "" : "");
  $("spread").value = lengths ? lengths.summary.spread.toFixed(2) : (op.packing ? op.packing.spread ?? "" : "");
  $("strategy").value = (op.packing && op.packing.strategy) || "stream";
  $("cp-size").value = op.cp ? String(op.cp.size) : "";
  $("cp-shard").value = op.cp ? op.cp.shard : (state.defaults.shard || "headtail");
  showPacking();
}

// The control shows for a design that has a documents input, and whenever a packing
// is set, so that one carried over from another design can always be taken off.
function showPacking() {
  const documents = state.described ? state.described.documents : false;
  const packed = state.op.packing !== null;
  $("packing").hidden = !(documents || packed);
  const fromFile = packed && state.lengths !== null && state.op.packing.lengths !== undefined;
  $("docs").disabled = !packed || fromFile;
  $("spread").disabled = !packed || fromFile;
  $("strategy").disabled = !packed;
  $("lengths-file").disabled = !packed;
  $("lengths-readout").hidden = !fromFile;
  if (fromFile) {
    const s = state.lengths.summary;
    $("lengths-name").textContent = `${state.lengths.name}: ${int(s.documents)} documents, mean ${fixed(s.mean, 1)}, `
      + `spread ${fixed(s.spread, 2)}, p99 ${int(s.p99)}, max ${int(s.max)}. `;
  }
  $("cp-shard").disabled = !$("cp-size").value;
  let note = "";
  if (packed && !documents) note = "This design has no documents input: the packing changes nothing. Untick to take it off.";
  else if (!packed) note = "Off: one document fills each row.";
  else if (fromFile) note = "Training rows hold documents drawn from the file's lengths. Serving stays one document a sequence.";
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
  for (const [part, words] of [["packing", "packing"], ["cp", "context parallelism"]]) {
    if (!answer.ok && String(answer.data.path || "").startsWith(`op.${part}`)) {
      $("op-notice").textContent = `Dropped a stored ${words} the engine refuses (${answer.data.error}).`;
      $("op-notice").hidden = false;
      op[part] = null;
      answer = await call("POST", "/api/operating-point", { op });
    }
  }
  if (!answer.ok) {
    $("op-notice").textContent = `Dropped a stored operating point the engine refuses (${answer.data.error}).`;
    $("op-notice").hidden = false;
    localStorage.removeItem(OP_KEY);
    return;
  }
  if (op.packing && op.packing.lengths) {
    // The file's name and summary are not stored: the engine reads the histogram again.
    const read = answer.data.op.packing;
    state.lengths = { name: "stored lengths", histogram: op.packing.lengths, summary: read.lengths };
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
  state.view.load($("design").value);
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
    state.view.judged(onOp ? null : answer.data);
    markStale(true);
    setStatus(onOp ? "the operating point is refused" : "the design is refused; your text is kept");
    document.body.dataset.state = "error";
    return;
  }
  showError("design-error", null);
  showError("op-error", null);
  $("design").classList.remove("invalid");
  state.view.judged(null);
  state.described = answer.data.design;
  if (state.attention >= state.described.attentions.length) state.attention = 0;
  showPacking();
  renderReadout(answer.data.report);
  renderRanks(answer.data.report);
  renderWalkthrough(answer.data.walkthrough);
  renderAttentions();
  const [rules, preview, chart] = await Promise.all([
    call("POST", "/api/rules", { text, op }),
    state.described.attentions.length
      ? call("POST", "/api/preview", { text, op, attention: state.attention, cells: CELLS })
      : Promise.resolve(null),
    call("POST", "/api/chart", { text, op }),
  ]);
  if (generation !== state.generation) return;
  renderRules(rules);
  renderPreview(preview);
  renderChart(chart);
  markStale(false);
  setStatus(`analysed in ${fixed((performance.now() - started) / 1000, 2)} s`);
  document.body.dataset.state = "ready";
}

// -- the attention picker ------------------------------------------------------------

function renderAttentions() {
  const select = $("attention");
  const list = state.described.attentions;
  select.replaceChildren(...list.map((a) =>
    el("option", { value: String(a.index) }, `${a.path} ×${a.layers}: ${a.keeps}`)));
  select.value = String(state.attention);
  $("attention-pick").hidden = list.length < 2;
}

// -- a lengths file -------------------------------------------------------------------

// The file's bytes go to the server, which reads them as `--pack-lengths` reads a file (by its
// suffix: a JSON or CSV histogram, a text, .npy or Parquet list); the page keeps the histogram.
async function readLengthsFile() {
  const file = $("lengths-file").files[0];
  if (!file) return;
  if (file.size > state.maxUpload) {  // refused here rather than sent: the server would refuse it too
    showError("op-error", { error: `${file.name} is ${int(file.size)} bytes; at most ${int(state.maxUpload)} here `
      + "(write a histogram with `tensorcad lengths`, which is tiny)", path: "" });
    $("lengths-file").value = "";
    return;
  }
  const bytes = new Uint8Array(await file.arrayBuffer());
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  setStatus(`reading ${file.name}…`, true);
  const answer = await call("POST", "/api/lengths", { name: file.name, base64: btoa(binary) });
  if (!answer.ok) {
    showError("op-error", answer.data);
    $("lengths-file").value = "";
    setStatus("the lengths file is refused");
    document.body.dataset.state = "error";
    return;
  }
  showError("op-error", null);
  state.lengths = answer.data;
  readOpForm();
  writeOpForm();
  storeOp();
  await update();
}

// -- wiring -----------------------------------------------------------------------------

async function start() {
  const presets = await call("GET", "/api/presets");
  state.presets = presets.data.presets;
  state.defaults = presets.data.defaults;
  state.maxUpload = presets.data.maxUpload;
  $("cp-shard").replaceChildren(...presets.data.shardings.map((h) => el("option", { value: h }, h)));
  state.view = new DesignView((text) => {
    localStorage.setItem(DESIGN_KEY, text);
    localStorage.removeItem(PRESET_KEY);
    $("preset").value = "";
    schedule();
  });
  for (const p of state.presets) $("preset").append(el("option", { value: p.name }, p.name));
  $("hardware").replaceChildren(...presets.data.hardware.map((h) => el("option", { value: h }, h)));
  call("GET", "/api/catalog").then((answer) => { if (answer.ok) $("catalog").textContent = answer.data.text; });

  await restoreOp();
  writeOpForm();

  $("preset").addEventListener("change", () => { if ($("preset").value) loadPreset($("preset").value); });
  $("design").addEventListener("input", () => {
    state.view.typed($("design").value);
    localStorage.setItem(DESIGN_KEY, $("design").value);
    localStorage.removeItem(PRESET_KEY);
    $("preset").value = "";
    schedule();
  });
  $("op").addEventListener("input", (event) => {
    if (event.target === $("lengths-file")) return;  // read on "change", by readLengthsFile
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
  $("lengths-file").addEventListener("change", readLengthsFile);
  $("lengths-clear").addEventListener("click", () => {
    state.lengths = null;
    $("lengths-file").value = "";
    readOpForm();
    writeOpForm();
    storeOp();
    schedule();
  });
  $("show-blocks").addEventListener("change", () => {
    $("blocks").hidden = !$("show-blocks").checked || $("blocks").dataset.state !== "drawn";
  });
  $("attention").addEventListener("change", () => {
    state.attention = Number($("attention").value);
    update();
  });

  const initial = await call("GET", "/api/initial");
  const storedText = localStorage.getItem(DESIGN_KEY);
  if (initial.ok && initial.data.design) {
    $("design").value = JSON.stringify(initial.data.design, null, 2);
    state.view.load($("design").value);
    // A design opened from the command line is analysed at its own context, as a preset is.
    state.op.seq = initial.data.context;
    writeOpForm();
    storeOp();
    await update();
  } else if (storedText) {
    $("design").value = storedText;
    state.view.load(storedText);
    $("preset").value = localStorage.getItem(PRESET_KEY) || "";
    await update();
  } else {
    await loadPreset("llama-3-8b-documents");
  }
}

document.addEventListener("DOMContentLoaded", start);
