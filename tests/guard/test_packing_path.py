"""`packing_path` on Llama, Mistral, Gemma 2 and GPT-2 in eager / sdpa / flex, held to a hand-instrumented run.

The hand instrument is the test's own: it patches the function each path ends in
(the modeling file's ``eager_attention_forward``, ``torch.nn.functional.
scaled_dot_product_attention``, transformers' ``compile_friendly_flex_attention``)
and writes down what reached it. Whether the documents stayed apart is
established by running each document alone (`alone_gaps`), never by the guard.
"""

from __future__ import annotations

import importlib

import pytest
import torch
from guard_setups import tiny_model
from hf_setups import alone_gaps, block_diagonal, collated

from tensorcad.guard import packing_path

# Gemma 2 has no sdpa path in transformers 5.24 (it refuses to load with one), nor GPT-2 a flex one:
# each refusal is a test below, so a transformers that adds the path fails here and gets its case.
CASES = [("llama", "eager"), ("llama", "sdpa"), ("mistral", "eager"), ("mistral", "sdpa"), ("gpt2", "eager"),
         ("gpt2", "sdpa"), ("gemma2", "eager")]
FLEX = [("llama", "flex_attention"), ("mistral", "flex_attention"), ("gemma2", "flex_attention")]


class Hand:
    """What reached each kernel, one entry a call, written down by patching the kernel itself."""

    def __init__(self, monkeypatch, family: str, implementation: str):
        self.seen: list[str] = []
        if implementation == "eager":
            module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
            original = module.eager_attention_forward

            def eager(module_, q, k, v, attention_mask, *args, **kwargs):
                self.seen.append("none" if attention_mask is None else "4D tensor")
                return original(module_, q, k, v, attention_mask, *args, **kwargs)

            monkeypatch.setattr(module, "eager_attention_forward", eager)
        elif implementation == "sdpa":
            original = torch.nn.functional.scaled_dot_product_attention

            def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, **kwargs):
                self.seen.append("4D tensor" if attn_mask is not None else "is_causal" if is_causal else "none")
                return original(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, **kwargs)

            monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", sdpa)
        else:
            from torch.nn.attention.flex_attention import BlockMask, flex_attention
            from transformers.integrations import flex_attention as hf_flex

            def flex(q, k, v, training=False, **kwargs):  # uncompiled: the path, not the speed, is under test
                mask = kwargs.get("block_mask")
                self.seen.append("BlockMask" if isinstance(mask, BlockMask) else "none")
                return flex_attention(q, k, v, **kwargs)

            monkeypatch.setattr(hf_flex, "compile_friendly_flex_attention", flex)


def _batches(ids, documents, positions):
    clean = {"input_ids": ids, "position_ids": positions, "use_cache": False}
    return {"clean": clean, "all-ones mask": dict(clean, attention_mask=torch.ones_like(ids)),
            "4D block-diagonal mask": dict(clean, attention_mask=block_diagonal(documents))}


def _held_to_hand(monkeypatch, family, implementation):
    ids, documents, positions, _ = collated()
    model = tiny_model(family, implementation)
    if implementation == "flex_attention":
        # transformers' compiled flex segfaults on CPU here (torch 2.13); both runs take the uncompiled kernel, and
        # build the same BlockMask uncompiled (its compile costs 20-40 s a family, and changes no pair it keeps).
        from transformers import masking_utils

        build = masking_utils.create_block_mask
        monkeypatch.setattr(masking_utils, "create_block_mask", lambda *a, **k: build(*a, **{**k, "_compile": False}))
        Hand(monkeypatch, family, implementation)
    for name, batch in _batches(ids, documents, positions).items():
        if implementation == "flex_attention" and name.startswith("4D"):
            continue  # flex applies a 4D tensor as a score_mod, which the hand instrument cannot tell from others
        report = packing_path(model, batch)
        with monkeypatch.context() as m:
            hand = Hand(m, family, implementation)
            with torch.no_grad():
                model(**batch)
        assert [p.mask for p in report.paths] == hand.seen, (family, implementation, name)
        assert [p.layer for p in report.paths] == list(range(model.config.num_hidden_layers))
        assert {p.implementation for p in report.paths} == {implementation}
        # Documents apart exactly where each document run alone equals itself packed.
        def fn(i, d, p, batch=batch):
            return model(**batch).logits
        alone = max(alone_gaps(model, fn, ids, documents, positions)) < 1e-4
        # The all-ones mask lets documents see each other; the test's block-diagonal mask keeps them apart, and
        # loses the window, so each document equals itself alone there only in families without windows.
        assert report.documents_apart == (name != "all-ones mask"), (family, implementation, name)
        windowed = family in ("mistral", "gemma2")
        assert alone == (name == "clean" or (name.startswith("4D") and not windowed)), (family, name)
        windows = getattr(model.config, "layer_types", None) or []
        for p in report.paths:
            sliding = family == "mistral" or (family == "gemma2" and windows[p.layer] == "sliding_attention")
            assert p.kind == ("sliding" if sliding else "full")
            assert p.window == (16 if sliding else None)
            if name == "4D block-diagonal mask" and sliding:
                assert p.window_lost and p.reach == 40  # the longest document (40) seen whole: no window
            elif name == "clean":
                assert p.reach == (16 if sliding else 40) and not p.window_lost


@pytest.mark.parametrize("family, implementation", CASES)
def test_the_path_each_layer_took_is_what_a_hand_instrumented_run_records(monkeypatch, family, implementation):
    _held_to_hand(monkeypatch, family, implementation)


@pytest.mark.slow
@pytest.mark.parametrize("family, implementation", FLEX)
def test_the_flex_path_is_what_a_hand_instrumented_run_records(monkeypatch, family, implementation):
    _held_to_hand(monkeypatch, family, implementation)


def test_sdpa_takes_is_causal_when_an_all_ones_mask_hides_the_documents():
    ids, documents, positions, _ = collated()
    report = packing_path(tiny_model("llama", "sdpa"), _batches(ids, documents, positions)["all-ones mask"])
    assert report.lines() == ["layers 0, 1 (full) ran sdpa with is_causal"]
    assert [p.documents_apart for p in report.paths] == [False, False]


def test_the_recording_leaves_the_interface_as_it_was():
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    before = dict(ALL_ATTENTION_FUNCTIONS._local_mapping)
    ids, _, positions, _ = collated()
    packing_path(tiny_model("llama", "eager"), {"input_ids": ids, "position_ids": positions, "use_cache": False})
    assert ALL_ATTENTION_FUNCTIONS._local_mapping == before
    assert "eager" not in ALL_ATTENTION_FUNCTIONS  # eager is each modeling file's own again


def test_gpt2_has_no_flex_path_in_this_transformers():
    with pytest.raises(ValueError, match="flex_attention"):
        tiny_model("gpt2", "flex_attention")


def test_gemma2_has_no_sdpa_path_in_this_transformers():
    with pytest.raises(ValueError, match="scaled_dot_product_attention"):
        tiny_model("gemma2", "sdpa")
