"""check_isolation against hand-written models whose leaks are known by construction."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.runtime.certification.forward.isolation import check_isolation, segments  # noqa: E402

VOCAB, DIM = 32, 16


class TinyAttention(torch.nn.Module):
    """One causal attention layer over embeddings; `keep` decides which keys a query sees."""

    def __init__(self, keep: str):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(VOCAB, DIM)
        self.qkv = torch.nn.Linear(DIM, 3 * DIM)
        self.out = torch.nn.Linear(DIM, VOCAB)
        self.keep = keep

    def forward(self, ids, documents, positions=None):
        x = self.embed(ids)  # (B, T, C)
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        T = ids.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        same = documents[:, :, None] == documents[:, None, :]  # (B, T, T)
        later = documents[:, :, None] >= documents[:, None, :]
        mask = {"documents": causal & same, "leaky": causal & later, "none": causal.expand_as(same)}[self.keep]
        scores = (q @ k.transpose(-2, -1)).masked_fill(~mask, float("-inf"))
        return self.out(torch.softmax(scores, dim=-1) @ v)  # (B, T, V)


def batch(rows=2, seq=24):
    ids = torch.randint(0, VOCAB, (rows, seq), generator=torch.Generator().manual_seed(1))
    documents = torch.tensor([[0] * 5 + [1] * 9 + [2] * 10, [0] * 12 + [1] * 3 + [2] * 9])[:rows, :seq]
    return ids, documents


def test_document_mask_is_isolated_and_every_document_was_perturbed():
    ids, documents = batch()
    result = check_isolation(TinyAttention("documents"), ids, documents, vocab=VOCAB)
    assert result.passed, result.message()
    assert result.perturbed == result.documents == 6
    assert result.own_change > 0
    # each pass compares every output outside the perturbed document
    assert result.compared == sum(48 - (end - first) for _, _, first, end in segments(documents))


def test_a_model_that_ignores_the_mask_is_caught_naming_the_leak():
    ids, documents = batch()
    result = check_isolation(TinyAttention("none"), ids, documents, vocab=VOCAB)
    assert not result.passed
    # causal attention without the document mask: document 0 of row 0 reaches 1 and 2
    first = result.leaks[0]
    assert (first.row, first.document, first.moved_row, first.moved_document) == (0, 0, 0, 1)
    assert first.first_position == 5 and first.largest > 0
    assert all(leak.moved_row == leak.row for leak in result.leaks)  # rows never mix
    assert "document 0 of row 0 moved document 1" in result.leaks[0].message()
    assert "moved document" in result.message()


def test_a_mask_that_keeps_earlier_documents_leaks_forward_only():
    ids, documents = batch()
    result = check_isolation(TinyAttention("leaky"), ids, documents, vocab=VOCAB)
    assert not result.passed
    assert all(leak.moved_document > leak.document for leak in result.leaks)
    assert {(leak.row, leak.document) for leak in result.leaks} == {(0, 0), (0, 1), (1, 0), (1, 1)}


class MixesRows(torch.nn.Module):
    """Isolated within a row, but normalises over the batch, so rows see each other."""

    def __init__(self):
        super().__init__()
        self.inner = TinyAttention("documents")

    def forward(self, ids, documents, positions=None):
        x = self.inner(ids, documents)
        return x - x.mean(dim=0, keepdim=True)


def test_a_leak_into_another_row_is_named():
    ids, documents = batch()
    result = check_isolation(MixesRows(), ids, documents, vocab=VOCAB)
    assert not result.passed
    assert any(leak.moved_row != leak.row for leak in result.leaks)
    other = next(leak for leak in result.leaks if leak.moved_row != leak.row)
    assert f"row {other.moved_row}" in other.message()


class IgnoresTokens(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.randn(VOCAB))

    def forward(self, ids, documents, positions=None):
        return self.bias.expand(*ids.shape, VOCAB)


def test_a_model_that_ignores_its_tokens_does_not_pass_vacuously():
    ids, documents = batch()
    result = check_isolation(IgnoresTokens(), ids, documents, vocab=VOCAB)
    assert not result.leaks
    assert not result.passed
    assert result.own_change == 0
    assert "vacuously" in result.message()


def test_sampling_perturbs_a_seeded_subset():
    ids, documents = batch()
    model = TinyAttention("documents")
    a = check_isolation(model, ids, documents, vocab=VOCAB, sample=3, seed=4)
    b = check_isolation(model, ids, documents, vocab=VOCAB, sample=3, seed=4)
    assert a.passed and a.perturbed == 3 and a.documents == 6
    assert a == b
    # another seed perturbs another subset: the outputs compared (48 less each chosen
    # document's length, summed) differ, so the seed is seen, not only the sample size
    c = check_isolation(model, ids, documents, vocab=VOCAB, sample=3, seed=5)
    assert c.perturbed == 3 and c.compared != a.compared


def test_positions_are_passed_through_unchanged():
    ids, documents = batch()
    seen = []

    def model_fn(i, d, p):
        seen.append(p)
        return TinyAttention("documents")(i, d)

    positions = torch.arange(24).expand(2, 24)
    check_isolation(model_fn, ids, documents, positions, vocab=VOCAB)
    assert all(p is positions for p in seen)


@pytest.mark.parametrize("bad, path", [
    (dict(documents=torch.zeros(2, 5, dtype=torch.long)), "documents"),
    (dict(documents=torch.tensor([[1] * 24, [1] * 23 + [0]])), "documents"),
    (dict(vocab=1), "vocab"),
    (dict(ids=torch.zeros(2, 24)), "ids"),
])
def test_bad_inputs_name_the_argument(bad, path):
    ids, documents = batch()
    kwargs = dict(ids=ids, documents=documents, vocab=VOCAB) | bad
    with pytest.raises(TensorcadError) as e:
        check_isolation(TinyAttention("documents"), kwargs.pop("ids"), kwargs.pop("documents"), **kwargs)
    assert e.value.path == path


class LeaksBy(torch.nn.Module):
    """Isolated attention plus ``eps`` times the row's first token: a leak of known size.

    Changing document 0 of a row changes its first token by a whole number in [1, VOCAB),
    so every output of that row moves by ``eps`` times that number before rounding.
    ``offset`` lifts the outputs to a magnitude where float32's spacing is known.
    """

    def __init__(self, eps: float, offset: float = 0.0):
        super().__init__()
        self.inner, self.eps, self.offset = TinyAttention("documents"), eps, offset

    def forward(self, ids, documents, positions=None):
        out = self.inner(ids, documents) + self.offset
        return out + self.eps * ids[:, :1, None].to(out.dtype)


def test_a_leak_of_1e_7_is_caught_bitwise():
    ids, documents = batch()
    result = check_isolation(LeaksBy(1e-7), ids, documents, vocab=VOCAB)
    assert not result.passed
    # only document 0 holds a row's first token: each row's later documents moved
    assert {(leak.row, leak.document) for leak in result.leaks} == {(0, 0), (1, 0)}
    assert {(leak.moved_row, leak.moved_document) for leak in result.leaks} == {(0, 1), (0, 2), (1, 1), (1, 2)}
    # the largest move is eps times the token's change (at most VOCAB - 1), give or take rounding
    assert 1e-7 * 0.5 < result.worst().largest < 1e-7 * VOCAB
    # a tolerance would have hidden it: every leak is far below 1e-3
    assert all(leak.largest < 1e-3 for leak in result.leaks)


def test_a_leak_below_float32s_resolution_is_reported_as_unseeable():
    ids, documents = batch()
    # outputs in [8, 16) are spaced 2**-20 apart in float32: half of that is 4.77e-7, above
    # the largest leak here (1e-8 times at most 31), so both runs round to the same bits
    result = check_isolation(LeaksBy(1e-8, offset=12.0), ids, documents, vocab=VOCAB)
    assert result.passed  # no bit moved: nothing a bitwise check can see
    assert result.dtype == "float32"
    assert 8 <= result.scale < 16 and result.resolution == 2.0**-21  # half of 8 * 2**-23
    assert result.resolution > 1e-8 * (VOCAB - 1)
    assert "cannot be seen at this dtype and scale" in result.message()
    assert result.to_json()["resolution"] == result.resolution
    # in float64 the same leak is seen
    double = LeaksBy(1e-8, offset=12.0).double()
    result64 = check_isolation(double, ids, documents, vocab=VOCAB)
    assert not result64.passed and result64.resolution == 2.0**-50  # half of 8 * 2**-52


def test_integer_outputs_have_no_resolution_floor():
    ids, documents = batch()
    result = check_isolation(lambda i, d, p: i * 0 + d, ids, documents, vocab=VOCAB)
    assert result.resolution == 0.0 and "cannot be seen" not in result.message()


# --- what the result says, word for word (tools/mutate.py isolation found these unpinned) ------

from tensorcad.runtime.certification.forward.isolation import IsolationResult, Leak  # noqa: E402


def test_a_leak_says_what_moved_where():
    same = Leak(row=0, document=1, moved_row=0, moved_document=2, largest=0.25, first_position=7)
    assert same.message() == ("changing document 1 of row 0 moved document 2 of the same row "
                              "by up to 0.25, first at token 7 of the row")
    other = Leak(row=0, document=1, moved_row=3, moved_document=0, largest=1.5e-7, first_position=0)
    assert other.message() == ("changing document 1 of row 0 moved document 0 of row 3 "
                               "by up to 1.5e-07, first at token 0 of the row")
    assert other.to_json() == {"row": 0, "document": 1, "movedRow": 3, "movedDocument": 0,
                               "largest": 1.5e-7, "firstPosition": 0}


def result(**kw):
    base = dict(leaks=(), perturbed=3, documents=4, own_change=0.5, still=(), compared=40)
    return IsolationResult(**{**base, **kw})


def test_the_results_message_in_each_case():
    small = Leak(0, 0, 0, 1, 0.1, 5)
    big = Leak(1, 0, 1, 2, 0.3, 9)
    assert result(perturbed=0).message() == "no document was perturbed"
    assert not result(perturbed=0).passed and result(perturbed=0).worst() is None
    assert result(leaks=(small,)).message() == small.message()
    assert result(leaks=(small, big)).message() == big.message() + " (1 more leak)"
    assert result(leaks=(small, big, small)).message() == big.message() + " (2 more leaks)"
    assert result(leaks=(small, big)).worst() is big and not result(leaks=(small,)).passed
    assert result(still=((1, 2),)).message() == (
        "changing document 2 of row 1 moved none of its own outputs: the model ignores its "
        "tokens, so isolation would pass vacuously")
    assert not result(still=((1, 2),)).passed
    assert result().message() == ("isolated: 3 documents changed, every other output bitwise "
                                  "equal (own outputs moved by at least 0.5)")
    assert result(resolution=2.0**-21, dtype="float32", scale=12.5).message() == (
        "isolated: 3 documents changed, every other output bitwise equal (own outputs moved by "
        "at least 0.5); a leak under 4.77e-07 (half a float32 ulp at outputs up to 12.5) can "
        "round away and cannot be seen at this dtype and scale")
    assert result().passed


def test_the_results_json_in_full():
    leak = Leak(0, 0, 0, 1, 0.1, 5)
    assert result(leaks=(leak,), resolution=0.25, dtype="float16", scale=300.0).to_json() == {
        "passed": False, "perturbed": 3, "documents": 4, "ownChange": 0.5, "compared": 40,
        "leaks": 1, "resolution": 0.25, "dtype": "float16", "scale": 300.0,
        "forwards": 0, "method": "one document a forward", "worst": leak.to_json(), "message": leak.message()}
    assert result().to_json()["worst"] is None and result().to_json()["passed"] is True


class Wrapped(torch.nn.Module):
    """The same isolated model, its outputs as Hugging Face returns them, or as a tuple."""

    def __init__(self, how: str):
        super().__init__()
        self.inner, self.how = TinyAttention("documents"), how

    def forward(self, ids, documents, positions=None):
        out = self.inner(ids, documents)
        if self.how == "logits":
            return type("CausalLMOutput", (), {"logits": out})()
        return (out, torch.zeros(1))  # the output first, anything after


@pytest.mark.parametrize("how", ["logits", "tuple"])
def test_outputs_are_found_inside_what_models_return(how):
    ids, documents = batch()
    wrapped = check_isolation(Wrapped(how), ids, documents, vocab=VOCAB)
    plain = check_isolation(TinyAttention("documents"), ids, documents, vocab=VOCAB)
    assert wrapped.passed and wrapped.own_change == plain.own_change and wrapped.scale == plain.scale


def test_outputs_that_are_not_a_tensor_name_the_model():
    ids, documents = batch()
    with pytest.raises(TensorcadError) as error:
        check_isolation(lambda i, d, p: "logits", ids, documents, vocab=VOCAB)
    assert error.value.path == "model_fn" and error.value.message == "expected a tensor of outputs, got str"


def test_a_leak_of_nan_is_a_leak():
    ids, documents = batch()

    def poisoned(i, d, p):
        out = TinyAttention("documents")(i, d)
        # a changed first token turns every later output of its row into NaN
        return torch.where(i[:, :1, None] != ids[:, :1, None], float("nan"), out)

    result = check_isolation(poisoned, ids, documents, vocab=VOCAB)
    assert not result.passed and result.worst() is not None
    assert all(leak.largest != leak.largest for leak in result.leaks)  # NaN, said as NaN


@pytest.mark.parametrize("bad, path, message", [
    (dict(ids=[[1, 2]]), "ids", "expected a (B, T) tensor, got list"),
    (dict(ids=torch.zeros(24, dtype=torch.long)), "ids", "expected a (B, T) tensor, got torch.Size([24])"),
    (dict(ids=torch.zeros(2, 24)), "ids", "expected integers, got torch.float32"),
    (dict(documents=torch.zeros(2, 5, dtype=torch.long)), "documents",
     "shape (2, 5) differs from ids (2, 24)"),
    (dict(positions=torch.zeros(2, 5, dtype=torch.long)), "positions",
     "shape (2, 5) differs from ids (2, 24)"),
    (dict(positions=torch.zeros(2, 24, dtype=torch.bool)), "positions", "expected integers, got torch.bool"),
    (dict(vocab=1), "vocab", "expected an integer of at least 2, got 1"),
    (dict(vocab=2.5), "vocab", "expected an integer of at least 2, got 2.5"),
    (dict(vocab=True), "vocab", "expected an integer of at least 2, got True"),
    # a document id that falls back below an earlier one, anywhere along the row
    (dict(documents=torch.tensor([[0] * 10 + [2] * 10 + [1] * 4, [0] * 24])), "documents",
     "document ids must never fall along a row"),
])
def test_bad_inputs_say_what_is_wrong(bad, path, message):
    ids, documents = batch()
    kwargs = dict(ids=ids, documents=documents, vocab=VOCAB) | bad
    with pytest.raises(TensorcadError) as e:
        check_isolation(TinyAttention("documents"), kwargs.pop("ids"), kwargs.pop("documents"), **kwargs)
    assert (e.value.path, e.value.message) == (path, message)


def test_outputs_not_shaped_by_the_batch_name_the_model():
    ids, documents = batch()
    with pytest.raises(TensorcadError) as e:
        check_isolation(lambda i, d, p: torch.zeros(24, 2), ids, documents, vocab=VOCAB)
    assert e.value.path == "model_fn"
    assert e.value.message == "outputs shaped (24, 2) do not start with (B, T) = (2, 24)"


def test_the_smallest_vocabulary_and_sample_are_taken():
    ids, documents = batch()
    model = TinyAttention("documents")
    assert check_isolation(model, ids % 2, documents, vocab=2).passed
    one = check_isolation(model, ids, documents, vocab=VOCAB, sample=1)
    assert one.perturbed == 1 and one.passed
    # the default seed is 0
    assert check_isolation(model, ids, documents, vocab=VOCAB, sample=3) == \
        check_isolation(model, ids, documents, vocab=VOCAB, sample=3, seed=0)


def test_a_sample_perturbs_distinct_documents():
    ids, documents = batch()
    lengths = [end - first for _, _, first, end in segments(documents)]
    every = check_isolation(TinyAttention("documents"), ids, documents, vocab=VOCAB)
    for seed in range(4):
        five = check_isolation(TinyAttention("documents"), ids, documents, vocab=VOCAB, sample=5, seed=seed)
        # five distinct documents of six: all but one, whose outside outputs are left out
        assert five.compared in {every.compared - (48 - n) for n in lengths}


def test_every_token_of_the_perturbed_document_changes_and_nothing_else():
    ids, documents = batch()
    seen = []

    def recording(i, d, p):
        seen.append(i.clone())
        return TinyAttention("documents")(i, d)

    for vocab in (VOCAB, 2):  # at vocab 2 a shift of 0 would leave about half the tokens as they were
        seen.clear()
        base = ids % vocab
        check_isolation(recording, base, documents, vocab=vocab)
        for changed, (row, _, first, end) in zip(seen[1:], segments(documents)):
            moved = changed != base
            assert moved[row, first:end].all() and moved.sum() == end - first
            assert changed.dtype == ids.dtype and int(changed.min()) >= 0 and int(changed.max()) < vocab


def test_an_empty_batch_perturbs_nothing():
    ids = documents = torch.zeros(2, 0, dtype=torch.long)
    result = check_isolation(lambda i, d, p: torch.zeros(2, 0, 4), ids, documents, vocab=VOCAB)
    assert (result.perturbed, result.own_change, result.passed) == (0, 0.0, False)
    assert result.message() == "no document was perturbed" and result.scale == result.resolution == 0.0


def test_the_resolution_at_other_dtypes_and_sizes():
    ids, documents = batch()

    def per_token(dtype):  # isolated by construction: each output reads only its own token
        return lambda i, d, p: (i.double() / 64 + 8).to(dtype)[..., None]

    half = check_isolation(per_token(torch.bfloat16), ids, documents, vocab=VOCAB)
    assert half.passed and half.dtype == "bfloat16" and half.resolution == 2.0**-5  # half of 2**-4 at 8
    one = check_isolation(lambda i, d, p: (i.float() / 64 + 8)[..., None], ids[:1, :1],
                          torch.zeros(1, 1, dtype=torch.long), vocab=VOCAB)
    assert one.resolution == 2.0**-21 and 8 <= one.scale < 9  # a single output has a resolution too
    integers = check_isolation(lambda i, d, p: i[..., None] * 1, ids, documents, vocab=VOCAB)
    assert integers.scale == integers.resolution == 0.0
    nothing_finite = check_isolation(lambda i, d, p: torch.full((*i.shape, 2), float("inf")) * i[..., None],
                                     ids, documents, vocab=VOCAB)
    assert nothing_finite.scale == nothing_finite.resolution == 0.0


def test_a_sample_of_no_documents_is_refused():
    ids, documents = batch()
    with pytest.raises(TensorcadError) as e:
        check_isolation(TinyAttention("documents"), ids, documents, vocab=VOCAB, sample=0)
    assert (e.value.path, e.value.message) == ("sample", "expected at least 1 document, got 0")
