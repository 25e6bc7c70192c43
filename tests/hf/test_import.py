"""Configs become designs: every key accounted for, the presets' shapes analysed exactly
as the presets are, and what a design cannot say refused in one line naming it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import tensorcad
from tensorcad.errors import TensorcadError
from tensorcad.hf import design_from_config, dispositions, import_hf

from hf_families import CONFIG_CLASSES, FAMILIES, tiny_config  # tests/hf, on sys.path (rootdir import mode)

transformers = pytest.importorskip("transformers", reason="transformers is absent: its config classes are the reference")


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("which", ["default", "tiny"])
def test_every_key_of_the_config_class_goes_somewhere(family, which):
    cls = getattr(transformers, CONFIG_CLASSES[family])
    config = (cls() if which == "default" else tiny_config(transformers, family)).to_dict()
    where = dispositions(config)
    assert set(config) <= set(where), f"keys said to go nowhere: {sorted(set(config) - set(where))}"
    for key in config:
        assert where[key].how in ("mapped", "carried", "ignored"), key
        assert where[key].note.strip(), f"{key} has no reason or destination"


@pytest.mark.parametrize("family", FAMILIES)
def test_carried_keys_are_in_the_design(family):
    config = tiny_config(transformers, family).to_dict()
    design = design_from_config(config)
    carried = {k for k, d in dispositions(config).items() if d.how == "carried" and k in config}
    assert set(design["hf"]["carried"]) == carried
    assert design["hf"]["model_type"] == config["model_type"] == family.split("-")[0]
    tensorcad.load(design)  # a valid design


def _config_of_preset(preset: str) -> dict:
    """The preset's shapes written as transformers would: through its config class."""
    t = transformers
    if preset == "llama-3-8b":
        return t.LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                             num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
                             rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 500000.0}).to_dict()
    if preset == "mistral-7b":
        return t.MistralConfig(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                               num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=32768,
                               rms_norm_eps=1e-5, sliding_window=4096).to_dict()
    if preset == "gpt2-small":
        return t.GPT2Config().to_dict()
    raise AssertionError(preset)


OPERATING_POINTS = [
    tensorcad.OperatingPoint(seq=2048),
    tensorcad.OperatingPoint(seq=8192, packing=tensorcad.Packing(mean=1024, spread=1.0)),
]


@pytest.mark.parametrize("preset, documents", [
    ("llama-3-8b", False), ("llama-3-8b", True), ("mistral-7b", False), ("gpt2-small", False), ("gpt2-small", True),
])
def test_the_presets_shapes_import_to_the_presets_analysis(preset, documents):
    name = f"{preset}-documents" if documents else preset
    want = tensorcad.load(name)
    got = tensorcad.load(design_from_config(_config_of_preset(preset), documents=documents,
                                            positions=name == "gpt2-small-documents", name=name))
    assert got.context == want.context
    for op in OPERATING_POINTS:
        seq = min(op.seq, want.context)
        op = tensorcad.OperatingPoint(seq=seq, packing=op.packing)
        assert tensorcad.analyze(got, op).to_json() == tensorcad.analyze(want, op).to_json()


def test_documents_and_positions_add_inputs_and_the_mask():
    config = tiny_config(transformers, "llama").to_dict()
    plain = design_from_config(config)
    both = design_from_config(config, documents=True, positions=True)
    assert set(plain["inputs"]) == {"ids"}
    assert both["inputs"] == {"ids": {"role": "tokens"}, "documents": {"role": "documents"},
                              "positions": {"role": "positions"}}
    attention = both["nodes"][1]["params"]["block"]["params"]["attention"]
    assert attention["mask"] == "doc(b, q) == doc(b, kv)"
    assert both["nodes"][1]["in"] == {"x": "embed", "doc": "documents", "pos": "positions"}
    assert tensorcad.check(tensorcad.load(both), tensorcad.OperatingPoint(seq=128)) is not None


def _refused(config: dict) -> str:
    with pytest.raises(TensorcadError) as e:
        design_from_config(config)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_an_unknown_model_type_is_one_line_naming_it():
    config = {**tiny_config(transformers, "llama").to_dict(), "model_type": "mamba"}
    assert _refused(config).startswith("model_type: unknown model_type 'mamba' (supported: llama,")


def test_a_known_family_the_language_cannot_say_yet_says_what_it_lacks():
    message = _refused({**tiny_config(transformers, "gemma2").to_dict(), "model_type": "gemma3"})
    assert message.startswith("model_type: 'gemma3': a vision-language model") and "gemma3_text" in message


@pytest.mark.parametrize("model_type, field", [("deepseek_v3", "n_group / topk_group"), ("gpt_oss", "attention sinks")])
def test_moe_families_the_language_cannot_say_are_refused_naming_what_it_lacks(model_type, field):
    message = _refused({**tiny_config(transformers, "llama").to_dict(), "model_type": model_type})
    assert message.startswith(f"model_type: {model_type!r}: ") and field in message


@pytest.mark.parametrize(
    "change, path",
    [
        ({"rope_parameters": {"rope_type": "proportional", "rope_theta": 500000.0, "factor": 8.0}},
         "rope_parameters.rope_type"),
        ({"rope_parameters": {"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0, "beta_fast": 32}},
         "rope_parameters.beta_fast"),
        ({"quantization_config": {"bits": 4}}, "quantization_config"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"is_encoder_decoder": True}, "is_encoder_decoder"),
        ({"rope_scaling": {"type": "mrope", "mrope_section": [2, 2]}}, "rope_scaling.rope_type"),
    ],
)
def test_an_unsupported_field_is_one_line_naming_it(change, path):
    config = {**tiny_config(transformers, "llama").to_dict(), **change}
    assert _refused(config).startswith(f"{path}: ")


def test_layer_types_without_a_short_cycle_are_refused_naming_them():
    # Qwen2's max_window_layers: full layers first, then sliding ones; no cycle of <= 16 layers
    config = transformers.Qwen2Config(num_hidden_layers=20, use_sliding_window=True, sliding_window=16,
                                      max_window_layers=4).to_dict()
    assert _refused(config).startswith("layer_types: no cycle of at most 16 layers repeats to these 20")


def test_layer_types_in_turn_become_the_stacks_windows():
    config = tiny_config(transformers, "gemma2").to_dict()
    assert config["layer_types"] == ["sliding_attention", "full_attention"] * 2
    stack = design_from_config(config)["nodes"][1]["params"]
    assert stack["windows"] == [8, None] and stack["repeat"] == 4
    assert "window" not in stack["block"]["params"]["attention"]
    design = tensorcad.load(design_from_config(config))
    windows = [(a.window, layers) for a, layers in design.attentions()]
    assert windows == [(8, 2), (None, 2)]


def test_partial_rotary_is_refused_where_transformers_turns_every_feature():
    # Llama's rotary embedding never reads partial_rotary_factor; Phi-3's turns that part of each head (Phi-4-mini).
    config = tiny_config(transformers, "llama").to_dict()
    config["rope_parameters"] = {**config["rope_parameters"], "partial_rotary_factor": 0.5}
    assert _refused(config).startswith("rope_parameters.partial_rotary_factor: 0.5: this family's transformers code "
                                       "rotates every feature of a head")
    phi = tiny_config(transformers, "phi3").to_dict()
    phi["rope_parameters"] = {**phi["rope_parameters"], "partial_rotary_factor": 0.75}
    rope = design_from_config(phi)["nodes"][1]["params"]["block"]["params"]["attention"]["rope"]
    assert rope == {"theta": 10000.0, "rotary_dim": 12}  # three quarters of a 16-wide head


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "tensorcad.cli", *args], capture_output=True, text=True)


def test_import_hf_writes_a_design_from_a_directory(tmp_path):
    folder = tmp_path / "tiny-llama"
    folder.mkdir()
    tiny_config(transformers, "llama").save_pretrained(folder)
    out = tmp_path / "design.json"
    run = _cli("import-hf", str(folder), "--documents", "--positions", "-o", str(out))
    assert run.returncode == 0, run.stderr
    design = json.loads(out.read_text())
    assert design == import_hf(folder, documents=True, positions=True)
    # Named apart from the plain import (issue 33): the two designs' goldens must not share a name.
    assert design["name"] == "tiny-llama-documents-positions"
    assert set(design["inputs"]) == {"ids", "documents", "positions"}


def test_commands_take_a_config_where_they_take_a_design(tmp_path):
    path = tmp_path / "config.json"
    tiny_config(transformers, "mistral").to_json_file(path)
    run = _cli("analyze", str(path), "--json")
    assert run.returncode == 0, run.stderr
    want = tensorcad.analyze(tensorcad.load(import_hf(path)), tensorcad.OperatingPoint(seq=128)).to_json()
    assert json.loads(run.stdout) == want
    assert _cli("rules", str(tmp_path)).returncode == 0
    run = _cli("codegen", str(tmp_path))
    assert run.returncode == 0 and "def load_hf_state_dict(self, state_dict):" in run.stdout


def test_the_cli_refuses_a_bad_config_in_one_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**tiny_config(transformers, "llama").to_dict(), "model_type": "mamba"}))
    for command in (["import-hf", str(path)], ["analyze", str(path)]):
        run = _cli(*command)
        assert run.returncode == 2
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1 and "unknown model_type 'mamba'" in lines[0] and str(path) in lines[0], lines


def test_certify_takes_a_model_directory(tmp_path):
    # --positions (or --documents): the design checks on the imported design; without either, the
    # directory's own model is certified (tests/hf/test_certify_model_dir.py).
    tiny_config(transformers, "gpt2").save_pretrained(tmp_path)
    run = _cli("certify", str(tmp_path), "--positions", "--export", "--json")
    assert run.returncode == 0, run.stderr
    (result,) = json.loads(run.stdout)
    outcomes = {c["name"]: c["outcome"] for c in result["checks"]}
    assert result["passed"] and outcomes["export"] == "passed" and outcomes["rules"] == "passed"


def test_the_hf_package_imports_neither_torch_nor_transformers():
    code = ("import sys, tensorcad.hf, tensorcad.hf.weights, tensorcad.codegen; "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip() == "[]", run.stderr


@pytest.mark.parametrize("family", FAMILIES)
def test_generated_weight_loading_is_formatted_as_black_leaves_it(family):
    black = pytest.importorskip("black")
    source = tensorcad.generate(tensorcad.load(design_from_config(
        tiny_config(transformers, family).to_dict(), documents=True, positions=True)))
    assert "HF_WEIGHTS = (" in source and "def from_pretrained(cls, directory" in source
    assert black.format_str(source, mode=black.Mode()) == source


# Shaped like the config.json files on the Hub (older transformers wrote rope_theta,
# rope_scaling, torch_dtype, n_ctx, auto_map, task_specific_params): they import as written.
HUB_FILES = {
    "Meta-Llama-3-8B": {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
        "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 8192,
        "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
        "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 500000.0,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.40.0.dev0",
        "use_cache": True, "vocab_size": 128256,
    },
    "Phi-3-mini-4k-instruct": {
        "_name_or_path": "Phi-3-mini-4k-instruct", "architectures": ["Phi3ForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "auto_map": {"AutoConfig": "configuration_phi3.Phi3Config"},
        "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu", "hidden_size": 3072,
        "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 4096, "model_type": "phi3",
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
        "original_max_position_embeddings": 4096, "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05,
        "rope_scaling": None, "rope_theta": 10000.0, "sliding_window": 2047, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "transformers_version": "4.40.2", "use_cache": True, "vocab_size": 32064,
    },
    "gpt2": {
        "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
        "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
        "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1, "summary_activation": None,
        "summary_first_dropout": 0.1, "summary_proj_to_labels": True, "summary_type": "cls_index",
        "summary_use_proj": True, "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
        "vocab_size": 50257,
    },
}


@pytest.mark.parametrize("name", HUB_FILES)
def test_hub_shaped_files_import(name, tmp_path):
    (tmp_path / name).mkdir()
    (tmp_path / name / "config.json").write_text(json.dumps(HUB_FILES[name]))
    design = tensorcad.load(import_hf(tmp_path / name))
    assert design.name == name
    if name == "Meta-Llama-3-8B":
        assert tensorcad.analyze(design, OPERATING_POINTS[1]).to_json()["params"] == \
            tensorcad.analyze(tensorcad.load("llama-3-8b"), OPERATING_POINTS[1]).to_json()["params"]


def test_a_llama_3_1_hub_file_imports_its_rope_scaling():
    # Meta-Llama-3.1-8B's config.json: Llama 3's shapes, a 131,072 context, rope_scaling of type llama3.
    config = {**HUB_FILES["Meta-Llama-3-8B"], "max_position_embeddings": 131072, "rope_scaling": {
        "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192, "rope_type": "llama3"}}
    design = tensorcad.load(design_from_config(config, name="llama-3-8b"))
    rope = design.nodes[1].children[0].child("attention").child("rope_q").params
    assert rope["theta"] == 500000.0 and rope["scaling"] == {
        "type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_context": 8192}
    assert design.context == 131072
    op = tensorcad.OperatingPoint(seq=8192, packing=tensorcad.Packing(mean=1024, spread=1.0))
    # the scaling turns the angles only: the figures are Llama 3 8B's at the same operating point
    assert tensorcad.analyze(design, op).to_json() == tensorcad.analyze(tensorcad.load("llama-3-8b"), op).to_json()


@pytest.mark.parametrize("family, change, path", [
    ("stablelm", {"qk_layernorm": True}, "qk_layernorm"),  # a LayerNorm per head
    ("cohere", {"use_qk_norm": True}, "use_qk_norm"),
    ("gemma3_text", {"use_bidirectional_attention": True}, "use_bidirectional_attention"),
    ("gemma3_text", {"rope_parameters": {"sliding_attention": {"rope_type": "proportional"},
                                         "full_attention": {"rope_type": "default"}}},
     "rope_parameters.sliding_attention.rope_type"),
    ("smollm3", {"no_rope_layers": [1, 0, 2, 1]}, "no_rope_layers"),  # zeros and ones only
    ("starcoder2", {"hidden_act": "relu"}, "hidden_act"),
    ("granite", {"logits_scaling": 0.0}, "logits_scaling"),
])
def test_what_a_newer_family_has_that_the_language_cannot_say_is_one_line_naming_it(family, change, path):
    config = {**tiny_config(transformers, family).to_dict(), **change}
    assert _refused(config).startswith(f"{path}: ")


def test_llama_3_1s_saved_config_imports_its_llama3_scaling(tmp_path):
    # A saved config sorts its keys ('factor' before 'rope_type'): the type is read first all the same.
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=2, rope_parameters={
                                          "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                          "original_max_position_embeddings": 8192})
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())["rope_parameters"]
    assert list(saved)[0] != "rope_type"  # the order that once named 'factor' first
    want = {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_context": 8192}
    rope = tensorcad.load(import_hf(tmp_path)).nodes[1].children[0].child("attention").child("rope_q").params
    assert rope["theta"] == 500000.0 and rope["scaling"] == want
    older = {k: v for k, v in saved.items() if k != "rope_theta"}  # older files: rope_scaling beside rope_theta
    design = design_from_config({**config.to_dict(), "rope_parameters": None, "rope_theta": 5e5,
                                 "rope_scaling": older})
    rope = tensorcad.load(design).nodes[1].children[0].child("attention").child("rope_q").params
    assert rope["theta"] == 500000.0 and rope["scaling"] == want


def test_the_supported_families_are_the_same_list_in_the_docs_the_help_and_the_refusal(capsys):
    from pathlib import Path

    from tensorcad.cli import main
    from tensorcad.hf import SUPPORTED

    assert "gemma2" in SUPPORTED
    docs = (Path(__file__).parents[2] / "docs" / "huggingface.md").read_text()
    assert f"(supported: {', '.join(SUPPORTED)})" in docs
    assert all(f"| `{family}` |" in docs for family in SUPPORTED)
    with pytest.raises(SystemExit):
        main(["import-hf", "--help"])
    assert f"model_type {', '.join(SUPPORTED)}" in " ".join(capsys.readouterr().out.split())
