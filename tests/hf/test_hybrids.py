"""The hybrid families (Mamba-2, Bamba, LFM2) on CPU: transformers cannot keep packed documents
apart, the certificates say so naming the family, the layers and what they need, and
tensorcad's generated model of the same weights equals transformers and passes every
certificate packed.

Tiny random models from transformers' own config classes, float32, their norm scales and
biases moved off their init so a weight loaded in the wrong place moves the logits. Each
packed document is also held to transformers run on that document alone: the reference
no code of ours computes. Every certificate in full (boundaries, gradients) runs under
``-m slow``; the default run keeps bitwise isolation and the comparison with transformers.
"""

from __future__ import annotations

import importlib.util
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="transformers is absent: it is the reference these tests hold to")

import tensorcad.testing  # noqa: E402
import tensorcad  # noqa: E402
from tensorcad.analysis.params import count_params  # noqa: E402
from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.hf import design_from_config, dispositions, import_hf  # noqa: E402
from tensorcad.runtime import build  # noqa: E402
from tensorcad.runtime.building import DesignModel  # noqa: E402

from hf_families import (  # noqa: E402  tests/hf, on sys.path (rootdir import mode)
    HYBRID_CHUNK, HYBRID_CONFIG_CLASSES, HYBRID_FAMILIES, HYBRID_KERNEL, tiny_hybrid)

TOLERANCE = 1e-5
LENGTHS = [[1, 6, 1, 11, 13], [32]]  # one-token documents, longer than the kernel and the chunk; a full row
# a packed document's largest difference from itself alone in transformers, position_ids only
LEAKS = {"mamba2": 1.57, "bamba": 7.2e-3, "lfm2": 1.9e-4}
# what each family's diagnosis names: the family, its stateful layers, what they need
NAMED = {
    "mamba2": ("Mamba-2's selective-scan layers (all 2 layers)", "passes its layers no seq_idx"),
    "bamba": ("Bamba's Mamba-2 layers (layers 0, 2)", "seq_idx and cu_seqlens", "causal_conv1d and mamba_ssm CUDA"),
    "lfm2": ("LFM2's short-convolution layers (layers 0, 2)", "only with seq_idx", "causal_conv1d CUDA kernel"),
}


@pytest.fixture(autouse=True)
def quiet():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        yield


@pytest.fixture(scope="module", params=HYBRID_FAMILIES)
def pair(request):
    config = tiny_hybrid(transformers, request.param)
    torch.manual_seed(0)
    hf = transformers.AutoModelForCausalLM.from_config(config).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in hf.parameters():
            if p.ndim == 1:
                p.add_(0.2 * torch.randn(p.shape, generator=g))
    # Mamba-2 has no attention to read positions with; the others rotate by them
    design = tensorcad.load(design_from_config(config.to_dict(), documents=True, positions=request.param != "mamba2"))
    model = build(design, form="eager").load_hf_state_dict(hf.state_dict())
    vars(sys.modules[type(model).__module__]).get("COMPILE", {}).update(flex_attention=False, create_block_mask=False)
    return request.param, config, hf, DesignModel(model, design)  # passes the inputs the design has


def packed():
    documents = torch.tensor([sum(([d] * n for d, n in enumerate(row)), []) for row in LENGTHS])
    positions = torch.tensor([sum((list(range(n)) for n in row), []) for row in LENGTHS])
    ids = torch.randint(0, 97, documents.shape, generator=torch.Generator().manual_seed(3))
    return ids, documents, positions


def _theirs(hf, ids):
    with torch.no_grad():
        return hf(input_ids=ids, use_cache=False).logits


@pytest.mark.parametrize("family", HYBRID_FAMILIES)
@pytest.mark.parametrize("which", ["default", "tiny"])
def test_every_key_of_the_config_class_goes_somewhere(family, which):
    cls = getattr(transformers, HYBRID_CONFIG_CLASSES[family])
    config = (cls() if which == "default" else tiny_hybrid(transformers, family)).to_dict()
    where = dispositions(config)
    assert set(config) <= set(where), f"keys said to go nowhere: {sorted(set(config) - set(where))}"
    assert all(where[k].note.strip() for k in config)
    design = design_from_config(config)
    assert set(design["hf"]["carried"]) == {k for k in config if where[k].how == "carried"}


def test_import_hf_and_the_analysis_count_transformers_parameters(pair, tmp_path):
    family, config, hf, _ = pair
    config.save_pretrained(tmp_path)  # the folder import-hf reads: Mamba-2's (0, inf) step limit as {"__float__": ...}
    design = tensorcad.load(import_hf(tmp_path))
    assert count_params(design).total == hf.num_parameters()
    assert tensorcad.analyze(design).to_json()["params"]["total"] == hf.num_parameters()


def test_unpacked_our_logits_are_transformers(pair):
    family, config, hf, ours = pair
    ids = torch.randint(0, 97, (1, 40), generator=torch.Generator().manual_seed(2))
    want = _theirs(hf, ids)
    assert want.abs().max() > 0.1
    for form in ("eager", "flex"):
        ours.form = form
        with torch.no_grad():
            assert (ours(ids, torch.zeros_like(ids)) - want).abs().max() <= TOLERANCE, form
    ours.form = "eager"


def test_packed_each_document_is_transformers_on_it_alone(pair):
    family, config, hf, ours = pair
    ids, documents, positions = packed()
    with torch.no_grad():
        got = ours(ids, documents, positions)
    for r, row in enumerate(LENGTHS):
        start = 0
        for n in row:
            alone = _theirs(hf, ids[r:r + 1, start:start + n])
            assert (got[r:r + 1, start:start + n] - alone).abs().max() <= TOLERANCE, (family, r, start)
            start += n
    assert max(n for row in LENGTHS for n in row) > max(HYBRID_CHUNK, HYBRID_KERNEL)


def test_ours_is_isolated_packed(pair):
    # bitwise, every document; faithful is the test above, held to transformers itself
    family, config, hf, ours = pair
    assert tensorcad.testing.assert_isolated(ours, *packed(), boundaries=False).failures == ()


@pytest.mark.slow
def test_ours_passes_every_certificate_packed(pair):
    family, config, hf, ours = pair
    batch = packed()
    assert tensorcad.testing.assert_isolated(ours, *batch).failures == ()
    assert tensorcad.testing.assert_faithful(ours, *batch).passed
    assert tensorcad.testing.assert_gradients_isolated(ours, *batch).passed


def test_a_scaled_rope_on_bamba_turns_half_of_each_head_as_transformers_does():
    # rope.rotary_dim (Bamba's partial_rotary_factor 0.5) and rope.scaling together, held to transformers
    config = tiny_hybrid(transformers, "bamba").to_dict()
    config["rope_parameters"] = {"rope_type": "llama3", "rope_theta": 1e4, "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 16,
                                 "partial_rotary_factor": 0.5}
    config = transformers.BambaConfig.from_dict(config)
    torch.manual_seed(0)
    hf = transformers.AutoModelForCausalLM.from_config(config).eval()
    design = tensorcad.load(design_from_config(config.to_dict()))
    rope = next(n.params for n, _ in design.walk() if n.kind == "rope")
    assert rope["rotary_dim"] * 2 == rope["head_dim"] and rope["scaling"]["type"] == "llama3"
    model = build(design, form="eager").load_hf_state_dict(hf.state_dict())
    ids = torch.randint(0, 97, (1, 40), generator=torch.Generator().manual_seed(2))  # past the original 16
    with torch.no_grad():
        assert (model(ids) - _theirs(hf, ids)).abs().max() <= TOLERANCE


def test_hf_state_dict_loads_back_into_transformers(pair):
    family, config, hf, ours = pair
    fresh = transformers.AutoModelForCausalLM.from_config(config).eval()
    result = fresh.load_state_dict(ours.module.hf_state_dict(), strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    ids = torch.randint(0, 97, (1, 24), generator=torch.Generator().manual_seed(4))
    assert torch.equal(_theirs(fresh, ids), _theirs(hf, ids))


def test_with_position_ids_only_transformers_fails_and_the_message_says_why(pair):
    family, config, hf, _ = pair
    model_fn = tensorcad.testing.hf_causal_lm(hf)  # packed position_ids, use_cache=False: all attention needs
    batch = packed()
    for certificate, options in ((tensorcad.testing.assert_isolated, {"boundaries": False}), (tensorcad.testing.assert_faithful, {})):
        with pytest.raises(tensorcad.testing.CertificateError) as failure:
            certificate(model_fn, *batch, **options)
        message = str(failure.value)
        for words in NAMED[family]:
            assert words in message, (certificate.__name__, words, message)
    # the leak is real, not rounding: each document after the first of its row moves (docs/hybrid.md quotes
    # these), by what transformers packed shows against transformers on each document alone, computed here
    faithful = failure.value.report
    ids, _, positions = batch
    with torch.no_grad():
        whole = hf(input_ids=ids, position_ids=positions, use_cache=False).logits
    leaks, start = [], 0
    for n in LENGTHS[0]:
        leaks.append((whole[:1, start:start + n] - _theirs(hf, ids[:1, start:start + n])).abs().max().item())
        start += n
    assert leaks[0] <= TOLERANCE < min(leaks[1:])  # the first starts from zero state; each after it moves
    assert faithful.largest == pytest.approx(max(leaks), rel=1e-3) == pytest.approx(LEAKS[family], rel=0.02)
    assert len(faithful.differences) == 4


@pytest.mark.skipif(importlib.util.find_spec("causal_conv1d") is not None, reason="the CUDA kernel is installed")
def test_seq_idx_without_the_kernel_is_one_line_naming_what_it_needs(pair):
    family, config, hf, _ = pair
    if family == "mamba2":  # Mamba2ForCausalLM hands its layers nothing: refused before any call
        with pytest.raises(TensorcadError) as refusal:
            tensorcad.testing.hf_causal_lm(hf, packing="seq_idx")
        assert "Mamba2ForCausalLM passes its layers no seq_idx" in refusal.value.message
        return
    model_fn = tensorcad.testing.hf_causal_lm(hf, packing="seq_idx")
    with pytest.raises(TensorcadError) as refusal:
        model_fn(*packed())
    assert refusal.value.path == "packing" and "\n" not in refusal.value.message
    assert all(words in refusal.value.message for words in NAMED[family])
    assert "not installed here (causal_conv1d" in refusal.value.message


def test_seq_idx_is_refused_for_a_family_without_stateful_layers():
    from hf_families import tiny_config

    llama = transformers.AutoModelForCausalLM.from_config(tiny_config(transformers, "llama"))
    with pytest.raises(TensorcadError, match="packing='seq_idx' is for the hybrid families"):
        tensorcad.testing.hf_causal_lm(llama, packing="seq_idx")


@pytest.mark.parametrize("family, change, key", [
    ("bamba", {"time_step_limit": [0.0, 0.1]}, "time_step_limit"),  # a clamped step: not in the language
    ("mamba2", {"hidden_act": "gelu"}, "hidden_act"),
    ("mamba2", {"expand": 3}, "expand"),  # the inner width must be heads x head_dim
    ("lfm2", {"layer_types": ["conv", "sliding_attention", "conv"]}, "layer_types"),
    ("bamba", {"rope_parameters": {"rope_type": "proportional", "rope_theta": 1e4, "partial_rotary_factor": 0.5}},
     "rope_parameters.rope_type"),  # a rope type the language has no scaling for
    ("lfm2", {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}},
     "rope_parameters.partial_rotary_factor"),  # LFM2's attention turns every feature
])
def test_what_the_language_cannot_say_is_refused_naming_the_key(family, change, key):
    config = {**tiny_hybrid(transformers, family).to_dict(), **change}
    with pytest.raises(TensorcadError) as refusal:
        design_from_config(config)
    assert refusal.value.path == key and "\n" not in refusal.value.message
