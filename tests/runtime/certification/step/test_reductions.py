"""The loss's reductions: their values written out, and what each weighs a document's targets, exactly."""

from __future__ import annotations

from fractions import Fraction

import pytest

torch = pytest.importorskip("torch")

from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.runtime.certification.step.reductions import (  # noqa: E402
    INVARIANT,
    REDUCTIONS,
    describe_weights,
    name_of,
    reduce,
    weights,
    weights_json,
)

# Row 0: documents of 7 and 2 targets ([a..g] and [x, y]); row 1: one of 3 and one of none.
TOKENS = [torch.tensor([1.0, 2, 3, 4, 5, 6, 7]), torch.tensor([10.0, 20]), torch.tensor([4.0, 4, 7]),
          torch.tensor([])]
ROWS = [0, 0, 1, 1]


def test_each_reduction_is_its_formula():
    assert float(reduce("token", TOKENS, ROWS)) == pytest.approx((28 + 30 + 15) / 12)
    assert float(reduce("document", TOKENS, ROWS)) == pytest.approx((4 + 15 + 5) / 3)  # the empty one left out
    assert float(reduce("sequence", TOKENS, ROWS)) == pytest.approx(((28 + 30) / 9 + 15 / 3) / 2)
    mine = lambda tokens, rows: torch.stack([t.max() for t in tokens if t.numel()]).sum()  # noqa: E731
    assert float(reduce(mine, TOKENS, ROWS)) == 7 + 20 + 7
    assert REDUCTIONS == ("token", "document", "sequence")
    assert INVARIANT == {"token": True, "document": True, "sequence": False}


def test_one_row_a_b_c_to_g_and_x_y_weigh_a_ninth_against_half_of_a_seventh_and_a_half():
    counts, rows = [7, 2], [0, 0]
    assert weights("token", counts, rows) == (Fraction(1, 9), Fraction(1, 9))
    assert weights("sequence", counts, rows) == (Fraction(1, 9), Fraction(1, 9))  # one row: the row's mean
    assert weights("document", counts, rows) == (Fraction(1, 2) * Fraction(1, 7), Fraction(1, 2) * Fraction(1, 2))
    assert weights_json("document", counts, rows) == ["1/14", "1/4"]
    assert weights_json(lambda t, r: 0, counts, rows) is None
    # every weighting sums to one over the targets
    for name in REDUCTIONS:
        assert sum(w * n for w, n in zip(weights(name, counts, rows), counts)) == 1


def test_weights_over_rows_and_empty_documents():
    counts = [t.numel() for t in TOKENS]
    assert weights("token", counts, ROWS) == (Fraction(1, 12),) * 3 + (Fraction(0),)
    assert weights("document", counts, ROWS) == (Fraction(1, 21), Fraction(1, 6), Fraction(1, 9), Fraction(0))
    assert weights("sequence", counts, ROWS) == (Fraction(1, 18), Fraction(1, 18), Fraction(1, 6), Fraction(0))
    # a row with no targets at all is no row of the mean
    assert weights("sequence", [4, 0], [0, 1]) == (Fraction(1, 4), Fraction(0))
    for name in REDUCTIONS:  # each weighting is the reduction's own: the loss of the tokens, term by term
        value = sum(float(w) * float(t.sum()) for w, t in zip(weights(name, counts, ROWS), TOKENS))
        assert value == pytest.approx(float(reduce(name, TOKENS, ROWS)))


def test_the_weights_read_as_a_sentence():
    pieces = [(0, 0, 0, 8), (0, 1, 8, 11), (1, 0, 0, 4), (1, 1, 4, 9)]
    text = describe_weights("document", [7, 2, 3, 1], pieces)
    assert text == ("`document` weighs a target of document 0 of row 0 (7 targets) 1/28, a target of document 1 "
                    "of row 0 (2 targets) 1/8, a target of document 0 of row 1 (3 targets) 1/12, and 1 more")
    assert describe_weights("token", [1, 0], pieces[:2]) == "`token` weighs a target of document 0 of row 0 (1 target) 1"
    assert describe_weights("token", [2, 2, 2, 2], pieces, shown=1) == (
        "`token` weighs a target of document 0 of row 0 (2 targets) 1/8, and 3 more")


def test_a_row_without_targets_is_no_row_of_the_sequence_mean():
    assert float(reduce("sequence", [torch.tensor([2.0, 4.0]), torch.tensor([])], [0, 1])) == 3.0
    assert float(reduce("document", [torch.tensor([]), torch.tensor([2.0, 4.0])], [0, 0])) == 3.0


def test_a_bad_reduction_is_refused():
    for bad, says in (("mean", "reduction: unknown reduction 'mean' (reductions: token, document, sequence, or a "
                               "callable (tokens, rows) -> loss)"),
                      (3, "reduction: expected a name or a callable, got int")):
        with pytest.raises(TensorcadError) as caught:
            reduce(bad, TOKENS, ROWS)
        assert str(caught.value) == says
        with pytest.raises(TensorcadError):
            weights(bad, [1], [0])
    assert name_of(lambda t, r: 0) == "<lambda>"

    class Reducer:
        def __call__(self, tokens, rows):
            return tokens[0].sum()

    assert name_of(Reducer()) == "Reducer" and float(reduce(Reducer(), TOKENS, ROWS)) == 28
    with pytest.raises(TensorcadError) as caught:
        reduce("token", [torch.tensor([])], [0])
    assert str(caught.value) == ("labels: no document holds a target of its own (every supervised label is "
                                 "predicted across a boundary)")
