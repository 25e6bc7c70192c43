"""rl[logprobs]: TRL's selective_log_softmax path on a packed batch, held to each sequence run alone by the test."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
trl_utils = pytest.importorskip("trl.trainer.utils")

from rl_cases import alone_logprobs, tiny_llama, token_batch  # noqa: E402

from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.runtime.certification.rl.logprobs import check_logprobs  # noqa: E402

ROWS = [[5, 9, 3], [7, 4, 6]]


def within_sequences(model, batch):
    """TRL's path (selective_log_softmax, entropy_from_logits) on the packed rows, the shift kept inside each
    sequence: a position whose next token starts another sequence scores nothing (0)."""
    logits = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False).logits
    return _scored(logits, batch), trl_utils.entropy_from_logits(logits)


def rolled_flat(model, batch):
    """verl #6475: next-token labels by torch.roll on the flattened packed tensor."""
    ids, positions = batch["input_ids"], batch["position_ids"]
    logits = model(input_ids=ids, position_ids=positions, use_cache=False).logits
    labels = torch.roll(ids.reshape(-1), shifts=-1).reshape(ids.shape)
    return trl_utils.selective_log_softmax(logits, labels)


def through_the_row(model, batch):
    """Positions counted 0..T-1 through the pack instead of the batch's restarting position_ids."""
    ids = batch["input_ids"]
    logits = model(input_ids=ids, position_ids=torch.arange(ids.shape[1]).expand_as(ids), use_cache=False).logits
    return _scored(logits, batch)


def test_trls_path_with_the_shift_inside_each_sequence_is_each_sequence_alone():
    model, batch = tiny_llama(), token_batch(ROWS)
    result = check_logprobs(within_sequences, model, batch)
    assert result.passed, result.message()
    assert result.entropy and result.sequences == 6 and result.forwards <= 3
    # the reference the certificate holds it to, computed here one sequence a call
    got, entropy = within_sequences(model, batch)
    for r, row in enumerate(ROWS):
        at = 0
        for n in row:
            lp, h = alone_logprobs(model, batch["input_ids"][r, at:at + n])
            assert torch.allclose(got[r, at:at + n - 1].double(), lp, atol=1e-5)
            assert torch.allclose(entropy[r, at:at + n].double(), h, atol=1e-5)
            at += n


def test_torch_roll_on_the_flat_packed_tensor_names_the_first_boundary():
    model, batch = tiny_llama(), token_batch(ROWS)
    result = check_logprobs(rolled_flat, model, batch)
    assert not result.passed
    first = result.crossings[0]
    assert (first.sequence, first.row, first.column, first.next_column) == (0, 0, 4, 5)
    assert result.message().startswith("the log-probs of the packed batch are not the model's own on each sequence "
                                       "alone: position 4 of row 0, the last token of sequence 0, holds")
    assert "torch.roll on the flat packed tensor, verl #6475" in result.message()
    # the last sequence of the batch wraps to the batch's first token, as the roll does
    last = result.crossings[-1]
    assert (last.row, last.column, last.next_row, last.next_column) == (1, 16, 0, 0)


def test_positions_counted_through_the_row_are_named_with_the_gap_in_nats():
    model, batch = tiny_llama(), token_batch(ROWS)
    result = check_logprobs(through_the_row, model, batch)
    assert not result.passed and not result.crossings
    assert {g.sequence for g in result.gaps} == {1, 2, 4, 5}  # every sequence but each row's first
    gap = result.gaps[0]
    lp, _ = alone_logprobs(model, batch["input_ids"][0, 5:14])
    assert gap.want == pytest.approx(float(lp[gap.position]), abs=1e-5)
    assert f"a gap of {gap.nats:.3g} nats" in result.message()
    assert "positions counted through the row" in result.message()


def test_the_cache_left_on_is_named():
    """transformers reads packing off position_ids only without a cache: use_cache=True (the config's default)
    makes every sequence attend to those before it in its row."""
    model, batch = tiny_llama(), token_batch(ROWS)

    def cached(model, batch):
        return _scored(model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).logits, batch)

    result = check_logprobs(cached, model, batch)
    assert not result.passed and {g.sequence for g in result.gaps} == {1, 2, 4, 5}
    assert "The cause: the cache left on: called with use_cache=True" in result.message()


def test_a_cache_kept_between_calls_is_named():
    model, batch = tiny_llama(), token_batch(ROWS)
    kept = {}

    def stateful(model, batch):  # the rollout's past_key_values carried into each scoring forward
        ids = batch["input_ids"]
        cache = kept.get("cache")
        offset = 0 if cache is None else cache.get_seq_length()
        out = model(input_ids=ids, position_ids=batch["position_ids"] + offset, cache=cache, use_cache=True)
        kept["cache"] = out.past_key_values
        return _scored(out.logits, batch)

    stateful(model, batch)  # generation left its cache
    result = check_logprobs(stateful, model, batch)
    assert not result.passed and "gives another answer on a second call on the same batch" in result.message()


def _scored(logits, batch):
    ids, positions = batch["input_ids"], batch["position_ids"]
    lp = trl_utils.selective_log_softmax(logits[:, :-1], ids[:, 1:])
    lp = torch.where(positions[:, 1:] == 0, torch.zeros_like(lp), lp)
    return torch.cat([lp, torch.zeros_like(lp[:, :1])], 1)


def test_bad_input_names_its_path():
    model, batch = tiny_llama(), token_batch(ROWS)
    with pytest.raises(TensorcadError, match="logprob_fn"):
        check_logprobs(lambda m, b: torch.zeros(3), model, batch)
    with pytest.raises(TensorcadError, match="input_ids"):
        check_logprobs(within_sequences, model, {"position_ids": batch["position_ids"]})
