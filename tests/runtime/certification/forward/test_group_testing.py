"""Group testing's bisection, exactly: who is named, under which group, and what it costs (issue 42's mutation).

The planted models here are functions of the batch written to make one path of `check_isolation_grouped`
run: a leak that needs two documents changed together (named under the first of the smallest group that
moved it), a leak from every document into every other (the bisection's budget runs out: the moved
documents are counted, not named, and the forwards stay within the one-a-document check's), and a leak
from one document into several. Each expected leak is written from the model's own definition.
"""

from __future__ import annotations

import torch

from tensorcad.runtime.certification.forward.group_testing import check_isolation_grouped, groups
from tensorcad.runtime.certification.forward.isolation import check_isolation

VOCAB = 50
LENGTHS = (4, 5, 3, 6, 4, 5, 3, 4)  # eight documents in one row


def batch():
    documents = torch.repeat_interleave(torch.arange(len(LENGTHS)), torch.tensor(LENGTHS))[None]
    ids = torch.randint(0, VOCAB, documents.shape, generator=torch.Generator().manual_seed(0))
    return ids, documents


def span(d):
    first = sum(LENGTHS[:d])
    return first, first + LENGTHS[d]


class Counted:
    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, ids, documents, positions):
        self.calls += 1
        return self.fn(ids, documents, positions)


def own(ids):
    """Each token's own output: a function of its token alone (an isolated model)."""
    return torch.nn.functional.one_hot(ids, VOCAB).float()


def test_a_leak_that_needs_two_documents_changed_together_is_named_under_the_first_of_their_group():
    ids, documents = batch()
    [group] = [g for g in groups(len(LENGTHS)) if 0 in g and 1 in g][:1]  # a forward changing documents 0 and 1
    target = next(d for d in range(len(LENGTHS)) if d not in group)
    base = ids.clone()

    def model(x, d, p):
        out = own(x)
        both = bool((x[0, slice(*span(0))] != base[0, slice(*span(0))]).any()
                    and (x[0, slice(*span(1))] != base[0, slice(*span(1))]).any())
        a, b = span(target)
        out[0, a + 1:b] += float(both)  # the target's tokens after its first move, only with 0 and 1 changed
        return out

    result = check_isolation_grouped(model, ids, documents, vocab=VOCAB)
    assert not result.passed
    [leak] = result.leaks
    assert (leak.row, leak.document, leak.moved_document) == (0, group[0], target)
    assert leak.first_position == span(target)[0] + 1 and leak.largest == 1.0
    assert not check_isolation(model, ids, documents, vocab=VOCAB).leaks  # one at a time: never both changed


def test_a_leak_from_every_document_spends_no_more_than_one_a_document_and_counts_the_rest():
    ids, documents = batch()

    def model(x, d, p):
        return own(x) + x.float().sum() / 1000  # every output reads every token of the row

    counted = Counted(model)
    result = check_isolation_grouped(counted, ids, documents, vocab=VOCAB)
    assert not result.passed
    forwards = len(groups(len(LENGTHS)))
    # the base, one a group, and at most one a document more to bisect: never past the one-a-document check's
    assert counted.calls == result.forwards <= 1 + forwards + len(LENGTHS)
    unnamed = len(LENGTHS) - len({leak.moved_document for leak in result.leaks})
    assert ("sources not sought" in result.method) == (unnamed > 0)
    for leak in result.leaks:  # each named leak is one the one-a-document check finds too
        assert leak.document != leak.moved_document


def test_one_document_leaking_into_several_names_each_with_its_first_moved_token():
    ids, documents = batch()
    source, targets = 2, (4, 6)

    def model(x, d, p):
        out = own(x)
        a, b = span(source)
        signal = x[0, a:b].float().sum()
        for t in targets:
            first, end = span(t)
            out[0, first + 2:end] += signal  # from each target's third token on
        return out

    result = check_isolation_grouped(model, ids, documents, vocab=VOCAB)
    assert {(leak.document, leak.moved_document) for leak in result.leaks} == {(source, t) for t in targets}
    for leak in result.leaks:
        assert leak.first_position == span(leak.moved_document)[0] + 2
    each = check_isolation(model, ids, documents, vocab=VOCAB)
    assert set(result.leaks) == set(each.leaks)  # the same leaks, the same shifts, the same figures


def test_a_model_that_raises_is_named_with_how_many_documents_were_changed():
    from tensorcad.errors import TensorcadError

    ids, documents = batch()
    for count, words in ((len(LENGTHS), f"{len(groups(len(LENGTHS))[0])} documents changed together"),
                         (2, "1 document changed together")):
        tokens = sum(LENGTHS[:count])
        base = ids[:, :tokens].clone()

        def breaks(x, d, p):
            if not torch.equal(x, base):
                raise RuntimeError("changed")
            return own(x)

        try:
            check_isolation_grouped(breaks, base, documents[:, :tokens], vocab=VOCAB)
        except TensorcadError as error:
            assert f"model_fn ({words})" in str(error), str(error)
        else:
            raise AssertionError("a model that raises passed")


def test_the_changed_tokens_keep_the_ids_dtype_and_a_sample_is_isolations():
    ids, documents = batch()
    seen = set()

    def records(x, d, p):
        seen.add(x.dtype)
        return own(x.long())

    check_isolation_grouped(records, ids.int(), documents, vocab=VOCAB)
    assert seen == {torch.int32}

    def reads_the_row(x, d, p):
        return own(x) + x.float().sum() / 1000

    grouped = check_isolation_grouped(reads_the_row, ids, documents, vocab=VOCAB, sample=3)
    each = check_isolation(reads_the_row, ids, documents, vocab=VOCAB, sample=3)  # the same default seed
    assert grouped.perturbed == each.perturbed == 3
    assert {leak.document for leak in grouped.leaks} <= {leak.document for leak in each.leaks}


def test_bad_positions_are_named_and_outputs_of_no_width_move_nothing():
    from tensorcad.errors import TensorcadError

    ids, documents = batch()
    try:
        check_isolation_grouped(lambda x, d, p: own(x), ids, documents, ids[:, :3], vocab=VOCAB)
    except TensorcadError as error:
        assert error.path == "positions"
    else:
        raise AssertionError("positions of another shape were taken")
    empty = check_isolation_grouped(lambda x, d, p: torch.zeros(*x.shape, 0), ids, documents, vocab=VOCAB)
    assert not empty.leaks and len(empty.still) == len(LENGTHS)  # nothing to move: every document still


def test_the_result_holds_what_the_one_a_document_check_holds_and_its_own_counts():
    ids, documents = batch()
    grouped = check_isolation_grouped(lambda x, d, p: own(x) * 3.0, ids, documents, vocab=VOCAB)
    each = check_isolation(lambda x, d, p: own(x) * 3.0, ids, documents, vocab=VOCAB)
    for field in ("perturbed", "documents", "own_change", "still", "resolution", "dtype", "scale"):
        assert getattr(grouped, field) == getattr(each, field), field
    forwards = groups(len(LENGTHS))
    tokens = sum(LENGTHS)
    # every forward compares each token outside the documents it changes
    assert grouped.compared == sum(tokens - sum(LENGTHS[i] for i in g) for g in forwards)
    assert grouped.forwards == len(forwards) + 1
    assert grouped.method == f"group testing ({len(forwards)} forwards for {len(LENGTHS)} documents)"


def test_a_leak_into_the_first_document_is_named_and_a_nan_change_counts_as_still():
    ids, documents = batch()

    def backwards(x, d, p):  # document 0's outputs read document 5's tokens
        out = own(x)
        a, b = span(5)
        out[0, :LENGTHS[0]] += x[0, a:b].float().sum() / 100
        return out

    result = check_isolation_grouped(backwards, ids, documents, vocab=VOCAB)
    assert [(leak.document, leak.moved_document) for leak in result.leaks] == [(5, 0)]
    base = ids.clone()

    def nan_when_changed(x, d, p):  # document 2's own outputs turn NaN once its tokens change
        out = own(x)
        a, b = span(2)
        if not torch.equal(x[0, a:b], base[0, a:b]):
            out[0, a:b] = float("nan")
        return out

    grouped = check_isolation_grouped(nan_when_changed, ids, documents, vocab=VOCAB)
    each = check_isolation(nan_when_changed, ids, documents, vocab=VOCAB)
    assert grouped.still == each.still == ((0, 2),) and not grouped.leaks


def test_no_documents_need_no_forward_and_outputs_not_shaped_by_the_batch_are_named():
    from tensorcad.errors import TensorcadError

    assert groups(0) == [] and groups(1) == [(0,)]
    empty = torch.zeros(1, 0, dtype=torch.long)
    result = check_isolation_grouped(lambda x, d, p: own(x), empty, empty, vocab=VOCAB)
    assert result.perturbed == 0 and result.own_change == 0.0 and result.forwards == 1
    ids, documents = batch()
    try:
        check_isolation_grouped(lambda x, d, p: torch.zeros(3), ids, documents, vocab=VOCAB)
    except TensorcadError as error:
        assert str(error) == f"model_fn: outputs shaped (3,) do not start with (B, T) = (1, {sum(LENGTHS)})"
    else:
        raise AssertionError("outputs of no (B, T) passed")


def test_a_leak_of_nan_is_a_leak_named_with_its_nan():
    ids, documents = batch()
    base = ids.clone()

    def nan_next_door(x, d, p):  # document 3 turns NaN when document 1 changes
        out = own(x)
        if not torch.equal(x[0, slice(*span(1))], base[0, slice(*span(1))]):
            out[0, slice(*span(3))] = float("nan")
        return out

    result = check_isolation_grouped(nan_next_door, ids, documents, vocab=VOCAB)
    [leak] = result.leaks
    assert (leak.document, leak.moved_document) == (1, 3) and leak.largest != leak.largest
