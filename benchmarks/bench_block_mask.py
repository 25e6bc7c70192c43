"""What sharing the block mask saves: an 8-layer stack of `attend` with a document mask.

Each round is one forward pass over a new batch (fresh documents). "once a batch" is the
prelude's cache: the first layer builds the block mask, the other seven share it.
"every layer" empties the cache before each layer, as a cache keyed by the mask
function did, since a factory makes a new function every call.

    python -m pytest benchmarks/bench_block_mask.py -o python_files='bench_*.py'

The ratio (every layer ÷ once a batch, the median over rounds that alternate the two)
goes in benchmark.extra_info, with the
paths that ran (compiled or not) and the builds per forward pass, counted.
"""

from __future__ import annotations

import importlib.util
import statistics
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

PRELUDE_PATH = Path(__file__).resolve().parents[1] / "tensorcad" / "codegen" / "prelude.py"
LAYERS, B, H, H_KV, T, D = 8, 2, 8, 2, 1024, 64
ROUNDS = 10


def load_prelude(compile_: bool) -> dict:
    spec = importlib.util.spec_from_file_location("tensorcad_codegen_prelude", PRELUDE_PATH)
    prelude = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prelude)
    ns: dict = {}
    source = prelude.IMPORTS + prelude.ATTENTION_RUNTIME + prelude.ROTARY_RUNTIME
    exec(compile(source, "<prelude>", "exec"), ns)
    ns["COMPILE"].update(flex_attention=compile_, create_block_mask=compile_)
    return ns


def same_document(documents):
    """Keeps a key when it is in the query's document and not after it."""

    def same_document_causal(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (documents[b, q_idx] == documents[b, kv_idx])

    same_document_causal.reads = (documents,)
    same_document_causal.uses_head = False  # as the generator marks a mask that never reads h
    return same_document_causal


def fresh_documents(generator: torch.Generator) -> torch.Tensor:
    """(B, T) document ids: ~96-token documents cut at random points of each row."""
    starts = torch.rand(B, T, generator=generator) < 1 / 96
    starts[:, 0] = False
    return starts.long().cumsum(dim=1)


@pytest.mark.parametrize("compile_", [False, True], ids=["uncompiled", "compiled"])
def test_block_mask_once_a_batch_vs_every_layer(benchmark, compile_):
    ns = load_prelude(compile_)
    builds = []
    real_run_compiled = ns["_run_compiled"]

    # Counted outside the compiled function: a side effect traced into it would
    # make torch.compile guard on the list and recompile.
    def counting_run_compiled(name, *args, **kwargs):
        if name != "create_block_mask":
            return real_run_compiled(name, *args, **kwargs)
        start = time.perf_counter()
        block_mask = real_run_compiled(name, *args, **kwargs)
        builds.append(time.perf_counter() - start)
        return block_mask

    ns["_run_compiled"] = counting_run_compiled
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, T, D, generator=generator)
    k = torch.randn(B, H_KV, T, D, generator=generator)
    v = torch.randn(B, H_KV, T, D, generator=generator)

    def forward(documents, every_layer):
        x = q
        with torch.no_grad():
            for _ in range(LAYERS):
                if every_layer:
                    ns["_BLOCK_MASKS"].clear()
                x = ns["attend"](x, k, v, form="flex", mask_mod=same_document(documents))
        return x

    def one_batch():
        return (fresh_documents(generator), False), {}

    # warm up (and, compiled, pay the compile) outside the timings; sharing the
    # block mask must not change what the stack computes
    documents = fresh_documents(generator)
    torch.testing.assert_close(forward(documents, False), forward(documents, True), rtol=0, atol=0)

    builds.clear()
    benchmark.pedantic(forward, setup=one_batch, rounds=ROUNDS, iterations=1)
    builds_once = len(builds) / ROUNDS

    # The ratio from rounds that alternate the two, so load from anything else on
    # the machine falls on both alike: the median of each round's ratio.
    builds.clear()
    once_s, every_s, ratios = [], [], []
    for _ in range(ROUNDS):
        documents = fresh_documents(generator)
        start = time.perf_counter()
        forward(documents, False)
        middle = time.perf_counter()
        forward(documents.clone(), True)
        end = time.perf_counter()
        once_s.append(middle - start)
        every_s.append(end - middle)
        ratios.append((end - middle) / (middle - start))
    builds_per_round = len(builds) / ROUNDS
    build_s = statistics.median(builds)

    ratio = statistics.median(ratios)
    benchmark.extra_info.update(
        layers=LAYERS, B=B, H=H, H_kv=H_KV, T=T, D=D,
        paths=dict(ns["RUNTIME_PATHS"]),
        builds_per_forward_once_a_batch=builds_once,
        builds_per_forward_every_layer=builds_per_round - 1,
        median_s_once_a_batch=statistics.median(once_s),
        median_s_every_layer=statistics.median(every_s),
        ratio_every_layer_to_once=ratio,
        median_s_per_block_mask_build=build_s,
    )
    assert builds_once == 1 and builds_per_round == 1 + LAYERS
    print(f"\n{ns['RUNTIME_PATHS']}: once a batch {statistics.median(once_s) * 1e3:.1f} ms, "
          f"every layer {statistics.median(every_s) * 1e3:.1f} ms, ratio {ratio:.2f}, "
          f"one build {build_s * 1e3:.1f} ms")
