"""Block masks from the documents against create_block_mask, and built once a batch vs once a layer.

The mask is the generated module's own (llama-3-8b-documents' `causal_same_document`
factory, with the `ranges` codegen gives it). "from documents" is the prelude's
`_block_mask_from_ranges`; "create_block_mask" is PyTorch's, eager and compiled (warm:
the compile is paid before timing). Every figure goes in benchmark.extra_info as a
ratio of two timings taken in the same run, so load on the machine falls on both.

    python -m pytest benchmarks/bench_block_mask.py -o python_files='bench_*.py'

Eager create_block_mask holds every score of a row (T x T booleans, and the int64
document ids it compares at every score), so it is run where that fits this
machine; beyond, the report gives the memory it would need instead of a timing.
"""

from __future__ import annotations

import functools
import statistics
import time
import types
import warnings

import pytest

torch = pytest.importorskip("torch")

import tensorcad  # noqa: E402
from tensorcad.codegen import generate  # noqa: E402
from tensorcad.packing import draw  # noqa: E402
from tensorcad.runtime.building.generated import load_module  # noqa: E402

SIZES = (2048, 8192, 32768, 131072)
EAGER_UP_TO = 8192  # beyond, T x T scores held at once crowd this shared machine
COMPILED_UP_TO = 131072
MEAN = 1024  # tokens a document, exponential lengths


@functools.cache
def generated():
    """The generated module's namespace: its prelude and its mask factory."""
    return load_module(generate(tensorcad.load("llama-3-8b-documents")), "bench").__dict__


def documents(rows: int, seq: int, seed: int = 0) -> torch.Tensor:
    docs, _ = draw(rows, seq, MEAN, 1.0, seed=seed)
    return torch.from_numpy(docs)


def best_of(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def without_ranges(mask_mod):
    """The same mask_mod without `ranges`: what create_block_mask is handed."""
    plain = types.FunctionType(mask_mod.__code__, mask_mod.__globals__, mask_mod.__name__,
                               mask_mod.__defaults__, mask_mod.__closure__)
    plain.reads, plain.uses_head = mask_mod.reads, mask_mod.uses_head
    return plain


@pytest.mark.parametrize("seq", SIZES)
def test_from_documents_vs_create_block_mask(benchmark, seq):
    if benchmark.disabled and seq > 2048:
        pytest.skip("CI smoke run: the smallest size only")
    from torch.nn.attention.flex_attention import create_block_mask

    ns = generated()
    mask_mod = ns["causal_same_document_mask"](documents(1, seq))

    def from_documents():
        return ns["_block_mask_from_ranges"](mask_mod, mask_mod.ranges, 1, None, seq, seq, "cpu")

    ours = from_documents()
    benchmark(from_documents)
    ours_s = best_of(from_documents, 20)
    info = {"seq": seq, "rows": 1, "from_documents_s": ours_s}
    plain = without_ranges(mask_mod)
    if seq <= EAGER_UP_TO:
        reference = create_block_mask(plain, 1, None, seq, seq, device="cpu")
        assert torch.equal(reference.kv_num_blocks, ours.kv_num_blocks)
        assert torch.equal(reference.full_kv_num_blocks, ours.full_kv_num_blocks)
        eager_s = best_of(lambda: create_block_mask(plain, 1, None, seq, seq, device="cpu"),
                          1 if benchmark.disabled else 2)
        info.update(eager_s=eager_s, ratio_eager=eager_s / ours_s)
    else:
        # create_mask holds at least one boolean a score (its int64 gathers more)
        info.update(eager_s=None, eager_needs_gb_at_least=seq * seq / 1e9)
    if not benchmark.disabled and seq <= COMPILED_UP_TO:
        compiled = torch.compile(create_block_mask)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            start = time.perf_counter()
            reference = compiled(plain, 1, None, seq, seq, device="cpu")
            info["compile_s"] = time.perf_counter() - start
        assert torch.equal(reference.kv_num_blocks, ours.kv_num_blocks)
        compiled_s = best_of(lambda: compiled(plain, 1, None, seq, seq, device="cpu"),
                             3 if seq <= 32768 else 1)
        info.update(compiled_s=compiled_s, ratio_compiled=compiled_s / ours_s)
    benchmark.extra_info.update(info)
    if not benchmark.disabled:
        # The speed-ups claimed, as ratios of timings taken in this run (docs/performance.md
        # measured 548-3,310x eager and 129-887x compiled): the targets, ≥ 200x eager at 8,192
        # and ≥ 5x compiled, with the eager floor a quarter of the smallest measured at 2,048.
        if "ratio_eager" in info:
            assert info["ratio_eager"] >= (200 if seq >= 8192 else 50), info
        if "ratio_compiled" in info:
            assert info["ratio_compiled"] >= 5, info


# -- once a batch vs once a layer --------------------------------------------------------

B, H, H_KV, T, D = 2, 8, 2, 1024, 64


@pytest.mark.parametrize("builder", ["from_documents", "create_block_mask"])
@pytest.mark.parametrize("layers", [2, 8, 32])
def test_block_mask_once_a_batch_vs_every_layer(benchmark, layers, builder):
    """A stack of `attend` layers; "every layer" empties the cache before each one."""
    if benchmark.disabled and layers > 2:
        pytest.skip("CI smoke run: two layers only")
    seq = 256 if benchmark.disabled else T
    ns = generated()
    ns["COMPILE"].update(flex_attention=False, create_block_mask=False)
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, seq, D, generator=generator)
    k = torch.randn(B, H_KV, seq, D, generator=generator)
    v = torch.randn(B, H_KV, seq, D, generator=generator)
    make = ns["causal_same_document_mask"]
    mask_for = make if builder == "from_documents" else (lambda docs: without_ranges(make(docs)))
    seeds = iter(range(1, 10**6))

    def forward(docs, every_layer):
        x = q
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(layers):
                if every_layer:
                    ns["_BLOCK_MASKS"].clear()
                x = ns["attend"](x, k, v, form="flex", mask_mod=mask_for(docs))
        return x

    docs = documents(B, seq)
    torch.testing.assert_close(forward(docs, False), forward(docs, True), rtol=0, atol=0)
    benchmark.pedantic(forward, setup=lambda: ((documents(B, seq, next(seeds)), False), {}),
                       rounds=1 if benchmark.disabled else 3, iterations=1)
    once_s, every_s, ratios = [], [], []
    for _ in range(1 if benchmark.disabled else 3):
        docs = documents(B, seq, next(seeds))
        start = time.perf_counter()
        forward(docs, False)
        middle = time.perf_counter()
        forward(docs.clone(), True)
        end = time.perf_counter()
        once_s.append(middle - start)
        every_s.append(end - middle)
        ratios.append((end - middle) / (middle - start))
    def one_build():
        ns["_BLOCK_MASKS"].clear()
        return ns["_block_mask"](mask_for(docs), B, H, seq, seq, "cpu")

    build_s = best_of(one_build, 1 if benchmark.disabled else 3)
    benchmark.extra_info.update(
        layers=layers, builder=builder, B=B, H=H, H_kv=H_KV, T=seq, D=D, build_s=build_s,
        path=ns["RUNTIME_PATHS"]["block_mask"],
        once_a_batch_s=statistics.median(once_s), every_layer_s=statistics.median(every_s),
        ratio_every_layer_to_once=statistics.median(ratios),
    )
    assert ns["RUNTIME_PATHS"]["block_mask"] == (
        "from_ranges" if builder == "from_documents" else "create_block_mask")
    if not benchmark.disabled:
        # Sharing one mask across layers must never cost: every layer over once a batch stays
        # at or above 0.9 (alternating rounds on a shared machine move it ~5%). The saving
        # itself is small on CPU, where attention dominates (0.96-1.12x measured), so no
        # larger speed-up is claimed.
        assert statistics.median(ratios) >= 0.9, ratios
