"""Weighted gradients, exactly: the exponents, the three passes and their fall-backs (issue 42's mutation).

Tiny models written here: an isolated one (each token's output from its own embedding), one whose outputs
read the row's mean embedding (every document reaches every other), one that ignores a document's tokens.
Each verdict and figure is held to `check_gradient_isolation` (one backward a document) or to the
definition of the passes.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tensorcad.runtime.certification.forward.gradients import check_gradient_isolation
from tensorcad.runtime.certification.forward.weighted_gradients import SPREAD, check_gradients_weighted, exponents

VOCAB = 30


class Tiny(nn.Module):
    def __init__(self, mix: float = 0.0, deaf: int | None = None):
        super().__init__()
        torch.manual_seed(0)
        self.embed, self.out = nn.Embedding(VOCAB, 8), nn.Linear(8, VOCAB)
        self.mix, self.deaf = mix, deaf

    def forward(self, ids, documents, positions=None):
        h = self.embed(ids)
        if self.deaf is not None:  # a document whose outputs do not read its tokens
            h = torch.where((documents == self.deaf)[..., None], torch.zeros_like(h), h)
        if self.mix:
            h = h + self.mix * h.mean(dim=1, keepdim=True)
        return self.out(h)


def batch(lengths=(3, 5, 2, 4, 6)):
    documents = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))[None]
    ids = torch.randint(0, VOCAB, documents.shape, generator=torch.Generator().manual_seed(3))
    return ids, documents, None


def test_the_exponents_are_distinct_pairs_within_the_spread_and_seeded():
    width = 2 * SPREAD + 1
    for count in (1, 7, 100, width ** 2):
        got = exponents(count, SPREAD, seed=5)
        assert len(got) == count == len(set(got)) and all(len(e) == 2 for e in got)
        assert all(-SPREAD <= x <= SPREAD for e in got for x in e)
    assert exponents(50, SPREAD, 1) == exponents(50, SPREAD, 1) != exponents(50, SPREAD, 2)
    for count, spread in ((9, 1), (4, 4), (30, 2)):  # the first `count` codes of the grid, in a seeded order
        width = 2 * spread + 1
        assert sorted(exponents(count, spread, 0)) == sorted(((n % width) - spread, (n // width) % width - spread)
                                                             for n in range(count))


def test_an_isolated_model_takes_three_backward_passes_and_names_none():
    model = Tiny()
    result = check_gradients_weighted(model, *batch())
    assert result.passed and result.backwards == 3 and result.losses == result.documents == 5
    assert result.method == "3 weighted backward passes for 5 documents" and result.still == ()


def test_a_document_whose_outputs_ignore_its_tokens_is_still():
    result = check_gradients_weighted(Tiny(deaf=2), *batch())
    assert result.still == ((0, 2),)
    assert result.still == check_gradient_isolation(Tiny(deaf=2), *batch()).still


def test_a_leak_makes_the_passes_disagree_and_is_named_one_document_at_a_time():
    model = Tiny(mix=0.5)
    result = check_gradients_weighted(model, *batch())
    each = check_gradient_isolation(model, *batch())
    assert not result.passed and result.leaks == each.leaks
    assert result.method == ("the 3 weighted passes disagreed; each document's loss taken back alone to name "
                             "the leaks")
    assert result.backwards == each.backwards + 3


def test_a_document_without_a_loss_must_get_no_gradient():
    model = Tiny(mix=0.5)
    result = check_gradients_weighted(model, *batch(), sample=2, seed=1)
    assert not result.passed and result.losses == 2  # the sampled two reach the others: the passes disagree
    assert check_gradients_weighted(Tiny(), *batch(), sample=2, seed=1).passed


@pytest.mark.parametrize("count", [(2 * SPREAD + 1) ** 2 + 1])
def test_more_documents_than_the_passes_can_tell_apart_are_taken_back_one_at_a_time(count):
    ids, documents, _ = batch((1,) * count)
    result = check_gradients_weighted(Tiny(), ids, documents)
    assert result.passed and result.backwards == count
    assert result.method == f"one backward a document: {count} documents need more than three passes"


def test_half_precision_spreads_its_exponents_less():
    model = Tiny().half()
    ids, documents, _ = batch()
    result = check_gradients_weighted(model, ids, documents)
    assert result.passed and result.backwards == 3


def test_a_sample_is_weighted_too_and_its_documents_are_the_one_a_document_checks():
    model = Tiny()
    sampled = check_gradients_weighted(model, *batch(), sample=2)
    assert sampled.passed and sampled.losses == 2 and sampled.backwards == 3
    assert sampled.method == "3 weighted backward passes for 2 documents"  # the unsampled ones got no gradient
    leaky = Tiny(mix=0.5)
    each = check_gradient_isolation(leaky, *batch(), sample=2)  # the same default seed: the same two documents
    assert {leak.document for leak in check_gradients_weighted(leaky, *batch(), sample=2).leaks} == \
        {leak.document for leak in each.leaks}


def test_the_embedding_given_and_the_positions_reach_the_model():
    class TwoTables(Tiny):
        def __init__(self):
            super().__init__()
            self.other = nn.Embedding(VOCAB, 8)

        def forward(self, ids, documents, positions):
            assert positions is not None  # the batch's positions, passed on
            return self.out(self.embed(ids) + self.other(ids))

    ids, documents, _ = batch()
    positions = torch.zeros_like(ids)
    model = TwoTables()
    result = check_gradients_weighted(model, ids, documents, positions, embedding=model.other)
    assert result.passed and result.embedding == check_gradient_isolation(
        model, ids, documents, positions, embedding=model.other).embedding
    from tensorcad.errors import TensorcadError

    with pytest.raises(TensorcadError, match=r"^positions: shape"):
        check_gradients_weighted(model, ids, documents, positions[:, :2])


@pytest.mark.parametrize("dtype, count, weighted", [
    (torch.float32, 100, True),   # 33 x 33 codes at float32's spread of 16
    (torch.float16, 81, True),    # 9 x 9 codes at half precision's spread of 4
    (torch.float16, 82, False),   # one more than half precision's codes: one backward a document
])
def test_the_spread_is_the_outputs_dtypes_and_bounds_the_documents_weighed(dtype, count, weighted):
    model = Tiny().to(dtype)
    ids, documents, _ = batch((1,) * count)
    result = check_gradients_weighted(model, ids, documents)
    assert result.passed and result.backwards == (3 if weighted else count)


def test_the_fall_back_keeps_every_setting_and_the_bound_is_inclusive():
    class TwoTables(Tiny):
        def __init__(self):
            super().__init__(mix=0.5)
            self.other = nn.Embedding(VOCAB, 8)

        def forward(self, ids, documents, positions):
            assert positions is not None
            h = self.embed(ids) + self.other(ids)
            return self.out(h + self.mix * h.mean(dim=1, keepdim=True))

    ids, documents, _ = batch()
    positions = torch.zeros_like(ids)
    model = TwoTables()
    options = dict(embedding=model.other, sample=3, seed=2)
    weighted = check_gradients_weighted(model, ids, documents, positions, **options)
    each = check_gradient_isolation(model, ids, documents, positions, **options)
    assert not weighted.passed and weighted.leaks == each.leaks and weighted.losses == each.losses == 3
    assert weighted.embedding == each.embedding
    width = 2 * SPREAD + 1
    ids, documents, _ = batch((1,) * width ** 2)  # exactly as many documents as codes: still weighed
    assert check_gradients_weighted(Tiny(), ids, documents).backwards == 3


def test_a_model_whose_outputs_ignore_the_embeddings_is_refused_as_the_one_a_document_check_refuses_it():
    from tensorcad.errors import TensorcadError

    class Ignores(Tiny):
        def forward(self, ids, documents, positions=None):
            return self.out(torch.ones(*ids.shape, 8))

    for check in (check_gradients_weighted, check_gradient_isolation):
        with pytest.raises(TensorcadError, match=r"^embedding: no embedding module read the ids"):
            check(Ignores(), *batch())


def test_past_the_codes_the_one_at_a_time_check_gets_the_embedding_and_positions():
    class ReadsOther(Tiny):  # the outputs read the second table only: held at the first, every document is still
        def __init__(self):
            super().__init__()
            self.other = nn.Embedding(VOCAB, 8)

        def forward(self, ids, documents, positions):
            assert positions is not None
            return self.out(0 * self.embed(ids) + self.other(ids))

    count = (2 * SPREAD + 1) ** 2 + 1
    ids, documents, _ = batch((1,) * count)
    model = ReadsOther()
    positions = torch.zeros_like(ids)
    assert not check_gradients_weighted(model, ids[:, :9], documents[:, :9], positions[:, :9]).passed  # held: embed
    result = check_gradients_weighted(model, ids, documents, positions, embedding=model.other)
    assert result.passed and result.losses == count
    assert result.method == f"one backward a document: {count} documents need more than three passes"


def test_the_result_in_full_its_seeded_sample_and_an_empty_batch():
    result = check_gradients_weighted(Tiny(), *batch())
    assert result.leaks == () and result.note == "" and result.embedding == "embed"
    for seed in range(4):  # which documents a seeded sample holds: the one-a-document check's own
        weighted = check_gradients_weighted(Tiny(deaf=1), *batch(), sample=2, seed=seed)
        each = check_gradient_isolation(Tiny(deaf=1), *batch(), sample=2, seed=seed)
        assert weighted.still == each.still and weighted.losses == 2
    empty = torch.zeros(1, 0, dtype=torch.long)
    nothing = check_gradients_weighted(Tiny(), empty, empty)
    # a raw RuntimeError before (a gradient of no token reshaped to (1, 0, -1))
    assert nothing.losses == nothing.documents == 0 and nothing.backwards == 0 and not nothing.passed
    assert nothing.method == "no document: nothing taken back"


def test_a_sample_past_the_codes_is_the_one_at_a_time_checks_sample():
    # a sample of 1,100 of 1,200 documents is more than the codes tell apart: taken back one at a time, those 1,100
    ids, documents, _ = batch((1,) * 1200)
    for seed in (0, 3):
        weighted = check_gradients_weighted(Tiny(deaf=7), ids, documents, sample=1100, seed=seed)
        each = check_gradient_isolation(Tiny(deaf=7), ids, documents, sample=1100, seed=seed)
        assert weighted.losses == each.losses == 1100 and weighted.still == each.still
