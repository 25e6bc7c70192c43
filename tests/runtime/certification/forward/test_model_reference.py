"""Faithful's reference is the model, not the wrapper (`forward.model_reference`), planted both ways.

A wrapper whose 4D block-diagonal mask drops Mistral's sliding window agrees with
itself run alone (the old default's false pass); a wrapper that log-softmaxes the
logits differs from transformers' logits (the ``alone_fn="model"`` false alarm).
Each expected verdict is established first by transformers' own forward, each
document run alone (`hf_setups.alone_gaps`), never by the code under test.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "hf"))  # the tiny setups of tests/hf
from hf_setups import LENGTHS, WINDOW, alone_gaps, block_diagonal, collated, tiny_model  # noqa: E402

from tensorcad.runtime.certification import certificate  # noqa: E402

METHODS = ("grouped", "each")


def windowless(model):
    """The wrapper docs used to recommend: same document, causal, and no window."""

    def model_fn(ids, documents, positions):
        return model(input_ids=ids, attention_mask=block_diagonal(documents), position_ids=positions,
                     use_cache=False).logits

    return model_fn


def log_softmaxed(model):
    def model_fn(ids, documents, positions):
        out = model(input_ids=ids, position_ids=positions, use_cache=False).logits
        return torch.log_softmax(out, dim=-1)

    return model_fn


@pytest.mark.parametrize("method", METHODS)
def test_a_4d_mask_that_drops_the_window_is_no_false_pass(method):
    model = tiny_model("mistral")
    ids, documents, positions, _ = collated()
    assert max(LENGTHS) > WINDOW
    gaps = alone_gaps(model, windowless(model), ids, documents, positions)
    assert max(gaps) > 1e-2  # transformers' own forward alone keeps the window the wrapper lost
    result = certificate("faithful", method)(windowless(model), ids, documents, positions)
    assert not result.passed
    # The documents past the window, and only those, differ: each by what transformers' forward says.
    wrong = {d.document: d.largest for d in result.differences}
    assert set(wrong) == {d for d, gap in enumerate(gaps) if gap > 1e-5}
    assert all(wrong[d] == pytest.approx(gaps[d], rel=1e-3) for d in wrong)
    assert result.reference.startswith("transformers' own forward of MistralForCausalLM")


@pytest.mark.parametrize("method", METHODS)
def test_an_output_transforming_wrapper_is_no_false_alarm(method):
    model = tiny_model("llama")
    ids, documents, positions, _ = collated()
    # Established first: the model's own logits, packed and alone, agree.
    assert max(alone_gaps(model, lambda i, d, p: model(input_ids=i, position_ids=p, use_cache=False),
                          ids, documents, positions)) < 1e-5
    result = certificate("faithful", method)(log_softmaxed(model), ids, documents, positions)
    assert result.passed, result.message()
    assert "against transformers' own forward of LlamaForCausalLM" in result.message()
    # The old reference (the model's forward alone against the wrapper's outputs) is the false alarm.
    def alone(i, d, p):
        return model(input_ids=i, use_cache=False).logits

    assert not certificate("faithful", method)(log_softmaxed(model), ids, documents, positions,
                                               alone_fn=alone).passed


def test_a_wrapper_calling_the_model_per_row_is_compared_with_itself_and_says_so():
    model = tiny_model("llama")
    ids, documents, positions, _ = collated()
    two = (torch.cat([ids, ids]), torch.cat([documents, documents]), torch.cat([positions, positions]))

    def per_row(i, d, p):
        return torch.cat([model(input_ids=i[r:r + 1], position_ids=p[r:r + 1], use_cache=False).logits
                          for r in range(i.shape[0])])

    result = certificate("faithful", "each")(per_row, *two)
    assert result.passed
    assert result.reference == ("the model_fn itself on each document alone (the hook on LlamaForCausalLM saw 2 "
                                "calls for one packed batch, so the model's own outputs could not be read)")


def test_a_users_own_alone_fn_is_the_reference_it_names():
    model = tiny_model("llama")
    ids, documents, positions, _ = collated()
    fn = log_softmaxed(model)
    result = certificate("faithful", "grouped")(fn, ids, documents, positions, alone_fn=fn)
    assert result.passed and result.reference == "the given alone_fn on each document alone"
