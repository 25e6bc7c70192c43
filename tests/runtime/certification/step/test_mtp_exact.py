"""Multi-token prediction to the letter (issue 46's mutation): each of step[labels]'s two MTP messages word for word
on a batch written out by hand, the refusal of a model's mtp_targets of the wrong shape, and the modules' cost under
a packing that pads (their matmuls over the real tokens, their attention the last block's keys a query), held to the
main analysis of the same rows."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from tensorcad import OperatingPoint, analyze  # noqa: E402
from tensorcad.analysis.mtp import mtp_cost  # noqa: E402
from tensorcad.design import load  # noqa: E402
from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.packing import Packing  # noqa: E402
from tensorcad.runtime.certification.step.batch import IGNORE_INDEX, StepBatch  # noqa: E402
from tensorcad.runtime.certification.step.mtp import check_heads, head_failures, mtp_heads, rolled_targets  # noqa: E402

# one row, documents of 3 and 4 tokens; the targets are the tokens' own numbers (shifted: the output at t is trained
# on targets[t]), none at a document's last token
DOCUMENTS = torch.tensor([[0, 0, 0, 1, 1, 1, 1]])
TARGETS = torch.tensor([[11, 12, IGNORE_INDEX, 14, 15, 16, IGNORE_INDEX]])


def batch() -> StepBatch:
    return StepBatch(ids=torch.zeros_like(TARGETS), documents=DOCUMENTS, positions=torch.zeros_like(TARGETS),
                     labels=TARGETS, shift="shifted")


def test_the_roll_within_documents_by_hand():
    assert rolled_targets(batch(), 1).tolist() == [[12, IGNORE_INDEX, IGNORE_INDEX, 15, 16, IGNORE_INDEX,
                                                    IGNORE_INDEX]]
    assert rolled_targets(batch(), 2).tolist() == [[IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX, 16, IGNORE_INDEX,
                                                    IGNORE_INDEX, IGNORE_INDEX]]


def test_a_roll_across_the_boundary_and_a_wrong_token_in_words():
    got = rolled_targets(batch(), 1).clone()
    got[0, 1] = 14  # document 0's second output trained on document 1's first target
    got[0, 4] = 99  # a wrong token inside the last document
    assert head_failures(batch(), 1, got) == [
        "head 1: row 0: the output at position 1 of document 0 (its last at 2) is trained on 14, a target of "
        "document 0: the roll crosses the boundary at position 3; the last 2 positions of every document must "
        "train head 1 on nothing (-100)",
        "head 1: row 0: the output at position 4 (document 1) is trained on 99, where the token 2 ahead in its "
        "document is 16",
    ]
    got = rolled_targets(batch(), 2).clone()
    got[0, 2] = 15  # head 2 at document 0's last: the roll reaches document 1
    assert head_failures(batch(), 2, got) == [
        "head 2: row 0: the output at position 2 of document 0 (its last at 2) is trained on 15, a target of "
        "document 1: the roll crosses the boundary at position 3; the last 3 positions of every document must "
        "train head 2 on nothing (-100)"]


def test_a_target_past_the_rows_end_is_a_wrong_token_not_a_crossing():
    for k in (1, 2):
        got = rolled_targets(batch(), k).clone()
        got[0, 7 - k] = 5  # t + k is the row's end: no document there to name
        assert head_failures(batch(), k, got) == [
            f"head {k}: row 0: the output at position {7 - k} (document 1) is trained on 5, where the token {k + 1} "
            "ahead in its document is -100"]
    clean = torch.stack([rolled_targets(batch(), 1), rolled_targets(batch(), 2)])
    assert head_failures(batch(), 1, clean[0]) == [] and check_heads(batch(), clean) == ()


class Heads(torch.nn.Module):
    def __init__(self, shape):
        super().__init__()
        self.shape = shape

    def mtp_targets(self, targets, documents):
        return torch.zeros(self.shape, dtype=torch.long)


def test_a_models_mtp_targets_of_another_shape_are_refused():
    assert mtp_heads(torch.nn.Linear(1, 1), batch()) is None  # no mtp_targets: no heads
    assert mtp_heads(Heads((2, 1, 7)), batch()).shape == (2, 1, 7)
    for shape in ((1, 7), (2, 1, 6), (2, 7, 1)):
        with pytest.raises(TensorcadError) as e:
            mtp_heads(Heads(shape), batch())
        assert str(e.value) == f"model.mtp_targets: returned {shape}, expected (depth, 1, 7)"


DESIGN = {
    "name": "tiny-mtp", "context": 32,
    "inputs": {"ids": {"role": "tokens"}, "doc": {"role": "documents"}},
    "nodes": [
        {"id": "embed", "kind": "embedding", "in": {"x": "ids"}, "params": {"vocab": 50, "dim": 32}},
        {"id": "layers", "kind": "stack", "in": {"x": "embed", "doc": "doc"}, "params": {
            "repeat": 2, "block": {"kind": "transformer_block", "params": {
                "attention": {"heads": 4, "mask": "doc(b, q) == doc(b, kv)"}, "mlp": {"hidden": 64}}}}},
        {"id": "norm", "kind": "rmsnorm", "in": {"x": "layers"}},
        {"id": "head", "kind": "linear", "in": {"x": "norm"}, "params": {"out": 50}}],
    "output": "head",
    "mtp": {"depth": 2},
}
PADDED = OperatingPoint(seq=32, packing=Packing(8, 0.5, strategy="pad"))
PER_KEY = 4 * 8 * 4  # 4 x head_dim x heads: one key's score and weighted sum, a query


def test_under_a_padding_packer_the_modules_cost_their_real_tokens_and_the_last_blocks_keys():
    report = analyze(load(DESIGN), PADDED).to_json()
    packed = report["flops"]["packed"]
    real = 1 - packed["packing"]["padding"]
    assert 0.2 < real < 0.3  # 8-token documents one a 32-token row
    mtp = report["mtp"]
    # the main analysis's attention over the same rows: 2 layers, each the last block's kernel
    assert mtp["fwdPerToken"] == pytest.approx(2 * mtp["params"]["matmul"] / real + 2 * packed["fwdAttention"] / 2,
                                               rel=1e-12)
    assert packed["fwdAttention"] == pytest.approx(2 * PER_KEY * packed["keysPerQuery"], rel=1e-12)
    assert mtp == {"depth": 2, "params": mtp["params"], "fwdPerToken": mtp["fwdPerToken"],
                   "trainPerToken": 3 * mtp["fwdPerToken"]}
    cost = mtp_cost(load(DESIGN), 32, PADDED.packing, seed=PADDED.seed)
    assert cost.depth == 2 and cost.to_json() == mtp


def test_a_mask_that_reads_no_documents_pays_the_padding_but_not_the_packing():
    causal = copy.deepcopy(DESIGN)
    causal["nodes"][1]["params"]["block"]["params"]["attention"] = {"heads": 4}
    del causal["inputs"]["doc"], causal["nodes"][1]["in"]["doc"]
    real = 1 - analyze(load(DESIGN), PADDED).to_json()["flops"]["packed"]["packing"]["padding"]
    cost = mtp_cost(load(causal), 32, PADDED.packing, seed=PADDED.seed)
    assert cost.fwd_per_token == pytest.approx(2 * cost.params.matmul / real + 2 * PER_KEY * 16.5, rel=1e-12)
    unpacked = mtp_cost(load(causal), 32)
    assert unpacked.fwd_per_token == pytest.approx(2 * unpacked.params.matmul + 2 * PER_KEY * 16.5, rel=1e-12)
    assert mtp_cost(load({k: v for k, v in DESIGN.items() if k != "mtp"}), 32) is None


def _windowed(repeat, windows):
    design = copy.deepcopy(DESIGN)
    design["nodes"][1]["params"].update(repeat=repeat, windows=windows)
    return mtp_cost(load(design), 32)


def window_keys(w):
    return sum(min(q + 1, w) for q in range(32)) / 32 if w else 16.5  # keys a causal query keeps, by hand


@pytest.mark.parametrize("repeat, windows, last", [
    (3, [4, 8, None], None),  # the whole cycle once: the last block
    (6, [4, 8, None], None),  # twice
    (3, [None, 4, 8], 8),
    (5, [4, 8, None], 8),  # cut short (Gemma 3's way): repetition 4 runs block 4 mod 3
    (4, [8, 4, None], 8),  # repetition 3 runs block 0
])
def test_the_modules_attention_is_the_stacks_last_repetition(repeat, windows, last):
    cost = _windowed(repeat, windows)
    assert cost.fwd_per_token == pytest.approx(2 * cost.params.matmul + 2 * PER_KEY * window_keys(last), rel=1e-12)
