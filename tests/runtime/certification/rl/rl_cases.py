"""RL batches and loops written out by hand for the rl certificates' tests: packed and padded batches, and
the loss functions frameworks write (TRL 1.16's GRPO branches, verl's agg_loss), each with its planted twin."""

from __future__ import annotations

import torch

from tensorcad.packing import positions_of


def packed_batch(rows: list[list[int]], pad: int = 0) -> dict:
    """Packed rows of sequences (their lengths), each row padded by ``pad`` tokens the loss does not count."""
    width = max(sum(r) for r in rows) + pad
    documents = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for r, lengths in enumerate(rows):
        at = 0
        for d, n in enumerate(lengths):
            documents[r, at:at + n] = d
            mask[r, at:at + n] = 1
            at += n
        documents[r, at:] = len(lengths)  # the padding run: a document of its own, no loss token
    ids = (torch.arange(documents.numel()).reshape(documents.shape) * 7 + 3) % 50
    return {"input_ids": ids, "position_ids": positions_of(documents), "loss_mask": mask}


def padded_batch(lengths: list[int], width: int | None = None) -> dict:
    """One sequence a row, right-padded (TRL's completion_mask layout)."""
    width = width or max(lengths)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for r, n in enumerate(lengths):
        mask[r, :n] = 1
    return {"completion_ids": torch.ones_like(mask), "completion_mask": mask}


def sequences_of(inputs: dict):
    """(row, first, end) of each sequence with a loss token, read from position_ids as a packed loop reads them."""
    mask = inputs.get("loss_mask", inputs.get("completion_mask"))
    out = []
    if "position_ids" not in inputs:
        return [(r, 0, mask.shape[1]) for r in range(mask.shape[0]) if mask[r].any()]
    positions = inputs["position_ids"]
    for r in range(positions.shape[0]):
        starts = (positions[r] == 0).nonzero().flatten().tolist() + [positions.shape[1]]
        for a, b in zip(starts, starts[1:]):
            if mask[r, a:b].any():
                out.append((r, a, b))
    return out


def tiny_llama(seed: int = 0):
    """A 2-layer Llama of hidden 32 on CPU, float32, eval mode: packing by restarting position_ids (sdpa)."""
    import transformers

    torch.manual_seed(seed)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                      attn_implementation="sdpa", bos_token_id=None, eos_token_id=None,
                                      pad_token_id=None)
    return transformers.LlamaForCausalLM(config).eval()


def token_batch(rows: list[list[int]], seed: int = 0) -> dict:
    """Packed rows of random tokens (vocab 64), no padding: input_ids, restarting position_ids, a loss mask."""
    batch = packed_batch(rows)
    g = torch.Generator().manual_seed(seed)
    batch["input_ids"] = torch.randint(1, 64, batch["input_ids"].shape, generator=g)
    return batch


def alone_logprobs(model, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One sequence run by itself, one call: (log p(token t+1 | ..t) for t < n-1, entropy at every t)."""
    with torch.no_grad():
        logits = model(input_ids=ids[None], position_ids=torch.arange(len(ids))[None]).logits[0].double()
    logp = torch.log_softmax(logits, -1)
    return logp[:-1].gather(-1, ids[1:, None])[:, 0], -(logp.exp() * logp).sum(-1)
