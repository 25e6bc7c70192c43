"""Generated models equal transformers: tiny random models (CPU, float32) built from
their config classes, imported, loaded with transformers' weights.

- one document: our logits within 1e-5 of transformers', eager and flex forms;
- a packed row (document mask, positions restarting): each document's logits equal
  transformers run on that document alone;
- `hf_state_dict()` loads back into transformers (strict) and gives its logits;
- the parameter count is transformers' `num_parameters()`, and the eager form's
  FlopCounterMode count is the analysis's.
FlexAttention runs uncompiled (COMPILE off), so no test waits on a compiler.
"""

from __future__ import annotations

import sys
import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="transformers is absent: it is the reference these tests hold to")

import tensorcad  # noqa: E402
from tensorcad.analysis.params import count_params  # noqa: E402
from tensorcad.hf import design_from_config, import_hf  # noqa: E402
from tensorcad.runtime import build  # noqa: E402
from tensorcad.runtime.building.profile import profile  # noqa: E402

from hf_families import FAMILIES, NEW_FAMILIES, WINDOW, WINDOWED, tiny_config  # noqa: E402  tests/hf, on sys.path

TOLERANCE = 1e-5
LENGTHS = (15, 11, 14)  # a packed row of three documents, each longer than the windows


@pytest.fixture(autouse=True)
def quiet():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        yield


def _hf_model(family):
    config = tiny_config(transformers, family)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    # Norm scales start at one and biases at zero: move them, so a weight loaded into
    # the wrong place (or not at all) moves the logits.
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.add_(0.2 * torch.randn(p.shape, generator=g))
    return config, model


def _ours(design, hf):
    model = build(tensorcad.load(design), form="eager")
    vars(sys.modules[type(model).__module__])["COMPILE"].update(flex_attention=False, create_block_mask=False)
    return model.load_hf_state_dict(hf.state_dict())


# The families of issue 34 go through every test here under -m slow; the default run holds each of them to
# transformers in one pass (test_each_newer_family_equals_transformers_in_one_pass), on one build.
@pytest.fixture(scope="module", params=[f if f not in NEW_FAMILIES else pytest.param(f, marks=pytest.mark.slow)
                                        for f in FAMILIES])
def pair(request):
    config, hf = _hf_model(request.param)
    return request.param, config, hf


def _theirs(hf, ids):
    with torch.no_grad():
        return hf(input_ids=ids, use_cache=False).logits


def _both_forms(model, *args):
    out = {}
    paths = vars(sys.modules[type(model).__module__])["RUNTIME_PATHS"]
    with torch.no_grad():
        for form in ("eager", "flex"):
            model.form = form
            out[form] = model(*args)
            assert paths["attend"] == form  # FlexAttention itself ran, not the eager fallback
    return out


def _packed_row(config):
    documents = torch.cat([torch.full((n,), i) for i, n in enumerate(LENGTHS)])[None]
    positions = torch.cat([torch.arange(n) for n in LENGTHS])[None]
    ids = torch.randint(0, config.vocab_size, documents.shape, generator=torch.Generator().manual_seed(3))
    return ids, documents, positions


def test_one_document_equals_transformers(pair):
    family, config, hf = pair
    ours = _ours(design_from_config(config.to_dict()), hf)
    ids = torch.randint(0, config.vocab_size, (2, 40), generator=torch.Generator().manual_seed(2))
    want = _theirs(hf, ids)
    assert want.abs().max() > 0.1  # logits large enough for 1e-5 to mean something
    for form, got in _both_forms(ours, ids).items():
        assert (got - want).abs().max() <= TOLERANCE, f"{family} {form}"


def test_a_packed_row_equals_each_document_alone_through_transformers(pair):
    family, config, hf = pair
    raw = design_from_config(config.to_dict(), documents=True, positions=True)
    ours = _ours(raw, hf)
    ids, documents, positions = _packed_row(config)
    stack = next(n for n in raw["nodes"] if n["kind"] == "stack")
    windows = stack["params"].get("windows") or [stack["params"]["block"]["params"]["attention"].get("window")]
    assert WINDOW in windows if family in WINDOWED else windows == [None]  # in force: shorter than every document
    assert min(LENGTHS) > WINDOW
    for form, got in _both_forms(ours, ids, documents, positions).items():
        start = 0
        for i, n in enumerate(LENGTHS):
            alone = _theirs(hf, ids[:, start:start + n])
            assert (got[:, start:start + n] - alone).abs().max() <= TOLERANCE, f"{family} {form} document {i}"
            start += n


def test_a_packed_row_equals_transformers_own_packing_from_position_ids(pair):
    # transformers finds the documents from restarting position_ids, but only with use_cache=False
    family, config, hf = pair
    ours = _ours(design_from_config(config.to_dict(), documents=True, positions=True), hf)
    ids, documents, positions = _packed_row(config)
    with torch.no_grad():
        packed = hf(input_ids=ids, position_ids=positions, use_cache=False).logits
        cached = hf(input_ids=ids, position_ids=positions, use_cache=True).logits
        got = ours(ids, documents, positions)
    assert (got - packed).abs().max() <= TOLERANCE
    assert (got - cached).abs().max() > 1e-3  # with a cache it attends across documents


@pytest.mark.parametrize("family", WINDOWED)
def test_a_design_without_its_window_is_caught(family):
    # the comparison can fail: the same weights without the sliding window are another model
    config, hf = _hf_model(family)
    raw = design_from_config(config.to_dict())
    raw["nodes"][1]["params"].pop("windows", None)
    raw["nodes"][1]["params"]["block"]["params"]["attention"].pop("window", None)
    ids = torch.randint(0, config.vocab_size, (1, 40), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        assert (_ours(raw, hf)(ids) - _theirs(hf, ids)).abs().max() > 1e-3


@pytest.mark.parametrize("family", NEW_FAMILIES)
def test_each_newer_family_equals_transformers_in_one_pass(family):
    # one document and a packed row, eager and flex, against transformers alone; weights back; params counted
    config, hf = _hf_model(family)
    raw = design_from_config(config.to_dict(), documents=True, positions=True)
    ours = _ours(raw, hf)
    ids, documents, positions = _packed_row(config)
    alone = [_theirs(hf, ids[:, start:start + n]) for start, n in zip((0, 15, 26), LENGTHS)]
    whole = _theirs(hf, ids)
    assert whole.abs().max() > 0.1
    for form, got in _both_forms(ours, ids, documents, positions).items():
        for (start, n), want in zip(zip((0, 15, 26), LENGTHS), alone):
            assert (got[:, start:start + n] - want).abs().max() <= TOLERANCE, f"{family} {form} packed"
    for form, got in _both_forms(ours, ids, torch.zeros_like(documents), None).items():
        assert (got - whole).abs().max() <= TOLERANCE, f"{family} {form} one document"
    fresh = transformers.AutoModelForCausalLM.from_config(config).eval()
    fresh.load_state_dict(ours.hf_state_dict(), strict=True)
    assert torch.equal(_theirs(fresh, ids), whole)
    assert count_params(tensorcad.load(raw)).total == hf.num_parameters()


def _attention(raw):
    return raw["nodes"][1]["params"]["block"]["params"]["attention"]


# What each family of issue 34 adds that moves no weight, taken away. (What moves weights, OLMo 2's norms after
# each half, StarCoder 2's two-matrix MLP, is held by the weight map: a design without it cannot load them.)
WITHOUT = {
    "llama-3.1": lambda raw: _attention(raw)["rope"].pop("scaling"),
    "gemma3_text": lambda raw: raw["nodes"][1]["params"].update(ropes=[raw["nodes"][1]["params"]["ropes"][0]] * 3),
    "granite": lambda raw: raw["nodes"][1]["params"]["block"]["params"].pop("residual_scale"),
    "smollm3": lambda raw: raw["nodes"][1]["params"].update(ropes=[raw["nodes"][1]["params"]["ropes"][0]] * 2),
    "cohere": lambda raw: _attention(raw)["rope"].update(interleaved=False),
    "stablelm": lambda raw: _attention(raw)["rope"].pop("rotary_dim"),
}


@pytest.mark.parametrize("family", WITHOUT)
def test_a_design_without_what_its_family_adds_is_caught(family):
    # the same weights in a design that lacks the family's rope scaling, rope bases, residual scale, layers
    # without rope, rotary pairs or part of a head: another model, so the comparisons above can fail
    config, hf = _hf_model(family)
    raw = design_from_config(config.to_dict())
    WITHOUT[family](raw)
    ids = torch.randint(0, config.vocab_size, (1, 40), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        assert (_ours(raw, hf)(ids) - _theirs(hf, ids)).abs().max() > 1e-3


def test_hf_state_dict_round_trips_through_transformers(pair):
    family, config, hf = pair
    ours = _ours(design_from_config(config.to_dict()), hf)
    fresh = transformers.AutoModelForCausalLM.from_config(config).eval()
    result = fresh.load_state_dict(ours.hf_state_dict(), strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    ids = torch.randint(0, config.vocab_size, (1, 24), generator=torch.Generator().manual_seed(4))
    assert torch.equal(_theirs(fresh, ids), _theirs(hf, ids))


def test_params_and_flops_are_held_to_transformers(pair):
    family, config, hf = pair
    design = tensorcad.load(design_from_config(config.to_dict()))
    assert count_params(design).total == hf.num_parameters()
    ours = _ours(design, hf)
    ids = torch.randint(0, config.vocab_size, (2, 32), generator=torch.Generator().manual_seed(5))
    p = profile(ours, design, {"ids": ids})
    assert p.matmul == p.expected_matmul and p.attention == p.dense_attention and p.other == 0


def test_from_pretrained_reads_a_saved_directory(tmp_path):
    config, hf = _hf_model("qwen3")
    hf.save_pretrained(tmp_path)  # model.safetensors, the tied head written once
    design = tensorcad.load(import_hf(tmp_path))
    model = build(design, form="eager")
    loaded = type(model).from_pretrained(str(tmp_path), form="eager")
    ids = torch.randint(0, config.vocab_size, (1, 20), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        assert (loaded(ids) - _theirs(hf, ids)).abs().max() <= TOLERANCE


def test_from_pretrained_reads_shards_bfloat16_and_pytorch_model_bin(tmp_path):
    config, hf = _hf_model("phi3")
    module_model = build(tensorcad.load(design_from_config(config.to_dict())), form="eager")
    Model = type(module_model)
    sharded, legacy = tmp_path / "sharded", tmp_path / "legacy"
    hf.to(torch.bfloat16).save_pretrained(sharded, max_shard_size="40KB")
    assert (sharded / "model.safetensors.index.json").is_file() and len(list(sharded.glob("*.safetensors"))) > 1
    legacy.mkdir()
    torch.save(hf.state_dict(), legacy / "pytorch_model.bin")
    want = {k: v.float() for k, v in hf.state_dict().items()}  # bfloat16, upcast exactly
    for directory in (sharded, legacy):
        got = Model.from_pretrained(str(directory), form="eager").hf_state_dict()
        assert got.keys() == want.keys()
        assert all(torch.equal(got[k], want[k]) for k in want), directory.name


def test_missing_and_unexpected_keys_are_one_error_naming_them():
    config, hf = _hf_model("llama")
    ours = build(tensorcad.load(design_from_config(config.to_dict())), form="eager")
    state = hf.state_dict()
    del state["model.layers.1.mlp.up_proj.weight"]
    state["model.layers.9.extra.weight"] = torch.zeros(1)
    with pytest.raises(ValueError) as e:
        ours.load_hf_state_dict(state)
    assert str(e.value) == ("not LlamaForCausalLM's weights for this model: 1 missing "
                            "(model.layers.1.mlp.up_proj.weight); 1 unexpected (model.layers.9.extra.weight)")


@pytest.mark.slow
def test_compiled_flex_equals_transformers_on_a_packed_row():
    # the path a GPU run takes: torch.compile'd flex_attention over a block mask built from the
    # documents' ranges (Mistral's window within documents is range-exact; ~20 s on CPU)
    config, hf = _hf_model("mistral")
    model = build(tensorcad.load(design_from_config(config.to_dict(), documents=True, positions=True)), form="flex")
    model.load_hf_state_dict(hf.state_dict())
    namespace = vars(sys.modules[type(model).__module__])
    ids, documents, positions = _packed_row(config)
    with torch.no_grad():
        got = model(ids, documents, positions)
        want = hf(input_ids=ids, position_ids=positions, use_cache=False).logits
    assert namespace["RUNTIME_PATHS"] == {"attend": "flex", "block_mask": "from_ranges",
                                          "flex_attention": "compiled"}
    assert (got - want).abs().max() <= TOLERANCE


def test_a_misshapen_tensor_is_named():
    config, hf = _hf_model("gpt2")
    ours = build(tensorcad.load(design_from_config(config.to_dict())), form="eager")
    state = hf.state_dict()
    state["transformer.h.0.attn.c_attn.weight"] = torch.zeros(64, 100)
    with pytest.raises(ValueError, match=r"1 tensors do not fit this model: transformer\.h\.0\.attn\.c_attn\.weight \(64, 100\)"):
        ours.load_hf_state_dict(state)
