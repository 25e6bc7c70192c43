"""Hypothesis strategies for hostile input, one per surface.

Each draws what an attacker (or a careless script) would send: wrong types,
boundary and absurd numbers, control characters, huge and deeply nested
values, misspelled names, and the specific tricks of each format (YAML
aliases and 1.1 scalars, duplicate keys, Unicode digits, FIFOs, /dev/zero).
"""

from __future__ import annotations

import json
import string

from hypothesis import strategies as st

from tensorcad.design import load, preset_names

PRESETS = preset_names()
RAW = {name: load(name).to_dict() for name in ("nano-sort", "t5-bias", "gpt2-small", "llama-3-8b-documents")}
FIXTURES = ["good.json", "good.yaml", "laughs.yaml", "dir.json", "fifo.json", "zero.json", "dangling.json",
            "binary.json", "missing.json", "no-suffix", "../../etc/passwd", "/etc/passwd", "/dev/zero",
            "/dev/stdin", "x" * 5000, "x" * 5000 + ".json", "a\nb.json", "\x1b[31mred.json", "nul\x00.json",
            "", ".", "-", "--", "nano-sort", "nano-sort ", "NANO-SORT", "nano_sort"]

CONTROL = "".join(chr(c) for c in range(32)) + "\x7f\x85\u2028\u2029\u202e"
hostile_text = st.one_of(
    st.text(max_size=20),
    st.text(alphabet=CONTROL + "ab", max_size=10),
    st.sampled_from(["", " ", "\n", "a\nb", "x" * 5000, "٣", "１", "1:30", "yes", "on", "null", "NaN", "Infinity",
                     "__import__('os').system('id')", "${HOME}", "$(id)", "`id`", "'; DROP TABLE x; --",
                     "{{7*7}}", "<script>alert(1)</script>", "%s%s%n", "\ud800" if False else "\ufffd", "🙂" * 3]),
)
hostile_number = st.one_of(
    st.sampled_from([0, -1, 1, 2, 3, 7, 63, 64, 128, 4096, 2**22, 2**22 + 1, 2**24, 2**24 + 1, 2**31, 2**53 + 1,
                     2**63, 2**64, 10**30, -(2**63)]),
    st.sampled_from([0.0, -0.0, 0.5, 1e-320, 1e-9, 1e308, 1.5, float("nan"), float("inf"), -float("inf")]),
    st.integers(-10, 10**6), st.floats(allow_nan=True, allow_infinity=True),
)
hostile_scalar = st.one_of(hostile_number, hostile_text, st.booleans(), st.none())
hostile_value = st.recursive(hostile_scalar, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(hostile_text, inner, max_size=4)), max_leaves=8)


def _nested(depth: int):
    value: object = 1
    for i in range(depth):
        value = [value] if i % 2 else {"a": value}
    return value


deep_value = st.sampled_from([10, 100, 900, 2000, 50_000]).map(_nested)


# -- expressions ---------------------------------------------------------------------

ATOMS = ["b", "h", "q", "kv", "score", "doc(b, q)", "doc(b, kv)", "bias(bucket(kv - q), h)", "0", "1", "-1", "7",
         "2**40", "2**41", "1099511627777", "0.5", "1e308", "True", "False", "heads", "window", "head_dim",
         "unknown", "__class__", "doc", "doc(q, b)", "doc(b, q, kv)", "bias", "'s'", "b''", "None", "...", "q.real",
         "q[0]", "[q]", "(q, kv)", "{q}", "lambda: q", "f'{q}'", "(q := 1)", "*q", "not_a_fn(q)"]
OPS = ["+", "-", "*", "//", "%", "/", "**", "<<", ">>", "^", "@", "&", "|", "and", "or", "==", "!=", "<", "<=",
       ">", ">=", "is", "in"]


@st.composite
def _expression(draw, depth=0):
    choice = draw(st.integers(0, 9 if depth < 6 else 0))
    if choice <= 2:
        return draw(st.sampled_from(ATOMS))
    if choice == 3:
        return f"({draw(_expression(depth + 1))}) {draw(st.sampled_from(OPS))} ({draw(_expression(depth + 1))})"
    if choice == 4:
        return f"{draw(st.sampled_from(['-', '~', 'not ', '+']))}({draw(_expression(depth + 1))})"
    if choice == 5:
        fn = draw(st.sampled_from(["min", "max", "abs", "where", "bucket", "tanh", "eval", "exec", "__import__",
                                   "getattr", "open"]))
        n = draw(st.sampled_from([0, 1, 2, 3, 4, 62, 63, 64, 65, 300, 995]))
        arg = draw(st.sampled_from(["q", "kv", "1", "h", "score"]))
        return f"{fn}({','.join([arg] * n)})"
    if choice == 6:
        n = draw(st.sampled_from([2, 3, 10, 62, 63, 64, 65, 300, 995]))
        op = draw(st.sampled_from(["<", "<=", "==", " and ", " or ", " & ", "+"]))
        return op.join(["q"] * n) if op in ("<", "<=", "==") else op.join(["(q >= kv)"] * n)
    if choice == 7:
        n = draw(st.sampled_from([10, 99, 100, 101, 500]))
        return draw(st.sampled_from(["(" * n + "q" + ")" * n, "-" * n + "q", "~" * n + "(q >= kv)",
                                     "not " * n + "(q >= kv)", "(" * n + "q"]))
    if choice == 8:
        return draw(st.text(alphabet=string.printable + "٣１\u202e", max_size=40))
    return f"({draw(_expression(depth + 1))}) & ({draw(_expression(depth + 1))})"


@st.composite
def _plausible(draw, want="bool", depth=0):
    """Well-typed masks and scores near the limits: the success path, and chains 62..65 deep."""
    if want == "int":
        choice = draw(st.integers(0, 6 if depth < 5 else 1))
        if choice == 0:
            return draw(st.sampled_from(["q", "kv", "h", "b", "doc(b, q)", "doc(b, kv)"]))
        if choice == 1:
            return str(draw(st.integers(-300, 300)))
        if choice == 2:
            op = draw(st.sampled_from(["+", "-", "*", "//", "%"]))
            right = draw(_plausible("int", depth + 1)) if op not in ("//", "%") else str(draw(st.integers(1, 64)))
            return f"({draw(_plausible('int', depth + 1))} {op} {right})"
        if choice == 3:
            n = draw(st.sampled_from([2, 3, 30, 62, 63, 64, 65, 300, 600, 900]))
            return f"{draw(st.sampled_from(['min', 'max']))}({','.join(draw(st.sampled_from(['q', '7'])) for _ in range(n))})"
        if choice == 4:
            return f"abs({draw(_plausible('int', depth + 1))})"
        if choice == 5:
            return f"bucket({draw(_plausible('int', depth + 1))})"
        return f"where({draw(_plausible('bool', depth + 1))}, {draw(_plausible('int', depth + 1))}, {draw(_plausible('int', depth + 1))})"
    choice = draw(st.integers(0, 4 if depth < 5 else 0))
    if choice == 0:
        op = draw(st.sampled_from(["==", "!=", "<", "<=", ">", ">="]))
        return f"({draw(_plausible('int', depth + 1))} {op} {draw(_plausible('int', depth + 1))})"
    if choice == 1:
        op = draw(st.sampled_from(["&", "|", "and", "or"]))
        return f"({draw(_plausible('bool', depth + 1))} {op} {draw(_plausible('bool', depth + 1))})"
    if choice == 2:
        return f"~{draw(_plausible('bool', depth + 1))}"
    if choice == 3:
        n = draw(st.sampled_from([2, 5, 31, 62, 63, 64, 65, 300, 600, 995]))
        return "<".join(draw(st.sampled_from(["q", "h"])) for _ in range(n))
    return "doc(b, q) == doc(b, kv)"


plausible_masks = _plausible("bool")
plausible_scores = st.builds(lambda e, f: f.format(e), _plausible("int"),
                             st.sampled_from(["score + bias(bucket({0}), h)", "score * {0}", "score - {0}",
                                              "where(q >= kv, score, score + {0})", "tanh(score) + {0}"]))

expressions = st.one_of(
    plausible_masks, plausible_masks, plausible_scores,
    _expression(),
    st.sampled_from(["doc(b, q) == doc(b, kv)", "(q >= kv) & (doc(b, q) == doc(b, kv))", "q - kv < window",
                     "x" * 2001, " ", "", "\n", "q >= kv\n", "q >= kv # comment", "q >= kv;", "q >= kv\nimport os"]),
)


# -- designs -----------------------------------------------------------------------

def _paths(value, limit=400):
    """Paths into the value, breadth first and at most ``limit`` (iterative: an edit may have nested it deeply)."""
    out, queue = [], [((), value)]
    while queue and len(out) < limit:
        path, item = queue.pop(0)
        out.append(path)
        if isinstance(item, dict):
            queue.extend((path + (k,), v) for k, v in item.items())
        elif isinstance(item, list):
            queue.extend((path + (i,), v) for i, v in enumerate(item))
    return out


def _set(root, path, new):
    if not path:
        return new
    parent = root
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = new
    return root


@st.composite
def design_values(draw):
    """A preset's content with a few hostile edits at random places."""
    raw = json.loads(json.dumps(RAW[draw(st.sampled_from(sorted(RAW)))]))
    for _ in range(draw(st.integers(0, 3))):
        paths = _paths(raw)
        path = draw(st.sampled_from(paths))
        edit = draw(st.sampled_from(["benign", "benign", "benign", "plausible", "value", "deep", "expression",
                                     "unknown-key", "delete", "kind", "reserved", "name", "wrap"]))
        if edit == "benign":  # a number nudged within what a design may say: the success path
            numbers = [p for p in paths if type(_get(raw, p)) is int and not isinstance(_get(raw, p), bool)]
            if numbers:
                raw = _set(raw, draw(st.sampled_from(numbers)), draw(st.sampled_from([1, 2, 4, 8, 16, 64, 128])))
        elif edit == "plausible":
            attention = attention_params(raw)
            if attention is not None:
                attention["mask" if "doc" in json.dumps(raw.get("inputs", "")) else "score"] = draw(
                    plausible_masks if "doc" in json.dumps(raw.get("inputs", "")) else plausible_scores)
        elif edit == "value":
            raw = _set(raw, path, draw(hostile_value))
        elif edit == "deep":
            raw = _set(raw, path, draw(deep_value))
        elif edit == "expression":
            attention = attention_params(raw)
            if attention is not None:
                attention[draw(st.sampled_from(["mask", "score"]))] = draw(expressions)
        elif edit == "unknown-key" and isinstance(_get(raw, path), dict):
            _get(raw, path)[draw(hostile_text)] = draw(hostile_scalar)
        elif edit == "delete" and path and isinstance(_get(raw, path[:-1]), dict):
            del _get(raw, path[:-1])[path[-1]]
        elif edit == "kind" and isinstance(raw, dict) and isinstance(raw.get("nodes"), list) and raw["nodes"]:
            node = raw["nodes"][draw(st.integers(0, len(raw["nodes"]) - 1))]
            if isinstance(node, dict):
                node["kind"] = draw(st.one_of(hostile_value, st.sampled_from(["stack", "sdpa", "table", "Stack"])))
        elif edit == "reserved" and isinstance(raw, dict) and isinstance(raw.get("inputs"), dict):
            name = draw(st.sampled_from(["q", "k", "v", "x", "b", "kv", "score", "heads", "self", "torch", "for",
                                         "a b", "doc\n", "ids"]))
            raw["inputs"][name] = {"role": draw(st.sampled_from(["documents", "positions", "tokens"]))}
            if isinstance(raw.get("nodes"), list) and len(raw["nodes"]) > 1 and isinstance(raw["nodes"][1], dict):
                raw["nodes"][1].setdefault("in", {})[name] = name
        elif edit == "name" and isinstance(raw, dict):
            raw["name"] = draw(hostile_text)
        elif edit == "wrap":
            raw = _set(raw, path, [_get(raw, path)])
    return raw


def attention_params(raw):
    """The first attention's params in a design's content (a dict holding heads), or None."""
    for path in _paths(raw, 2000):
        item = _get(raw, path)
        if isinstance(item, dict) and "heads" in item and "causal" in item:
            return item
    return None


def _get(root, path):
    for key in path:
        root = root[key]
    return root


def _yaml_text(value) -> str:
    import yaml

    return yaml.safe_dump(value, allow_unicode=True)


@st.composite
def design_files(draw):
    """(suffix, text) of a design file: JSON or YAML, with the formats' own tricks."""
    value = draw(design_values())
    form = draw(st.sampled_from(["json", "json", "yaml", "duplicate", "yaml-1.1", "laughs", "anchor", "garbage",
                                 "truncated", "tag"]))
    text = _dumps(value)
    if form == "json":
        return ".json", text
    if form == "yaml":
        try:
            return ".yaml", _yaml_text(value)
        except (RecursionError, ValueError):
            return ".yaml", text
    if form == "duplicate":
        return draw(st.sampled_from([".json", ".yaml"])), text.replace("{", '{"name": "first", ', 1)
    if form == "yaml-1.1":
        scalar = draw(st.sampled_from(["yes", "no", "on", "off", "1:30", "0755", "0x1F", "2001-12-14", "~", ".inf",
                                       "1_000", "0b101", "+12", "Null", "TRUE"]))
        return ".yaml", text.replace('"nano-sort"', scalar, 1).replace("256", scalar, 1)
    if form == "laughs":
        levels = draw(st.integers(1, 9))
        lines = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
        lines += [f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 9) + "]" for i in range(levels)]
        return ".yaml", "\n".join(lines) + f"\nname: *{chr(97 + levels)}\n"
    if form == "anchor":
        return ".yaml", "name: &n nano\ndescription: *n\n" + _yaml_text({k: v for k, v in RAW["nano-sort"].items()
                                                                          if k not in ("name", "description")})
    if form == "garbage":
        return draw(st.sampled_from([".json", ".yaml", ".yml"])), draw(st.text(max_size=200))
    if form == "truncated":
        return ".json", text[: draw(st.integers(0, max(0, len(text) - 1)))]
    return ".yaml", draw(st.sampled_from(["!!python/object/apply:os.system ['id']\n", "name: !!binary aGk=\n",
                                          "!!set {a, b}\n", "--- a\n--- b\n", "%YAML 1.1\n---\nname: x\n",
                                          "name: !custom x\n"]))


# -- command lines -----------------------------------------------------------------

OPTIONS = {
    "--seq": st.sampled_from(["0", "-1", "1", "2", "7", "64", "256", "1024", "4096", "4097", "4194305", "16777216",
                              "16777217", "٣", "１", "1e3", "1.5", "0x10", "1_000", "", " 8", "nan", "9" * 40]),
    "--pack": st.sampled_from(["0", "-5", "0.5", "1", "16", "64", "1024", "1e-9", "1e30", "nan", "inf", "", "٣",
                               "1e-320"]),
    "--pack-spread": st.sampled_from(["0", "1", "-1", "10", "10.5", "1e-320", "1e-5", "nan", "", "0.0001"]),
    "--hardware": st.sampled_from(["H100", "A100", "B200", "TPU", "", "h100", "H100\n"]),
    "--gpus": st.sampled_from(["1", "0", "-1", "1000001", "true", "1.0", "٣"]),
    "--mfu": st.sampled_from(["0.4", "0", "1", "1.01", "nan", "-0.1"]),
    "--price": st.sampled_from(["2.5", "0", "-1", "1e7", "inf"]),
    "--tokens": st.sampled_from(["1", "0", "1e18", "1e19", "1e30", "nan"]),
    "--train-dtype": st.sampled_from(["bf16", "fp4", "int3", "", "fp8\n"]),
    "--serve-dtype": st.sampled_from(["bf16", "fp2", ""]),
    "--out": st.sampled_from(["", "out.json", "dir.json", "fifo.json", "missing/dir/out.json", "a\nb", "x" * 5000,
                              "/dev/full"]),
    "-o": st.sampled_from(["", "gen.py", "dir.json", "missing/x.py", "x" * 5000]),
    "--json": st.none(), "--markdown": st.none(), "--help": st.none(), "--version": st.none(), "--bogus": st.none(),
    "--seq=": st.none(),
}
COMMANDS = ["presets", "catalog", "show", "validate", "analyze", "rules", "codegen", "new", "", "nope", "ANALYZE", "-h"]
DESIGNS = st.one_of(st.sampled_from(PRESETS), st.sampled_from(FIXTURES), hostile_text)


@st.composite
def argvs(draw):
    command = draw(st.sampled_from(COMMANDS))
    argv = [command] if command else []
    if command in ("show", "validate", "analyze", "rules", "codegen") or draw(st.booleans()):
        argv.append(draw(DESIGNS))
    if command == "catalog" and draw(st.booleans()):
        argv.append(draw(st.sampled_from(["stack", "sdpa", "nope", "", "x" * 5000, "a\nb"])))
    for _ in range(draw(st.integers(0, 4))):
        option = draw(st.sampled_from(sorted(OPTIONS)))
        value = draw(OPTIONS[option])
        argv.extend([option] if value is None else [option, value])
    return argv


# -- MCP calls ---------------------------------------------------------------------

# certify and mask_preview build models and draw rows: tests/mcp/test_mcp_session.py calls them, bounded.
TOOLS = ["presets", "catalog", "show", "validate", "analyze", "rules", "codegen", "walkthrough", "lengths", "nope"]
ARGUMENTS = ["design", "op", "kind", "scale", "histogram"]
MISSPELLED = ["packing", "pack", "pack_spread", "seq", "seq_len", "spread", "gpu", "Design", "design ", "", "seq\n",
              "__proto__"]
mcp_values = st.one_of(
    hostile_value,
    st.sampled_from(PRESETS + FIXTURES[:10] + [7, 256, 512, 64.0, 1024, "256", "64", True, False, None, "", "H100"]),
    design_values(),
).filter(lambda v: _dumpable(v))


def _dumpable(value) -> bool:
    """Whether the case can travel to the worker as JSON (50,000 levels deep cannot; 900 can, and is sent)."""
    try:
        json.dumps(value)
    except (RecursionError, ValueError):
        return False
    return True


PLAUSIBLE = {"op": [{"seq": 256}, {"packing": {"mean": 64}}, {"seq": 1024, "packing": {"mean": 300.5, "spread": 0.5}},
                    {"hardware": "A100", "gpus": 8, "mfu": 0.3}, {"pricePerGpuHour": 3.5, "tokens": 1e12},
                    {"seq": 256, "packing": {"lengths": {"16": 3, "90": 2}, "strategy": "bfd"}}],
             "kind": ["stack", "sdpa", "table"], "histogram": [{"16": 3, "90": 2}, {"1": 1}]}
# An operating point with hostile values at every level, misspelled fields among them.
hostile_op = st.fixed_dictionaries({}, optional={
    "seq": hostile_number, "packing": st.one_of(hostile_value, st.fixed_dictionaries(
        {"mean": hostile_number}, optional={"spread": hostile_number, "men": hostile_scalar,
                                            "lengths": hostile_value, "strategy": hostile_text})),
    "cp": st.one_of(hostile_value, st.fixed_dictionaries({"size": hostile_number}, optional={"shard": hostile_text})),
    "hardware": hostile_text, "gpus": hostile_scalar, "tokens": hostile_scalar, "bogus": hostile_scalar})


@st.composite
def mcp_calls(draw):
    tool = draw(st.sampled_from(TOOLS))
    arguments = {}
    if tool not in ("presets", "catalog") and draw(st.integers(0, 9)):
        arguments["design"] = draw(st.one_of(st.sampled_from(PRESETS), st.sampled_from(PRESETS), mcp_values))
    for _ in range(draw(st.integers(0, 3))):
        name = draw(st.one_of(st.sampled_from(ARGUMENTS), st.sampled_from(ARGUMENTS), st.sampled_from(MISSPELLED)))
        values = st.one_of(mcp_values, hostile_op) if name in ("op", "histogram") else mcp_values
        arguments[name] = draw(st.one_of(st.sampled_from(PLAUSIBLE.get(name, [None])), values))
    if tool == "codegen" and "scale" in arguments:
        del arguments["scale"]  # scaling builds the model with torch: the runtime's business, not this suite's
    return {"tool": tool, "arguments": arguments}


# -- HTTP requests -----------------------------------------------------------------

PATHS = ["/", "/api/presets", "/api/design?name=nano-sort", "/api/design?name=", "/api/design?name=%0a%1b",
         "/api/design?name=../../etc/passwd", "/api/catalog", "/api/initial", "/api/validate", "/api/analyze",
         "/api/rules", "/api/preview", "/api/operating-point", "/api/chart", "/api/lengths", "/static/app.js",
         "/static/../server.py",
         "/static/%2e%2e/server.py", "/static/", "//", "/nope", "*", "http://evil.example/", "/" + "a" * 10000,
         "/api/presets?" + "a=1&" * 500]
HOSTS = ["127.0.0.1:{PORT}", "localhost:{PORT}", "evil.example", "127.0.0.1", "127.0.0.1:{PORT}.evil.example", "",
         "[::1]:{PORT}"]
ORIGINS = [None, None, "http://127.0.0.1:{PORT}", "http://evil.example", "null", "http://localhost:{PORT}",
           "https://127.0.0.1:{PORT}", "http://127.0.0.1:{PORT}\r\nX: y"]
def _dumps(value) -> str:
    try:
        return json.dumps(value, allow_nan=True)
    except (RecursionError, ValueError):  # nested past what json.dumps can write: the text, directly
        return '{"design": ' + "[" * 50_000 + "]" * 50_000 + "}"


http_bodies = st.one_of(
    st.builds(lambda d, op: _dumps({"design": d, "op": op}), st.sampled_from(PRESETS),
              st.one_of(st.none(), st.fixed_dictionaries({}, optional={
                  "seq": st.sampled_from([16, 256, 1024, 4096]), "packing": st.fixed_dictionaries(
                      {"mean": st.sampled_from([16, 64, 500])}), "gpus": st.integers(1, 64)}))),
    st.builds(lambda d, op: _dumps({"design": d, "op": op}),
              st.one_of(st.sampled_from(PRESETS[:3]), design_values(), hostile_value),
              st.one_of(st.none(), st.fixed_dictionaries({}, optional={
                  "seq": hostile_number, "packing": st.one_of(hostile_value, st.fixed_dictionaries(
                      {"mean": hostile_number}, optional={"spread": hostile_number})), "hardware": hostile_text,
                  "gpus": hostile_scalar, "tokens": hostile_scalar, "bogus": hostile_scalar}))),
    st.builds(lambda t: json.dumps({"text": t}), st.builds(lambda f: f[1], design_files())),
    st.builds(_dumps, st.one_of(hostile_value, deep_value)),
    st.sampled_from(["", "{", "[" * 100_000, '{"design": "nano-sort", "design": 1}', "\xff\xfe", "null"]),
    st.text(max_size=100),
)


@st.composite
def http_requests(draw):
    method = draw(st.sampled_from(["GET"] * 4 + ["POST"] * 8 + ["HEAD", "PUT", "DELETE", "OPTIONS", "TRACE",
                                   "CONNECT", "BREW", "get", "G\x00T", ""]))
    fitting = ["/api/validate", "/api/analyze", "/api/rules", "/api/preview", "/api/operating-point", "/api/chart",
               "/api/lengths"] \
        if method == "POST" else ["/", "/api/presets", "/api/design?name=nano-sort", "/api/catalog", "/static/app.js"]
    path = draw(st.one_of(st.sampled_from(fitting), st.sampled_from(PATHS)))
    version = draw(st.one_of(st.just("HTTP/1.1"), st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/0.9", "HTTP/2.0",
                                                                  "HTTP/1.1 extra", "", "HTTP/1.1\x00"])))
    headers = []
    host = draw(st.one_of(st.just(HOSTS[0]), st.just(HOSTS[0]), st.sampled_from(HOSTS + [None])))
    if host is not None:
        headers.append(f"Host: {host}")
    origin = draw(st.one_of(st.sampled_from(ORIGINS[:3]), st.sampled_from(ORIGINS)))
    if origin is not None:
        headers.append(f"Origin: {origin}")
    body = draw(http_bodies).encode("utf-8", "surrogatepass").decode("latin-1")
    if method not in ("GET", "HEAD") or draw(st.booleans()):
        kind = draw(st.sampled_from(["application/json"] * 6 + ["application/json; charset=utf-8", "text/plain", None,
                                     "APPLICATION/JSON", "multipart/form-data"]))
        if kind is not None:
            headers.append(f"Content-Type: {kind}")
        length = draw(st.sampled_from(["exact"] * 12 + ["none", "short", "huge", "negative", "unicode",
                                       "two", "junk"]))
        n = len(body.encode("latin-1"))
        if length == "exact":
            headers.append(f"Content-Length: {n}")
        elif length == "short":
            headers.append(f"Content-Length: {max(0, n - 1)}")
        elif length == "huge":
            headers.append("Content-Length: 99999999999")
        elif length == "negative":
            headers.append("Content-Length: -1")
        elif length == "unicode":
            headers.append("Content-Length: \u0663".encode("utf-8").decode("latin-1"))
        elif length == "two":
            headers.extend([f"Content-Length: {n}", f"Content-Length: {n}"])
        elif length == "junk":
            headers.append("Content-Length: 12abc")
    if draw(st.sampled_from([False] * 9 + [True])):  # too many headers, or one too long: http.server's own 431
        count, size = draw(st.sampled_from([(150, 1), (1, 70_000), (3, 20)]))
        headers.extend(["X-Filler: " + "a" * size] * count)
    return f"{method} {path} {version}".rstrip() + "\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n" + body
