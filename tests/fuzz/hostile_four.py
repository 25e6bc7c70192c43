"""Hypothesis strategies for round four's surfaces (#47): the Dask scheduler's address, the context-parallel
launcher's options, the guard's settings, hybrid Hugging Face configs, mixer designs and the step certificates'
batches.

Each draw is a dict the worker (``worker_four.py``) runs. Where the strategy builds a case it knows to be bad
(a scheme that is not tcp, a port out of range, a window of 0), it says so in ``expect: "refused"``: that case
succeeding is a wrong success, counted as a failure, beside the tracebacks and hangs every case is held to.
"""

from __future__ import annotations

import copy

from hypothesis import strategies as st

from hostile import hostile_number, hostile_scalar, hostile_text, hostile_value
from tensorcad.design import load

# -- the Dask scheduler's address ------------------------------------------------------------------------------

_hosts = st.one_of(st.sampled_from(["127.0.0.1", "localhost", "[::1]", "10.0.0.1", "scheduler", "a" * 300, "",
                                    "h st", "h/x", "h@x", "::1"]), hostile_text)
_ports = st.one_of(st.integers(-5, 70000).map(str), st.sampled_from(["", "http", "08786", "８７８６", "1e3",
                                                                      "+1", " 1", "99999999999999999999"]),
                   hostile_text)


@st.composite
def scheduler_addresses(draw):
    scheme = draw(st.sampled_from(["tcp://", "", "tls://", "ucx://", "inproc://", "ws://", "TCP://", "tcp:/"]))
    host, port = draw(_hosts), draw(_ports)
    address = draw(st.one_of(st.just(f"{scheme}{host}:{port}"), st.just(f"{scheme}{host}"), hostile_text))
    bad_scheme = scheme in ("tls://", "ucx://", "inproc://", "ws://", "TCP://")
    bad_port = not (port.isascii() and port.isdigit() and 0 < int(port) < 65536)
    known_bad = address == f"{scheme}{host}:{port}" and (bad_scheme or bad_port)
    return {"address": address, **({"expect": "refused"} if known_bad else {})}


# -- the context-parallel launcher's options (everything before a rank spawns) -----------------------------------

_LAUNCHER = {"--world-size": st.integers(-2, 80), "--seq": st.sampled_from([-1, 0, 127, 128, 1000, 4096, 2**15,
                                                                            2**15 + 1, 2**26]),
             "--rows": st.integers(-1, 70), "--pack": st.sampled_from(["0", "1e-300", "0.5", "64", "nan", "inf",
                                                                       "-1", "1e9", "abc"]),
             "--spread": st.sampled_from(["0", "1e-5", "1", "10", "11", "nan", "-inf"]),
             "--heads": st.integers(-1, 70), "--head-dim": st.sampled_from([0, 1, 64, 256, 257, 2**20]),
             "--window": st.sampled_from([-5, 0, 1, 64, 5000, 2**40]),
             "--shard": st.sampled_from(["", ",", "contiguous", "headtail", "nope", "contiguous,nope", "x" * 2000]),
             "--kernel": st.sampled_from(["flex", "blockwise", "cuda", ""]), "--repeats": st.integers(-1, 200),
             "--seed": st.sampled_from([-1, 0, 2**31, 2**31 + 1])}


@st.composite
def launcher_argvs(draw):
    chosen = draw(st.lists(st.sampled_from(sorted(_LAUNCHER)), max_size=6, unique=True))
    argv = []
    for option in chosen:
        argv += [option, str(draw(_LAUNCHER[option]))]
    if draw(st.booleans()):
        argv.append(draw(st.sampled_from(["--bogus", "--json", "-h", "--seq"])))
    known_bad = "-h" not in argv and any(a == "--window" and b in ("0", "-5") for a, b in zip(argv, argv[1:]))
    return {"argv": argv, **({"expect": "refused"} if known_bad else {})}


# -- the guard's settings ------------------------------------------------------------------------------------------

_GUARD = {"certificates": st.one_of(st.just(["step[labels]"]), st.just("step[loss]"), st.lists(hostile_scalar, max_size=3),
                                    hostile_scalar),
          "certify_on": st.one_of(st.sampled_from(["replica", "model", None, "", 5]), hostile_scalar),
          "on_failure": st.one_of(st.sampled_from(["raise", "warn", "stop", "RAISE"]), hostile_scalar),
          "first": hostile_number, "every": hostile_number, "eos_id": st.one_of(hostile_number, st.none()),
          "unknown_keyword": hostile_scalar}


@st.composite
def guard_settings(draw):
    keys = draw(st.lists(st.sampled_from(sorted(_GUARD)), max_size=4, unique=True))
    kwargs = {k: draw(_GUARD[k]) for k in keys}
    known_bad = kwargs.get("certificates") == "step[loss]" or kwargs.get("certify_on") == 5
    return {"kwargs": kwargs, **({"expect": "refused"} if known_bad else {})}


# -- hybrid Hugging Face configs -----------------------------------------------------------------------------------

HYBRIDS = {
    "mamba2": {"model_type": "mamba2", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 2, "num_heads": 4,
               "head_dim": 16, "state_size": 8, "n_groups": 1, "expand": 2, "conv_kernel": 4, "chunk_size": 16},
    "bamba": {"model_type": "bamba", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64, "mamba_n_heads": 4,
              "mamba_d_head": 16, "mamba_d_state": 8, "mamba_n_groups": 1, "mamba_expand": 2, "mamba_d_conv": 4,
              "mamba_chunk_size": 16, "attn_layer_indices": [1]},
    "lfm2": {"model_type": "lfm2", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64, "conv_L_cache": 3,
             "layer_types": ["conv", "full_attention"], "block_ffn_dim_multiplier": 1.0,
             "block_multiple_of": 16, "block_auto_adjust_ff_dim": True},
}
_HYBRID_VALUES = st.one_of(hostile_value, st.sampled_from([0, -1, 2**31, 2**70, float("nan"), float("inf"), 1e308,
                                                            [], {}, "", None, True, [True], [0, 0], [99]]))


@st.composite
def hybrid_configs(draw):
    family = draw(st.sampled_from(sorted(HYBRIDS)))
    config = copy.deepcopy(HYBRIDS[family])
    for key in draw(st.lists(st.sampled_from(sorted(config)), max_size=3, unique=True)):
        config[key] = draw(_HYBRID_VALUES)
    known_bad = any(config.get("num_hidden_layers") == v for v in (2**70, 2**31))
    return {"config": config, **({"expect": "refused"} if known_bad else {})}


# -- mixer designs ---------------------------------------------------------------------------------------------------

_MIXER_RAW = load("mamba2-hybrid-documents").to_dict()
_MIXER_KEYS = ["heads", "head_dim", "state", "groups", "kernel", "chunk"]
_MIXER_VALUES = st.one_of(st.sampled_from([1, 2, 3, 4, 8, 16, 64, 128, 4096, 4097, 2**20, 0, -1]), hostile_scalar)


@st.composite
def mixer_designs(draw):
    raw = copy.deepcopy(_MIXER_RAW)
    block = raw["nodes"][1]["params"]["blocks"]["mamba"]["params"]
    mixer = block["mixer"]
    if draw(st.booleans()):
        mixer["kind"] = draw(st.sampled_from(["ssm", "linear_attention", "short_conv", "ssm2", ""]))
        mixer["params"] = {"heads": 8, "head_dim": 64} if mixer["kind"] == "linear_attention" else mixer["params"]
    for key in draw(st.lists(st.sampled_from(_MIXER_KEYS), max_size=3, unique=True)):
        mixer["params"][key] = draw(_MIXER_VALUES)
    if draw(st.booleans()):
        block["dim"] = raw["nodes"][0]["params"]["dim"] = draw(st.sampled_from([64, 4096, 2**20, 2**20 + 1, 0]))
    return {"design": raw, "scale": draw(st.booleans())}


# -- the step certificates' batches --------------------------------------------------------------------------------

_ids = st.one_of(st.lists(st.lists(st.integers(-3, 70), min_size=0, max_size=12), min_size=0, max_size=2),
                 hostile_value)


@st.composite
def step_batches(draw):
    tokens = draw(st.integers(2, 12))
    good = [[(i * 7) % 31 for i in range(tokens)]]
    batch = {"input_ids": good, "labels": good, "documents": [[0] * (tokens // 2) + [1] * (tokens - tokens // 2)]}
    for key in draw(st.lists(st.sampled_from(["input_ids", "labels", "documents", "position_ids", "cu_seq_lens_q",
                                              "cu_seq_lens_k", "attention_mask", "seq_idx"]), max_size=2, unique=True)):
        batch[key] = draw(_ids)
    dtype = draw(st.sampled_from(["int64", "int64", "int32", "int16", "uint8", "float32", "complex64"]))
    settings = draw(st.fixed_dictionaries({}, optional={
        "atol": st.sampled_from([0.0, 1e-6, 0.01, 0.02, float("inf"), float("nan"), -1.0]),
        "rtol": st.sampled_from([0.0, 0.1, 0.2, 1e300, float("nan")]),
        "only": st.one_of(st.just(["step[labels]"]), st.just(["step[loss]"]), st.just("step[loss]"),
                          st.lists(hostile_text, max_size=2))}))
    known_bad = settings.get("atol") in (float("inf"), -1.0) or settings.get("rtol") == 1e300
    return {"batch": batch, "dtype": dtype, "settings": settings, **({"expect": "refused"} if known_bad else {})}
