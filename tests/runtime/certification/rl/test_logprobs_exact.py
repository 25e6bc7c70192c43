"""rl[logprobs] word for word: every message, path and JSON field, with each figure computed here from the
model run on each sequence alone (rl_cases.alone_logprobs), and the log-probs the function returns."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
trl_utils = pytest.importorskip("trl.trainer.utils")

from rl_cases import alone_logprobs, tiny_llama, token_batch  # noqa: E402

from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.runtime.certification.forward.faithful import default_tolerance  # noqa: E402
from tensorcad.runtime.certification.rl.logprobs import check_logprobs  # noqa: E402

ROWS = [[5, 9, 3], [7, 4, 6]]  # sequences 0..2 in row 0 (from 0, 5, 14), 3..5 in row 1 (from 0, 7, 11)
FIRSTS = [(0, 0, 5), (0, 5, 9), (0, 14, 3), (1, 0, 7), (1, 7, 4), (1, 11, 6)]


@pytest.fixture(scope="module")
def case():
    return tiny_llama(), token_batch(ROWS)


def clean(model, batch):
    logits = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False).logits
    ids, positions = batch["input_ids"], batch["position_ids"]
    lp = trl_utils.selective_log_softmax(logits[:, :-1], ids[:, 1:])
    lp = torch.where(positions[:, 1:] == 0, torch.zeros_like(lp), lp)
    return torch.cat([lp, torch.zeros_like(lp[:, :1])], 1), trl_utils.entropy_from_logits(logits)


def planted(spots, what="log-prob", by=0.5):
    """The clean function with ``by`` added at (row, column) ``spots`` of its log-probs or its entropies."""
    def fn(model, batch):
        lp, h = clean(model, batch)
        target = lp if what == "log-prob" else h
        for r, c in spots:
            target[r, c] += by
        return lp, h
    return fn


def test_a_pass_says_its_largest_gap_its_tolerance_and_its_forward_passes(case):
    model, batch = case
    result = check_logprobs(clean, model, batch)
    assert result.tolerance == default_tolerance(torch.float32) and result.forwards == 3
    assert result.largest < result.tolerance and result.entropy
    message = (f"the log-probs and entropies of 6 packed sequences equal the model's own forward on each alone "
               f"(largest gap {result.largest:.3g} nats, tolerance {result.tolerance:.3g}; 3 forward passes)")
    assert result.to_json() == {"passed": True, "sequences": 6, "largest_gap_nats": result.largest,
                                "tolerance": result.tolerance, "forwards": 3, "entropy": True, "gaps": [],
                                "crossings": [], "cause": "", "message": message}
    only = check_logprobs(lambda m, b: clean(m, b)[0], model, batch)
    assert not only.entropy and only.message().startswith("the log-probs of 6 packed sequences equal")
    assert check_logprobs(clean, model, batch, atol=0.25).tolerance == 0.25


def test_a_gap_names_its_sequence_row_position_and_nats(case):
    model, batch = case
    result = check_logprobs(planted([(0, 7)]), model, batch)  # sequence 1 (from 5), position 2
    lp, _ = alone_logprobs(model, batch["input_ids"][0, 5:14])
    got = float(clean(model, batch)[0][0, 7].detach()) + 0.5
    gap = result.gaps[0]
    assert (gap.what, gap.sequence, gap.row, gap.first, gap.position) == ("log-prob", 1, 0, 5, 2)
    assert gap.got == pytest.approx(got, abs=1e-6) and gap.want == pytest.approx(float(lp[2]), abs=1e-5)
    assert result.largest == pytest.approx(0.5, abs=1e-4)
    assert gap.message() == (f"sequence 1 (row 0, from token 5), the log-prob of token 3 position 2: {gap.got:.6g} "
                             f"where the sequence alone gives {gap.want:.6g}, a gap of {gap.nats:.3g} nats")
    assert result.message() == ("the log-probs and entropies of the packed batch are not the model's own on each "
                                "sequence alone: " + gap.message())
    assert result.to_json()["gaps"] == [gap.__dict__] and result.cause == ""


def test_an_entropy_gap_is_told_at_its_position(case):
    model, batch = case
    result = check_logprobs(planted([(1, 10)], "entropy"), model, batch)  # sequence 4 (row 1, from 7), position 3
    _, h = alone_logprobs(model, batch["input_ids"][1, 7:11])
    gap = result.gaps[0]
    assert (gap.what, gap.sequence, gap.position) == ("entropy", 4, 3)
    assert gap.want == pytest.approx(float(h[3]), abs=1e-5)
    assert gap.message().startswith("sequence 4 (row 1, from token 7), the entropy at position 3: ")


def test_three_differences_are_told_and_the_rest_counted(case):
    model, batch = case
    result = check_logprobs(planted([(0, 0), (0, 5), (0, 14), (1, 0), (1, 7)]), model, batch)
    assert [g.sequence for g in result.gaps] == [0, 1, 2, 3, 4]
    assert result.message().endswith("; and 2 more") and result.message().count("a gap of") == 3


def test_a_nan_is_an_infinite_gap(case):
    model, batch = case
    result = check_logprobs(planted([(1, 12)], by=float("nan")), model, batch)
    assert result.gaps[0].nats == float("inf") and "a gap of inf nats" in result.message()
    assert result.largest == float("inf")


def test_the_roll_across_every_boundary_is_told_with_its_cause(case):
    model, batch = case

    def rolled(model, batch):
        ids = batch["input_ids"]
        logits = model(input_ids=ids, position_ids=batch["position_ids"], use_cache=False).logits
        return trl_utils.selective_log_softmax(logits, torch.roll(ids.reshape(-1), -1).reshape(ids.shape))

    result = check_logprobs(rolled, model, batch)
    assert [(c.sequence, c.row, c.column, c.next_row, c.next_column) for c in result.crossings] == [
        (0, 0, 4, 0, 5), (1, 0, 13, 0, 14), (2, 0, 16, 1, 0), (3, 1, 6, 1, 7), (4, 1, 10, 1, 11), (5, 1, 16, 0, 0)]
    first = result.crossings[0]
    assert first.got == pytest.approx(float(rolled(model, batch)[0, 4].detach()), abs=1e-6)
    assert first.message() == (f"position 4 of row 0, the last token of sequence 0, holds {first.got:.6g}, the "
                               "log-prob of token 5 of row 0: the first token of the next sequence, across the "
                               "boundary")
    told = "; ".join(c.message() for c in result.crossings[:3])
    assert result.message() == (
        "the log-probs of the packed batch are not the model's own on each sequence alone: " + told + "; and 3 more. "
        "The cause: a shift across a boundary (labels made by torch.roll on the flat packed tensor, verl #6475): "
        "shift inside each sequence (by cu_seqlens or position_ids), never across the row")


def test_a_gap_of_no_known_cause_tells_none(case):
    model, batch = case
    result = check_logprobs(planted([(0, 7)]), model, batch)
    assert result.cause == "" and not result.message().endswith(".")


def test_bad_input_word_for_word(case):
    model, batch = case
    cases = [
        (lambda: check_logprobs(3, model, batch), "logprob_fn",
         "expected a callable (model, batch) -> (B, T) log-probs, got int"),
        (lambda: check_logprobs(clean, model, {"position_ids": batch["position_ids"]}), "batch.input_ids",
         "the batch holds no input_ids: nothing to score"),
        (lambda: check_logprobs(lambda m, b: torch.zeros(3), model, batch), "logprob_fn.logprobs",
         "expected a (B, T) = (2, 17) tensor, got torch.Size([3])"),
        (lambda: check_logprobs(lambda m, b: (clean(m, b)[0], [1.0]), model, batch), "logprob_fn.entropies",
         "expected a (B, T) = (2, 17) tensor, got list"),
    ]
    for n, (call, path, message) in enumerate(cases):
        with pytest.raises(TensorcadError) as error:
            call()
        assert (error.value.path, error.value.message) == (path, message), n
    with pytest.raises(TensorcadError) as error:
        check_logprobs(clean, object(), batch)
    assert error.value.path == "model"


def through_the_row(model, batch):
    ids = batch["input_ids"]
    logits = model(input_ids=ids, position_ids=torch.arange(ids.shape[1]).expand_as(ids), use_cache=False).logits
    return _within(logits, batch)


def _within(logits, batch):
    ids, positions = batch["input_ids"], batch["position_ids"]
    lp = trl_utils.selective_log_softmax(logits[:, :-1], ids[:, 1:])
    lp = torch.where(positions[:, 1:] == 0, torch.zeros_like(lp), lp)
    return torch.cat([lp, torch.zeros_like(lp[:, :1])], 1)


def test_each_cause_word_for_word(case):
    model, batch = case
    through = check_logprobs(through_the_row, model, batch)
    assert through.cause == ("The cause: positions counted through the row (position_ids 0..T-1 across the pack, not "
                             "restarting at each sequence): pass the batch's restarting position_ids to the model")
    assert through.message().endswith(". " + through.cause)
    # the gaps are those of the row counted through, position by position: sequence 1's first is at token 5
    assert through.gaps[0].first == 5 and through.gaps[0].got == pytest.approx(
        float(through_the_row(model, batch)[0, 5 + through.gaps[0].position].detach()), abs=1e-6)
    cached = check_logprobs(lambda m, b: _within(m(input_ids=b["input_ids"], position_ids=b["position_ids"],
                                                   use_cache=True).logits, b), model, batch)
    assert cached.cause == ("The cause: the cache left on: called with use_cache=True, transformers makes a "
                            "DynamicCache and then reads no packing from position_ids, so every sequence attends to "
                            "those before it in its row; call the model with use_cache=False")
    calls = []

    def drifting(model, batch):  # a second call answers otherwise: what a cache kept between calls does
        calls.append(1)
        return planted([(0, 7)], by=0.5 * len(calls))(model, batch)

    drift = check_logprobs(drifting, model, batch)
    assert len(calls) == 2 and drift.cause == (
        "The cause: the function gives another answer on a second call on the same batch: a cache left on "
        "(past_key_values kept from a previous call or from generation: call the model with past_key_values=None, "
        "use_cache=False)")


def test_one_more_is_counted_and_a_float64_model_has_its_own_tolerance(case):
    model, batch = case
    four = check_logprobs(planted([(0, 0), (0, 5), (0, 14), (1, 0)]), model, batch)
    assert four.message().endswith("; and 1 more") and len(four.gaps) == 4
    wide = tiny_llama().double()
    result = check_logprobs(clean, wide, batch)
    assert result.tolerance == default_tolerance(torch.float64) != default_tolerance(torch.float32)
    assert result.passed and result.largest < default_tolerance(torch.float64)


def test_a_batch_that_marks_its_sequences_by_documents_reads_the_same(case):
    model, batch = case
    documents = {"input_ids": batch["input_ids"], "loss_mask": batch["loss_mask"],
                 "documents": torch.tensor([[0] * 5 + [1] * 9 + [2] * 3, [0] * 7 + [1] * 4 + [2] * 6])}

    def by_documents(model, b):
        return clean(model, {**b, "position_ids": batch["position_ids"]})

    result = check_logprobs(by_documents, model, documents)
    assert result.passed and result.sequences == 6, result.message()
    rolled = check_logprobs(planted([(0, 7)]), model, batch)
    assert rolled.gaps[0].want == pytest.approx(
        float(alone_logprobs(model, batch["input_ids"][0, 5:14])[0][2]), abs=1e-5)
