"""tensorcad.hf.diagnosis: on a leak from a Hugging Face model, the setting that caused it, named."""

from __future__ import annotations

import pytest
import torch

from tensorcad.testing import assert_isolated
from tensorcad.hf.diagnosis import diagnose, reachable_hf_models

transformers = pytest.importorskip("transformers")

from hf_setups import collated, tiny_model  # noqa: E402 - tests/hf is on sys.path


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama", "sdpa")


def test_the_models_a_callable_reaches_are_found(llama):
    def model_fn(ids, documents, positions):
        return llama(input_ids=ids).logits

    assert reachable_hf_models(model_fn) == [llama]
    assert reachable_hf_models(lambda i, d, p, m=llama: m(i)) == [llama]
    assert reachable_hf_models(lambda i, d, p: i) == []


def test_a_clean_call_has_nothing_to_diagnose(llama):
    ids, documents, positions, _ = collated()
    assert diagnose(llama, {"input_ids": ids, "position_ids": positions, "use_cache": False}) is None
    assert "use_cache=False" in diagnose(llama, {"input_ids": ids, "position_ids": positions})
    assert "all-ones" in diagnose(llama, {"position_ids": positions, "attention_mask": torch.ones_like(ids)})


def test_positions_counted_through_the_row_without_a_mask_are_named(llama):
    ids, documents, _, _ = collated()

    def model_fn(ids, documents, positions):
        return llama(input_ids=ids, position_ids=torch.arange(ids.shape[1])[None], use_cache=False).logits

    with pytest.raises(AssertionError, match=r"LlamaForCausalLM: the position_ids never restart"):
        assert_isolated(model_fn, ids, documents, None, vocab=128, boundaries=False)


def test_a_positional_call_is_read_by_the_forwards_own_names(llama):
    ids, documents, positions, _ = collated()

    def model_fn(ids, documents, positions):
        return llama(ids, torch.ones_like(ids), positions, use_cache=False).logits  # input_ids, attention_mask, position_ids

    with pytest.raises(AssertionError, match=r"drop the all-ones attention_mask"):
        assert_isolated(model_fn, ids, documents, positions, vocab=128, boundaries=False)


GLOBAL_LLAMA = None


def test_a_model_the_function_reads_from_its_module_is_found(llama):
    global GLOBAL_LLAMA
    GLOBAL_LLAMA = llama

    def model_fn(ids, documents, positions):
        return GLOBAL_LLAMA(input_ids=ids).logits

    assert reachable_hf_models(model_fn) == [llama]


def _leak_established(llama, model_fn, ids, documents, positions):
    from hf_setups import alone_gaps

    assert max(alone_gaps(llama, model_fn, ids, documents, positions)) > 1e-3  # it does leak, seen here


def test_position_ids_left_out_are_named(llama):
    # Before: the generic leak text only.
    ids, documents, positions, _ = collated()

    def model_fn(ids, documents, positions):
        return llama(input_ids=ids, use_cache=False).logits

    _leak_established(llama, model_fn, ids, documents, positions)
    with pytest.raises(AssertionError, match=r"LlamaForCausalLM: pass position_ids: without them transformers "
                                             r"counts positions straight through the row"):
        assert_isolated(model_fn, ids, documents, positions, vocab=128, boundaries=False)


def test_documents_passed_as_the_attention_mask_are_named(llama):
    ids, documents, positions, _ = collated()

    def model_fn(ids, documents, positions):
        return llama(ids, documents, positions, use_cache=False).logits  # input_ids, attention_mask, position_ids

    _leak_established(llama, model_fn, ids, documents, positions)
    with pytest.raises(AssertionError, match=r"the attention_mask holds document ids, but transformers reads a 2D "
                                             r"attention_mask as padding"):
        assert_isolated(model_fn, ids, documents, positions, vocab=128, boundaries=False)
    # A real padding mask (left padding: 0s then 1s, positions not restarting there) is not taken for documents.
    from tensorcad.hf.diagnosis import _documents_as_mask

    padding = torch.tensor([[0, 0, 1, 1, 1]])
    assert not _documents_as_mask(padding, torch.tensor([[0, 0, 0, 1, 2]]))
    assert _documents_as_mask(padding, torch.tensor([[0, 1, 0, 1, 2]]))
