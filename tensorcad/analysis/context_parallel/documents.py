"""Per-document head-tail sharding, counted on the reordered layout.

Megatron's and TransformerEngine's THD split, and the picture in PyTorch's
``_PerDocumentHeadTailLoadBalancer`` docstring: every document piece of a row
is padded to a multiple of 2N and cut in 2N chunks, rank r holds chunks r and
2N-1-r of each, and the row is padded to a multiple of N x 128 (PyTorch's CP
block mask needs whole blocks a rank). Padding keeps and is kept by nothing.
Chunks cut blocks, so unlike the other shardings a rank's blocks are not the
unsharded row's: they are counted here on the layout the ranks really hold,
for same-document masks, causal (with a sliding window or not) or not (held to PyTorch's BlockMask of the
reordered row in ``tests/analysis/test_context_parallel_torch.py``).
"""

from __future__ import annotations

import math

import numpy as np


def below(x, window: int | None) -> np.ndarray:
    """Scores kept by the first x queries of a document under causality (and a window W):
    the sum of min(p + 1, W) for p < x."""
    x = np.asarray(x, dtype=np.float64)
    if window is None:
        return x * (x + 1) / 2
    w = float(window)
    return np.where(x <= w, x * (x + 1) / 2, w * (w + 1) / 2 + (x - w) * w)


def padded_pieces(lengths: np.ndarray, piece_row: np.ndarray, count: int, size: int, block: int):
    """Each piece padded to a multiple of 2N, each row then padded to a multiple of N x block
    by one piece of padding alone: (lengths, padded lengths, row of each, padded row lengths)."""
    two = 2 * size
    padded = -(-lengths // two) * two
    total = np.bincount(piece_row, weights=padded, minlength=count).astype(np.int64)
    unit = math.lcm(size * block, two)
    row_len = -(-total // unit) * unit
    lengths = np.concatenate([lengths, np.zeros(count, dtype=np.int64)])
    padded = np.concatenate([padded, row_len - total])
    piece_row = np.concatenate([piece_row, np.arange(count)])
    order = np.lexsort((np.r_[np.zeros(len(padded) - count), np.ones(count)], piece_row))
    return lengths[order], padded[order], piece_row[order], row_len


def per_document(lengths: np.ndarray, piece_row: np.ndarray, count: int, n: int, block: int,
                 causal: bool, window: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
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

    A sliding window (causal, q - kv < W) breaks the runs' common start; there
    each key rank is counted in turn (``_windowed_blocks``), N times the work.
    """
    to_documents = np.bincount(piece_row, weights=-lengths % (2 * n), minlength=count)
    length, padded, piece_row, row_len = padded_pieces(lengths, piece_row, count, n, block)
    c = padded // (2 * n)
    start_of_row = np.searchsorted(piece_row, np.arange(count))
    before = np.concatenate([[0], np.cumsum(2 * c)])
    local = before[:-1] - before[start_of_row][piece_row]  # O_d
    kept = _per_document_kept(length, c, piece_row, count, n, causal, window)
    # Whole rows at a time, so the (entries, N) arrays stay a few million cells.
    entries = np.bincount(piece_row, weights=-(-2 * c // block) + 1, minlength=count)
    bounds = np.searchsorted(np.cumsum(entries), np.arange(1, count + 1) * max(1, 4_000_000 // n))
    blocks = np.zeros((count, n))
    lo = 0
    for hi in np.unique(np.clip(np.append(bounds, count), 1, count)):
        if hi <= lo:
            continue
        sel = np.flatnonzero((piece_row >= lo) & (piece_row < hi) & (c > 0))
        args = (length[sel], c[sel], local[sel], piece_row[sel] - lo, hi - lo, n, block)
        blocks[lo:hi] = (_per_document_blocks(*args, causal) if window is None
                         else _windowed_blocks(*args, window))
        lo = hi
    return blocks.astype(np.int64), kept, row_len, to_documents


def _per_document_kept(length, c, piece_row, count, n, causal, window=None) -> np.ndarray:
    """(rows, N) scores kept: rank r's queries are chunk r and chunk 2N-1-r of every piece.

    Scores kept by a piece's first x queries: x(x + 1)/2 (causal) or x L; a chunk's
    share is the difference at its real edges min(kc, L)."""
    L = length[:, None].astype(np.float64)
    edges = np.minimum(np.arange(2 * n + 1)[None, :] * c[:, None].astype(np.float64), L)
    kept_below = below(edges, window) if causal else edges * L
    chunk = np.diff(kept_below, axis=1)
    per_rank = chunk[:, :n] + chunk[:, :n - 1:-1]  # chunks r and 2N-1-r
    cell = piece_row[:, None] * n + np.arange(n)[None, :]
    return np.bincount(cell.ravel(), weights=per_rank.ravel(), minlength=count * n).reshape(count, n)


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


def _windowed_blocks(length, c, local, piece_row, count, n, block, window) -> np.ndarray:
    """Blocks of a causal sliding window within documents, key rank by key rank.

    A querying rank's queries of a piece in a block are at most two ranges (in
    its head chunk and its tail chunk); each keeps the keys from its first
    query's position - W + 1 to its last, so the kept keys are at most two
    position ranges. Key rank sigma holds chunk sigma (local O_d ..) and chunk
    2N-1-sigma (local O_d + c ..) of the piece, so each range meets it in at
    most two runs: four runs a piece, in local order, counted as above.
    """
    first_block = local // block
    spans = (local + 2 * c - 1) // block - first_block + 1
    piece = np.repeat(np.arange(len(c)), spans)
    ramp = np.arange(len(piece)) - np.repeat(np.cumsum(spans) - spans, spans)
    qblock = first_block[piece] + ramp
    L, cc, O = (x[piece][:, None] for x in (length, c, local))
    u = np.maximum(qblock[:, None] * block, O) - O
    v = np.minimum(qblock[:, None] * block + block, O + 2 * cc) - 1 - O
    rho = np.arange(n)[None, :]
    head_lo, head_hi = rho * cc + u, np.minimum(rho * cc + np.minimum(v, cc - 1), L - 1)
    tail_lo = (2 * n - 1 - rho) * cc + np.maximum(u - cc, 0)
    tail_hi = np.minimum((2 * n - 1 - rho) * cc + (v - cc), L - 1)
    head = (u < cc) & (head_lo <= L - 1)
    tail = (v >= cc) & (tail_lo <= L - 1)
    # Key ranges [a1, b1] and [a2, b2] (empty where a > b), the second merged into the first where they touch.
    a1 = np.where(head, np.maximum(head_lo - window + 1, 0), np.maximum(tail_lo - window + 1, 0))
    b1 = np.where(head, head_hi, np.where(tail, tail_hi, -1))
    a2 = np.where(head & tail, np.maximum(tail_lo - window + 1, 0), 0)
    b2 = np.where(head & tail, tail_hi, -1)
    touch = (b2 >= a2) & (a2 <= b1 + 1)
    b1 = np.where(touch, b2, b1)
    b2 = np.where(touch, -1, b2)
    group = (piece_row[piece].astype(np.int64) * (int(qblock.max()) + 1) + qblock)[:, None, None]
    big = int((local + 2 * c).max()) // block + 2
    out = np.zeros((len(piece), n))
    for sigma in range(n):
        runs_lo, runs_hi = [], []
        for chunk, shift in ((sigma, 0), (2 * n - 1 - sigma, 1)):  # head region, then tail region
            lo_pos, hi_pos = chunk * cc, chunk * cc + cc - 1
            for a, b in ((a1, b1), (a2, b2)):
                lo, hi = np.maximum(a, lo_pos), np.minimum(b, hi_pos)
                base = O + shift * cc - chunk * cc
                runs_lo.append(np.where(lo <= hi, base + lo, 0))
                runs_hi.append(np.where(lo <= hi, base + hi, -1))
        lo = np.stack(runs_lo, axis=1)  # (entries, 4 runs, rho), in local order
        hi = np.stack(runs_hi, axis=1)
        real = hi >= lo
        start, end = lo // block, np.where(real, hi // block, -1)
        tagged = np.maximum.accumulate((np.where(real, end, -1) + group * big).reshape(-1, n), axis=0)
        previous = np.full_like(tagged, -1)
        previous[1:] = tagged[:-1]
        previous = np.maximum(previous.reshape(end.shape) - group * big, -1)
        out += np.where(real, end - np.maximum(start - 1, previous), 0).sum(axis=1)
    cell = piece_row[piece][:, None] * n + rho
    return np.bincount(cell.ravel(), weights=out.ravel(), minlength=count * n).reshape(count, n)
