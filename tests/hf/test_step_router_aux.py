"""The step certificates on a mixture of experts whose loss adds the router's auxiliary loss (issue 42, issue 44).

A tiny random Mixtral with ``output_router_logits`` adds ``router_aux_loss_coef x
aux_loss`` to its loss. That term is transformers' ``load_balancing_loss_func``
over every token of the batch: no document alone has it. Before, step[loss] and
eval[parity] compared the model's whole loss with the documents' cross-entropy
and failed a model that keeps its documents apart (on this batch: 5.57823 against
4.57722, a gap of 1.00 against a tolerance of 5.58e-5, the coefficient 0.5 times
the auxiliary loss 2.00; step[gradients] 0.0775 of the norm apart, the router's). Now the
cross-entropy is compared with the documents' own and the auxiliary loss with the
same documents padded one a row, which the test computes itself: each document
run alone, its router logits pooled by transformers' own function.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers.models.mixtral import modeling_mixtral  # noqa: E402

from tensorcad.testing import (  # noqa: E402
    CertificateError,
    assert_step_accumulation,
    assert_step_gradients,
    assert_step_loss,
)
from tensorcad.runtime.certification import certify_step  # noqa: E402

LENGTHS = (9, 14, 6, 11)
COEF = 0.5  # large, so that the term the certificates used to compare is far past any tolerance


def mixtral(cls=transformers.MixtralForCausalLM):
    torch.manual_seed(0)
    config = transformers.MixtralConfig(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                        num_experts_per_tok=2, max_position_embeddings=128,
                                        output_router_logits=True, router_aux_loss_coef=COEF, use_cache=False,
                                        attn_implementation="sdpa")
    return cls(config).eval()


def packed_batch():
    ids = torch.randint(1, 96, (1, sum(LENGTHS)), generator=torch.Generator().manual_seed(3))
    positions = torch.cat([torch.arange(n) for n in LENGTHS])[None]
    labels = ids.clone()
    labels[0, positions[0] == 0] = -100  # a document's first token is predicted from no token of its own
    return {"input_ids": ids, "position_ids": positions, "labels": labels}


def pooled_alone(model, batch) -> float:
    """transformers' own load-balancing loss over the router logits of each document run by itself."""
    ids, starts = batch["input_ids"], [0]
    for n in LENGTHS:
        starts.append(starts[-1] + n)
    with torch.no_grad():
        runs = [model(input_ids=ids[:, a:b], use_cache=False).router_logits for a, b in zip(starts, starts[1:])]
    layers = tuple(torch.cat([run[layer] for run in runs]) for layer in range(len(runs[0])))
    config = model.config
    return float(modeling_mixtral.load_balancing_loss_func(layers, config.num_local_experts,
                                                           config.num_experts_per_tok))


def test_cross_entropy_is_compared_apart_and_the_aux_loss_with_the_documents_pooled():
    model, batch = mixtral(), packed_batch()
    with torch.no_grad():
        out = model(**batch)
    assert float(out.aux_loss) * COEF > 1e-2  # the term is there, and large
    result = assert_step_loss(model, batch)
    assert result.router is not None and result.router.passed
    assert result.router.coef == COEF
    # the packed batch's auxiliary loss is the model's own, and the documents alone pooled give it too
    assert result.router.packed == pytest.approx(float(out.aux_loss), rel=1e-6)
    assert result.router.packed == pytest.approx(pooled_alone(model, batch), rel=1e-5)
    # and the cross-entropy is the model's loss less the term
    assert result.packed == pytest.approx(float(out.loss) - COEF * float(out.aux_loss), rel=1e-5)
    assert "the router's auxiliary loss (x 0.5 in the model's loss" in result.message()
    assert result.router.padding_counted == 0 and "padding tokens" not in result.message()
    assert "the packed loss's cross-entropy (its loss less the router's term)" in result.message()
    assert_step_gradients(model, batch)
    assert_step_accumulation(model, batch)


def test_eval_parity_and_every_step_certificate_pass_a_mixtral_that_keeps_its_documents_apart():
    report = certify_step(mixtral(), packed_batch())
    assert report.passed, report.message()
    assert set(report.results) == {"step[labels]", "step[loss]", "step[gradients]", "eval[parity]"}
    parity = report.results["eval[parity]"].message()
    assert "the router's auxiliary loss" in parity and "over the documents padded" in parity


class PoolsPadding(transformers.MixtralForCausalLM):
    """transformers before PR #28517 (issue #28505): the load-balancing loss pooled the padding tokens too."""

    def forward(self, *args, attention_mask=None, **kwargs):
        out = super().forward(*args, attention_mask=attention_mask, **kwargs)
        if out.aux_loss is not None:
            aux = modeling_mixtral.load_balancing_loss_func(out.router_logits, self.num_experts,
                                                            self.num_experts_per_tok)  # no attention_mask
            if out.loss is not None:
                out.loss = out.loss - self.router_aux_loss_coef * out.aux_loss + self.router_aux_loss_coef * aux
            out.aux_loss = aux
        return out


def test_an_aux_loss_that_pools_the_padding_fails_eval_parity_naming_it():
    report = certify_step(mixtral(PoolsPadding), packed_batch(), only=["eval[parity]"])
    parity = report.results["eval[parity]"]
    assert not parity.passed and parity.value_passed  # the cross-entropy agrees; the pooled term does not
    assert " is not " in parity.message().split("the router's auxiliary loss")[1]
    # the padding the padded run pooled, counted by the test: each row's length less its document's
    padding = len(LENGTHS) * max(LENGTHS) - sum(LENGTHS)
    assert parity.router.padding_counted == padding
    assert (f"the padded run's term pools its {padding} padding tokens (it equals the family's "
            "load_balancing_loss_func with no attention_mask): pass the mask to the aux loss") in parity.message()
    with pytest.raises(CertificateError, match="router's auxiliary loss"):
        assert_step_loss(mixtral(PoolsPadding), packed_batch())


def sequence_wise(logits, experts, top_k, sequences) -> torch.Tensor:
    """A sequence-wise load-balancing loss (DeepSeek-V3's complementary one): transformers' function over each
    sequence's tokens alone, averaged. ``sequences``: a list of (row, first, end) spans of the (B, T) batch."""
    rows = sequences[-1][0] + 1 if sequences else 1
    width = logits[0].shape[0] // rows
    terms = [modeling_mixtral.load_balancing_loss_func(
        tuple(layer.reshape(rows, width, -1)[r, a:b] for layer in logits), experts, top_k)
        for r, a, b in sequences]
    return torch.stack(terms).mean()


class SequenceWise(transformers.MixtralForCausalLM):
    """An aux loss of scope 'sequence' done right under packing: each document is a sequence (position_ids
    restart at it); unpacked, each row's real tokens are."""

    per_document = True

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, **kwargs):
        out = super().forward(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                              **kwargs)
        rows, width = input_ids.shape
        if position_ids is not None and self.per_document:
            spans = [(r, int(a), int(b)) for r in range(rows) for a, b in zip(
                *(lambda s: (s, s[1:] + [width]))((position_ids[r] == 0).nonzero().flatten().tolist()))]
        elif attention_mask is not None:
            spans = [(r, 0, int(attention_mask[r].sum())) for r in range(rows)]
        else:
            spans = [(r, 0, width) for r in range(rows)]
        aux = sequence_wise(out.router_logits, self.num_experts, self.num_experts_per_tok, spans)
        if out.loss is not None:
            out.loss = out.loss - self.router_aux_loss_coef * out.aux_loss + self.router_aux_loss_coef * aux
        out.aux_loss = aux
        return out


class RowAsSequence(SequenceWise):
    """Megatron-LM #5696: the sequence-wise aux loss over the packed row, every document in it one sequence."""

    per_document = False


def test_a_sequence_wise_aux_loss_passes_per_document_and_fails_over_the_packed_row_naming_the_scope():
    batch = packed_batch()
    clean = certify_step(mixtral(SequenceWise), batch, only=["eval[parity]"]).results["eval[parity]"]
    assert clean.passed, clean.message()
    # the test's own figures: the mean of the documents' own terms, and the one over the row
    model = mixtral(SequenceWise)
    with torch.no_grad():
        logits = model(**batch).router_logits
    starts = [0]
    for n in LENGTHS:
        starts.append(starts[-1] + n)
    per_document = float(sequence_wise(logits, 4, 2, [(0, a, b) for a, b in zip(starts, starts[1:])]))
    over_row = float(sequence_wise(logits, 4, 2, [(0, 0, sum(LENGTHS))]))
    assert clean.router.packed == pytest.approx(per_document, rel=1e-5)
    assert abs(over_row - per_document) > 1e-2
    fault = certify_step(mixtral(RowAsSequence), batch, only=["eval[parity]"]).results["eval[parity]"]
    assert not fault.passed and fault.value_passed and fault.router.row_as_sequence
    assert fault.router.packed == pytest.approx(over_row, rel=1e-5)
    assert fault.router.padded == pytest.approx(per_document, rel=1e-5)
    assert "over each packed row as one sequence" in fault.message() and "Megatron-LM #5696" in fault.message()
    assert "padding tokens" not in fault.message()
    # the two other faults' diagnoses stay apart: a pooled-padding model is not called a scope
    pools = certify_step(mixtral(PoolsPadding), batch, only=["eval[parity]"]).results["eval[parity]"]
    assert pools.router.padding_counted and not pools.router.row_as_sequence
