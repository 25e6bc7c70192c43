"""step/router.py to the letter (issue 44's mutation): what router_aux reads off a real Mixtral's output, what
held_aux concludes from two runs' terms, and every word and key of the comparison.

Each figure is transformers' own ``load_balancing_loss_func`` applied by the test to the router logits it slices
itself; the comparisons' inputs are small binary fractions, so every boundary (a gap equal to the tolerance) is
exact.
"""

from __future__ import annotations

import math
import sys
import types

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers.modeling_outputs import MoeCausalLMOutputWithPast  # noqa: E402
from transformers.models.mixtral import modeling_mixtral  # noqa: E402

from tensorcad.runtime.certification.step.router import AuxCheck, RouterAux, held_aux, router_aux  # noqa: E402

EXPERTS, TOP_K, WIDTH = 4, 2, 7
lbl = modeling_mixtral.load_balancing_loss_func


def mixtral(cls=transformers.MixtralForCausalLM, coef=0.25, top_k=TOP_K):
    torch.manual_seed(0)
    config = transformers.MixtralConfig(vocab_size=64, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                                        num_attention_heads=2, num_key_value_heads=1, num_local_experts=EXPERTS,
                                        num_experts_per_tok=top_k, max_position_embeddings=64,
                                        output_router_logits=True, router_aux_loss_coef=coef, use_cache=False,
                                        attn_implementation="sdpa")
    return cls(config).eval()


def run(model, rows=2, mask=None):
    ids = torch.randint(1, 64, (rows, WIDTH), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, labels=ids, use_cache=False)


def rows_of(out, keep, experts=EXPERTS, top_k=TOP_K, function=lbl):
    """The family's function over each kept row's tokens alone (``keep[r]`` a boolean row), by the test."""
    b = out.logits.shape[0]
    return [float(function(tuple(layer.reshape(b, WIDTH, -1)[r][keep[r]] for layer in out.router_logits),
                           experts, top_k)) for r in range(b) if keep[r].any()]


def test_a_packed_run_reads_the_coefficient_the_term_and_each_row_as_a_sequence():
    model = mixtral()
    out = run(model)
    aux = router_aux(model, out)
    assert aux.coef == 0.25 and type(aux.coef) is float
    assert aux.value == float(out.aux_loss) and aux.aux.dim() == 0
    assert torch.equal(aux.term, 0.25 * out.aux_loss)
    assert aux.padding == 0 and aux.pooled_with_padding is None  # nothing padded: no unmasked term asked
    per_row = rows_of(out, torch.ones(2, WIDTH, dtype=torch.bool))
    assert per_row[0] != per_row[1]  # so a mean is told from either row or their sum
    assert aux.per_row == pytest.approx(sum(per_row) / 2, rel=1e-12)


def test_a_padded_run_counts_its_padding_and_pools_it_as_a_loss_without_the_mask_would():
    model = mixtral()
    mask = torch.ones(2, WIDTH, dtype=torch.long)
    mask[1, 4:] = 0
    out = run(model, mask=mask)
    real = mask.bool()
    aux = router_aux(model, out, real)
    assert aux.padding == 3
    assert aux.pooled_with_padding == pytest.approx(float(lbl(out.router_logits, EXPERTS, TOP_K)), rel=1e-12)
    assert aux.pooled_with_padding != pytest.approx(aux.value, rel=1e-6)  # the model's own term masks
    assert aux.per_row == pytest.approx(sum(rows_of(out, real)) / 2, rel=1e-12)
    # a row with no real token is no sequence: the mean is over the other row alone
    only = torch.zeros(2, WIDTH, dtype=torch.bool)
    only[0] = True
    alone = router_aux(model, out, only)
    assert alone.padding == WIDTH
    assert alone.per_row == pytest.approx(rows_of(out, only)[0], rel=1e-12)


def test_no_term_where_the_loss_adds_none():
    model = mixtral()
    out = run(model)
    model.router_aux_loss_coef = True  # a flag, not a coefficient
    assert router_aux(model, out) is None
    model.router_aux_loss_coef = "0.25"
    assert router_aux(model, out) is None
    del model.router_aux_loss_coef
    assert router_aux(model, out) is None
    model.router_aux_loss_coef = 1  # an int is a coefficient
    assert router_aux(model, out).coef == 1.0
    no_logits = mixtral()
    no_logits.config.output_router_logits = False
    assert router_aux(no_logits, run(no_logits)) is None  # aux_loss None


def test_an_output_without_router_logits_keeps_the_term_and_diagnoses_nothing():
    model = mixtral()
    out = run(model)
    bare = MoeCausalLMOutputWithPast(loss=out.loss, aux_loss=out.aux_loss, logits=out.logits)
    real = torch.ones(2, WIDTH, dtype=torch.bool)
    real[0, 5:] = False
    aux = router_aux(model, bare, real)
    assert (aux.coef, aux.value, aux.padding, aux.pooled_with_padding, aux.per_row) == \
        (0.25, float(out.aux_loss), 2, None, None)
    # outputs whose logits are not (B, T, V): no rows to read
    flat = MoeCausalLMOutputWithPast(loss=out.loss, aux_loss=out.aux_loss, logits=out.logits[0],
                                     router_logits=out.router_logits)
    assert router_aux(model, flat).per_row is None
    unnamed = MoeCausalLMOutputWithPast(aux_loss=out.aux_loss, logits=out.logits, router_logits=out.router_logits)
    assert router_aux(model, unnamed).value == float(out.aux_loss)  # no loss: the term is taken where it is


def test_the_experts_are_read_from_either_config_name_and_top_k_from_the_config():
    model = mixtral(top_k=1)
    out = run(model)
    keep = torch.ones(2, WIDTH, dtype=torch.bool)
    assert router_aux(model, out).per_row == pytest.approx(sum(rows_of(out, keep, top_k=1)) / 2, rel=1e-12)
    # other families' names, as a config holding only what router_aux reads (transformers' configs are strict
    # dataclasses: a Mixtral config takes no num_experts)
    model.config = types.SimpleNamespace(num_experts=EXPERTS, num_experts_per_tok=1)  # Qwen2-MoE's name
    assert router_aux(model, out).per_row == pytest.approx(sum(rows_of(out, keep, top_k=1)) / 2, rel=1e-12)
    model.config = types.SimpleNamespace(num_local_experts=0, num_experts=0)  # no experts: nothing to diagnose
    assert router_aux(model, out).per_row is None
    model.config = types.SimpleNamespace(num_local_experts=None, num_experts=EXPERTS)  # no top_k: transformers' 2
    assert router_aux(model, out).per_row == pytest.approx(sum(rows_of(out, keep, top_k=2)) / 2, rel=1e-12)
    model.config = None
    assert router_aux(model, out).per_row is None


def _module(name, function):
    module = types.ModuleType(name)
    module.load_balancing_loss_func = function
    sys.modules[name] = module
    return module


def test_the_function_is_the_first_one_up_the_models_classes_and_a_raising_one_diagnoses_nothing():
    def doubled(logits, experts, top_k, attention_mask=None):
        return 2 * lbl(logits, experts, top_k, attention_mask)

    _module("tensorcad_test_doubled", doubled)
    Doubled = type("Doubled", (transformers.MixtralForCausalLM,), {"__module__": "tensorcad_test_doubled"})
    model = mixtral(Doubled)
    mask = torch.ones(2, WIDTH, dtype=torch.long)
    mask[0, 6:] = 0
    out = run(model, mask=mask)
    aux = router_aux(model, out, mask.bool())
    assert aux.pooled_with_padding == pytest.approx(2 * float(lbl(out.router_logits, EXPERTS, TOP_K)), rel=1e-12)
    assert aux.per_row == pytest.approx(sum(rows_of(out, mask.bool(), function=doubled)) / 2, rel=1e-12)
    # a user's subclass in a module without the function: the family's own, up the classes
    Users = type("Users", (transformers.MixtralForCausalLM,), {"__module__": __name__})
    assert router_aux(mixtral(Users), out, mask.bool()).pooled_with_padding == \
        pytest.approx(float(lbl(out.router_logits, EXPERTS, TOP_K)), rel=1e-12)

    def other_signature(logits):
        raise TypeError("load_balancing_loss_func() takes 1 positional argument")

    _module("tensorcad_test_other", other_signature)
    Other = type("Other", (transformers.MixtralForCausalLM,), {"__module__": "tensorcad_test_other"})
    other = router_aux(mixtral(Other), out, mask.bool())
    assert (other.value, other.padding, other.pooled_with_padding, other.per_row) == \
        (float(out.aux_loss), 1, None, None)


def _aux(value, pooled=None, padding=0, per_row=None, coef=0.5):
    return RouterAux(coef, torch.tensor(value, dtype=torch.float64), pooled, padding, per_row)


def test_the_comparison_in_words_and_json():
    ok = AuxCheck(0.5, 1.25, 1.0, 0.25)
    assert ok.gap == 0.25 and ok.passed  # a gap equal to the tolerance passes
    assert ok.message() == ("the router's auxiliary loss (x 0.5 in the model's loss, compared apart: a statistic "
                            "of the whole batch, not of each document) 1.25 packed equals 1 over the documents "
                            "padded one a row with their mask (gap 0.25, tolerance 0.25)")
    assert ok.to_json() == {"passed": True, "coef": 0.5, "packed": 1.25, "padded": 1.0, "gap": 0.25,
                            "tolerance": 0.25, "paddingCounted": 0, "rowAsSequence": False}
    plain = AuxCheck(0.5, 1.5, 1.0, 0.25)
    assert not plain.passed and plain.message().endswith(
        "1.5 packed is not 1 over the documents padded one a row with their mask (gap 0.5, tolerance 0.25)")
    pooled = AuxCheck(0.5, 1.5, 1.0, 0.25, padding_counted=16)
    assert pooled.message().endswith(
        "(gap 0.5, tolerance 0.25): the padded run's term pools its 16 padding tokens (it equals the family's "
        "load_balancing_loss_func with no attention_mask): pass the mask to the aux loss")
    assert pooled.to_json()["paddingCounted"] == 16
    row = AuxCheck(0.5, 1.5, 1.0, 0.25, row_as_sequence=True)
    assert row.message().endswith(
        "(gap 0.5, tolerance 0.25): the packed term is the family's load_balancing_loss_func over each packed row "
        "as one sequence, the padded one over each document: a sequence-wise aux loss must take each document as "
        "its sequence under packing (Megatron-LM #5696)")
    assert row.to_json()["rowAsSequence"] is True
    # a diagnosis is said only of a failure
    assert AuxCheck(0.5, 1.0, 1.0, 0.25, 16, True).message().endswith("(gap 0, tolerance 0.25)")
    assert not AuxCheck(0.5, math.nan, 1.0, 0.25).passed


def test_held_aux_diagnoses_pooled_padding_and_a_row_taken_as_a_sequence():
    seen = []

    def tolerance_of(reference):
        seen.append(reference)
        return 0.25

    assert held_aux(None, _aux(1.0), tolerance_of) is None
    lost = held_aux(_aux(1.0), None, tolerance_of)
    assert math.isnan(seen[-1]) and math.isnan(lost.padded) and not lost.passed and not lost.row_as_sequence
    check = held_aux(_aux(2.0, coef=0.125), _aux(1.0, pooled=2.0, padding=9), tolerance_of)
    assert seen[-1] == 1.0  # the tolerance is the reference's (the padded run's term)
    assert (check.coef, check.packed, check.padded, check.tolerance) == (0.125, 2.0, 1.0, 0.25)
    # the padded run's term is its unmasked one (within the tolerance) and the packed one is past it: pooled
    assert held_aux(_aux(1.5), _aux(1.0, pooled=1.25, padding=9), tolerance_of).padding_counted == 9
    assert held_aux(_aux(1.5), _aux(1.0, pooled=1.5, padding=9), tolerance_of).padding_counted == 0
    assert held_aux(_aux(1.25), _aux(1.0, pooled=1.0, padding=9), tolerance_of).padding_counted == 0  # it passes
    assert held_aux(_aux(1.5), _aux(1.0, pooled=1.0, padding=0), tolerance_of).padding_counted == 0
    assert held_aux(_aux(1.5), _aux(1.0, pooled=None, padding=9), tolerance_of).padding_counted == 0
    # each run's term is its per-row one, and they differ: the packed row was the sequence
    row = held_aux(_aux(2.0, per_row=2.25), _aux(1.0, per_row=0.75), tolerance_of)
    assert row.row_as_sequence and row.padding_counted == 0
    assert not held_aux(_aux(2.0, per_row=2.5), _aux(1.0, per_row=1.0), tolerance_of).row_as_sequence
    assert not held_aux(_aux(2.0, per_row=2.0), _aux(1.0, per_row=1.5), tolerance_of).row_as_sequence
    assert not held_aux(_aux(1.25, per_row=1.25), _aux(1.0, per_row=1.0), tolerance_of).row_as_sequence
    assert not held_aux(_aux(2.0), _aux(1.0, per_row=1.0), tolerance_of).row_as_sequence
    assert not held_aux(_aux(2.0, per_row=2.0), _aux(1.0), tolerance_of).row_as_sequence
    # pooled padding is the diagnosis when both fit
    both = held_aux(_aux(2.0, per_row=2.0), _aux(1.0, pooled=1.0, padding=4, per_row=1.0), tolerance_of)
    assert both.padding_counted == 4 and not both.row_as_sequence


def test_a_users_own_output_and_model_are_read_by_what_they_have():
    model = mixtral()
    out = run(model)
    real = torch.ones(2, WIDTH, dtype=torch.bool)
    real[1, 3:] = False
    pooled = float(lbl(out.router_logits, EXPERTS, TOP_K))
    # an output object of the user's own: only the attributes it has are read
    assert router_aux(model, types.SimpleNamespace(loss=out.loss)) is None  # no aux_loss
    bare = router_aux(model, types.SimpleNamespace(aux_loss=out.aux_loss))  # no loss, logits or router logits
    assert (bare.value, bare.pooled_with_padding, bare.per_row) == (float(out.aux_loss), None, None)
    no_logits = router_aux(model, types.SimpleNamespace(aux_loss=out.aux_loss, router_logits=out.router_logits), real)
    assert no_logits.pooled_with_padding == pytest.approx(pooled, rel=1e-12) and no_logits.per_row is None
    flat = MoeCausalLMOutputWithPast(aux_loss=out.aux_loss, logits=out.logits[0], router_logits=out.router_logits)
    flat_aux = router_aux(model, flat, real)  # logits of no (B, T, V): no rows, the pooled term still
    assert flat_aux.pooled_with_padding == pytest.approx(pooled, rel=1e-12) and flat_aux.per_row is None
    # every token padding: no row to average, the pooled term still
    empty = router_aux(model, out, torch.zeros(2, WIDTH, dtype=torch.bool))
    assert empty.pooled_with_padding == pytest.approx(pooled, rel=1e-12) and empty.per_row is None
    # a config naming only num_local_experts (no num_experts alias)
    model.config = types.SimpleNamespace(num_local_experts=EXPERTS, num_experts_per_tok=TOP_K)
    assert router_aux(model, out).per_row == pytest.approx(
        sum(rows_of(out, torch.ones(2, WIDTH, dtype=torch.bool))) / 2, rel=1e-12)


class _NoConfig(torch.nn.Module):
    """A user's module with a coefficient and no config (its module holds no load_balancing_loss_func)."""

    router_aux_loss_coef = 0.5


def test_a_model_without_a_family_function_or_config_keeps_the_term_and_diagnoses_nothing():
    mixtral_out = run(mixtral())
    real = torch.ones(2, WIDTH, dtype=torch.bool)
    real[0, 2:] = False
    for model in (_NoConfig(), transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=8, hidden_size=8, intermediate_size=8, num_hidden_layers=1, num_attention_heads=1))):
        model.router_aux_loss_coef = 0.5
        aux = router_aux(model, mixtral_out, real)
        assert (aux.coef, aux.value, aux.padding, aux.pooled_with_padding, aux.per_row) == \
            (0.5, float(mixtral_out.aux_loss), 5, None, None)
