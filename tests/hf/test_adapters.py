"""tensorcad.testing.adapters: adapt, call and hf_causal_lm, on real (tiny, random) transformers models and plain modules."""

from __future__ import annotations

import pytest
import torch

from tensorcad.testing import CertificateError, adapt, assert_gradients_isolated, assert_isolated, call, hf_causal_lm
from tensorcad.hf.adapters import document_mask, is_encoder
from tensorcad.errors import TensorcadError
from tensorcad.packing import draw

transformers = pytest.importorskip("transformers")

from hf_setups import block_diagonal, collated, tiny_model  # noqa: E402 - tests/hf is on sys.path


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama", "sdpa")


@pytest.fixture(scope="module")
def gpt2():
    return tiny_model("gpt2", "sdpa")


@pytest.fixture(scope="module")
def batch():
    documents, positions = draw(2, 96, 20, 1.0, seed=0)
    ids = torch.randint(0, 128, (2, 96), generator=torch.Generator().manual_seed(0))
    return ids, torch.from_numpy(documents), torch.from_numpy(positions)


class Generated(torch.nn.Module):
    """A model that already takes what the harness passes (a generated model's forward)."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(128, 8)

    def forward(self, ids, documents=None, positions=None):
        return self.embed(ids)


class TakesX(torch.nn.Module):
    def forward(self, x):
        return x


def test_a_callable_that_takes_the_harness_arguments_is_used_as_it_is():
    model = Generated()
    assert adapt(model) is model

    def model_fn(ids, documents, positions):
        return ids

    assert adapt(model_fn) is model_fn
    assert adapt(lambda *args: args[0]) is not None


def test_anything_else_is_refused_in_one_line_saying_what_to_wrap():
    with pytest.raises(TypeError) as caught:
        adapt(TakesX())
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("model_fn: TakesX(x) does not take (ids, documents, positions); wrap it:")
    assert "tensorcad.testing.call(model, ids='input_ids'" in message
    with pytest.raises(TypeError, match=r"model_fn: .*\(ids, documents\) does not take"):
        adapt(lambda ids, documents: ids)
    with pytest.raises(TypeError, match="expected a model or a callable, got int"):
        adapt(3)
    with pytest.raises(TypeError, match="TakesX"):  # assert_isolated refuses the same way, before any call
        assert_isolated(TakesX(), torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 4, dtype=torch.long))


def test_a_bare_llama_is_adapted_not_handed_the_documents_as_its_attention_mask(llama, batch):
    # Called positionally, Llama would take documents as attention_mask and "leak" where nothing does.
    ids, documents, positions = batch
    with pytest.raises(AssertionError):
        assert_isolated(lambda i, d, p: llama(i, d, p).logits, ids, documents, positions, vocab=128)
    (result,) = assert_isolated(llama, ids, documents, positions)
    assert result.passed and result.perturbed == result.documents


def test_a_bare_gpt2_is_adapted_instead_of_failing_in_its_cache(gpt2, batch):
    ids, documents, positions = batch
    with pytest.raises(Exception):
        gpt2(ids, documents, positions)  # what a positional guess does
    assert assert_isolated(gpt2, ids, documents)[0].passed  # positions derived from the documents


def test_the_adapter_carries_the_models_config_for_the_vocabulary(llama):
    model_fn = hf_causal_lm(llama)
    assert model_fn.config.vocab_size == 128 and model_fn.model is llama
    assert "hf_causal_lm(LlamaForCausalLM, packing='position_ids', call='trainer')" in repr(model_fn)


def test_position_ids_and_mask_packings_agree(llama, batch):
    ids, documents, positions = batch
    with torch.no_grad():
        a = hf_causal_lm(llama, packing="position_ids")(ids, documents, positions)
        b = hf_causal_lm(llama, packing="mask")(ids, documents, None)
        c = llama(input_ids=ids, attention_mask=block_diagonal(documents), position_ids=positions).logits
    assert (a - b).abs().max() < 1e-5 and (b - c).abs().max() == 0


def test_flash_kwargs_are_refused_only_where_transformers_would_attend_across_documents():
    # The evidence, each document run alone: sdpa ignores cu_seq_lens, yet a decoder called with them and the
    # collator's restarting position_ids (no mask, no cache) is kept apart by those positions; an encoder is not.
    from hf_setups import alone_gaps

    ids, documents, positions, batch = collated()
    flash = {k: batch[k] for k in ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")}
    llama, bert = tiny_model("llama", "sdpa"), tiny_model("bert", "sdpa")
    assert max(alone_gaps(llama, lambda i, d, p: llama(input_ids=i, position_ids=p, use_cache=False, **flash).logits,
                          ids, documents, positions)) < 1e-5
    assert min(alone_gaps(bert, lambda i, d, p: bert(input_ids=i, position_ids=p, **flash).logits,
                          ids, documents, positions)) > 1e-4  # every document, the first too, reads the others
    assert assert_isolated(hf_causal_lm(llama, packing="flash_kwargs"), ids, documents, positions).passed
    with pytest.raises(TensorcadError, match=r"packing: 'flash_kwargs' on BertForMaskedLM, an encoder under 'sdpa': "
                                             r"'sdpa' ignores cu_seq_lens .* use packing='mask'"):
        hf_causal_lm(bert, packing="flash_kwargs")
    with pytest.raises(TensorcadError, match=r"packing: unknown packing 'cu'"):
        hf_causal_lm(llama, packing="cu")
    with pytest.raises(TensorcadError, match=r"model: expected a transformers PreTrainedModel, got Generated"):
        hf_causal_lm(Generated())


def test_an_encoders_mask_has_no_tril_and_a_decoders_has():
    bert, llama = tiny_model("bert", "sdpa"), tiny_model("llama", "sdpa")
    assert is_encoder(bert) and not is_encoder(llama)
    documents = torch.tensor([[0, 0, 0, 1, 1]])
    keep = lambda m: (document_mask(m, documents)[0, 0] == 0).int().tolist()  # noqa: E731
    assert keep(bert) == [[1, 1, 1, 0, 0]] * 3 + [[0, 0, 0, 1, 1]] * 2
    assert keep(llama) == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [0, 0, 0, 1, 0], [0, 0, 0, 1, 1]]


def test_the_mask_keeps_mistrals_window_and_refuses_layers_that_differ():
    mistral = tiny_model("mistral", "sdpa")
    mistral.config.sliding_window = 2
    documents = torch.zeros(1, 4, dtype=torch.long)
    keep = (document_mask(mistral, documents)[0, 0] == 0).int().tolist()
    # transformers' sliding window keeps kv > q - window: two keys a query, itself included.
    assert keep == [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]
    qwen = tiny_model("qwen2", "sdpa")
    qwen.config.layer_types = ["sliding_attention", "full_attention"]
    with pytest.raises(TensorcadError, match=r"a 4D mask is shared by every layer: use packing='position_ids'"):
        hf_causal_lm(qwen, packing="mask")


def test_under_flex_attention_the_mask_is_a_block_mask_keeping_the_same_pairs():
    from torch.nn.attention.flex_attention import BlockMask

    sdpa = tiny_model("llama", "sdpa")
    flex = tiny_model("llama", "flex_attention")
    documents = torch.tensor([[0] * 5 + [1] * 7 + [2] * 4])
    block = document_mask(flex, documents)
    assert isinstance(block, BlockMask)
    T = documents.shape[1]
    q, kv = torch.arange(T)[:, None], torch.arange(T)[None, :]
    from_block = block.mask_mod(torch.tensor(0), torch.tensor(0), q, kv)
    assert torch.equal(from_block, document_mask(sdpa, documents)[0, 0] == 0)


def test_call_maps_the_harness_arguments_to_keywords(llama, batch):
    ids, documents, positions = batch
    model_fn = call(llama, ids="input_ids", positions="position_ids", output="logits", use_cache=False)
    with torch.no_grad():
        assert torch.equal(model_fn(ids, documents, positions), llama(input_ids=ids, position_ids=positions,
                                                                       use_cache=False).logits)
        assert torch.equal(model_fn(ids, documents, None), model_fn(ids, documents, positions))  # derived
    assert assert_isolated(model_fn, ids, documents, positions)[0].passed

    class Keywords(torch.nn.Module):
        def forward(self, tokens, segment_ids=None):
            return {"out": torch.nn.functional.one_hot(tokens, 128).float() + segment_ids[..., None]}

    fn = call(Keywords(), ids="tokens", documents="segment_ids", output="out")
    assert fn(ids, documents, None).shape == (2, 96, 128)
    with pytest.raises(TensorcadError, match=r"call: Keywords.forward takes no keyword 'position_ids'"):
        call(Keywords(), ids="tokens", positions="position_ids")
    with pytest.raises(TensorcadError, match=r"output: the model's result \(dict\) has no 'logits'"):
        call(Keywords(), ids="tokens", documents="segment_ids", output="logits")(ids, documents, None)


def test_collator_batch_in_the_harness_through_the_adapter():
    ids, documents, positions, batch = collated()
    model = tiny_model("qwen2", "eager")
    assert assert_isolated(hf_causal_lm(model), ids, documents, batch["position_ids"])[0].passed


# --- flash_kwargs: the collator's cu_seq_lens reaching an attention that reads them ---------------


def varlen_sdpa(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """A varlen attention registered with transformers' AttentionInterface: causal sdpa on each document
    that ``cu_seq_lens_q`` delimits (what FlashAttention's varlen kernel computes), no cross-document keys."""
    cu = kwargs["cu_seq_lens_q"].tolist()  # a KeyError here means the kwargs never arrived
    varlen_sdpa.seen.append({k: kwargs[k] for k in ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")})
    pieces = [torch.nn.functional.scaled_dot_product_attention(
        query[:, :, s:e], key[:, :, s:e], value[:, :, s:e], is_causal=True, scale=scaling, enable_gqa=True)
        for s, e in zip(cu[:-1], cu[1:])]
    return torch.cat(pieces, dim=2).transpose(1, 2).contiguous(), None


varlen_sdpa.seen = []


def test_flash_kwargs_reach_a_varlen_attention_as_the_collator_gives_them(batch):
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

    AttentionInterface.register("tensorcad_varlen", varlen_sdpa)
    AttentionMaskInterface.register("tensorcad_varlen", flash_attention_mask)
    rows = batch
    ids, documents, positions, batch = collated()
    model = tiny_model("llama", "tensorcad_varlen")
    model_fn = hf_causal_lm(model, packing="flash_kwargs")
    varlen_sdpa.seen.clear()
    with torch.no_grad():
        out = model_fn(ids, documents, positions)
    # Each layer received exactly the collator's keyword arguments.
    assert len(varlen_sdpa.seen) == 2
    for seen in varlen_sdpa.seen:
        for key in ("cu_seq_lens_q", "cu_seq_lens_k"):
            assert seen[key].dtype == batch[key].dtype and torch.equal(seen[key], batch[key])
        assert seen["max_length_q"] == batch["max_length_q"] and seen["max_length_k"] == batch["max_length_k"]
    # And the packed outputs are the collator's packing without cache, isolated.
    with torch.no_grad():
        reference = tiny_model("llama", "sdpa")(input_ids=ids, position_ids=positions, use_cache=False).logits
    assert (out - reference).abs().max() < 1e-5
    assert assert_isolated(model_fn, ids, documents, positions, boundaries=False).passed
    # Two rows are flattened into one (varlen kernels take no batch) and the outputs shaped back.
    with torch.no_grad():
        flat = model_fn(*rows)
        plain = hf_causal_lm(tiny_model("llama", "sdpa"))(*rows)
    assert flat.shape == plain.shape == (2, 96, 128) and (flat - plain).abs().max() < 1e-5


def whole_row_sdpa(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """A registered attention that reads neither its mask nor cu_seq_lens: causal over the whole flattened
    row, as a flash kernel called without its varlen arguments would be."""
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, is_causal=True, scale=scaling,
                                                           enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def _register(name, attention):
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

    AttentionInterface.register(name, attention)
    AttentionMaskInterface.register(name, flash_attention_mask)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_gradients_are_certified_through_flash_kwargs(family, batch):
    # The adapter flattens the batch to one row; the embedding that reads it is found, its gradient read
    # back row by row. Two rows of documents, the second beginning inside one.
    _register("tensorcad_varlen", varlen_sdpa)
    model = tiny_model(family, "tensorcad_varlen")
    result = assert_gradients_isolated(hf_causal_lm(model, packing="flash_kwargs"), *batch)
    assert result.passed and result.losses == result.documents > 2 and result.embedding == "model.embed_tokens"


def test_an_attention_that_ignores_cu_seq_lens_leaks_gradients_and_the_certificate_says_so(batch):
    _register("tensorcad_whole_row", whole_row_sdpa)
    model = tiny_model("llama", "tensorcad_whole_row").train()
    ids, documents, positions = batch
    # The reference, by hand: the flattened row's embeddings as a leaf, the loss on row 0's second document.
    embeds = model.model.embed_tokens(ids.reshape(1, -1)).detach().requires_grad_(True)
    logits = model(inputs_embeds=embeds, position_ids=positions.reshape(1, -1), use_cache=False).logits
    second = documents[0] == documents[0, -1]
    logits.reshape(*ids.shape, -1)[0][second].sum().backward()
    reached = embeds.grad.reshape(*ids.shape, -1).abs().amax(-1)
    assert reached[0][~second].max() > 0  # the gradient crosses into the documents before it
    model.eval()
    with pytest.raises(CertificateError, match=r"gradients cross documents\nthe loss on document \d+ of row \d+ has "
                                               r"gradient up to \S+ on the embeddings of document \d+"):
        assert_gradients_isolated(hf_causal_lm(model, packing="flash_kwargs"), *batch)


def test_a_compiled_model_is_recognised_by_what_it_compiles(llama):
    # torch.compile's wrapper forwards (*args, **kwargs): taken as it is, it would be called positionally.
    compiled = torch.compile(llama)  # compiles on first call; this test never calls it
    adapted = adapt(compiled)
    assert adapted.model is compiled and "hf_causal_lm(LlamaForCausalLM, compiled, packing='position_ids', call='trainer')" in repr(adapted)
    assert not is_encoder(compiled) and is_encoder(torch.compile(tiny_model("bert", "sdpa")))


@pytest.mark.slow
def test_a_compiled_llama_adapted_is_isolated(llama, batch):
    ids, documents, positions = batch
    compiled = torch.compile(llama)
    with torch.no_grad():
        assert (adapt(compiled)(ids, documents, positions) - hf_causal_lm(llama)(ids, documents, positions)).abs().max() < 1e-5
    assert assert_isolated(compiled, ids, documents, positions, sample=2, boundaries=False).passed


def test_an_encoder_is_refused_packed_position_ids_and_a_bare_encoder_gives_its_hidden_states():
    with pytest.raises(TensorcadError, match=r"packing: BertForMaskedLM is an encoder: .* use packing='mask'"):
        hf_causal_lm(tiny_model("bert", "sdpa"), packing="position_ids")
    config = tiny_model("bert", "sdpa").config
    torch.manual_seed(0)
    encoder = transformers.BertModel(config).eval()  # AutoModel's BERT: no head, last_hidden_state out
    ids, documents, positions, _ = collated()
    with torch.no_grad():
        hidden = adapt(encoder)(ids, documents, positions)
        alone = encoder(input_ids=ids[:, :9]).last_hidden_state  # document 0 is the first 9 tokens
    assert hidden.shape == (1, 160, 32) and (hidden[:, :9] - alone).abs().max() < 1e-5
    assert assert_isolated(encoder, ids, documents, positions, vocab=128, boundaries=False).passed
