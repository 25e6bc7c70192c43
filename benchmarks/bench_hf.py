"""The generated model against transformers' LlamaForCausalLM on the same packed batch.

llama-3-8b-documents generated and set to one shape (4 layers of 512, 8 heads of 64
over 2 key/value heads, SwiGLU 1,536, vocabulary 8,192); LlamaForCausalLM built with
the same shape, random weights both (weight loading is the Hugging Face issue's). One
row of 2,048 tokens packed with documents of about 256 tokens (spread 1):

- ours: compiled flex forward (block mask from the documents), eager forward, eager
  forward + backward (the eager form materialises every T x T score);
- transformers, sdpa: the packed ``position_ids`` path (it finds the documents from
  the restarting positions) and an explicit 4D document-causal mask; forward, and
  forward + backward.

Times are medians of rounds that alternate with transformers' sdpa forward (the
reference, in the same run); each figure goes in extra_info as a ratio to it. Peak
memory is each variant's growth of the peak resident set over one warm run (its
compile and first run paid before), in a fresh process holding only its model
(``python benchmarks/bench_hf.py VARIANT T``): Linux resets the peak (VmHWM) to the
current resident set when "5" is written to /proc/self/clear_refs, so the growth is
what the run itself added, not what building the model left behind.

    python -m pytest benchmarks/bench_hf.py -o python_files='bench_*.py'
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

SHAPE = dict(dim=512, n_layer=4, n_head=8, n_kv_head=2, head_dim=64, hidden=1536, vocab_size=8192)
ROWS, T, MEAN = 1, 2048, 256
SMOKE_T = 256
VARIANTS = ("ours_flex_compiled", "ours_eager_forward", "ours_eager_train",
            "hf_sdpa_position_ids", "hf_sdpa_position_ids_train", "hf_sdpa_4d_mask")
REFERENCE = "hf_sdpa_position_ids"


def batch(seq: int):
    from tensorcad.packing import draw, positions_of

    documents, _ = draw(ROWS, seq, MEAN, 1.0, seed=0)
    ids = torch.randint(0, SHAPE["vocab_size"], (ROWS, seq), generator=torch.Generator().manual_seed(0))
    return ids, torch.from_numpy(documents), torch.from_numpy(positions_of(documents))


def ours(seq: int):
    import tensorcad
    from tensorcad.runtime.building.generated import build
    from tensorcad.runtime.building.scaling import scale

    # Scaled first: only the class and its module are kept, and 8B parameters would not fit.
    model = build(scale(tensorcad.load("llama-3-8b-documents"), params=1_000_000))
    config = dataclasses.replace(model.config, context=seq, **SHAPE)
    torch.manual_seed(0)
    model = type(model)(config, form="flex")
    return model, type(model).forward.__globals__


def theirs(seq: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=SHAPE["vocab_size"], hidden_size=SHAPE["dim"],
                         intermediate_size=SHAPE["hidden"], num_hidden_layers=SHAPE["n_layer"],
                         num_attention_heads=SHAPE["n_head"], num_key_value_heads=SHAPE["n_kv_head"],
                         head_dim=SHAPE["head_dim"], max_position_embeddings=seq, rope_theta=500000.0,
                         rms_norm_eps=1e-5, tie_word_embeddings=False)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def variants(seq: int, only: str | None = None) -> dict:
    """name -> a callable running it once on the packed batch (models built once).

    With ``only``, just the model that variant needs is built (a fresh process
    measuring its peak memory holds nothing else).
    """
    ids, documents, positions = batch(seq)
    model, ns = ours(seq) if only is None or only.startswith("ours") else (None, {})
    hf = theirs(seq) if only is None or only.startswith("hf") else None
    i = torch.arange(seq)
    keep = (i[:, None] >= i[None, :]) & (documents[0][:, None] == documents[0][None, :])
    mask_4d = keep[None, None]  # (B, 1, T, T) booleans: True attends

    def ours_flex():
        model.form = "flex"
        ns["COMPILE"].update(flex_attention=True)
        with torch.no_grad():
            return model(ids, documents=documents)

    def ours_eager(train):
        def run():
            model.form = "eager"
            if train:
                model(ids, documents=documents).float().mean().backward()
                model.zero_grad(set_to_none=True)
                return None
            with torch.no_grad():
                return model(ids, documents=documents)
        return run

    def hf_run(mask, train):
        def run():
            kwargs = {"attention_mask": mask_4d} if mask else {"position_ids": positions}
            if train:
                hf(ids, **kwargs).logits.float().mean().backward()
                hf.zero_grad(set_to_none=True)
                return None
            with torch.no_grad():
                return hf(ids, **kwargs).logits
        return run

    return {
        "ours_flex_compiled": ours_flex,
        "ours_eager_forward": ours_eager(False),
        "ours_eager_train": ours_eager(True),
        "hf_sdpa_position_ids": hf_run(False, False),
        "hf_sdpa_position_ids_train": hf_run(False, True),
        "hf_sdpa_4d_mask": hf_run(True, False),
    }, ns


def peak_memory(variant: str, seq: int) -> float:
    """Growth of the peak resident set (bytes) over one warm run of `variant`, in a fresh process."""
    out = subprocess.run([sys.executable, str(Path(__file__)), variant, str(seq)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_growth_bytes"]


def test_generated_model_vs_transformers(benchmark):
    warnings.simplefilter("ignore")
    seq = SMOKE_T if benchmark.disabled else T
    runs, ns = variants(seq)
    runs["ours_flex_compiled"]()  # pay the compile (about 17 s on CPU) outside the timings
    with torch.no_grad():
        # Same shapes, different random weights: the logits agree in shape, not in value.
        assert runs["ours_eager_forward"]().shape == runs[REFERENCE]().shape
    rounds = 1 if benchmark.disabled else 5
    benchmark.pedantic(runs["ours_flex_compiled"], rounds=rounds, iterations=1)
    times = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():  # alternating, so load falls on all alike
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(t) for name, t in times.items()}
    info = {"T": seq, "shape": SHAPE, "mean_document": MEAN, "paths": dict(ns["RUNTIME_PATHS"]),
            "median_s": medians,
            "ratio_to_hf_sdpa_position_ids": {n: m / medians[REFERENCE] for n, m in medians.items()}}
    # What the eager form materialises: one float32 score a (head, query, key), a layer
    info["eager_scores_bytes_a_layer"] = ROWS * SHAPE["n_head"] * seq * seq * 4
    if not benchmark.disabled and peak_resettable():
        info["peak_growth_bytes"] = {name: peak_memory(name, seq) for name in runs}
    benchmark.extra_info.update(info)


def _status_bytes(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024  # the kernel writes kB
    raise KeyError(field)


def peak_resettable() -> bool:
    """Whether this kernel lets a process reset its peak resident set (Linux 4.0 on)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return _status_bytes("VmHWM") > 0
    except (OSError, KeyError):
        return False


def _measure_one(variant: str, seq: int) -> None:
    warnings.simplefilter("ignore")
    runs, _ = variants(seq, only=variant)
    run = runs[variant]
    run()  # compile (the flex variant) and first-touch allocations, outside the measure
    Path("/proc/self/clear_refs").write_text("5")  # peak := current resident set
    before = _status_bytes("VmRSS")
    run()
    print(json.dumps({"variant": variant, "peak_growth_bytes": _status_bytes("VmHWM") - before}))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    _measure_one(sys.argv[1], int(sys.argv[2]))
