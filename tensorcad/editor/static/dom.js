// Small helpers every part of the page shares: the server call and text-only DOM building.
// Nothing the server says is ever read as HTML.

export const $ = (id) => document.getElementById(id);

export async function call(method, path, body) {
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

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  setAttributes(node, attrs);
  for (const child of children) node.append(child instanceof Node ? child : String(child));
  return node;
}

function setAttributes(node, attrs) {
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.setAttribute("class", value);
    else if (key.startsWith("data-") || key.startsWith("aria-")) node.setAttribute(key, value);
    else node[key] = value;
  }
}

// SVG elements, in the namespace of the page's own <svg> (read from it, so no address is written here).
export function svg(parent, tag, attrs = {}, text) {
  const node = document.createElementNS(parent.namespaceURI, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = String(text);
  parent.append(node);
  return node;
}

// -- numbers as people read them -------------------------------------------------

export const int = (x) => Math.round(x).toLocaleString("en-US");
export const fixed = (x, digits) =>
  x.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
export const percent = (x) => `${fixed(100 * x, 1)}%`;

export function si(x, unit) {
  for (const [prefix, scale] of [["P", 1e15], ["T", 1e12], ["G", 1e9], ["M", 1e6], ["k", 1e3]]) {
    if (Math.abs(x) >= scale) return `${fixed(x / scale, 2)} ${prefix}${unit}`;
  }
  return `${fixed(x, 2)} ${unit}`;
}

// Memory in binary units, as the CLI prints it (tensorcad/format.py).
export function binaryBytes(n) {
  for (const [unit, scale] of [["TiB", 2 ** 40], ["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]]) {
    if (Math.abs(n) >= scale) return `${fixed(n / scale, 2)} ${unit}`;
  }
  return `${int(n)} B`;
}

export function duration(seconds) {
  if (seconds >= 2 * 86400) return `${fixed(seconds / 86400, 1)} days`;
  if (seconds >= 3600) return `${fixed(seconds / 3600, 1)} hours`;
  if (seconds >= 60) return `${fixed(seconds / 60, 1)} minutes`;
  return `${fixed(seconds, seconds >= 1 ? 1 : 3)} s`;
}

// A token count short: 64, 512, 1k, 8k, 128k.
export function tokens(x) {
  if (x >= 1024 * 1024 && x % (1024 * 1024) === 0) return `${x / (1024 * 1024)}M`;
  if (x >= 1024 && x % 1024 === 0) return `${x / 1024}k`;
  return int(x);
}
