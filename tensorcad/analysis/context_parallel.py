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
(``tiles._decide``, or the same count in closed form for document-causal
masks) summed by rank. Per-document chunks cut blocks, so its blocks are
counted on the reordered layout itself (``_per_document``), for masks that
are causal and/or same-document.

This module holds the per-row figures; ``context_parallel_report`` turns
them into the report's section. Importing it imports no more than numpy: the
operating point (and so the CLI's parser) holds a ``ContextParallel``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tensorcad.errors import TensorcadError, check_integer

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
        """Refuse a row this sharding cannot split into whole blocks a rank, in one line."""
        n = self.size
        if self.shard == "per-document":
            return  # documents and the row are padded to fit
        if self.shard == "headtail":
            if seq % (2 * n):
                raise TensorcadError("cp.size", f"head-tail cuts the row in 2 x {n} = {2 * n} chunks, "
                                                f"which does not divide {seq:,} tokens")
            if (seq // (2 * n)) % block:
                raise TensorcadError("cp.size", f"head-tail chunks of {seq // (2 * n):,} tokens are not whole "
                                                f"{block}-token blocks; the engine counts blocks for whole-block chunks")
            return
        if seq % n:
            raise TensorcadError("cp.size", f"{n} ranks do not divide the row of {seq:,} tokens")
        if (seq // n) % block:
            raise TensorcadError("cp.size", f"each rank's {seq // n:,} tokens are not whole {block}-token blocks "
                                            f"(PyTorch's CP block mask needs the row divisible by {n} x {block})")

    def to_json(self) -> dict:
        return {"size": self.size, "shard": self.shard}


@dataclass(frozen=True)
class RankWork:
    """Each row's work on each rank: ``blocks`` (rows, N) non-empty tiles, ``kept`` (rows, N)
    scores kept (None when the mask is not counted exactly), ``tokens`` (rows,) the
    row's length after the sharding's padding."""

    blocks: np.ndarray
    kept: np.ndarray | None
    tokens: np.ndarray


def _mask_parts(attention, role_of):
    """(keep, (causal, same document, window or None)) when the mask is only those parts
    (a window only with causality: q - kv < W), else (keep, None)."""
    from tensorcad.design.expr import Const
    from tensorcad.design.expr.nodes import Binary, Compare, Param, Var

    from .tiles import _conjuncts, _is_causal, _is_same_document

    keep = attention.keep if attention.keep is not None else Const(True)
    causal = same = False
    window = None
    for part in _conjuncts(keep):
        if _is_causal(part):
            causal = True
        elif _is_same_document(part, role_of):
            same = True
        elif (isinstance(part, Compare) and part.op == "<" and part.left == Binary("-", Var("q"), Var("kv"))
              and isinstance(part.right, Param) and isinstance(part.right.value, int)):
            window = part.right.value if window is None else min(window, part.right.value)
        elif not (isinstance(part, Const) and part.value is True):
            return keep, None
    if window is not None and not causal:
        return keep, None
    return keep, (causal, same, window)


def _below(x: np.ndarray, window: int | None) -> np.ndarray:
    """Scores kept by the first x queries of a document under causality (and a window W):
    sum of min(p + 1, W) for p < x."""
    x = np.asarray(x, dtype=np.float64)
    if window is None:
        return x * (x + 1) / 2
    w = float(window)
    return np.where(x <= w, x * (x + 1) / 2, w * (w + 1) / 2 + (x - w) * w)


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
    from .rows import tensor_roles
    from .tiles import _decide

    role_of = dict(tensor_roles(attention))
    keep, kinds = _mask_parts(attention, role_of)
    seq, count = rows.seq, rows.count
    blocks = -(-seq // block)
    starts = np.arange(blocks, dtype=np.int64) * block
    if kinds is not None and kinds[0]:
        causal, same, window = kinds
        first = np.broadcast_to(np.zeros(blocks, dtype=np.int64), (count, blocks))
        if same:
            r = np.arange(count)[:, None]
            first = starts[None, :] - rows.at("positions", r, starts[None, :])
        if window is not None:
            first = np.maximum(first, starts[None, :] - window + 1)
        return np.arange(blocks)[None, :] - first // block + 1
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


def _ordered_pieces(rows) -> tuple[np.ndarray, np.ndarray]:
    """Every piece of every row in row order, from the boundaries themselves: (lengths, row
    of each). Each row's pieces run from 0 through its cuts to ``seq``, so they tile it."""
    b = rows.boundaries
    count, seq = rows.count, rows.seq
    per_row = np.diff(b.offsets)
    # A row's piece starts: 0, then its cuts; ends: its cuts, then seq.
    starts = np.insert(b.cuts.astype(np.int64), b.offsets[:-1], 0)
    ends = np.insert(b.cuts.astype(np.int64), b.offsets[1:], seq)
    return ends - starts, np.repeat(np.arange(count), per_row + 1)


def query_block_kept(attention, rows, block: int) -> np.ndarray | None:
    """(rows, query blocks): scores each query block keeps, exact; None unless the mask is
    causal (with a window or not) and/or same-document, the masks counted exactly."""
    from .rows import tensor_roles

    role_of = dict(tensor_roles(attention))
    _, kinds = _mask_parts(attention, role_of)
    if kinds is None:
        return None
    causal, same, window = kinds
    seq, count = rows.seq, rows.count
    edges = np.minimum(np.arange(-(-seq // block) + 1, dtype=np.int64) * block, seq)
    if not same:
        t = edges.astype(np.float64)
        below = _below(t, window) if causal else t * seq
        return np.broadcast_to(np.diff(below), (count, len(edges) - 1)).copy()
    # F(t): scores kept by the queries before offset t = the whole pieces before
    # t's document, plus the part of its own: sum of min(p + 1, W) (causal) or p * n.
    lengths, piece_row = _ordered_pieces(rows)
    n = lengths.astype(np.float64)
    whole = _below(n, window) if causal else n * n
    first_piece = np.searchsorted(piece_row, np.arange(count))
    before = np.concatenate([[0.0], np.cumsum(whole)])
    r = np.arange(count)[:, None]
    t = np.broadcast_to(np.minimum(edges, seq - 1)[None, :], (count, len(edges)))
    k = first_piece[:, None] + rows.at("documents", r, t)
    p = rows.at("positions", r, t).astype(np.float64)
    part = _below(p, window) if causal else p * n[k]
    below = before[k] - before[first_piece][:, None] + part
    below[:, -1] = before[first_piece + np.diff(np.append(first_piece, len(n)))] - before[first_piece]
    return np.diff(below, axis=1)


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


def rank_work(attention, rows, cp: ContextParallel, block: int) -> RankWork:
    """Every row's kept scores and computed blocks on each rank, exactly."""
    from .rows import tensor_roles

    _refuse_heads(attention)
    cp.fits(rows.seq, block)
    n = cp.size
    if cp.shard == "per-document":
        role_of = dict(tensor_roles(attention))
        _, kinds = _mask_parts(attention, role_of)
        if kinds is None or not kinds[1] or kinds[2] is not None:
            raise TensorcadError("cp.shard", "per-document sharding is counted for masks that keep "
                                             "causal attention within documents only (no window)")
        return _per_document(rows, n, block, causal=kinds[0])
    counts = query_block_counts(attention, rows, block)
    ranks = block_ranks(cp.shard, counts, n)
    kept = query_block_kept(attention, rows, block)
    return RankWork(blocks=_by_rank(counts, ranks, n).astype(np.int64),
                    kept=None if kept is None else _by_rank(kept, ranks, n),
                    tokens=np.full(rows.count, rows.seq, dtype=np.int64))


def row_work(attention, documents, cp: ContextParallel, block: int = 128) -> RankWork:
    """``rank_work`` of given (rows, seq) document ids: for tests and the harness."""
    from .rows import Rows

    return rank_work(attention, Rows.from_arrays(np.asarray(documents)), cp, block)


# -- per-document head-tail ----------------------------------------------------------


def padded_pieces(rows, size: int, block: int):
    """Each piece padded to a multiple of 2N, each row then padded to a multiple of N x block
    by one piece of padding alone: (lengths, padded lengths, row of each, padded row lengths)."""
    two = 2 * size
    lengths, piece_row = _ordered_pieces(rows)
    padded = -(-lengths // two) * two
    total = np.bincount(piece_row, weights=padded, minlength=rows.count).astype(np.int64)
    unit = math.lcm(size * block, two)
    row_len = -(-total // unit) * unit
    lengths = np.concatenate([lengths, np.zeros(rows.count, dtype=np.int64)])
    padded = np.concatenate([padded, row_len - total])
    piece_row = np.concatenate([piece_row, np.arange(rows.count)])
    order = np.lexsort((np.r_[np.zeros(len(padded) - rows.count), np.ones(rows.count)], piece_row))
    return lengths[order], padded[order], piece_row[order], row_len


def _per_document(rows, n: int, block: int, causal: bool) -> RankWork:
    """Per-document head-tail, counted on the reordered layout.

    Every rank's tokens are laid out alike: piece d's chunk r then its chunk
    2N-1-r, at local offset O_d (the sum of 2c over the pieces before; c the
    piece's chunk). Keys are gathered rank after rank, and a rank's segment is
    whole blocks, so a query block's key blocks are counted within each key
    rank sigma's segment: for a piece whose latest real query in the block is
    at position m (chunk K = m // c, e = m % c), rank sigma's kept keys of that
    piece are one run from O_d whose length, as sigma goes 0..N-1, is
    c up to K, e + 1 at K, nothing after (K < N); or, with tau = 2N-1-K,
    c up to tau, c + e + 1 at tau, 2c after (K >= N). Runs of the pieces in
    one query block are disjoint and sorted; a run shares its first block with
    the runs before it exactly when one of them reaches into that block.
    """
    length, padded, piece_row, row_len = padded_pieces(rows, n, block)
    c = padded // (2 * n)
    start_of_row = np.searchsorted(piece_row, np.arange(rows.count))
    before = np.concatenate([[0], np.cumsum(2 * c)])
    local = before[:-1] - before[start_of_row][piece_row]  # O_d
    kept = _per_document_kept(length, c, piece_row, rows.count, n, causal)
    # Whole rows at a time, so the (entries, N) arrays stay a few million cells.
    entries = np.bincount(piece_row, weights=-(-2 * c // block) + 1, minlength=rows.count)
    bounds = np.searchsorted(np.cumsum(entries), np.arange(1, rows.count + 1) * max(1, 4_000_000 // n))
    blocks = np.zeros((rows.count, n))
    lo = 0
    for hi in np.unique(np.clip(np.append(bounds, rows.count), 1, rows.count)):
        if hi <= lo:
            continue
        sel = np.flatnonzero((piece_row >= lo) & (piece_row < hi) & (c > 0))
        blocks[lo:hi] = _per_document_blocks(length[sel], c[sel], local[sel], piece_row[sel] - lo,
                                             hi - lo, n, block, causal)
        lo = hi
    return RankWork(blocks=blocks.astype(np.int64), kept=kept, tokens=row_len)


def _per_document_kept(length, c, piece_row, count, n, causal) -> np.ndarray:
    """(rows, N) scores kept: rank r's queries are chunk r and chunk 2N-1-r of every piece."""
    rank = np.arange(n)[None, :]
    L, c = length[:, None].astype(np.float64), c[:, None].astype(np.float64)
    out = np.zeros((len(length), n))
    for chunk in (rank, 2 * n - 1 - rank):
        lo, hi = np.minimum(chunk * c, L), np.minimum((chunk + 1) * c, L)
        out += (hi * (hi + 1) - lo * (lo + 1)) / 2 if causal else (hi - lo) * L
    cell = piece_row[:, None] * n + rank
    return np.bincount(cell.ravel(), weights=out.ravel(), minlength=count * n).reshape(count, n)


def _per_document_blocks(length, c, local, piece_row, count, n, block, causal) -> np.ndarray:
    # Entries: (piece, local query block) pairs where the piece's 2c local tokens meet the block.
    first_block = local // block
    spans = (local + 2 * c - 1) // block - first_block + 1
    piece = np.repeat(np.arange(len(c)), spans)
    ramp = np.arange(len(piece)) - np.repeat(np.cumsum(spans) - spans, spans)
    qblock = first_block[piece] + ramp
    # int32 throughout: offsets stay below 2**24 tokens and halve the memory traffic.
    i32 = np.int32
    L, cc, O = (x[piece].astype(i32)[:, None] for x in (length, c, local))
    qblock = qblock.astype(i32)
    u = np.maximum(qblock[:, None] * block, O) - O  # the block's first and last local token of the piece
    v = np.minimum(qblock[:, None] * block + block, O + 2 * cc) - 1 - O
    rho = np.arange(n, dtype=i32)[None, :]
    # The latest real query of the piece in the block, for each querying rank rho (columns).
    tail_lo = (2 * n - 1 - rho) * cc + np.maximum(u - cc, 0)
    tail_hi = (2 * n - 1 - rho) * cc + (v - cc)
    head_lo, head_hi = rho * cc + u, rho * cc + np.minimum(v, cc - 1)
    tail = (v >= cc) & (tail_lo <= L - 1)
    head = (u < cc) & (head_lo <= L - 1)
    m = np.where(tail, np.minimum(tail_hi, L - 1), np.where(head, np.minimum(head_hi, L - 1), -1))
    if not causal:
        m = np.where(m >= 0, L - 1, -1)  # any real query keeps the whole document
    real = m >= 0
    K, e = np.where(real, m // cc, 0), np.where(real, m % cc, 0)
    early = K < n
    tau = 2 * n - 1 - K

    def reach(run):  # blocks a run of this length from O touches
        return (O + run - 1) // block - O // block + 1

    total = np.where(early, K * reach(cc) + reach(e + 1),
                     tau * reach(cc) + reach(cc + e + 1) + (n - 1 - tau) * reach(2 * cc))
    total = np.where(real, total, 0)
    # Sharing: a run shares its first block (the query block's own, i, for every
    # piece after the block's first) when an earlier piece's run reaches i * block.
    # An early run's reach falls with sigma (ranks 0..P-1 reach), a late one's
    # rises (ranks S..N-1 reach).
    x = qblock[:, None] * block
    prefix = np.where(real & early & (O + cc - 1 >= x), K + (O + e >= x), 0)
    suffix = np.where(~real | early, n,
                      np.where(O + cc - 1 >= x, 0, np.where(O + cc + e >= x, tau,
                                                            np.where(O + 2 * cc - 1 >= x, tau + 1, n))))
    group = (piece_row[piece].astype(np.int64) * (int(qblock.max()) + 1) + qblock)[:, None]
    big = n + 1
    most = np.maximum.accumulate(prefix + group * big, axis=0)
    least = np.minimum.accumulate(suffix - group * big, axis=0)
    P = np.zeros_like(prefix)
    S = np.full_like(suffix, n)
    P[1:] = np.maximum(most[:-1] - group[1:] * big, 0)
    S[1:] = np.minimum(least[:-1] + group[1:] * big, n)
    upto = np.where(real, np.where(early, K + 1, n), 0)  # ranks sigma where this piece's run is not empty
    shared = np.where(S <= P, upto, np.minimum(upto, P) + np.maximum(upto - np.maximum(S, P), 0))
    new = total - shared
    cell = piece_row[piece][:, None] * n + rho
    return np.bincount(cell.ravel(), weights=new.ravel(), minlength=count * n).reshape(count, n)
