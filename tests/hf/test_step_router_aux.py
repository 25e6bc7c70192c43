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
