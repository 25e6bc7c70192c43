"""Context parallelism: what each rank of a CP group computes for a packed row.

Under context parallelism a row of T tokens is split across N ranks: each
rank holds T/N queries and gathers every key and value, and the step waits
for the rank with the most attention. Four shardings (PyTorch's load
balancers in ``torch.distributed.tensor.experimental._context_parallel.
_load_balancer`` are the reference, ``tests/analysis/test_context_parallel_torch.py``):

- ``contiguous``: rank r holds tokens r*T/N .. (r+1)*T/N - 1 (no balancer);
- ``headtail`` (``_HeadTailLoadBalancer``): the row is cut in 2N chunks and
  rank r holds chunks r and 2N-1-r;
- ``per-document`` (``_PerDocumentHeadTailLoadBalancer``, Megatron's and
  TransformerEngine's THD split): every document is padded to a multiple of
  2N, cut in 2N chunks and rank r holds chunks r and 2N-1-r of each; the
  row is then padded to a multiple of N x 128 (PyTorch's CP block mask needs
  whole blocks a rank). Padding keeps and is kept by nothing;
- ``ptrr`` (``_PTRRLoadBalancer``): query blocks sorted by their count of
  non-empty key blocks are dealt to ranks in a snake (0..N-1, N-1..0, ...).

A rank's work is counted as the kernel does it: each of its query blocks
against every key block of the gathered (reordered) keys, a block computed
whole when it holds a kept score. Contiguous, head-tail and PTRR move whole
query blocks (head-tail only when a chunk is whole blocks, which is
required), so a rank computes exactly the blocks those query blocks compute
in the unsharded row: the engine's per-query-block decisions
(``tiles._decide``, or the same count in closed form for causal masks with
documents and windows) summed by rank. Per-document chunks cut blocks, so its
blocks are counted on the reordered layout itself
(``context_parallel_documents``), for same-document masks, causal or not,
with a sliding window or not.

This module holds the per-row figures; ``context_parallel_report`` turns
them into the report's section. Importing it imports no more than numpy: the
operating point (and so the CLI's parser) holds a ``ContextParallel``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tensorcad.errors import TensorcadError, check_integer

from .documents import below, per_document

SHARDINGS = ("contiguous", "headtail", "per-document", "ptrr")
DEFAULT_SHARD = "headtail"  # PyTorch's default balancer (_create_default_load_balancer)
MAX_SIZE = 1024


@dataclass(frozen=True)
class ContextParallel:
    """``size`` ranks split each training row; ``shard`` says which rank holds which token."""

    size: int
    shard: str = DEFAULT_SHARD

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", check_integer(self.size, "cp.size", 1, MAX_SIZE))
        if self.shard not in SHARDINGS:
            raise TensorcadError("cp.shard", f"unknown sharding {self.shard!r} ({', '.join(SHARDINGS)})")

    def fits(self, seq: int, block: int) -> None:
        """Refuse a row this sharding cannot split into whole blocks a rank, in one line naming sizes that fit."""
        n = self.size
        if self.shard == "per-document":
            return  # documents and the row are padded to fit
        if falls_back(self, seq):
            return  # PyTorch's default balancer becomes none: the contiguous chunks are counted
        if _splits(self.shard, n, seq, block):
            return
        if self.shard == "headtail":
            why = (f"head-tail chunks of {seq // (2 * n):,} tokens are not whole {block}-token blocks; "
                   "the engine counts blocks for whole-block chunks")
        elif seq % n:
            why = f"{n} ranks do not divide the row of {seq:,} tokens"
        else:
            why = (f"each rank's {seq // n:,} tokens are not whole {block}-token blocks "
                   f"(PyTorch's CP block mask needs the row divisible by {n} x {block})")
        sizes = [k for k in range(2, MAX_SIZE + 1) if _splits(self.shard, k, seq, block)]
        fit = (f"; {self.shard} splits {seq:,} tokens over {', '.join(map(str, sizes[:8]))} ranks" if sizes
               else f"; no rank count splits {seq:,} tokens {self.shard} into whole {block}-token blocks")
        raise TensorcadError("cp.size", why + fit)

    def to_json(self) -> dict:
        return {"size": self.size, "shard": self.shard}


def falls_back(cp: ContextParallel, seq: int) -> bool:
    """Whether PyTorch's default balancer (head-tail) becomes none for this row and shards it contiguously.

    ``_create_default_load_balancer`` returns None unless the row divides into 2N
    chunks, and ``context_parallel()`` then shards each buffer as DTensor does,
    torch.chunk's pieces of ceil(T/N) tokens, without a word.
    """
    return cp.shard == "headtail" and seq % (2 * cp.size) != 0


def _splits(shard: str, n: int, seq: int, block: int) -> bool:
    """Whether ``n`` ranks split a row of ``seq`` tokens ``shard``-wise into whole blocks a rank (or chunk)."""
    chunks = 2 * n if shard == "headtail" else n
    return seq % chunks == 0 and (seq // chunks) % block == 0


@dataclass(frozen=True)
class RankWork:
    """Each row's work on each rank: ``blocks`` (rows, N) non-empty tiles, ``kept`` (rows, N)
    scores kept (None when the mask is not counted exactly), ``tokens`` (rows,) the
    row's length after the sharding's padding."""

    blocks: np.ndarray
    kept: np.ndarray | None
    tokens: np.ndarray
    document_padding: np.ndarray | None = None  # (rows,) of the padding, what documents take to 2N multiples
    undivisible: np.ndarray | None = None  # (rows,) per-document only: pieces whose length 2N does not divide
    pieces: np.ndarray | None = None  # (rows,) per-document only: the row's document pieces


def _mask_parts(attention, role_of):
    """(keep, (causal, same document, window or None)) when the mask is only those parts
    (a window only with causality: q - kv < W), else (keep, None)."""
    from tensorcad.design.expr import Const
    from tensorcad.design.expr.nodes import Binary, Compare, Param, Var

    from tensorcad.design.masks import conjuncts, is_causal, is_same_document

    keep = attention.keep if attention.keep is not None else Const(True)
    causal = same = False
    window = None
    for part in conjuncts(keep):
        if is_causal(part):
            causal = True
        elif is_same_document(part, role_of):
            same = True
        elif (isinstance(part, Compare) and part.op == "<" and part.left == Binary("-", Var("q"), Var("kv"))
              and isinstance(part.right, Param) and isinstance(part.right.value, int)):
            window = part.right.value if window is None else min(window, part.right.value)
        elif not (isinstance(part, Const) and part.value is True):
            return keep, None
    if window is not None and not causal:
        return keep, None
    return keep, (causal, same, window)


def _refuse_heads(attention) -> None:
    from tensorcad.design.expr import variables

    if attention.keep is not None and "h" in variables(attention.keep):
        raise TensorcadError(attention.path, "the mask differs by head; PyTorch's CP load balancers "
                                             "need one mask for every head")


def query_block_counts(attention, rows, block: int) -> np.ndarray:
    """(rows, query blocks): key blocks each query block computes (full + partial).

    Causal masks, with or without documents and windows, in closed form: a
    query keeps the keys from max(its document's start, q - W + 1) to itself,
    a bound that never falls along the row, so query block i computes the key
    blocks from the one holding its first query's bound up to itself; held to
    ``tiles._decide`` in the tests. Any other mask goes through
    ``tiles._decide``, every query block of every row.
    """
    from ..rows import tensor_roles
    from ..tiles import _decide

    role_of = dict(tensor_roles(attention))
    keep, kinds = _mask_parts(attention, role_of)
    seq, count = rows.seq, rows.count
    blocks = -(-seq // block)
    starts = np.arange(blocks, dtype=np.int64) * block
    if kinds is not None and kinds[0]:
        return causal_block_counts(kinds, rows, starts, np.minimum(starts + block, seq), block)
    if kinds is not None and not kinds[1]:
        return np.full((count, blocks), blocks, dtype=np.int64)
    out = np.empty((count, blocks), dtype=np.int64)
    step = max(1, 65536 // blocks)  # rows a pass, to bound the interpreter's arrays
    for lo in range(0, count, step):
        hi = min(lo + step, count)
        row = np.repeat(np.arange(lo, hi), blocks)
        qb = np.tile(np.arange(blocks), hi - lo)
        full, partial = _decide(keep, role_of, rows, row, np.zeros_like(row), qb, block, seq)
        out[lo:hi] = (full + partial).reshape(hi - lo, blocks)
    return out


def causal_block_counts(kinds, rows, starts: np.ndarray, ends: np.ndarray, block: int) -> np.ndarray:
    """(rows, query blocks): key blocks computed by the query blocks [starts, ends) of a causal mask.

    A query keeps the keys from max(its document's start, q - W + 1) to itself, a
    bound that never falls along the row: the block computes the key blocks from
    the one holding its first query's bound to the one holding its last query.
    """
    _, same, window = kinds
    first = np.broadcast_to(np.zeros(len(starts), dtype=np.int64), (rows.count, len(starts)))
    if same:
        r = np.arange(rows.count)[:, None]
        first = starts[None, :] - rows.at("positions", r, starts[None, :])
    if window is not None:
        first = np.maximum(first, starts[None, :] - window + 1)
    return (ends[None, :] - 1) // block - first // block + 1


def _ordered_pieces(rows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every piece of every row in row order, from the boundaries themselves: (lengths, row
    of each, whether it is a row's padding). Each row's pieces run from 0 through its cuts
    to ``seq``, so they tile it; a padded row's last piece is its padding (``padding``
    on the boundaries, where the packing pads rows), which keeps no real score."""
    b = rows.boundaries
    count, seq = rows.count, rows.seq
    per_row = np.diff(b.offsets)
    # A row's piece starts: 0, then its cuts; ends: its cuts, then seq.
    starts = np.insert(b.cuts.astype(np.int64), b.offsets[:-1], 0)
    ends = np.insert(b.cuts.astype(np.int64), b.offsets[1:], seq)
    padding = np.zeros(len(starts), dtype=bool)
    padded = getattr(b, "padding", None)
    if padded is not None:
        last = np.cumsum(per_row + 1) - 1
        padding[last] = np.asarray(padded) > 0
    return ends - starts, np.repeat(np.arange(count), per_row + 1), padding


def query_block_kept(attention, rows, block: int) -> np.ndarray | None:
    """(rows, query blocks): scores each query block keeps, exact; None unless the mask is
    causal (with a window or not) and/or same-document, the masks counted exactly."""
    edges = np.minimum(np.arange(-(-rows.seq // block) + 1, dtype=np.int64) * block, rows.seq)
    prefix = kept_before(attention, rows, edges)
    return None if prefix is None else np.diff(prefix, axis=1)


def kept_before(attention, rows, edges: np.ndarray) -> np.ndarray | None:
    """(rows, edges): scores kept by the queries before each edge (0 <= edge <= seq), exact;
    None unless the mask is causal (with a window or not) and/or same-document."""
    from ..rows import tensor_roles

    role_of = dict(tensor_roles(attention))
    _, kinds = _mask_parts(attention, role_of)
    if kinds is None:
        return None
    causal, same, window = kinds
    seq, count = rows.seq, rows.count
    edges = np.asarray(edges, dtype=np.int64)
    if not same:
        t = edges.astype(np.float64)
        prefix = below(t, window) if causal else t * seq
        return np.broadcast_to(prefix, (count, len(edges))).copy()
    # F(t): scores kept by the queries before offset t = the whole pieces before
    # t's document, plus the part of its own: sum of min(p + 1, W) (causal) or p * n.
    lengths, piece_row, padding = _ordered_pieces(rows)
    n = lengths.astype(np.float64)
    whole = np.where(padding, 0.0, below(n, window) if causal else n * n)
    first_piece = np.searchsorted(piece_row, np.arange(count))
    before = np.concatenate([[0.0], np.cumsum(whole)])
    r = np.arange(count)[:, None]
    t = np.broadcast_to(np.minimum(edges, seq - 1)[None, :], (count, len(edges)))
    k = first_piece[:, None] + rows.at("documents", r, t)
    p = rows.at("positions", r, t).astype(np.float64)
    part = np.where(padding[k], 0.0, below(p, window) if causal else p * n[k])
    prefix = before[k] - before[first_piece][:, None] + part
    row_total = before[first_piece + np.diff(np.append(first_piece, len(n)))] - before[first_piece]
    return np.where(edges[None, :] >= seq, row_total[:, None], prefix)


def ptrr_ranks(counts: np.ndarray, size: int) -> np.ndarray:
    """(rows, query blocks) -> the rank PTRR deals each query block to.

    Blocks in descending order of work (ties in order of position, as a
    stable sort keeps them) are dealt in rounds of ``size``: even rounds to
    ranks 0..N-1, odd rounds back from N-1 (a snake).
    """
    rows, blocks = counts.shape
    order = np.argsort(-counts, axis=1, kind="stable")
    k = np.arange(blocks)
    slot, turn = k % size, (k // size) % 2
    rank_at = np.where(turn == 0, slot, size - 1 - slot)
    out = np.empty_like(order)
    np.put_along_axis(out, order, np.broadcast_to(rank_at, order.shape), axis=1)
    return out


def block_ranks(shard: str, counts: np.ndarray, size: int) -> np.ndarray:
    """(rows, query blocks): the rank holding each whole query block (not per-document)."""
    rows, blocks = counts.shape
    i = np.arange(blocks)
    if shard == "contiguous":
        return np.broadcast_to(i // (blocks // size), counts.shape)
    if shard == "headtail":
        chunk = i // (blocks // (2 * size))
        return np.broadcast_to(np.where(chunk < size, chunk, 2 * size - 1 - chunk), counts.shape)
    if shard == "ptrr":
        return ptrr_ranks(counts, size)
    raise ValueError(shard)


def _by_rank(values: np.ndarray, ranks: np.ndarray, size: int) -> np.ndarray:
    rows = values.shape[0]
    cell = np.arange(rows)[:, None] * size + ranks
    return np.bincount(cell.ravel(), weights=values.ravel().astype(np.float64),
                       minlength=rows * size).reshape(rows, size)


def rank_work(attention, rows, cp: ContextParallel, block: int, ranks: np.ndarray | None = None) -> RankWork:
    """Every row's kept scores and computed blocks on each rank, exactly; ``ranks`` (rows, query
    blocks) deals PTRR's blocks where another mask set the layout."""
    from ..rows import tensor_roles

    _refuse_heads(attention)
    cp.fits(rows.seq, block)
    n = cp.size
    if falls_back(cp, rows.seq):
        return _contiguous_chunks(attention, rows, n, block)
    if cp.shard == "per-document":
        role_of = dict(tensor_roles(attention))
        _, kinds = _mask_parts(attention, role_of)
        if kinds is None or not kinds[1]:
            raise TensorcadError("cp.shard", "per-document sharding is counted for masks that keep "
                                             "attention within documents (causal, windowed or not) only")
        lengths, piece_row, padding = _ordered_pieces(rows)
        # The sharding lays out the row's documents afresh: a padded row's own padding goes.
        lengths, piece_row = lengths[~padding], piece_row[~padding]
        blocks, kept, tokens, padding = per_document(lengths, piece_row, rows.count, n, block,
                                                     causal=kinds[0], window=kinds[2])
        undivisible = np.bincount(piece_row, weights=lengths % (2 * n) != 0, minlength=rows.count)
        return RankWork(blocks=blocks, kept=kept, tokens=tokens, document_padding=padding,
                        undivisible=undivisible, pieces=np.bincount(piece_row, minlength=rows.count))
    counts = query_block_counts(attention, rows, block)
    if ranks is None or cp.shard != "ptrr":
        ranks = block_ranks(cp.shard, counts, n)
    kept = query_block_kept(attention, rows, block)
    return RankWork(blocks=_by_rank(counts, ranks, n).astype(np.int64),
                    kept=None if kept is None else _by_rank(kept, ranks, n),
                    tokens=np.full(rows.count, rows.seq, dtype=np.int64))


def _contiguous_chunks(attention, rows, n: int, block: int) -> RankWork:
    """PyTorch's fallback: rank r holds torch.chunk's piece r, ceil(T/N) tokens from r·ceil(T/N).

    Its queries are cut in blocks from its own first token, so they are counted
    for causal masks in closed form (``causal_block_counts``); kept scores at
    the chunk edges (``kept_before``).
    """
    from ..rows import tensor_roles

    seq = rows.seq
    _, kinds = _mask_parts(attention, dict(tensor_roles(attention)))
    if kinds is None or not kinds[0]:
        raise TensorcadError("cp.size", f"PyTorch's default balancer becomes none at {seq:,} tokens (not divisible "
                                        f"by 2 x {n}); the contiguous chunks it leaves are counted for causal "
                                        "masks only")
    chunk = -(-seq // n)
    edges = np.minimum(np.arange(n + 1) * chunk, seq)
    blocks = np.zeros((rows.count, n), dtype=np.int64)
    for r in range(n):
        starts = np.arange(edges[r], edges[r + 1], block, dtype=np.int64)
        if len(starts):
            ends = np.minimum(starts + block, edges[r + 1])
            blocks[:, r] = causal_block_counts(kinds, rows, starts, ends, block).sum(axis=1)
    before = kept_before(attention, rows, edges)
    return RankWork(blocks=blocks, kept=np.diff(before, axis=1), tokens=np.full(rows.count, seq, dtype=np.int64))


def row_work(attention, documents, cp: ContextParallel, block: int = 128) -> RankWork:
    """``rank_work`` of given (rows, seq) document ids: for tests and the harness."""
    from ..rows import Rows

    return rank_work(attention, Rows.from_arrays(np.asarray(documents)), cp, block)
