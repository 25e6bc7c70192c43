"""The grouped certificates (few passes for every document) against the one-pass-a-document ones, on every planted
fault of the certificates' tests: the same verdicts, and the grouped ones' leaks among the others' (the very same
Leak: the same document changed by the same shift).

The models: the hand-written ones (isolated, mask forgotten, a backward that mixes a row, positions through the
row), a tiny Hugging Face Llama with and without the document mask, and GPT-2 counting positions through the row.
Each passes or fails by construction (`planted_models`); the test establishes nothing from the code under test but
that the two ways agree. The passes each way makes are counted by wrapping the model.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from planted_models import VOCAB, TinyAttention
from tensorcad.packing import draw
from tensorcad.runtime.certification import CERTIFICATES, certificate
from tensorcad.runtime.certification.forward.batched_faithful import buckets
from tensorcad.runtime.certification.forward.group_testing import codes, groups
from tensorcad.runtime.certification.forward.weighted_gradients import exponents

transformers = pytest.importorskip("transformers")


def block_diagonal(documents: torch.Tensor) -> torch.Tensor:
    T = documents.shape[1]
    keep = (documents[:, :, None] == documents[:, None, :]) & torch.ones(T, T, dtype=torch.bool).tril()
    return torch.zeros(keep.shape).masked_fill(~keep, torch.finfo(torch.float32).min)[:, None]


def _llama(masked: bool):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128)
    llama = transformers.LlamaForCausalLM(config).eval()

    def model_fn(ids, documents, positions):
        if masked:
            return llama(input_ids=ids, attention_mask=block_diagonal(documents), position_ids=positions)
        return llama(input_ids=ids, position_ids=positions)  # a cache object: packing is not detected, rows leak

    return model_fn


def _gpt2_positions_through_the_row():
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=2, n_positions=128,
                                     attn_implementation="eager", resid_pdrop=0, embd_pdrop=0, attn_pdrop=0)
    gpt2 = transformers.GPT2LMHeadModel(config).eval()

    def model_fn(ids, documents, positions):
        return gpt2(input_ids=ids, attention_mask=block_diagonal(documents), use_cache=False)

    return model_fn


# name: (model, the verdicts by construction: isolation, boundaries, faithful, gradients)
PLANTED = {
    "isolated": (lambda: TinyAttention(), (True, True, True, True)),
    "mask forgotten": (lambda: TinyAttention(mask=False), (False, False, False, False)),
    "custom backward leaks": (lambda: TinyAttention(leaky_backward=True), (True, True, True, False)),
    "positions through the row": (lambda: TinyAttention(learned_positions=True), (True, False, False, True)),
    "hf llama, document mask": (lambda: _llama(True), (True, True, True, True)),
    "hf llama, no mask": (lambda: _llama(False), (False, False, False, False)),
    "gpt-2, positions through the row": (_gpt2_positions_through_the_row, (True, False, False, True)),
}


@pytest.fixture(scope="module")
def batch():
    documents, positions = draw(2, 64, 8, 1.0, seed=0)
    ids = torch.randint(0, VOCAB, (2, 64), generator=torch.Generator().manual_seed(0))
    return ids, torch.from_numpy(documents), torch.from_numpy(positions)


class Counted:
    """The model under check, its forward calls and the backward passes through its outputs counted."""

    def __init__(self, model_fn):
        from tensorcad.runtime.certification.forward.gradients import modules_of

        self.model_fn, self.calls, self.backwards = model_fn, 0, 0
        self.model = modules_of(model_fn)[0]  # what the gradient check puts in train mode

    def __call__(self, *args):
        self.calls += 1
        value = self.model_fn(*args)
        out = value.logits if hasattr(value, "logits") else value
        if out.requires_grad:
            out.register_hook(self._backward)
        return out

    def _backward(self, grad):
        self.backwards += 1
        return grad


def _run(name, method, model_fn, batch):
    counted = Counted(model_fn)
    options = {"vocab": VOCAB} if name in ("isolation", "boundaries") else {}
    return certificate(name, method)(counted, *batch, **options), counted


@pytest.mark.parametrize("planted", list(PLANTED))
def test_the_grouped_certificates_give_the_one_a_document_verdicts(planted, batch):
    make, expected = PLANTED[planted]
    model_fn = make()
    for name, verdict in zip(CERTIFICATES, expected):
        each, each_runs = _run(name, "each", model_fn, batch)
        grouped, grouped_runs = _run(name, "grouped", model_fn, batch)
        assert each.passed is verdict, (planted, name, each.message())  # the fault is what the test planted
        assert grouped.passed is verdict, (planted, name, grouped.message())
        if name == "isolation":
            assert set(grouped.leaks) <= set(each.leaks) and bool(grouped.leaks) == bool(each.leaks)
            assert grouped.own_change == each.own_change or not verdict  # alone and in a group: the same change
        if name in ("faithful", "gradients") and not verdict:  # failures are named as the one-a-document run names them
            found = grouped.differences if name == "faithful" else grouped.leaks
            assert set(found) == set(each.differences if name == "faithful" else each.leaks)
        if verdict:  # a pass costs fewer passes grouped than one a document (13 documents here)
            if name == "gradients":
                assert grouped_runs.backwards <= 3 < each_runs.backwards == len(each_documents(batch))
            elif name == "faithful":  # alone may be the Hugging Face model's own forward, not model_fn: the
                assert grouped.calls < each.calls  # results count every call, the reference's included
            else:
                assert grouped_runs.calls < each_runs.calls


def each_documents(batch):
    from tensorcad.runtime.certification import segments

    return segments(batch[1])


def test_every_ordered_pair_of_documents_is_separated_by_some_forward():
    for count in range(1, 80):
        forwards = groups(count)
        changed = [{k for k, g in enumerate(forwards) if i in g} for i in range(count)]
        assert all(changed), count  # every document is changed somewhere (its own outputs must move)
        for i, j in itertools.permutations(range(count), 2):
            assert changed[i] - changed[j], (count, i, j)  # some forward changes i and compares j
        # the fewest forwards any family could use: the documents' sets of forwards must not contain each
        # other, and m forwards hold at most C(m, m // 2) such sets (Sperner), so m - 1 would be too few
        m = len(forwards)
        assert count == 1 or math.comb(m - 1, (m - 1) // 2) < count
    assert len(groups(32)) == 7 and len(groups(128)) == 10  # 32 documents: 7 forwards + 1; 128: 10 + 1
    assert len(codes(32)) == 32 and len(set(codes(32))) == 32


def test_the_buckets_leave_the_fewest_padded_tokens():
    lengths = [3, 9, 4, 30, 28, 5, 1]
    got = buckets(lengths)
    cost = sum(len(b) * max(lengths[i] for i in b) for b in got)
    best = min(sum(len(p) * max(p) for p in (sorted(lengths)[:k], sorted(lengths)[k:]) if p)
               for k in range(1, len(lengths) + 1))
    assert cost == best == 5 * 9 + 2 * 30 and sorted(i for b in got for i in b) == list(range(len(lengths)))


def test_the_weighted_passes_give_every_document_distinct_exponents():
    for count in (1, 33, 34, 200):
        scales = exponents(count, 16, seed=0)
        assert len(set(scales)) == count and all(abs(e) <= 16 for s in scales for e in s)
        assert len(scales[0]) == 2


def test_a_model_that_cannot_take_a_padded_batch_runs_one_a_call_and_says_so(batch):
    model = TinyAttention()

    def one_row_only(ids, documents, positions):
        if ids.shape[0] != 1:
            raise RuntimeError("one row at a time")
        return model(ids, documents, positions)

    result = certificate("faithful", "grouped")(model, *batch, alone_fn=one_row_only)
    assert result.passed and result.method == "one call a document: the padded batch raised RuntimeError"
    assert result.calls == result.compared + 1


def test_padding_that_reaches_a_document_is_run_alone_before_it_is_called_unfaithful(batch):
    model = TinyAttention(mask=False)  # no document mask: the padding after a document is seen by... nothing causal

    def sees_the_whole_row(ids, documents, positions):  # an encoder: every position reads the row's mean
        out = model(ids, torch.zeros_like(documents), positions)
        return out + model.embed(ids).mean(dim=1, keepdim=True).sum(-1, keepdim=True)

    each = certificate("faithful", "each")(sees_the_whole_row, *batch, alone_fn=sees_the_whole_row)
    grouped = certificate("faithful", "grouped")(sees_the_whole_row, *batch, alone_fn=sees_the_whole_row)
    assert grouped.passed is each.passed is False
    assert set(grouped.differences) == set(each.differences)
    assert "run alone" in grouped.method


def test_the_method_is_named_or_refused_by_name():
    from tensorcad.cli.dispatch import parser as cli_parser
    from tensorcad.cli.options import settings_option
    from tensorcad.errors import TensorcadError
    from tensorcad.runtime.building.settings import Settings

    with pytest.raises(TensorcadError, match=r"^tensorcad.method: unknown method 'fast' \(grouped, each\)$"):
        Settings(method="fast")
    with pytest.raises(TensorcadError, match=r"^method: unknown method 'fast' \(grouped, each\)$"):
        certificate("isolation", "fast")
    assert Settings().to_json() == {k: v for k, v in Settings(method="each").to_json().items() if k != "method"}
    parser = cli_parser()
    assert settings_option(parser.parse_args(["certify", "nano-sort", "--each-document"])).method == "each"
    assert settings_option(parser.parse_args(["certify", "nano-sort"])).method == "grouped"


def test_outputs_read_by_name_and_a_raise_named_by_its_run(batch):
    from tensorcad.runtime.certification import ModelRaised

    model = TinyAttention(mask=False)
    named = lambda ids, documents, positions: {"logits": model(ids, documents, positions)}  # noqa: E731
    for name in ("isolation", "boundaries", "faithful"):
        options = {"vocab": VOCAB} if name != "faithful" else {}
        assert not certificate(name, "grouped")(named, *batch, **options).passed  # a dict's logits, read by name
    calls = []

    def fails_when_changed(ids, documents, positions):
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("out of memory")
        return model(ids, documents, positions)

    with pytest.raises(ModelRaised, match=r"^model_fn \(\d+ documents changed together\): raised RuntimeError: "
                                          r"out of memory$"):
        certificate("isolation", "grouped")(fails_when_changed, *batch, vocab=VOCAB)
