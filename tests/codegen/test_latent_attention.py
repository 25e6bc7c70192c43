"""Multi-head latent attention (issue 44, for DeepSeek-V3): the language, its figures and its generated code,
held to transformers' DeepseekV3 with the same weights.

The design here is a tiny DeepSeek-V3 whose layers are all dense (first_k_dense_replace = the layers), so
that the attention is what differs from a Llama: q through a rank-16 latent, keys and values from a rank-8
one, 4 rotated features a head (interleaved, transformers' rope_interleave), values 8 wide beside q/k heads of
12. The test copies transformers' weights into the generated model by their names, which it writes itself.
"""

from __future__ import annotations

import pytest

from tensorcad import OperatingPoint, analyze
from tensorcad.design import load
from tensorcad.errors import TensorcadError

ATTENTION = {"heads": 4, "head_dim": 12, "value_dim": 8, "rope": {"theta": 10000.0, "interleaved": True},
             "latent": {"q_rank": 16, "kv_rank": 8, "rope_dim": 4}}


def design(attention=None, documents=False) -> dict:
    attention = dict(attention or ATTENTION)
    inputs = {"ids": {"role": "tokens"}}
    wires = {"x": "embed"}
    if documents:
        inputs.update(doc={"role": "documents"}, pos={"role": "positions"})
        wires.update(doc="doc", pos="pos")
        attention["mask"] = "doc(b, q) == doc(b, kv)"
    return {"name": "tiny-mla", "context": 64, "inputs": inputs, "nodes": [
        {"id": "embed", "kind": "embedding", "in": {"x": "ids"}, "params": {"vocab": 100, "dim": 32}},
        {"id": "layers", "kind": "stack", "in": wires, "params": {"repeat": 2, "block": {
            "kind": "transformer_block", "params": {"eps": 1e-6, "attention": attention, "mlp": {"hidden": 64}}}}},
        {"id": "norm", "kind": "rmsnorm", "in": {"x": "layers"}, "params": {"eps": 1e-6}},
        {"id": "head", "kind": "linear", "in": {"x": "norm"}, "params": {"out": 100}}], "output": "head"}


def deepseek():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.DeepseekV3Config(
        vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, q_lora_rank=16, kv_lora_rank=8, qk_rope_head_dim=4, qk_nope_head_dim=8,
        v_head_dim=8, first_k_dense_replace=2, max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=10000.0,
        rope_interleave=True, attention_bias=False, tie_word_embeddings=False, attn_implementation="eager",
        use_cache=False)
    model = transformers.DeepseekV3ForCausalLM(config).eval()
    for p in model.parameters():  # norms start at 1: move them, so a norm applied to the wrong tensor shows
        p.data.add_(0.1 * torch.randn_like(p))
    return model


NAMES = {"q_a": "q_a_proj", "q_a_norm": "q_a_layernorm", "q_b": "q_b_proj", "kv_a": "kv_a_proj_with_mqa",
         "kv_a_norm": "kv_a_layernorm", "kv_b": "kv_b_proj", "o": "o_proj"}


def transformers_name(ours: str) -> str:
    """Our generated module's parameter name -> transformers' DeepseekV3ForCausalLM's, written out here."""
    parts = ours.split(".")
    if parts[0] == "embed":
        return "model.embed_tokens.weight"
    if parts[0] == "norm":
        return "model.norm.weight"
    if parts[0] == "head":
        return "lm_head.weight"
    layer, module = parts[1], parts[2]
    if module == "attention_norm":
        return f"model.layers.{layer}.input_layernorm.weight"
    if module == "mlp_norm":
        return f"model.layers.{layer}.post_attention_layernorm.weight"
    if module == "attention":
        return f"model.layers.{layer}.self_attn.{NAMES[parts[3]]}.weight"
    return f"model.layers.{layer}.mlp.{parts[3]}_proj.weight"


def generated(reference):
    import torch

    from tensorcad.runtime import build

    model = build(load(design()), form="eager")
    theirs = reference.state_dict()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(theirs[transformers_name(name)])
    return model.eval()


def test_the_params_are_transformers_and_the_cache_is_the_latent():
    reference = deepseek()
    report = analyze(design(), OperatingPoint(seq=64))
    assert report.params.total == sum(p.numel() for p in reference.parameters())
    # a stream caches kv_rank + rope_dim = 12 numbers a token a layer, bf16: 64 x 12 x 2 layers x 2 bytes
    assert report.per_stream.kv_cache_bytes == 64 * 12 * 2 * 2
    # a score multiplies 12 features, a weighted sum 8: 2 x 32.5 keys x (12 + 8) x 4 heads x 2 layers
    assert report.flops.fwd_attention == pytest.approx(2 * 32.5 * (12 + 8) * 4 * 2)


def test_the_generated_model_equals_transformers_deepseek_v3_with_the_same_weights():
    import torch

    reference = deepseek()
    model = generated(reference)
    ids = torch.randint(0, 100, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        theirs = reference(input_ids=ids).logits
        ours = model(ids)
    assert (ours - theirs).abs().max().item() < 1e-5
    assert theirs.abs().max().item() > 0.1  # not two zeros compared


def test_packed_by_documents_each_equals_itself_alone():
    import torch

    from tensorcad.packing import positions_of
    from tensorcad.runtime import build

    torch.manual_seed(2)
    model = build(load(design(documents=True)), form="eager").eval()
    lengths = (7, 11, 6)
    ids = torch.randint(0, 100, (1, sum(lengths)))
    documents = torch.cat([torch.full((n,), d) for d, n in enumerate(lengths)])[None]
    with torch.no_grad():
        packed = model(ids, documents, positions_of(documents))
        start = 0
        for n in lengths:
            piece = ids[:, start:start + n]
            alone = model(piece, torch.zeros_like(piece), torch.arange(n)[None])
            assert (packed[:, start:start + n] - alone).abs().max().item() < 1e-5
            start += n


@pytest.mark.parametrize("change, path, words", [
    ({"kv_heads": 2}, "kv_heads", "a latent gives every head its own key and value"),
    ({"latent": {"kv_rank": 8, "rope_dim": 12}}, "latent.rope_dim", "leaves no unrotated feature"),
    ({"rope": None}, "rope", "give rope"),
    ({"qk_norm": {"eps": 1e-6}}, "qk_norm", "normalises its latents"),
    ({"latent": {"kv_rank": 8}}, "latent.rope_dim", "missing required param"),
    ({"latent": {"kv_rank": 8, "rope_dim": 4, "rank": 3}}, "latent.rank", "unknown param"),
    ({"latent": None}, "value_dim", "a latent attention's"),
])
def test_bad_latent_params_name_their_path(change, path, words):
    with pytest.raises(TensorcadError) as e:
        load(design({**ATTENTION, **change}))
    assert e.value.path == f"nodes[1].params.block.params.attention.{path}"
    assert words in str(e.value)
