"""The generated module's per-rank block mask under context parallelism: source text, like ``prelude``.

Under context parallelism each rank holds a slice of a *layout* of the row (which
position each slot holds, ``-1`` for padding) and gathers every rank's keys and values
in rank order; its BlockMask is its own queries against the gathered keys. PyTorch
builds it with ``create_block_mask`` over a rewritten mask_mod, every score evaluated
(``_create_cp_block_mask``). For a mask whose blocks its ranges decide exactly
(``design.block_ranges``: a document mask and bounds on ``q - kv``) this code builds it
from runs of the layout instead, exactly as create_block_mask would
(``tests/codegen/test_cp_block_mask.py`` holds it there, for every sharding the analysis
knows). ``prelude.ATTENTION_RUNTIME`` pastes it in after the block mask from ranges,
whose ``BLOCK`` and ``_per_head`` it uses; nothing here imports torch.
"""

from __future__ import annotations

CP_BLOCK_MASK = '''\
# ---------------------------------------------------------------------------
# Context parallelism: each rank's block mask, its queries against the gathered keys
#
# A layout (B or 1, L) names the position of the row each gathered slot holds,
# -1 for padding (which keeps, and is kept by, nothing). Rank r holds slots
# r * L/N .. (r + 1) * L/N - 1 and gathers all L keys and values in rank order.
# PyTorch's load balancers give such an index map (_generate_indices()), and
# so does tensorcad.runtime.building.cp_layout for the shardings tensorcad counts.
# ---------------------------------------------------------------------------


def cp_mask_mod(mask_mod, layout, rank, world_size):
    """mask_mod read through the layout: rank's local query q_idx, gathered key kv_idx."""
    local = layout.shape[-1] // world_size
    mine = layout[:, rank * local : (rank + 1) * local]

    def on_rank(b, h, q_idx, kv_idx):
        q, kv = mine[b, q_idx], layout[b, kv_idx]
        keep = mask_mod(b, h, q.clamp(min=0), kv.clamp(min=0))
        return keep & (q >= 0) & (kv >= 0)

    on_rank.__name__ = mask_mod.__name__
    return on_rank


def _cp_ranges_mask_mod(mask_mod, ranges, layout, rank, world_size):
    """cp_mask_mod of a mask with ranges, from tables a slot each: the same scores, kept by two lookups.

    A query slot keeps a key slot when both hold positions of one document at a
    distance in [-ahead, behind]: the mask the ranges state. Padding holds a
    document no slot shares. A partial block evaluates this at every score, so
    compiled FlexAttention's time follows the blocks, not the lookups.
    """
    local = layout.shape[-1] // world_size
    documents = ranges["documents"]
    at = layout.clamp(min=0)
    if documents is None:
        doc = torch.zeros_like(at)
    else:
        doc = documents.expand(layout.shape[0], -1).gather(1, at)
    low = int(doc.min()) if doc.numel() else 0
    key_doc = torch.where(layout >= 0, doc, torch.full_like(doc, low - 1))
    mine = slice(rank * local, (rank + 1) * local)
    query_doc = torch.where(layout >= 0, doc, torch.full_like(doc, low - 2))[:, mine]
    query_at = layout[:, mine].contiguous()
    query_doc = query_doc.contiguous()
    bounds = []
    for bound, sign in ((ranges["behind"], 1), (ranges["ahead"], -1)):
        if bound is None or bound == (None,):
            bounds.append(None)
        elif isinstance(bound, tuple) and len(bound) > 1:
            bounds.append(
                torch.tensor(bound, dtype=torch.int64, device=layout.device) * sign
            )
        else:
            bounds.append(sign * int(bound[0] if isinstance(bound, tuple) else bound))
    behind, ahead = bounds  # ahead negated: distance >= ahead

    def on_rank(b, h, q_idx, kv_idx):
        keep = query_doc[b, q_idx] == key_doc[b, kv_idx]
        distance = query_at[b, q_idx] - layout[b, kv_idx]
        if behind is not None:
            keep = keep & (
                distance <= (behind[h] if isinstance(behind, torch.Tensor) else behind)
            )
        if ahead is not None:
            keep = keep & (
                distance >= (ahead[h] if isinstance(ahead, torch.Tensor) else ahead)
            )
        return keep

    on_rank.__name__ = mask_mod.__name__
    return on_rank


def cp_block_mask(mask_mod, layout, rank, world_size, B, H, device=None):
    """Rank `rank`'s BlockMask over (L/N queries, L gathered keys) of the layout.

    What create_block_mask builds over cp_mask_mod, (B, H) as _block_mask would
    give them. A mask that carries `ranges` is decided from runs of the layout
    (_cp_block_mask_from_ranges), nothing evaluated score by score, and its
    partial blocks read the ranges' own mask (_cp_ranges_mask_mod, the same
    scores); any other is handed to create_block_mask over cp_mask_mod, as
    PyTorch's _create_cp_block_mask does.
    """
    layout = torch.as_tensor(layout, dtype=torch.int64, device=device)
    layout = layout.unsqueeze(0) if layout.dim() == 1 else layout
    if layout.shape[-1] % world_size:
        raise ValueError(
            f"{world_size} ranks do not divide a layout of {layout.shape[-1]} slots"
        )
    reads = tuple(getattr(mask_mod, "reads", ()))
    # Layouts that differ by row make the ranks' masks differ by row too.
    per_row = reads or getattr(mask_mod, "uses_batch", True) or layout.shape[0] > 1
    rows = B if per_row else None
    heads = H if getattr(mask_mod, "uses_head", True) else None
    layout = layout.expand(rows or 1, -1)
    ranges = getattr(mask_mod, "ranges", None)
    if ranges is not None and _cp_ranges_fit(ranges, layout):
        RUNTIME_PATHS["cp_block_mask"] = "from_ranges"
        on_rank = _cp_ranges_mask_mod(mask_mod, ranges, layout, rank, world_size)
        return _cp_block_mask_from_ranges(
            on_rank, ranges, layout, rank, world_size, heads or 1
        )
    RUNTIME_PATHS["cp_block_mask"] = "create_block_mask"
    on_rank = cp_mask_mod(mask_mod, layout, rank, world_size)
    L = layout.shape[-1]
    return create_block_mask(
        on_rank, rows, heads, L // world_size, L, device=layout.device
    )


def _cp_ranges_fit(ranges, layout):
    """Whether the ranges hold here: documents one row a layout row."""
    documents = ranges["documents"]
    if documents is None:
        return True
    return documents.dim() == 2 and documents.shape[0] in (1, layout.shape[0])


def _cp_pieces(slots, documents):
    """The slots cut into runs of consecutive positions of one document in one block.

    slots (R, n): a piece starts at a block's first slot, after padding, where
    the position does not follow the one before or the document changes.
    Padding makes no piece. Returns per piece (row, block, length, first
    position, document), each (pieces,).
    """
    real = slots >= 0
    at = slots.clamp(min=0)
    if documents is None:
        doc = torch.zeros_like(at)
    else:
        doc = documents.expand(slots.shape[0], -1).gather(1, at)
    slot = torch.arange(slots.shape[1], device=slots.device)
    follows = (
        real[:, :-1]
        & (slots[:, 1:] == slots[:, :-1] + 1)
        & (doc[:, 1:] == doc[:, :-1])
        & (slot[1:] % BLOCK != 0)
    )
    start = real.clone()
    start[:, 1:] &= ~follows
    piece = torch.cumsum(start.reshape(-1), 0) - 1  # the piece each real slot is in
    row, col = start.nonzero(as_tuple=True)
    length = torch.bincount(piece[real.reshape(-1)], minlength=row.numel())
    return row, col // BLOCK, length, slots[row, col], doc[row, col]


def _cp_pairs(q_row, q_doc, k_row, k_doc):
    """Every (query piece, key piece) pair of one row and one document, as index pairs.

    Scores of two documents are never kept, so no other pair can keep one.
    """
    if q_row.numel() == 0 or k_row.numel() == 0:
        empty = torch.zeros(0, dtype=torch.int64, device=q_row.device)
        return empty, empty
    low = torch.minimum(q_doc.min(), k_doc.min())
    span = torch.maximum(q_doc.max(), k_doc.max()) - low + 1
    k_key = k_row * span + (k_doc - low)
    q_key = q_row * span + (q_doc - low)
    order = torch.argsort(k_key, stable=True)
    keys = k_key[order]
    lo = torch.searchsorted(keys, q_key)
    count = torch.searchsorted(keys, q_key, right=True) - lo
    q_index = torch.repeat_interleave(
        torch.arange(q_key.numel(), device=q_key.device), count
    )
    before = torch.repeat_interleave(torch.cumsum(count, 0) - count, count)
    offset = torch.arange(q_index.numel(), device=q_key.device) - before
    return q_index, order[lo[q_index] + offset]


def _ordered(dense):
    """(counts, indices) of a (R, H, Qb, Kb) boolean block matrix, indices ascending."""
    counts = dense.sum(-1, dtype=torch.int32)
    indices = torch.argsort(dense.to(torch.int8), dim=-1, descending=True, stable=True)
    return counts, indices.to(torch.int32)


def _cp_block_mask_from_ranges(on_rank, ranges, layout, rank, world_size, heads):
    """The BlockMask create_block_mask would build over on_rank, decided from runs.

    The rank's query slots and all gathered key slots are cut into pieces: runs
    of consecutive positions of one document inside one block. A query piece
    [a, b] and a key piece [c, d] of the same document span the distances
    a - d .. b - c, every integer between; the pair keeps some score when that
    span meets [-ahead, behind], and every score when it lies inside. A block
    holds a kept score when one of its pairs does; it keeps every score when
    the pairs keeping every score cover BLOCK x BLOCK real query-key pairs (so
    no padding, one document, no slot past the end). Pairs are of one row and
    one document, a handful a block: nothing is evaluated score by score.
    """
    R, L = layout.shape
    S = L // world_size
    device = layout.device
    documents = ranges["documents"]
    q = _cp_pieces(layout[:, rank * S : (rank + 1) * S], documents)
    k = _cp_pieces(layout, documents)
    qi, ki = _cp_pairs(q[0], q[4], k[0], k[4])
    # No distance reaches 2 * (L + the row's length), so that bound is no bound.
    far = 2 * (L + int(layout.max()) + 1)
    behind = _per_head(ranges["behind"], far, device).view(1, -1)  # (1, H or 1)
    ahead = _per_head(ranges["ahead"], far, device).view(1, -1)
    a, c = q[3][qi], k[3][ki]
    b, d = a + q[2][qi] - 1, c + k[2][ki] - 1
    some = ((a - d)[:, None] <= behind) & ((b - c)[:, None] >= -ahead)  # (pairs, H)
    every = ((b - c)[:, None] <= behind) & ((a - d)[:, None] >= -ahead)
    H = heads
    Qb, Kb = -(-S // BLOCK), -(-L // BLOCK)
    h = torch.arange(H, device=device).view(1, -1)
    cell = ((q[0][qi].view(-1, 1) * H + h) * Qb + q[1][qi].view(-1, 1)) * Kb
    cell = (cell + k[1][ki].view(-1, 1)).expand(-1, H)  # (pairs, H)
    size = R * H * Qb * Kb
    hits = torch.zeros(size, dtype=torch.int32, device=device)
    hits.index_add_(0, cell[some], torch.ones_like(cell[some], dtype=torch.int32))
    pairs = (q[2][qi] * k[2][ki]).to(torch.int32).view(-1, 1).expand(-1, H)
    kept = torch.zeros(size, dtype=torch.int32, device=device)
    kept.index_add_(0, cell[every], pairs[every])
    full = (kept == BLOCK * BLOCK).view(R, H, Qb, Kb)
    partial = (hits > 0).view(R, H, Qb, Kb) & ~full
    kv_num_blocks, kv_indices = _ordered(partial)
    full_kv_num_blocks, full_kv_indices = _ordered(full)
    return BlockMask.from_kv_blocks(
        kv_num_blocks,
        kv_indices,
        full_kv_num_blocks,
        full_kv_indices,
        BLOCK_SIZE=BLOCK,
        mask_mod=on_rank,
        seq_lengths=(S, L),
    )


'''
