"""Hypothesis strategies for the file surfaces of round three (#32): Hugging Face configs, lengths files, corpora,
and the context-parallel options, each as a file's text and the command line that reads it.

A case is ``{"name": file name, "text": its text, "argv": [...]}``, ``{FILE}`` in argv standing for the file. The
values are what broke the promise before: integers of 5,000 digits, nesting past any reader's stack, a key given
twice, digits that are not ASCII, control characters and rich markup, values of the wrong JSON type, a mean below
one token, operating points past the memory budget, and ``-o`` onto the input itself.
"""

from __future__ import annotations

import json

from hypothesis import strategies as st

DIGITS = "9" * 5000
DEEP = "[" * 5000 + "]" * 5000
NAMES = ["a\x1b[31mred", "x\ry", " ", "[link=http://evil.example]x[/link]", "[bold]y", "ok-name", "", "\u202e"]
VALUES = st.one_of(
    st.sampled_from([None, True, -1, 0, 1, 7, 4096, -1e308, 1e308, 2**70, 0.5, "\x1b[31m", "", "4096", [],
                     [4096], {"a": {"b": {}}}, "gelu", "full_attention"]),
    st.integers(-(2**40), 2**40), st.text(max_size=8),
)
CONFIGS = {
    "llama": {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
              "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 128},
    "qwen2": {"model_type": "qwen2", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
              "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 128,
              "use_sliding_window": False, "sliding_window": 4096},
    "gpt2": {"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "vocab_size": 100, "n_positions": 128,
             "activation_function": "gelu"},
}


def _raw_json(draw, body: str) -> str:
    """A JSON text ``body`` broken one of the ways a reader once died of, or left whole."""
    trick = draw(st.sampled_from(["whole", "digits", "deep", "repeat", "cut", "bom", "nan"]))
    if trick == "digits":
        return body[:-1] + f', "x": {DIGITS}}}'
    if trick == "deep":
        return body[:-1] + f', "x": {DEEP}}}'
    if trick == "repeat":
        key = body[1:body.index(":")]
        return body[:-1] + f", {key}: 1}}"
    if trick == "cut":
        return body[: draw(st.integers(0, len(body)))]
    if trick == "bom":
        return "\ufeff" + body
    if trick == "nan":
        return body[:-1] + ', "x": NaN}'
    return body


@st.composite
def configs(draw):
    config = dict(CONFIGS[draw(st.sampled_from(sorted(CONFIGS)))])
    for _ in range(draw(st.integers(0, 2))):
        config[draw(st.sampled_from(sorted(config) + ["sliding_window", "layer_types", "rope_scaling"]))] = \
            draw(VALUES)
    argv = draw(st.sampled_from([["import-hf", "{FILE}"], ["analyze", "{FILE}"], ["show", "{FILE}"],
                                 ["import-hf", "{FILE}", "-o", "{FILE}"], ["import-hf", "{FILE}", "-o", ""]]))
    if draw(st.booleans()):
        argv = argv[:2] + ["--name", draw(st.sampled_from(NAMES))] + argv[2:] if argv[0] == "import-hf" else argv
    return {"name": "config.json", "text": _raw_json(draw, json.dumps(config)), "argv": argv}


LENGTH_TEXT = st.sampled_from(["64", "1", "0", "-3", "2.5", "1e3", "\u0663\u0663", "\uff11", DIGITS, "16777217",
                               " 7 ", "x", "", "nan", "inf", "0x10"])


@st.composite
def lengths_files(draw):
    suffix = draw(st.sampled_from([".json", ".csv", ".txt", ".npy", ".parquet"]))
    items = draw(st.lists(st.tuples(LENGTH_TEXT, LENGTH_TEXT), min_size=0, max_size=6))
    if suffix == ".json":
        body = "{" + ", ".join(f"{json.dumps(k)}: {v or 1}" for k, v in items) + "}" if items else "{}"
        text = _raw_json(draw, body) if items else draw(st.sampled_from(["{}", "[]", DEEP, "[1, 2, 64]", "3"]))
    elif suffix == ".csv":
        text = "length,count\n" + "".join(f"{k},{v}\n" for k, v in items)
    else:  # text, and files whose suffix promises a binary format they do not hold
        text = "".join(f"{k}\n" for k, _ in items)
    argv = ["analyze", "nano-sort", "--pack-lengths", "{FILE}"]
    argv += draw(st.sampled_from([[], ["--pack-strategy", "bfd"], ["--pack-lengths-column", ""],
                                  ["--pack-lengths-column", "length"], ["--seq", "65536"], ["--pack", "64"]]))
    return {"name": "lengths" + suffix, "text": text, "argv": argv}


@st.composite
def corpora(draw):
    suffix = draw(st.sampled_from([".jsonl", ".txt", ".parquet"]))
    if suffix == ".jsonl":
        lines = draw(st.lists(st.sampled_from(['{"text": "a b c"}', '{"text": 5}', '{"text": ["a"]}', "[]", "",
                                               f'{{"text": {DIGITS}}}', '{"text": ' + DEEP + "}",
                                               '{"text": "a", "text": "b"}', '{"body": "x"}', "not json",
                                               '{"text": "\\u001b[31m"}']), max_size=5))
        text = "\n".join(lines) + "\n"
    else:
        text = draw(st.sampled_from(["a b\n\nc d e\n", "", "é|a é|b", "a\x1eb", "\n\n\n", "w " * 500]))
    argv = ["lengths", "{FILE}", "--no-plot"]
    argv += draw(st.sampled_from([["-o", ""], ["-o", "{FILE}"], ["-o", "{FILE}", "--force"], ["-o", "good.json"],
                                  ["-o", "new-histogram.json"], ["-o", "[bold]h.json", "--json"]]))
    argv += draw(st.sampled_from([[], ["--separator", "\\x"], ["--separator", "é|"], ["--separator", "\\x1e"],
                                  ["--separator", ""], ["--field", ""], ["--field", "\x1b"], ["--by", "bytes"]]))
    return {"name": "corpus" + suffix, "text": text, "argv": argv}


@st.composite
def parallel_points(draw):
    seq = draw(st.sampled_from(["256", "4096", "65536", "4194304", "16777216", DIGITS, "0", "-8", "1e3"]))
    pack = draw(st.sampled_from([None, "1", "16", "1024", "1e-320", "0.5", "nan", DIGITS]))
    if pack is None and seq == "4194304":
        seq = "16777216"  # unpacked at 2^22 is accepted and takes seconds: the refused side of the edge instead
    argv = [draw(st.sampled_from(["analyze", "walkthrough", "rules"])), "nano-sort", "--seq", seq]
    if pack is not None:
        argv += ["--pack", pack]
    if seq in ("4194304", "16777216") and pack in ("1024", "16"):
        # Past the budget whatever else is drawn: points an accepted run would take minutes at are not drawn.
        argv += draw(st.sampled_from([["--pack-strategy", "bfd"], ["--pack-strategy", "split"],
                                      ["--cp", "1024", "--cp-shard", "per-document"]]))
    else:
        argv += draw(st.sampled_from([[], ["--cp", "2"], ["--cp", "3"], ["--cp", "1024"], ["--cp", "1025"],
                                      ["--cp", "0"], ["--cp", "8", "--cp-shard", "per-document"],
                                      ["--cp", "4", "--cp-shard", "\x1b"], ["--pack-strategy", "ffd"]]))
    return {"name": "unused.txt", "text": "", "argv": argv}


files = st.one_of(configs(), lengths_files(), corpora(), parallel_points())
