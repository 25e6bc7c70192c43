"""rl[alignment]: per-sample tensors through a pack -> length sort -> unpack pipeline written in the test."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.runtime.certification.rl.alignment import check_alignment  # noqa: E402

LENGTHS = [3, 7, 2, 6, 5, 4]
ORDER = sorted(range(len(LENGTHS)), key=lambda i: -LENGTHS[i])  # longest first: [1, 3, 4, 5, 0, 2]
KEYS = ("advantages", "rewards", "ref_logprobs")


def rollout():
    S, L = len(LENGTHS), max(LENGTHS)
    mask = torch.zeros(S, L, dtype=torch.long)
    for i, n in enumerate(LENGTHS):
        mask[i, :n] = 1
    return {"input_ids": torch.randint(1, 50, (S, L)) * mask, "attention_mask": mask,
            "advantages": torch.randn(S), "rewards": torch.rand(S), "ref_logprobs": -torch.rand(S, L)}


def packed(batch, width=12, forget=()):
    """Sort by length (longest first), pack first-fit into rows of ``width``, the tensors beside the tokens;
    a key in ``forget`` is taken in the batch's order instead of the sorted one (the planted fault)."""
    rows, fill = [], []
    for k, i in enumerate(ORDER):
        n = LENGTHS[i]
        r = next((r for r, f in enumerate(fill) if f + n <= width), None)
        if r is None:
            rows.append([]), fill.append(0)
            r = len(rows) - 1
        rows[r].append((k, i)), fill.__setitem__(r, fill[r] + n)
    out = {"input_ids": torch.zeros(len(rows), width, dtype=torch.long),
           "position_ids": torch.zeros(len(rows), width, dtype=torch.long)}
    for key in KEYS:
        out[key] = torch.zeros(len(rows), width, dtype=torch.float64)
    for r, members in enumerate(rows):
        at = 0
        for k, i in members:
            n = LENGTHS[i]
            out["input_ids"][r, at:at + n] = batch["input_ids"][i, :n]
            out["position_ids"][r, at:at + n] = torch.arange(n)
            for key in KEYS:
                src = ORDER[k] if key not in forget else k  # the fault: the k-th value of the unsorted batch
                value = batch[key][src]
                out[key][r, at:at + n] = value[:n] if value.dim() else value
            at += n
    return out


def unpacked(batch):
    """Pack, then unpack back to one row a sample in the batch's order (each sequence found by its tokens)."""
    p = packed(batch)
    S, L = batch["input_ids"].shape
    out = {"input_ids": torch.zeros(S, L, dtype=torch.long), "advantages": torch.zeros(S)}
    for r in range(p["input_ids"].shape[0]):
        starts = (p["position_ids"][r] == 0).nonzero().flatten().tolist()
        for a in starts:
            if p["input_ids"][r, a] == 0:
                continue
            i = next(i for i in range(S) if bool(batch["input_ids"][i, 0] == p["input_ids"][r, a]))
            n = LENGTHS[i]
            out["input_ids"][i, :n] = p["input_ids"][r, a:a + n]
            out["advantages"][i] = p["advantages"][r, a]
    return out


def test_a_pipeline_that_permutes_every_tensor_with_its_tokens_passes():
    result = check_alignment(packed, rollout(), KEYS)
    assert result.passed, result.message()
    assert "every token of the 6 sequences came back once" in result.message()
    assert check_alignment(unpacked, rollout(), ("advantages",)).passed


def test_advantages_left_in_packed_order_after_a_length_sort_name_the_sequence():
    result = check_alignment(lambda b: packed(b, forget=("advantages",)), rollout(), KEYS)
    assert not result.passed
    # the longest sequence (1) is packed first and gets the advantages of sequence 0, the batch's first
    assert result.message().startswith("the per-sample tensors did not come back on their own sequences: "
                                       "`advantages` of sequence 0 landed on sequence 1 (its token 0, row 0, "
                                       "column 0)")
    # by hand: every sequence but those the sort leaves in place (none here) carries another's advantages
    wrong = {m.owner: m.found for m in result.misplaced}
    assert wrong == {ORDER[k]: k for k in range(len(ORDER)) if ORDER[k] != k}
    assert {m.key for m in result.misplaced} == {"advantages"}  # rewards and ref_logprobs went with their tokens


def test_a_per_token_tensor_shifted_by_one_and_a_lost_sequence_are_named():
    def shifted(batch):
        out = packed(batch)
        out["ref_logprobs"] = torch.roll(out["ref_logprobs"], 1, dims=1)
        return out

    result = check_alignment(shifted, rollout(), ("ref_logprobs",))
    assert not result.passed and len(result.misplaced) == sum(LENGTHS)  # every token: no column of a row is
    inside = [m for m in result.misplaced if m.found == m.owner]  # its own (the first, the sequence before's)
    assert len(inside) == sum(LENGTHS) - len(LENGTHS)
    assert all(m.found_position == m.position - 1 for m in inside)
    assert "is its value at token 0: shifted by -1" in inside[0].message()

    def dropped(batch):
        out = packed(batch)
        out["input_ids"][-1] = 0  # the last row lost
        return out

    lost = check_alignment(dropped, rollout(), ("advantages",))
    assert not lost.passed and "did not come back whole" in lost.message()


def test_bad_input_names_its_path():
    with pytest.raises(TensorcadError, match="batch.values"):
        check_alignment(packed, rollout(), ("values",))
    with pytest.raises(TensorcadError, match="pipeline"):
        check_alignment(lambda b: 3, rollout(), KEYS)
    with pytest.raises(TensorcadError, match="keys"):
        check_alignment(packed, rollout(), ())
