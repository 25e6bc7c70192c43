"""The generated module's block mask from ranges, held to PyTorch's own create_block_mask.

Each design below is generated, executed and asked for its own mask_mod (the model's
factory over new rows, as `runtime.blockmask.model_masks` rebuilds it). For random
packings (hypothesis, about 2,500 rows a run: lengths that are and are not multiples
of 128, several rows packed differently, one-token documents, one document filling a
row, ids that skip)
the BlockMask built from ranges must equal create_block_mask's: kv_num_blocks and
full_kv_num_blocks, the same sets of indices (and so the same transposed q side),
and flex_attention must give the same output with either.
"""

from __future__ import annotations

import copy
import functools
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: E402

import tensorcad  # noqa: E402
from tensorcad.analysis.tiles import count_row_blocks  # noqa: E402
from tensorcad.codegen import generate  # noqa: E402
from tensorcad.design.block_ranges import block_ranges  # noqa: E402
from tensorcad.runtime.building.blockmask import model_masks  # noqa: E402
from tensorcad.runtime.building.generated import load_module  # noqa: E402

HEADS = 4
# attention params over nano-sort's (4 heads of 32): every family the ranges decide
DESIGNS = {
    "document-causal": {},
    "document-window": {"window": 100},
    "document-local-window": {"causal": False, "window": 200},
    "document-bidirectional": {"causal": False},
    "per-head-windows": {"mask": "(doc(b, q) == doc(b, kv)) & (q - kv < where(h < 2, 64, 300))"},
    "sliding-window": {"window": 192, "mask": None},
    "causal": {"mask": None},
}


def design(name: str):
    source = copy.deepcopy(tensorcad.load("nano-sort").to_dict())
    attention = source["nodes"][1]["params"]["block"]["params"]["attention"]
    attention.update(DESIGNS[name])
    if attention.get("mask", "") is None:
        del attention["mask"]
        source["nodes"][1]["in"].pop("doc")
    source["name"] = f"ranges-{name}"
    return tensorcad.load(source)


@functools.cache
def generated(name: str):
    """(make(documents) -> the model's mask_mod, the module's namespace) for design `name`."""
    d = design(name)
    module = load_module(generate(d), d.name)
    model = module.Model(module.CONFIG, form="eager")
    documents = torch.zeros(1, 16, dtype=torch.int64)
    inputs = {"ids": torch.zeros(1, 16, dtype=torch.int64)}
    if d.input("documents") is not None:
        inputs["documents"] = documents
    (mask,) = model_masks(model, inputs)  # the factory the module's own MASKS table names
    return (lambda documents: mask.make(documents, None)), module.__dict__


def rows_of(seq: int, rows: int, style: str, seed: int) -> torch.Tensor:
    """(rows, seq) non-decreasing document ids, each row packed its own way."""
    rng = np.random.default_rng(seed)
    out = []
    for r in range(rows):
        kind = style if style != "mixed" else ("random", "tokens", "whole", "skips")[r % 4]
        if kind == "whole":  # one document fills the row
            ids = np.full(seq, rng.integers(0, 5))
        elif kind == "tokens":  # mostly one-token documents, a few longer
            starts = rng.random(seq) < 0.8
            ids = np.cumsum(starts)
        else:
            mean = rng.choice([1.5, 16, 100, 300, 2000])
            starts = rng.random(seq) < 1 / mean
            ids = np.cumsum(starts) * (rng.integers(1, 4) if kind == "skips" else 1)
        out.append(ids + rng.integers(0, 3))
    return torch.from_numpy(np.stack(out).astype(np.int64))


def expected_and_built(name: str, documents: torch.Tensor):
    make, ns = generated(name)
    mask_mod = make(documents)
    rows, seq = documents.shape
    uses_documents = hasattr(mask_mod, "reads")
    B = rows if uses_documents else None
    H = HEADS if getattr(mask_mod, "uses_head", True) else None
    reference = create_block_mask(mask_mod, B, H, seq, seq, device="cpu")
    ns["RUNTIME_PATHS"].clear()
    ns["_BLOCK_MASKS"].clear()
    built = ns["_block_mask"](mask_mod, rows, HEADS, seq, seq, "cpu")
    assert ns["RUNTIME_PATHS"] == {"block_mask": "from_ranges"}
    return reference, built


def index_sets(counts: torch.Tensor, indices: torch.Tensor) -> list:
    flat_counts = counts.reshape(-1).tolist()
    flat = indices.reshape(len(flat_counts), -1)
    return [frozenset(flat[i, :n].tolist()) for i, n in enumerate(flat_counts)]


def assert_same_block_mask(reference, built):
    assert built.shape == reference.shape
    for counts, indices in (("kv_num_blocks", "kv_indices"), ("full_kv_num_blocks", "full_kv_indices"),
                            ("q_num_blocks", "q_indices"), ("full_q_num_blocks", "full_q_indices")):
        assert torch.equal(getattr(built, counts), getattr(reference, counts)), counts
        assert index_sets(getattr(built, counts), getattr(built, indices)) == \
            index_sets(getattr(reference, counts), getattr(reference, indices)), indices


@pytest.mark.parametrize("name", sorted(DESIGNS))
def test_every_family_is_decided_from_ranges(name):
    a = design(name).attentions()[0][0]
    assert block_ranges(a) is not None
    make, _ = generated(name)
    assert hasattr(make(torch.zeros(1, 8, dtype=torch.int64)), "ranges")


# 300 examples of 1-32 rows (fewer for long rows): 2,485 random rows in one counted run.
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(DESIGNS)),
       seq=st.sampled_from([1, 100, 127, 128, 129, 232, 256, 300, 513, 1000, 2048, 4095]),
       rows=st.integers(1, 32),
       style=st.sampled_from(["random", "tokens", "whole", "skips", "mixed"]),
       seed=st.integers(0, 2**32 - 1))
@example(name="document-causal", seq=4095, rows=3, style="mixed", seed=0)
@example(name="per-head-windows", seq=4095, rows=2, style="random", seed=1)
@example(name="document-local-window", seq=1000, rows=8, style="mixed", seed=2)
@example(name="sliding-window", seq=4095, rows=1, style="whole", seed=3)
def test_equals_create_block_mask(name, seq, rows, style, seed):
    # create_block_mask holds rows x heads x seq x seq booleans: long rows come fewer at once
    rows = min(rows, max(1, 2**24 // (HEADS * seq * seq)))
    documents = rows_of(seq, rows, style, seed)
    reference, built = expected_and_built(name, documents)
    assert_same_block_mask(reference, built)


@pytest.mark.parametrize("name", ["document-causal", "per-head-windows", "document-local-window"])
def test_the_engine_decides_the_same_blocks(name):
    # Three deciders of one mask: the engine's interval interpreter, the generated
    # module's ranges and create_block_mask (above) agree block for block.
    documents = rows_of(1000, 4, "mixed", 7)
    _, built = expected_and_built(name, documents)
    engine = count_row_blocks(design(name).attentions()[0][0], documents.numpy())
    heads = engine.full.shape[1]
    full = built.full_kv_num_blocks[:, :heads].numpy()
    partial = built.kv_num_blocks[:, :heads].numpy()
    # The engine clips the last block at seq and may call it full; FlexAttention pads it.
    assert (engine.full[..., :-1] == full[..., :-1]).all()
    assert ((engine.full + engine.partial) == (full + partial)).all()


@pytest.mark.parametrize("name", ["document-causal", "per-head-windows", "sliding-window"])
def test_flex_gives_the_same_output_with_either_mask(name):
    documents = rows_of(300, 3, "mixed", 11)
    reference, built = expected_and_built(name, documents)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, HEADS, 300, 16, generator=g) for _ in range(3))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        expected = flex_attention(q, k, v, block_mask=reference)
        got = flex_attention(q, k, v, block_mask=built)
    assert torch.equal(got, expected)


def test_other_masks_fall_back_to_create_block_mask():
    # The same mask text with a bound that leaves out the query itself is not exact
    # from ranges: the generated module says so and asks create_block_mask.
    source = copy.deepcopy(tensorcad.load("nano-sort").to_dict())
    attention = source["nodes"][1]["params"]["block"]["params"]["attention"]
    attention["mask"] = "(doc(b, q) == doc(b, kv)) & (q - kv >= 10)"
    d = tensorcad.load(source)
    assert block_ranges(d.attentions()[0][0]) is None
    module = load_module(generate(d), d.name)
    model = module.Model(form="flex")
    ns = module.__dict__
    ns["COMPILE"].update(flex_attention=False, create_block_mask=False)
    documents = rows_of(256, 2, "random", 5)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        model(torch.zeros(2, 256, dtype=torch.int64), documents)
    assert ns["RUNTIME_PATHS"]["block_mask"] == "create_block_mask"
    assert ns["RUNTIME_PATHS"]["create_block_mask"] == "eager"
