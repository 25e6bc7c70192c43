"""A Hugging Face LlamaForCausalLM (tiny, random, CPU) with a block-diagonal 4D mask is isolated."""

from __future__ import annotations

import pytest
import torch

from tensorcad.testing import assert_isolated
from tensorcad.packing import draw

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def llama():
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=256)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def batch():
    documents, positions = draw(2, 128, 24, 1.0, seed=0)
    ids = torch.randint(0, 128, (2, 128), generator=torch.Generator().manual_seed(0))
    return ids, torch.from_numpy(documents), torch.from_numpy(positions)


def block_diagonal(documents: torch.Tensor) -> torch.Tensor:
    """(B, 1, T, T) additive mask: 0 where a query may see a key (same document, not later)."""
    T = documents.shape[1]
    keep = (documents[:, :, None] == documents[:, None, :]) & torch.ones(T, T, dtype=torch.bool).tril()
    return torch.zeros(keep.shape).masked_fill(~keep, torch.finfo(torch.float32).min)[:, None]


def test_collator_positions_are_the_engines(batch):
    # Each row's documents handed to DataCollatorWithFlattening as a feature list, one example each:
    # its position_ids and seq_idx are the batch's positions and documents.
    from tensorcad.packing import documents_of_seq_idx, row_lengths

    ids, documents, positions = batch
    collator = transformers.DataCollatorWithFlattening(return_seq_idx=True)
    for row, lengths in enumerate(row_lengths(documents.numpy())):
        starts = [sum(lengths[:i]) for i in range(len(lengths))]
        features = [{"input_ids": ids[row, s:s + n].tolist()} for s, n in zip(starts, lengths)]
        collated = collator(features)
        assert torch.equal(collated["input_ids"][0], ids[row])
        assert torch.equal(collated["position_ids"][0], positions[row])
        assert torch.equal(documents_of_seq_idx(collated["seq_idx"])[0], documents[row] - documents[row, 0])


def test_llama_with_the_document_mask_is_isolated(llama, batch):
    def model_fn(ids, documents, positions):
        return llama(input_ids=ids, attention_mask=block_diagonal(documents), position_ids=positions)

    (result,) = assert_isolated(model_fn, *batch, vocab=128)
    assert result.passed and result.perturbed == result.documents


def test_llama_without_the_mask_is_caught(llama, batch):
    def model_fn(ids, documents, positions):
        return llama(input_ids=ids, position_ids=positions)

    with pytest.raises(AssertionError, match=r"changing document \d+ of row \d+ moved document \d+"):
        assert_isolated(model_fn, *batch, vocab=128)
