"""rl[alignment] word for word: every message, path and JSON field, and the canaries' edges (the first and
last sequence, the last token, values that name no sequence), on pipelines written here."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.runtime.certification.rl.alignment import KEY_STRIDE, check_alignment  # noqa: E402

LENGTHS = [4, 2, 3]  # S = 3 samples, L = 4: canary ids 1..12, token t of sample i is i * 4 + t + 1


def batch(mask=True):
    m = torch.tensor([[1 if t < n else 0 for t in range(4)] for n in LENGTHS])
    out = {"input_ids": torch.full((3, 4), 7), "advantages": torch.zeros(3), "logp": torch.zeros(3, 4)}
    if mask:
        out["attention_mask"] = m
    return out


def same(b):
    return dict(b)


def test_the_canaries_are_the_ones_documented_and_an_identity_passes():
    seen = {}

    def look(b):
        seen.update(b)
        return b

    result = check_alignment(look, batch(), ["advantages", "logp"])
    assert seen["input_ids"].tolist() == [[1, 2, 3, 4], [5, 6, 0, 0], [9, 10, 11, 0]]
    assert seen["advantages"].tolist() == [KEY_STRIDE, KEY_STRIDE + 1, KEY_STRIDE + 2]
    assert seen["logp"][2, 3].item() == 2 * KEY_STRIDE + 12 and seen["logp"].dtype == torch.float32
    assert seen["input_ids"].dtype == torch.long
    assert result.to_json() == {
        "passed": True, "sequences": 3, "keys": ["advantages", "logp"], "parts": 1, "misplaced": [],
        "missing": [], "repeated": [],
        "message": "every token of the 3 sequences came back once over 1 part(s), each with its own sequence's "
                   "`advantages`, `logp`"}


def test_without_a_mask_every_token_is_real_and_integer_tensors_come_back_as_float64():
    b = batch(mask=False)
    b["rewards"] = torch.zeros(3, dtype=torch.long)
    seen = {}
    result = check_alignment(lambda x: seen.update(x) or x, b, ["rewards"])
    assert seen["input_ids"].tolist() == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]
    assert seen["rewards"].dtype == torch.float64 and result.passed


def test_the_last_sequence_and_the_last_token_are_canaries_and_one_past_is_none():
    def shift_values(b):
        b = dict(b)
        b["advantages"] = b["advantages"].clone()
        b["advantages"][0] = KEY_STRIDE + 3  # one past the last sample: no sequence
        b["logp"] = b["logp"].clone()
        b["logp"][1, 0] = 2 * KEY_STRIDE + 13  # one past the last token: none
        b["logp"][1, 1] = 2 * KEY_STRIDE + 12  # the last token of the last sample: a canary, of sequence 2
        return b

    result = check_alignment(shift_values, batch(), ["advantages", "logp"])
    assert [m.__dict__ for m in result.misplaced] == [
        {"key": "advantages", "owner": 0, "position": t, "found": -1, "found_position": -1,
         "where": f"row 0, column {t}"} for t in range(4)] + [
        {"key": "logp", "owner": 1, "position": 0, "found": -1, "found_position": -1, "where": "row 1, column 0"},
        {"key": "logp", "owner": 1, "position": 1, "found": 2, "found_position": 3, "where": "row 1, column 1"}]
    assert result.message() == (
        "the per-sample tensors did not come back on their own sequences: `advantages` at token 0 of sequence 0 "
        "(row 0, column 0) holds no canary (4 tokens misplaced); `logp` at token 0 of sequence 1 (row 1, column 0) "
        "holds no canary (2 tokens misplaced)")


@pytest.mark.parametrize("value", [KEY_STRIDE - 1, KEY_STRIDE + 0.5, 2 * KEY_STRIDE, -1.0])
def test_a_value_that_is_no_whole_canary_of_its_tensor_names_no_sequence(value):
    def spoil(b):
        b = dict(b)
        b["advantages"] = b["advantages"].double().clone()
        b["advantages"][2] = value
        return b

    result = check_alignment(spoil, batch(), ["advantages"])
    assert {(m.owner, m.found, m.found_position) for m in result.misplaced} == {(2, -1, -1)}


def test_a_value_shifted_within_its_sequence_says_by_how_much():
    def shift(b):
        b = dict(b)
        b["logp"] = torch.roll(b["logp"], -1, dims=1)
        return b

    result = check_alignment(shift, batch(), ["logp"])
    assert result.misplaced[0].message() == ("`logp` at token 0 of sequence 0 (row 0, column 0) is its value at "
                                             "token 1: shifted by 1")


def test_parts_are_named_and_sequences_missing_or_repeated_are_listed():
    def split(b):
        one = {k: v[:2] for k, v in b.items()}
        two = {k: v[1:2] for k, v in b.items()}
        two["advantages"] = two["advantages"] + 1  # sequence 1's tokens carry sequence 2's value in part 1
        return [one, two]

    result = check_alignment(split, batch(), ["advantages"])
    assert result.parts == 2 and result.missing == (2,) and result.repeated == (1,)
    assert result.message() == (
        "the per-sample tensors did not come back on their own sequences: `advantages` of sequence 2 landed on "
        "sequence 1 (its token 0, row 0, column 0 of part 1) (2 tokens misplaced); sequence(s) 2 did not come "
        "back whole; sequence(s) 1 came back more than once")


def test_at_most_three_tensors_and_eight_sequences_are_told():
    S = 10
    b = {"input_ids": torch.ones(S, 2, dtype=torch.long), **{k: torch.zeros(S) for k in "abcd"}}

    def lose(x):
        x = {k: v.clone() for k, v in x.items()}
        for k in "abcd":
            x[k][0] = -5.0
        x["input_ids"][:, 1] = x["input_ids"][:, 0]  # every sequence's first token twice, its second never
        return x

    result = check_alignment(lose, b, list("abcd"))
    message = result.message()
    assert "`d`" not in message and "sequence(s) 0, 1, 2, 3, 4, 5, 6, 7 did not come back whole" in message
    assert "sequence(s) 0, 1, 2, 3, 4, 5, 6, 7 came back more than once" in message
    assert message.count("holds no canary (2 tokens misplaced)") == 3


def test_bad_input_word_for_word():
    b = batch()
    cases = [
        (lambda: check_alignment(3, b, ["advantages"]), "pipeline",
         "expected a callable (batch) -> batch or [batch, ...], got int"),
        (lambda: check_alignment(same, b, []), "keys",
         "name at least one per-sample tensor to follow (advantages, rewards, ...)"),
        (lambda: check_alignment(same, {"x": 1}, ["advantages"]), "batch.input_ids", "the batch holds no input_ids"),
        (lambda: check_alignment(same, {**b, "input_ids": torch.ones(12)}, ["advantages"]), "batch.input_ids",
         "expected one row a sample (S, L), got (12,)"),
        (lambda: check_alignment(same, {**b, "attention_mask": torch.ones(3, 5)}, ["advantages"]),
         "batch.attention_mask", "shape (3, 5) differs from input_ids (3, 4)"),
        (lambda: check_alignment(same, b, ["rewards"]), "batch.rewards", "not in the batch"),
        (lambda: check_alignment(same, {**b, "advantages": torch.zeros(4)}, ["advantages"]), "batch.advantages",
         "expected one value a sample (3,) or a token (3, 4), got (4,)"),
        (lambda: check_alignment(same, {"input_ids": torch.ones(1024, 1024)}, ["input_ids"]), "batch",
         f"1024 x 1024 tokens and 1 tensors are past what canaries can name (S x L < {KEY_STRIDE}, at most 14 "
         "tensors)"),
        (lambda: check_alignment(same, {"input_ids": torch.ones(2, 2), **{f"k{i}": torch.zeros(2) for i in range(15)}},
                                 [f"k{i}" for i in range(15)]), "batch",
         f"2 x 2 tokens and 15 tensors are past what canaries can name (S x L < {KEY_STRIDE}, at most 14 tensors)"),
        (lambda: check_alignment(lambda x: 5, b, ["advantages"]), "pipeline",
         "expected a batch dict or a list of them back, got int"),
        (lambda: check_alignment(lambda x: [], b, ["advantages"]), "pipeline",
         "expected a batch dict or a list of them back, got list"),
        (lambda: check_alignment(lambda x: [x, {"advantages": 1}], b, ["advantages"]), "pipeline[1].input_ids",
         "the returned batch holds no input_ids"),
        (lambda: check_alignment(lambda x: {**x, "input_ids": x["input_ids"] + 2}, b, ["advantages"]),
         "pipeline[0].input_ids", "holds a token id that is no canary: the pipeline made up tokens"),
        (lambda: check_alignment(lambda x: {**x, "input_ids": x["input_ids"] - 1}, b, ["advantages"]),
         "pipeline[0].input_ids", "holds a token id that is no canary: the pipeline made up tokens"),
        (lambda: check_alignment(lambda x: {**x, "advantages": torch.zeros(5)}, b, ["advantages"]),
         "pipeline.advantages", "shape (5,) matches neither the tokens (3, 4) nor one value a row"),
    ]
    for n, (call, path, message) in enumerate(cases):
        with pytest.raises(TensorcadError) as error:
            call()
        assert (error.value.path, error.value.message) == (path, message), n
    # 14 tensors and S x L = 2**20 - 2 are still named; one a row in a 1-D return reads the same
    assert check_alignment(same, {"input_ids": torch.ones(2, 2), **{f"k{i}": torch.zeros(2) for i in range(14)}},
                           [f"k{i}" for i in range(14)]).passed
    big = {"input_ids": torch.ones(2, (KEY_STRIDE - 2) // 2), "a": torch.zeros(2)}
    assert check_alignment(same, big, ["a"]).passed
    flat = check_alignment(lambda x: {"input_ids": x["input_ids"][0], "advantages": x["advantages"][:1]}, b,
                           ["advantages"])
    assert flat.misplaced == () and flat.missing == (1, 2)
