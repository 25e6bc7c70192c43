"""The generated module's block mask built from ranges: source text, like ``prelude``.

A mask whose blocks its ranges decide exactly (``design.block_ranges``: a document mask and
bounds on ``q - kv``) carries ``ranges``; the prelude's ``_block_mask`` then builds the
``BlockMask`` from each block's first and last position and document with this code,
instead of evaluating the mask at every score. ``prelude.ATTENTION_RUNTIME`` pastes it in
after ``_block_mask``; nothing here imports torch.
"""

from __future__ import annotations

BLOCK_MASK_FROM_RANGES = '''\
BLOCK = 128  # FlexAttention's default block: create_block_mask's BLOCK_SIZE


def _ranges_fit(ranges, rows, Q_LEN, KV_LEN):
    """Whether the ranges hold here: self-attention, documents one row a batch row."""
    documents = ranges["documents"]
    if Q_LEN != KV_LEN:
        return False
    if documents is None:
        return True
    return documents.dim() == 2 and tuple(documents.shape) == (rows, Q_LEN)


def _per_head(bound, unbounded, device):
    """A bound on q - kv as a (heads or 1, 1) integer tensor; None is `unbounded`."""
    values = bound if isinstance(bound, tuple) else (bound,)
    values = [unbounded if v is None else int(v) for v in values]
    return torch.tensor(values, dtype=torch.int64, device=device).view(-1, 1)


def _span_of_blocks(documents, seq):
    """Each block's least and greatest document id: (B, blocks) each.

    Ids never fall along a row, so these are the block's first and last; the
    minimum and maximum stay sound for any rows. The last block is padded with
    the row's last id, which adds no document to it.
    """
    B = documents.shape[0]
    blocks = -(-seq // BLOCK)
    pad = blocks * BLOCK - seq
    if pad:
        documents = torch.cat((documents, documents[:, -1:].expand(B, pad)), dim=1)
    per_block = documents.view(B, blocks, BLOCK)
    return per_block.amin(dim=-1).contiguous(), per_block.amax(dim=-1).contiguous()


def _kept_runs(behind, ahead, spans, SEQ, device):
    """Per query block, the key blocks it computes, as runs of block indices.

    Along a query block's keys each test holds on one run of key blocks:
    distances q - kv fall as the key block moves right, and document ids never
    fall. So some score is kept in blocks [lo, hi) and every score in the run
    [full_lo, full_hi) inside it, found by binary search: (B or 1, H or 1, Tb)
    each. The partial blocks are the run less the full ones.
    """
    starts = torch.arange(0, SEQ, BLOCK, device=device)
    ends = (starts + BLOCK - 1).clamp(max=SEQ - 1)
    q_lo, q_hi = starts.view(1, -1), ends.view(1, -1)  # query blocks, like key blocks
    # some q - kv in [-ahead, behind]: kv_hi >= q_lo - behind, kv_lo <= q_hi + ahead
    lo = torch.searchsorted(ends, q_lo - behind)  # (H or 1, Tb)
    hi = torch.searchsorted(starts, q_hi + ahead, right=True)
    # every q - kv inside: kv_lo >= q_hi - behind, kv_hi <= q_lo + ahead
    full_lo = torch.searchsorted(starts, q_hi - behind)
    full_hi = torch.searchsorted(ends, q_lo + ahead, right=True)
    lo, hi, full_lo, full_hi = (x.unsqueeze(0) for x in (lo, hi, full_lo, full_hi))
    if spans is not None:
        first, last = spans  # (B, Tb): each block's first and last document
        # blocks sharing a document with the query block: last >= its first, first <= its last
        lo = torch.maximum(lo, torch.searchsorted(last, first).unsqueeze(1))
        hi = torch.minimum(hi, torch.searchsorted(first, last, right=True).unsqueeze(1))
        # blocks wholly in the query block's one document d: first >= d, last <= d
        one = (first == last).unsqueeze(1)
        full_lo = torch.maximum(full_lo, torch.searchsorted(first, first).unsqueeze(1))
        full_hi = torch.where(
            one,
            torch.minimum(
                full_hi, torch.searchsorted(last, first, right=True).unsqueeze(1)
            ),
            torch.zeros_like(full_hi),
        )
    blocks = starts.numel()
    if SEQ % BLOCK:
        # create_block_mask pads the last block with masked scores, so a block
        # holding padding is never full there; nor is it here.
        full_hi = full_hi.clamp(max=blocks - 1)
        full_hi[..., -1] = 0
    hi = torch.maximum(hi, lo)
    full_lo = torch.minimum(torch.maximum(full_lo, lo), hi)
    full_hi = torch.maximum(torch.minimum(full_hi, hi), full_lo)
    return lo, hi, full_lo, full_hi


def _listed(lo, hi, full_lo, full_hi, shape):
    """(kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices) of the runs.

    Indices ascending, as create_block_mask lists them; entries past a row's
    count are never read (FlexAttention reads the first count), and are kept
    in range.
    """
    blocks = shape[-1]
    lo, hi, full_lo, full_hi = (
        x.expand(shape[:-1]).unsqueeze(-1) for x in (lo, hi, full_lo, full_hi)
    )
    step = torch.arange(blocks, device=lo.device)
    before = full_lo - lo  # partial blocks before the full run, then those after it
    partial = torch.where(step < before, lo + step, full_hi + step - before)
    full = full_lo + step
    counts = (before + hi - full_hi).squeeze(-1).to(torch.int32)
    full_counts = (full_hi - full_lo).squeeze(-1).to(torch.int32)
    return (
        counts,
        partial.clamp(max=blocks - 1).to(torch.int32),
        full_counts,
        full.clamp(max=blocks - 1).to(torch.int32),
    )


def _block_mask_from_ranges(mask_mod, ranges, B, H, Q_LEN, KV_LEN, device):
    """The BlockMask create_block_mask would build, decided per block from ranges.

    Per (query block, key block): q - kv spans q_lo - kv_hi .. q_hi - kv_lo, and
    the documents span their first .. last id. A block holds a kept score when
    the distances meet [-ahead, behind] and the documents overlap (skip it
    otherwise); it keeps every score when the distances lie inside and both
    blocks are one and the same document (computed whole, mask_mod unasked).
    Anything between is computed and masked by mask_mod. Why this is exact:
    `design/block_ranges.py` in tensorcad. A few binary searches a query block
    and a handful of tensor ops over the (B, H, T/128, S/128) index lists;
    nothing is evaluated score by score, nothing is compiled or sorted.
    """
    documents = ranges["documents"]
    spans = None if documents is None else _span_of_blocks(documents, Q_LEN)
    # No distance reaches 2 * Q_LEN, so that bound is no bound.
    behind = _per_head(ranges["behind"], 2 * Q_LEN, device)  # (H or 1, 1)
    ahead = _per_head(ranges["ahead"], 2 * Q_LEN, device)
    blocks = -(-Q_LEN // BLOCK)
    shape = (B or 1, H or 1, blocks, blocks)
    kv_side = _listed(*_kept_runs(behind, ahead, spans, Q_LEN, device), shape)
    # The q side is the kv side of the transposed mask: q - kv turned round,
    # the same documents. (create_block_mask sorts the dense blocks for it.)
    q_side = _listed(*_kept_runs(ahead, behind, spans, Q_LEN, device), shape)
    return BlockMask(
        seq_lengths=(Q_LEN, KV_LEN),
        kv_num_blocks=kv_side[0],
        kv_indices=kv_side[1],
        full_kv_num_blocks=kv_side[2],
        full_kv_indices=kv_side[3],
        q_num_blocks=q_side[0],
        q_indices=q_side[1],
        full_q_num_blocks=q_side[2],
        full_q_indices=q_side[3],
        BLOCK_SIZE=(BLOCK, BLOCK),
        mask_mod=mask_mod,
    )


'''
