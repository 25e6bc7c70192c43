"""The registry's ``cp-plan``: each sharding the analysis counts, laid out for the design's batch, certified.

A one-layer design whose attention is given per test: the check must draw the
design's own mask (causal or not, its window) and its settings' seed, lay out every
sharding it can, and fail when a layout loses or doubles a token (planted here by
changing one slot of the layout the building module gives).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tensorcad.runtime.building import cp_layouts  # noqa: E402
from tensorcad.runtime.building.settings import Settings  # noqa: E402
from tensorcad.runtime.building.subject import Subject  # noqa: E402
from tensorcad.runtime.certification.parallel import certificate  # noqa: E402
from tensorcad.runtime.certification.registry import certify  # noqa: E402

SETTINGS = Settings(seq=128, pack=32.0, spread=1.0, params=200_000, block_rows=32)
DOCUMENT = "doc(b, q) == doc(b, kv)"


def design(attention: dict, documents: bool = True) -> dict:
    dim, vocab = 32, 64
    block = {"kind": "transformer_block", "params": {
        "dim": dim, "norm": "rmsnorm", "mlp": {"hidden": 2 * dim, "activation": "swiglu"},
        "attention": {"heads": 4, "head_dim": 8, "rope": {"theta": 10000}, **attention}}}
    inputs = {"ids": {"role": "tokens"}, **({"documents": {"role": "documents"}} if documents else {})}
    return {"name": "tiny-cp", "context": 512, "inputs": inputs,
            "nodes": [{"id": "embed", "kind": "embedding", "in": {"x": "ids"}, "params": {"vocab": vocab, "dim": dim}},
                      {"id": "layers", "kind": "stack",
                       "in": {"x": "embed", **({"doc": "documents"} if documents else {})},
                       "params": {"repeat": 1, "block": block}},
                      {"id": "head", "kind": "linear", "in": {"x": "layers"}, "params": {"out": vocab}}],
            "output": "head"}


@pytest.fixture
def calls(monkeypatch):
    """Each check_cp_plan the registry's check makes: its keyword arguments (the real certificate still runs)."""
    made = []
    real = certificate.check_cp_plan

    def recorded(plan, batch, world_size, **kwargs):
        made.append({"world_size": world_size, **kwargs})
        return real(plan, batch, world_size, **kwargs)

    monkeypatch.setattr(certificate, "check_cp_plan", recorded)
    return made


def test_every_sharding_laid_out_is_certified_with_the_designs_mask_and_seed(calls):
    windowed = design({"causal": True, "mask": DOCUMENT, "window": 16})
    settings = replace(SETTINGS, seed=7)
    (check,) = certify(windowed, settings, only=["cp-plan"])
    assert (check.name, check.status) == ("cp-plan", "passed"), check.message
    assert sorted(check.figures) == ["contiguous", "headtail", "per-document"]
    assert calls == [{"world_size": 2, "causal": True, "window": 16, "seed": 7}] * 3
    assert check.message.endswith("; ptrr: not laid out here (PTRR deals whole 128-token blocks: 2 x 128 does not "
                                  "divide 128 tokens)")
    # Per document: each padded to a multiple of 2 x 2, the row to a multiple of 2 x 128, rows to the longest.
    documents = Subject(windowed, settings).batch[1].numpy()
    longest = 0
    for row in documents:
        lengths = np.diff(np.flatnonzero(np.r_[True, row[1:] != row[:-1], True]))
        longest = max(longest, -(-sum(-(-lengths // 4) * 4) // 256) * 256)
    assert [check.figures[s]["padding"] for s in ("contiguous", "headtail", "per-document")] == [0, 0, longest - 128]
    assert all(f["passed"] and f["worldSize"] == 2 for f in check.figures.values())


def test_a_bidirectional_window_is_drawn_as_one(calls):
    (check,) = certify(design({"causal": False, "mask": DOCUMENT + " and abs(q - kv) < 8"}), SETTINGS,
                       only=["cp-plan"])
    assert check.status == "passed", check.message
    assert calls[0] == {"world_size": 2, "causal": False, "window": 8, "seed": SETTINGS.seed}


def test_a_layout_that_doubles_a_token_fails_naming_the_sharding(monkeypatch):
    real = cp_layouts.cp_layout

    def doubling(documents, shard, world_size, counts=None, block=128):
        layout = real(documents, shard, world_size, counts, block)
        if shard == "headtail":
            layout = layout.clone()
            layout[:, 5] = layout[:, 4]
        return layout

    monkeypatch.setattr(cp_layouts, "cp_layout", doubling)
    (check,) = certify(design({"causal": True, "mask": DOCUMENT}), SETTINGS, only=["cp-plan"])
    assert (check.name, check.status) == ("cp-plan", "failed")
    lines = check.message.split("\n")
    assert lines[0] == "a sharding the analysis counts loses or leaks"
    assert lines[1].startswith("contiguous: an index map over 2 ranks: every position on one rank")
    assert lines[2].startswith("headtail: an index map over 2 ranks:")
    assert "a token on two ranks: row 0, position 4," in check.message
    assert [check.figures[s]["passed"] for s in ("contiguous", "headtail", "per-document")] == [True, False, True]


@pytest.mark.parametrize("attention, documents, reason", [
    ({"causal": True}, False, "tiny-cp has no document mask decided from its ranges to shard"),
    ({"causal": True, "mask": DOCUMENT + " and q - kv < where(h < 2, 8, 64)"}, True,
     "the mask keeps other distances on other heads: PyTorch's CP balancers need one mask"),
    ({"causal": False, "mask": DOCUMENT + " and kv - q < 4"}, True,
     "a one-sided window that keeps keys ahead is not a document mask this check draws"),
])
def test_masks_no_balancer_can_shard_are_skipped_saying_why(attention, documents, reason):
    (check,) = certify(design(attention, documents), SETTINGS, only=["cp-plan"])
    assert (check.status, check.message) == ("skipped", reason)


@pytest.mark.parametrize("mask", [DOCUMENT + " and q - kv < where(h < 1, 8, 64)",
                                  DOCUMENT + " and q - kv < 64 and kv - q < where(h < 1, 4, 8)"])
def test_two_heads_keeping_other_distances_behind_or_ahead_are_skipped(mask):
    (check,) = certify(design({"heads": 2, "causal": "where(h < 1, 8, 64)" in mask, "mask": mask}), SETTINGS,
                       only=["cp-plan"])
    assert (check.status, check.message) == (
        "skipped", "the mask keeps other distances on other heads: PyTorch's CP balancers need one mask")


def _kept(documents, distance):
    """The design's mask as a mask_mod over these rows: the same document, and the distance kept."""

    def kept(b, h, q, kv):
        return (documents[b, q] == documents[b, kv]) & distance(q, kv)

    return kept


def test_ptrr_deals_blocks_by_the_key_blocks_flexattention_counts(monkeypatch):
    """At 512 tokens PTRR is laid out: the counts it is dealt by are create_block_mask's own for the design's
    mask, with long documents (blocks kept whole) and windows that bind (blocks skipped)."""
    from torch.nn.attention.flex_attention import create_block_mask

    given = []
    real = cp_layouts.cp_layout

    def recorded(documents, shard, world_size, counts=None, block=128):
        given.append((shard, counts))
        return real(documents, shard, world_size, counts, block)

    monkeypatch.setattr(cp_layouts, "cp_layout", recorded)
    settings = replace(SETTINGS, seq=512, pack=300.0)
    masks = {"causal": ({"causal": True, "mask": DOCUMENT}, lambda q, kv: q >= kv),
             "causal window": ({"causal": True, "mask": DOCUMENT, "window": 8}, lambda q, kv: (q >= kv) & (q - kv < 8)),
             "both ways": ({"causal": False, "mask": DOCUMENT + " and abs(q - kv) < 8"},
                           lambda q, kv: (q - kv).abs() < 8)}
    dealt = {}
    for name, (attention, distance) in masks.items():
        given.clear()
        case = design(attention)
        (check,) = certify(case, settings, only=["cp-plan"])
        assert (check.name, check.status) == ("cp-plan", "passed"), check.message
        assert sorted(check.figures) == ["contiguous", "headtail", "per-document", "ptrr"]
        documents = Subject(case, settings).batch[1]
        flex = create_block_mask(_kept(documents, distance), documents.shape[0], 1, 512, 512, device="cpu")
        want = (flex.kv_num_blocks + flex.full_kv_num_blocks)[:, 0]
        assert [shard for shard, _ in given] == ["contiguous", "headtail", "per-document", "ptrr"]
        assert all(torch.equal(torch.as_tensor(counts), want) for _, counts in given), name
        dealt[name] = want.tolist()
        if name == "causal":
            assert int(flex.full_kv_num_blocks.sum()) > 0  # blocks kept whole count too
    assert len({str(d) for d in dealt.values()}) == 3, dealt  # each mask deals blocks of other work
