// The design view: the design's blocks as a tree, an inspector with the selected block's params as
// fields, and the undo history. The design's JSON text stays the one thing being edited: a field
// writes into it, and the engine (through /api/analyze, the same loader the CLI uses) says whether
// it holds; the error lands at the field whose path it names.
import { $, el } from "./dom.js";

// -- paths, as the engine writes them: nodes[1].params.block.params.attention.heads ---------------

export function pathText(segments) {
  return segments.map((s, i) => (typeof s === "number" ? `[${s}]` : (i ? `.${s}` : s))).join("");
}

function at(object, segments) {
  let node = object;
  for (const s of segments) {
    if (node === null || typeof node !== "object") return undefined;
    node = node[s];
  }
  return node;
}

function setAt(object, segments, value) {
  const parent = at(object, segments.slice(0, -1));
  parent[segments[segments.length - 1]] = value;
}

const isObject = (x) => x !== null && typeof x === "object" && !Array.isArray(x);

// -- the tree ---------------------------------------------------------------------------------------

// One tree item: a label, the object whose scalar members are its fields, and its children.
// A node's fields are its params (plus its id); a block ({kind, params}) likewise; a plain object
// inside params (attention, mlp, rope) is its own item.
function itemsOf(design) {
  const items = [];
  const add = (label, kind, fieldsAt, depth, extra = []) => {
    items.push({ label, kind, fieldsAt, depth, extra, path: pathText(fieldsAt) });
    const container = at(design, fieldsAt);
    if (!isObject(container)) return;
    for (const [key, value] of Object.entries(container)) {
      if (!isObject(value)) continue;
      if (typeof value.kind === "string") {
        add(key, value.kind, [...fieldsAt, key, "params"], depth + 1);
      } else {
        add(key, "", [...fieldsAt, key], depth + 1);
      }
    }
  };
  items.push({ label: design.name ?? "design", kind: "design", fieldsAt: [], depth: 0, extra: [], path: "",
               only: ["name", "context"] });
  if (isObject(design.inputs)) {
    for (const name of Object.keys(design.inputs)) {
      items.push({ label: name, kind: "input", fieldsAt: ["inputs", name], depth: 1, extra: [],
                   path: pathText(["inputs", name]) });
    }
  }
  (Array.isArray(design.nodes) ? design.nodes : []).forEach((node, i) => {
    if (!isObject(node)) return;
    const repeat = isObject(node.params) && Number.isInteger(node.params.repeat) ? ` ×${node.params.repeat}` : "";
    add(`${node.id ?? `nodes[${i}]`}${repeat}`, node.kind ?? "?", ["nodes", i, "params"], 1, [["nodes", i, "id"]]);
  });
  return items;
}

// -- the history --------------------------------------------------------------------------------------

// Each entry is a whole design text. Keystrokes in one field (or in the JSON text) while it keeps the
// focus make one step, so undo takes back the edit, not a character.
class History {
  constructor() {
    this.entries = [];
    this.index = -1;
    this.group = null;
  }
  reset(text) {
    this.entries = [text];
    this.index = 0;
    this.group = null;
  }
  record(text, group = null) {
    if (this.index >= 0 && this.entries[this.index] === text) return;
    if (group !== null && group === this.group && this.index === this.entries.length - 1 && this.index > 0) {
      this.entries[this.index] = text;
      return;
    }
    this.entries.splice(this.index + 1);
    this.entries.push(text);
    this.index = this.entries.length - 1;
    this.group = group;
  }
  close() {
    this.group = null;
  }
  step(by) {
    const next = this.index + by;
    if (next < 0 || next >= this.entries.length) return null;
    this.index = next;
    this.group = null;
    return this.entries[next];
  }
  get canUndo() { return this.index > 0; }
  get canRedo() { return this.index < this.entries.length - 1; }
}

// -- the view ---------------------------------------------------------------------------------------------

export class DesignView {
  // onEdit(text): the text changed here (a field, undo, redo); the page stores and analyses it.
  constructor(onEdit) {
    this.onEdit = onEdit;
    this.history = new History();
    this.selected = null;  // the selected item's path
    this.error = null;     // the engine's last refusal {error, path}, or null
    this.parsed = null;

    $("undo").addEventListener("click", () => this.step(-1));
    $("redo").addEventListener("click", () => this.step(1));
    document.addEventListener("keydown", (event) => {
      if (!(event.ctrlKey || event.metaKey) || event.altKey) return;
      if (event.target instanceof Element && event.target.closest("#op")) return;  // the operating point's own fields

      const key = event.key.toLowerCase();
      if (key === "z" || key === "y") {
        event.preventDefault();  // the page's history, not the field's own: one history for both views
        this.step(key === "y" || event.shiftKey ? 1 : -1);
      }
    });
    for (const tab of document.querySelectorAll("[role=tab]")) {
      tab.addEventListener("click", () => this.showTab(tab.dataset.tab));
    }
    $("design").addEventListener("blur", () => this.history.close());
  }

  showTab(name) {
    for (const tab of document.querySelectorAll("[role=tab]")) {
      const on = tab.dataset.tab === name;
      tab.setAttribute("aria-selected", String(on));
      $(tab.getAttribute("aria-controls")).hidden = !on;
    }
    if (name === "blocks") this.render();
  }

  // A new design (a preset, the one the server opened with): its own history starts here.
  load(text) {
    this.history.reset(text);
    this.selected = null;
    this.render();
  }

  // The JSON text was typed in.
  typed(text) {
    this.history.record(text, "json");
    this.render();
  }

  step(by) {
    const text = this.history.step(by);
    if (text === null) return;
    $("design").value = text;
    this.render();
    this.onEdit(text);
  }

  // The engine's answer to the latest text: null when it holds, else its {error, path}.
  judged(error) {
    this.error = error;
    this.markError();
  }

  render() {
    $("undo").disabled = !this.history.canUndo;
    $("redo").disabled = !this.history.canRedo;
    $("undo").dataset.steps = String(this.history.index);
    try {
      this.parsed = JSON.parse($("design").value);
    } catch (e) {
      this.parsed = null;
    }
    const tree = $("tree");
    if (!isObject(this.parsed)) {
      tree.replaceChildren(el("li", { class: "none" }, "The JSON does not parse as a design object: fix it in the JSON tab."));
      $("fields").replaceChildren();
      $("inspector-title").textContent = "";
      return;
    }
    const items = itemsOf(this.parsed);
    if (!items.some((item) => item.path === this.selected)) {
      const attention = items.find((item) => item.label === "attention");
      this.selected = (attention || items[0]).path;
    }
    tree.replaceChildren(...items.map((item) => {
      const button = el("button", { type: "button", class: "item", "data-path": item.path },
        el("span", { class: "label" }, item.label), item.kind ? el("span", { class: "kind" }, item.kind) : "");
      button.style.paddingLeft = `${0.4 + item.depth * 1.1}rem`;
      button.setAttribute("aria-pressed", String(item.path === this.selected));
      button.addEventListener("click", () => {
        this.selected = item.path;
        this.render();
      });
      return el("li", {}, button);
    }));
    this.renderInspector(items.find((item) => item.path === this.selected));
    this.markError();
  }

  renderInspector(item) {
    $("inspector-title").textContent = item.kind ? `${item.label} (${item.kind})` : item.label;
    const container = at(this.parsed, item.fieldsAt);
    const fields = [];
    for (const segments of item.extra) fields.push(segments);
    if (isObject(container)) {
      for (const [key, value] of Object.entries(container)) {
        if (isObject(value)) continue;  // a child item in the tree
        if (item.only && !item.only.includes(key)) continue;
        fields.push([...item.fieldsAt, key]);
      }
    }
    const rows = fields.map((segments) => this.field(segments));
    $("fields").replaceChildren(...(rows.length ? rows
      : [el("p", { class: "hint" }, "No params of its own: pick one of its parts in the tree.")]));
  }

  field(segments) {
    const path = pathText(segments);
    const value = at(this.parsed, segments);
    const name = segments[segments.length - 1];
    const id = `field-${path.replace(/[^A-Za-z0-9_-]/g, "_")}`;
    let input;
    if (typeof value === "boolean") {
      input = el("input", { type: "checkbox", id, checked: value, "data-path": path });
    } else {
      const text = typeof value === "string" ? value : JSON.stringify(value);
      input = el("input", { type: "text", id, value: text, spellcheck: false, autocomplete: "off", "data-path": path });
    }
    const error = el("p", { class: "field-error", "data-path": path, hidden: true, "aria-live": "polite" });
    input.setAttribute("aria-describedby", `${id}-error`);
    error.id = `${id}-error`;
    const kind = typeof value;
    const write = () => {
      const next = JSON.parse($("design").value);  // the text as it stands, with this one value changed
      setAt(next, segments, readValue(input, kind));
      const text = JSON.stringify(next, null, 2);
      $("design").value = text;
      this.parsed = next;
      this.history.record(text, `field:${path}`);
      $("undo").disabled = !this.history.canUndo;
      $("redo").disabled = !this.history.canRedo;
      $("undo").dataset.steps = String(this.history.index);
      this.onEdit(text);
    };
    input.addEventListener(kind === "boolean" ? "change" : "input", write);
    input.addEventListener("blur", () => this.history.close());
    return el("div", { class: "field", "data-path": path },
      el("label", { htmlFor: id }, String(name)), input, error);
  }

  // The engine's error at the field it names; or, if that field is not in view, at the tree item
  // that holds it and above the fields, so it is never lost.
  markError() {
    for (const line of document.querySelectorAll(".field-error")) {
      line.hidden = true;
      line.textContent = "";
    }
    for (const input of document.querySelectorAll("#fields input")) input.classList.remove("invalid");
    for (const button of document.querySelectorAll("#tree .item")) button.classList.remove("has-error");
    const elsewhere = $("inspector-error");
    elsewhere.hidden = true;
    const error = this.error;
    if (!error || !error.path || String(error.path).startsWith("op")) return;
    const path = String(error.path);
    const message = path && error.error.startsWith(path + ": ") ? error.error.slice(path.length + 2) : error.error;
    const line = [...document.querySelectorAll(".field-error")].find((x) => x.dataset.path === path);
    if (line) {
      line.textContent = message;
      line.hidden = false;
      line.parentElement.querySelector("input").classList.add("invalid");
    } else {
      elsewhere.textContent = error.error;
      elsewhere.hidden = false;
    }
    let holder = null;
    for (const button of document.querySelectorAll("#tree .item")) {
      const p = button.dataset.path;
      if ((p === "" || path === p || path.startsWith(p + ".") || path.startsWith(p + "["))
          && (holder === null || p.length > holder.dataset.path.length)) holder = button;
    }
    if (holder) holder.classList.add("has-error");
  }
}

// A field's text as the JSON value it stands for: a number where one was, a list where one was;
// anything else is sent as typed, for the engine to refuse with its own words.
function readValue(input, kind) {
  if (kind === "boolean") return input.checked;
  const text = input.value;
  if (kind === "number") {
    const number = Number(text.trim());
    return text.trim() !== "" && Number.isFinite(number) ? number : text;
  }
  if (kind === "object") {
    try {
      return JSON.parse(text);
    } catch (e) {
      return text;
    }
  }
  return text;
}
