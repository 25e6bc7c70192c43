// What the page draws from the engine's answers: the mask preview with the kernel's blocks over it,
// the chart of keys a query and blocks per kept score, and each context-parallel rank's work.
// Every figure here comes from the server; this file only places it.
import { $, el, fixed, int, percent, svg, tokens } from "./dom.js";

// -- the mask preview -------------------------------------------------------------------------------

function shade(fraction) {
  // White (nothing kept) to the accent blue (everything kept), linear in the fraction.
  const mix = (from, to) => Math.round(from + (to - from) * fraction);
  return `rgb(${mix(255, 31)}, ${mix(255, 78)}, ${mix(255, 156)})`;
}

// The overlay's colours, one a verdict; a test reads them back from the overlay's pixels.
export const BLOCK_COLOURS = {
  f: [22, 163, 74, 0.28],  // computed whole: every score in it kept
  p: [234, 88, 12, 0.62],  // computed, then partly masked
};

export function renderPreview(answer) {
  const canvas = $("preview");
  const context = canvas.getContext("2d");
  context.fillStyle = "#fff";
  context.fillRect(0, 0, canvas.width, canvas.height);
  const overlay = $("blocks");
  overlay.getContext("2d").clearRect(0, 0, overlay.width, overlay.height);
  overlay.dataset.state = "empty";
  const caption = $("preview-caption");
  $("block-counts").hidden = true;
  $("rank-strip-box").hidden = true;
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
  renderBlocks(p.kernelBlocks, p.seq);
  renderRankStrip(p.cpRanks);

  const what = p.sampled
    ? `${fixed(p.packing.mean, 0)}-token documents, spread ${+p.packing.spread.toFixed(2)}: ${p.documents} documents or pieces`
    : "no packing";
  const exact = p.exact ? "exact counts" : `estimated from every ${p.stride}th query and key`;
  caption.replaceChildren(
    el("b", { id: "preview-sample" }, p.sample), ` of ${int(p.seq)} tokens (${what}). `,
    `${n} × ${n} cells of ${int(p.cellTokens)} tokens; the shade is the fraction of scores kept (${exact}). `,
    `Keeps ${p.keeps}.`);
}

function renderBlocks(blocks, seq) {
  const overlay = $("blocks");
  const context = overlay.getContext("2d");
  const scale = overlay.width / seq;
  const counts = blocks.counts;
  for (const [key, id] of [["skipped", "count-skipped"], ["whole", "count-whole"], ["masked", "count-masked"]]) {
    $(id).textContent = int(counts[key]);
    $(id).dataset.count = String(counts[key]);
  }
  const computed = counts.whole + counts.masked;
  $("count-note").textContent = `${int(blocks.blocks)} × ${int(blocks.blocks)} blocks of ${blocks.block} × ${blocks.block}: `
    + `the kernel computes ${int(computed)} (${percent(computed / blocks.total)}) and skips the rest.`;
  $("block-counts").hidden = false;
  $("show-blocks").disabled = !blocks.drawn;
  if (!blocks.drawn) {
    overlay.dataset.state = "counts-only";
    $("count-note").textContent += " The blocks are under two pixels at this length: counted, not drawn.";
    return;
  }
  // What is drawn is kept beside the drawing, a string of letters a query block, so a test can read
  // the overlay back and hold it to the engine.
  const drawn = [];
  const side = (i) => Math.min(i * blocks.block, seq) * scale;
  for (let i = 0; i < blocks.blocks; i++) {
    const line = blocks.states[i];
    let letters = "";
    for (let j = 0; j < blocks.blocks; j++) {
      const letter = line[j];
      letters += letter;
      const colour = BLOCK_COLOURS[letter];
      if (!colour) continue;
      context.fillStyle = `rgba(${colour.join(", ")})`;
      const x = side(j), y = side(i);
      context.fillRect(x, y, side(j + 1) - x, side(i + 1) - y);
    }
    drawn.push(letters);
  }
  overlay.dataset.states = drawn.join("/");
  overlay.dataset.blocks = String(blocks.blocks);
  overlay.dataset.block = String(blocks.block);
  overlay.dataset.state = "drawn";
  overlay.hidden = !$("show-blocks").checked;
}

// Eight hues, a rank each (rank r takes RANK_COLOURS[r % 8]); a test reads them back from the strip.
export const RANK_COLOURS = [[31, 78, 156], [234, 88, 12], [22, 163, 74], [147, 51, 234], [220, 38, 38],
  [8, 145, 178], [202, 138, 4], [100, 116, 139]];

// Which rank holds each query block of the previewed row: the engine's assignment, a cell a block.
function renderRankStrip(strip) {
  const box = $("rank-strip-box");
  if (!strip) return;
  const canvas = $("rank-strip");
  const context = canvas.getContext("2d");
  context.clearRect(0, 0, canvas.width, canvas.height);
  box.hidden = false;
  if (!strip.ranks) {
    canvas.dataset.ranks = "";
    $("rank-strip-note").textContent = strip.reason;
    return;
  }
  const n = strip.ranks.length;
  strip.ranks.forEach((rank, i) => {
    context.fillStyle = `rgb(${RANK_COLOURS[rank % RANK_COLOURS.length].join(", ")})`;
    const x = Math.round((i * canvas.width) / n);
    context.fillRect(x, 0, Math.round(((i + 1) * canvas.width) / n) - x, canvas.height);
  });
  canvas.dataset.ranks = strip.ranks.join(",");
  canvas.dataset.blocks = strip.blocks.join(",");
  $("rank-strip-note").textContent = `${strip.size} ranks, ${strip.shard}: on this row they compute `
    + strip.blocks.map((b, r) => `rank ${r} ${int(b)}`).join(", ") + " blocks.";
}

// -- the chart -------------------------------------------------------------------------------------------

const CHART = { width: 460, height: 160, left: 52, right: 12, top: 22, bottom: 26 };

function logScale(lo, hi, from, to) {
  const a = Math.log(lo), b = Math.log(hi);
  return (x) => from + ((Math.log(x) - a) / (b - a || 1)) * (to - from);
}

// One panel: the curve's points against the mean on a log axis, the current point ringed.
function panel(root, answer, key, label, format, log) {
  root.replaceChildren();
  const c = CHART;
  root.setAttribute("viewBox", `0 0 ${c.width} ${c.height}`);
  const points = answer.points;
  const all = answer.current ? [...points, answer.current] : points;
  const means = all.map((p) => p.mean);
  const values = all.map((p) => p[key]);
  const x = logScale(Math.min(...means), Math.max(...means), c.left, c.width - c.right);
  let lo = Math.min(...values), hi = Math.max(...values);
  if (!log) lo = Math.min(1, lo);
  const y = log ? logScale(lo, hi, c.height - c.bottom, c.top)
    : (v) => c.height - c.bottom - ((v - lo) / (hi - lo || 1)) * (c.height - c.bottom - c.top);
  root.dataset.lo = String(lo);
  root.dataset.hi = String(hi);
  svg(root, "line", { x1: c.left, y1: c.height - c.bottom, x2: c.width - c.right, y2: c.height - c.bottom, class: "axis" });
  svg(root, "line", { x1: c.left, y1: c.top, x2: c.left, y2: c.height - c.bottom, class: "axis" });
  for (const p of points) {
    svg(root, "text", { x: x(p.mean), y: c.height - 8, class: "tick", "text-anchor": "middle" }, tokens(p.mean));
  }
  for (const v of [lo, hi]) {
    svg(root, "text", { x: c.left - 5, y: y(v) + 4, class: "tick", "text-anchor": "end" }, format(v));
  }
  svg(root, "text", { x: c.left, y: 12, class: "label" }, label);
  svg(root, "text", { x: c.width - c.right, y: 12, class: "tick", "text-anchor": "end" }, "mean document length, tokens →");
  svg(root, "polyline", { points: points.map((p) => `${x(p.mean)},${y(p[key])}`).join(" "), class: "curve" });
  for (const p of points) {
    const dot = svg(root, "circle", { cx: x(p.mean), cy: y(p[key]), r: 3.2, class: "point",
                                      "data-mean": p.mean, "data-value": p[key] });
    svg(dot, "title", {}, `${tokens(p.mean)}-token documents: ${format(p[key])}`);
  }
  if (answer.current) {
    const p = answer.current;
    const ring = svg(root, "circle", { cx: x(p.mean), cy: y(p[key]), r: 6.5, class: "current",
                                       "data-mean": p.mean, "data-value": p[key] });
    svg(ring, "title", {}, `the operating point: ${fixed(p.mean, 0)}-token documents, ${format(p[key])}`);
  }
}

export function renderChart(answer) {
  const box = $("chart-box");
  const note = $("chart-note");
  if (!answer || !answer.ok) {
    box.dataset.state = "error";
    note.textContent = answer ? answer.data.error : "";
    $("chart-keys").replaceChildren();
    $("chart-ratio").replaceChildren();
    return;
  }
  const a = answer.data;
  if (!a.points.length) {
    box.dataset.state = "empty";
    note.textContent = a.reason || "no points within the analysis budget";
    $("chart-keys").replaceChildren();
    $("chart-ratio").replaceChildren();
    return;
  }
  panel($("chart-keys"), a, "keysPerQuery", "keys a query", (v) => fixed(v, v < 100 ? 1 : 0), true);
  panel($("chart-ratio"), a, "blockRatio", "blocks per kept score", (v) => `${fixed(v, 2)}×`, false);
  // The curve is gamma lengths at every mean; a lengths file's ring is its own lengths, which no gamma need match.
  const offCurve = a.current && a.lengths
    ? ` The curve draws gamma lengths of spread ${fixed(a.spread, 2)} at each mean; the ring is the file's own `
      + "lengths at their mean, so it sits off the curve by as much as their shape differs from that gamma."
    : "";
  const where = a.current
    ? `The ring is the operating point (${fixed(a.current.mean, 0)}-token documents${a.lengths ? ", from the lengths file" : ""}).${offCurve}`
    : "Set a packing to mark the operating point.";
  const skipped = a.skipped.length ? ` Means below ${tokens(a.points[0].mean)} are past the analysis budget.` : "";
  note.textContent = `Mean document length across; spread ${fixed(a.spread, 2)}, ${a.strategy} rows. ${where}${skipped}`;
  box.dataset.state = "drawn";
}

// -- context parallelism ----------------------------------------------------------------------------------

export function renderRanks(report) {
  const box = $("ranks");
  const cp = report.contextParallel;
  if (!cp) {
    box.hidden = true;
    box.replaceChildren();
    return;
  }
  const most = Math.max(...cp.ranks.map((r) => r.blocks));
  const bars = cp.ranks.map((r) => {
    const bar = el("span", { class: "bar" });
    bar.style.width = `${(100 * r.blocks) / most}%`;
    return el("div", { class: "rank", "data-rank": String(r.rank), "data-blocks": String(r.blocks),
                       "data-kept": String(r.keptScores) },
      el("span", { class: "rank-name" }, `rank ${r.rank}`), el("span", { class: "track" }, bar),
      el("span", { class: "rank-value" }, `${fixed(r.blocks, 1)} blocks`,
         r.keptScores === null ? "" : `, ${int(r.keptScores)} scores`));
  });
  const padding = cp.paddingTokens ? `; ${int(cp.paddingTokens)} padding tokens a row (${percent(cp.paddingShare)})` : "";
  box.replaceChildren(
    el("p", { class: "hint" }, `${cp.size} ranks, ${cp.shard} sharding: each rank's computed blocks a row and layer. `
      + `The step waits for the slowest: max ÷ mean ${fixed(cp.maxOverMean, 3)}×${padding}.`),
    ...bars);
  box.dataset.maxOverMean = String(cp.maxOverMean);
  box.hidden = false;
}
