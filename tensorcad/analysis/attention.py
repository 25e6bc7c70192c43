"""Keys kept per query, measured by evaluating the mask at seeded, stratified samples.

Keys kept per query count the query itself: one 8,192-token causal document
keeps 4,096.5. The mean is over heads, rows and queries.

The sampler (``docs/packing.md``):

- 1,024 rows, the packing's own draw (``packing.draw_boundaries``, the rows
  ``packing.draw`` returns), or one document a row when packing is off;
- 16 queries a row at stratified positions: the sequence is cut into
  16 x 1,024 strata and each (row, query) takes one, jittered, so the
  queries of all rows together cover every position evenly; heads cycle over
  the strata the same way, so each head sees every part of the sequence;
- for each query, keys in bands that widen by four going back from it
  (widths 1, 4, 16, ...; the band of width 1 is the query itself, the last
  clipped at position 0), and likewise forward when the attention is not
  causal.

Each band is first decided whole by interval arithmetic (``design.expr.interval``):
a band the mask keeps entirely counts its width, one it removes counts
nothing. A band it cannot decide is split in four and decided again, while
that stays within a budget of a few boxes per band; a band still undecided
gets one key drawn uniformly from it, weighted by its width, and every such
key is evaluated at once with ``design.expr.evaluate``. For masks of
documents and positions nearly every band is decided, which is what takes
fixed 1,024-token documents at 8,192 from the half-percent noise of plain
band sampling to within 0.1% of the exact phase average.

The mean is a control-variate estimate (``_control_variate``). The control
is what a plain document-causal mask keeps at the same queries, position + 1;
its exact mean is taken over every window of the stream the rows were cut
from (``packing.Stream.causal_keys_every_window``, O(documents)), not over the
1,024 rows drawn. The rows' own noise (which long documents their edges cut:
+2.4% at 8,192 tokens in 1,024-token exponential documents at seed 0, 1.2%
across seeds) is thereby taken out; the sampler measures only what the mask
keeps beyond the control. For a document-causal mask that difference is 0 and
the figure is the exact count over every window: within 0.04% of
``closed_form.edge_corrected`` at every (T, mu, c) the tests hold it to (the
residue is the strata's rounding of the long tail), and never computed from
it.

A mask of positions alone (causal, a window, or nothing) is counted by
formula instead (``exact=True``); ``force_sampling`` makes it go through
the sampler, so tests can hold the sampler to the same numbers.
"""

from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass, replace

import numpy as np

from tensorcad.design.block_ranges import ranges_of
from tensorcad.design.expr import Box, Const, Env, Expr, Param, Read, evaluate, interval
from tensorcad.design.expr.nodes import Binary, Call, Compare, Unary, Var, children, tensor_reads, variables
from tensorcad.design.model import Attention
from tensorcad.errors import TensorcadError
from tensorcad.packing import MAX_SEQ, Packing

from .range_tiles import kept_from_ranges
from .rows import Rows, packed_rows, tensor_roles

ROWS = 1024
QUERIES = 16
BAND_GROWTH = 4
# Splitting undecided bands stops once it would evaluate more than this many
# boxes for each band first drawn; whatever is left undecided is sampled.
REFINE_BUDGET = 4


@dataclass(frozen=True)
class KeysEstimate:
    """Mean keys kept per query (over heads, rows and queries).

    ``stderr`` bounds the sampling noise of the keys drawn from undecided
    bands (each a Bernoulli trial, variance at most 1/4, times the band's
    width squared); it is 0 when every band was decided. ``samples`` counts
    the mask's evaluations: boxes decided plus keys drawn.
    """

    mean: float
    exact: bool
    stderr: float
    samples: int


def keys_per_query(attention: Attention, seq: int, packing: Packing | None = None,
                   seed: int = 0, force_sampling: bool = False) -> KeysEstimate:
    """Keys the attention keeps per query over rows of ``seq`` tokens under ``packing``."""
    if isinstance(seq, bool) or not isinstance(seq, numbers.Integral) or not 1 <= seq <= MAX_SEQ:
        raise TensorcadError("seq", f"expected an integer in [1, {MAX_SEQ}], got {seq!r}")
    roles = tensor_roles(attention)
    if not force_sampling and attention.mask is None and not roles:
        return KeysEstimate(_exact_positional(attention, int(seq)), True, 0.0, 0)
    # A mask that never reads h keeps the same scores in every head: one key for any head count,
    # so an edit of the heads asks nothing again (the draw and the strata do not depend on them).
    heads = attention.heads if attention.keep is not None and "h" in variables(attention.keep) else 1
    return _sampled(attention.keep, heads, tuple(sorted(roles.items())), attention.causal, int(seq), packing,
                    int(seed))


def _exact_positional(attention: Attention, seq: int) -> float:
    """Causal, window or nothing, one document a row: counted by the closed forms, not sampled.

    One formula for each, in `tensorcad.closed_form`; the closed-form check holds them to
    every score counted one by one (runtime.closed_form_check.brute_force_keys).
    """
    from tensorcad.packing import closed_form

    if attention.window is None:
        return closed_form.causal(seq) if attention.causal else closed_form.full(seq)
    return closed_form.window(seq, min(attention.window, seq), attention.causal)


def query_strata(rows: int, per_row: int, rng: np.random.Generator) -> np.ndarray:
    """Stratum index in [0, rows * per_row) of each (row, query), shape (rows, per_row).

    Query k of every row lies in the k-th of ``per_row`` equal slices of the
    sequence; within it, the rows take the slice's ``rows`` sub-strata in an
    order shuffled afresh for each k. Shuffling once for all k would put a
    row's queries at one offset from each slice's start, so with documents
    whose length divides the slice they would all sit at the same few ages.
    """
    sub = np.argsort(rng.random((per_row, rows)), axis=1).T
    return np.arange(per_row)[None, :] * rows + sub


@functools.lru_cache(maxsize=64)
def _sampled(keep: Expr | None, heads: int, roles: tuple[tuple[str, str], ...], causal: bool,
             seq: int, packing: Packing | None, seed: int) -> KeysEstimate:
    rows = packed_rows(seq, packing, seed, ROWS)
    keep = keep if keep is not None else Const(True)
    role_of = dict(roles)
    rng = np.random.default_rng(seed)

    strata = query_strata(rows.count, QUERIES, rng)
    total = rows.count * QUERIES
    query_row = np.repeat(np.arange(rows.count), QUERIES)
    weight = None
    if rows.real is None:
        t = np.floor((strata + rng.random(strata.shape)) * (seq / total)).astype(np.int64)
        query_t = np.minimum(t, seq - 1).ravel()
    else:
        # Queries over real tokens only: the same strata, of each row's real
        # part, and a query weighted by its row's real tokens, so the mean is
        # over real tokens rather than over rows.
        real = rows.real.astype(np.float64)
        fraction = ((strata + rng.random(strata.shape)) / total).ravel()
        query_t = np.minimum(np.floor(fraction * real[query_row]), real[query_row] - 1).astype(np.int64)
        weight = real[query_row] / real.mean()
    query_head = (strata % heads).ravel()
    ranges = ranges_of(keep, role_of, heads)
    if ranges is not None:
        # Every band of such a mask is decided (never a key drawn), so the bands would
        # add up to exactly this: each query's document met with its distance bounds.
        kept = kept_from_ranges(ranges, rows, query_row, query_head, query_t)
        mean, stderr = _control_variate(kept, rows, query_row, query_t, weight)
        return KeysEstimate(mean, False, stderr, len(kept))
    kept, evaluated = _kept_by_bands(keep, role_of, rows, query_row, query_head, query_t, seq,
                                     causal, rng)
    mean, stderr = _control_variate(kept, rows, query_row, query_t, weight)
    return KeysEstimate(mean, False, stderr, evaluated)


def _kept_by_bands(keep: Expr, role_of: dict[str, str], rows: Rows, query_row: np.ndarray,
                   query_head: np.ndarray, query_t: np.ndarray, seq: int, causal: bool,
                   rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """Keys each query keeps, by bands decided coarse to fine (keys drawn past the budget)."""
    points = _Queries(keep, role_of, rows, query_row, query_head, query_t)
    owner, lo, hi = _bands(query_t, seq, forward=not causal)
    kept = np.zeros(len(query_t))
    budget = REFINE_BUDGET * len(owner)
    evaluated = 0
    while len(owner):
        verdict = interval(keep, points.box(owner, lo, hi))
        evaluated += len(owner)
        width = hi - lo + 1
        always = np.broadcast_to(verdict.always, owner.shape)
        maybe = np.broadcast_to(verdict.maybe, owner.shape)
        kept += np.bincount(owner, weights=width * always, minlength=len(kept))
        # Indices, not boolean masks: numpy gathers by index many times faster.
        split = np.flatnonzero(maybe & (width > 1))
        if evaluated + 4 * len(split) > budget:
            # Out of budget: draw one key in each undecided band.
            draw_from = maybe
        else:
            draw_from = maybe & (width == 1)
        picked = np.flatnonzero(draw_from)
        if len(picked):
            key_t = lo[picked] + np.floor(rng.random(len(picked)) * width[picked]).astype(np.int64)
            value = _evaluate_at(keep, role_of, rows, query_row[owner[picked]],
                                 query_head[owner[picked]], query_t[owner[picked]], key_t)
            kept += np.bincount(owner[picked], weights=width[picked] * value, minlength=len(kept))
            evaluated += len(picked)
            if draw_from is maybe:
                break
        owner, lo, hi = _split(owner[split], lo[split], hi[split])
    return kept, evaluated


class _Queries:
    """The sampled queries, with what the mask reads at each query looked up once.

    A band's box gathers them by owner; only its keys' reads are looked up
    per band. Everything the interval interpreter reads is float64 already,
    so it converts nothing.
    """

    def __init__(self, keep: Expr, role_of: dict[str, str], rows: Rows, row: np.ndarray,
                 head: np.ndarray, t: np.ndarray):
        self.role_of, self.rows, self.row = role_of, rows, row
        bare = bare_variables(keep)
        self.b = row.astype(np.float64) if "b" in bare else None
        self.h = head.astype(np.float64) if "h" in bare else None
        self.q = t.astype(np.float64)
        self.reads = tensor_reads(keep)
        self.at_query = {port: rows.at(role_of[port], row, t).astype(np.float64)
                         for port, index in self.reads if index == "q"}

    def box(self, owner: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> Box:
        ranges = {}
        r = self.row[owner]
        for port, index in self.reads:
            if index == "q":
                value = self.at_query[port][owner]
                ranges[(port, index)] = (value, value)
            else:
                low, high = self.rows.over(self.role_of[port], r, lo, hi)
                ranges[(port, index)] = (low.astype(np.float64), high.astype(np.float64))
        q = self.q[owner]
        return Box(b=_gathered(self.b, owner), h=_gathered(self.h, owner), q=(q, q),
                   kv=(lo.astype(np.float64), hi.astype(np.float64)), reads=ranges)


def _gathered(values: np.ndarray | None, owner: np.ndarray):
    # An index the mask never reads outside a tensor read: any value will do.
    if values is None:
        return _UNREAD
    picked = values[owner]
    return picked, picked


_UNREAD = (np.float64(0.0), np.float64(0.0))


def bare_variables(expr: Expr) -> frozenset[str]:
    """The indices the expression reads other than as a tensor read's own (b, q|kv).

    A documents or positions read is looked up per row before the interval
    interpreter sees it, so ``doc(b, q)`` alone does not make a mask depend on
    ``b``: rows holding the same documents are then the same row.
    """
    found: set[str] = set()

    def visit(node: Expr) -> None:
        if isinstance(node, Var):
            found.add(node.name)
        elif isinstance(node, Read) and not node.table:
            return
        for child in children(node):
            visit(child)

    visit(expr)
    return frozenset(found)


def _control_variate(kept: np.ndarray, rows: Rows, query_row: np.ndarray,
                     query_t: np.ndarray, weight: np.ndarray | None = None) -> tuple[float, float]:
    """The mean with the noise of where the queries fell, and of which rows were drawn, taken out.

    The keys a plain document-causal mask keeps at the same queries,
    position + 1, are the control C. Its exact mean E[C] is known without
    sampling: over every window of the stream the rows were cut from
    (``Stream.causal_keys_every_window``; (T + 1)/2 for one document a row),
    else over the given rows' own pieces (sum of n(n + 1)/2). The regression
    estimator mean(K) - beta (mean(C) - E[C]) is the textbook control
    variate: unbiased up to O(1/n) for any mask, and the better the closer the
    mask is to the control. Taking E[C] over every window rather than the
    1,024 rows drawn removes the rows' own noise too (which long documents
    the row edges cut: 1.2% at 8 documents a row), leaving only that of the
    difference K - beta C, which is 0 for a document-causal mask.
    ``stderr`` is the standard error of the queries' residuals, K - beta C.
    ``weight`` (rows ending in padding) weighs each query by its row's real
    tokens, making every mean one over real tokens.
    """
    if weight is not None:
        return _weighted_control_variate(kept, rows, query_row, query_t, weight)
    control = rows.at("positions", query_row, query_t).astype(np.float64) + 1
    if rows.causal_keys is not None:
        expected = rows.causal_keys
    else:
        lengths, _ = rows.piece_lengths()
        expected = float((lengths * (lengths + 1.0) / 2).sum()) / (rows.count * rows.seq)
    spread = control - control.mean()
    # Sums of products, not ``@``: a BLAS dot on a shared machine can wait
    # milliseconds on its threads for a few thousand numbers.
    var_c = float((spread * spread).sum())
    beta = float((spread * (kept - kept.mean())).sum()) / var_c if var_c > 0 else 0.0
    residual = kept - beta * control
    n = len(kept)
    mean = float(kept.mean()) - beta * (float(control.mean()) - expected)
    stderr = float(residual.std(ddof=1)) / n**0.5 if n > 1 else 0.0
    return mean, stderr


def _weighted_control_variate(kept, rows: Rows, query_row, query_t, weight) -> tuple[float, float]:
    """``_control_variate`` with weighted means (the weights average 1)."""
    control = rows.at("positions", query_row, query_t).astype(np.float64) + 1
    expected = rows.causal_keys
    n = len(kept)
    total = float(weight.sum())
    c_mean = float((weight * control).sum()) / total
    k_mean = float((weight * kept).sum()) / total
    spread = control - c_mean
    var_c = float((weight * spread * spread).sum())
    beta = float((weight * spread * (kept - k_mean)).sum()) / var_c if var_c > 0 else 0.0
    residual = weight * (kept - beta * control)
    mean = k_mean - beta * (c_mean - expected)
    stderr = float(residual.std(ddof=1)) / n**0.5 if n > 1 else 0.0
    return mean, stderr


def _bands(query_t: np.ndarray, seq: int, forward: bool):
    """Bands of keys around each query: widths 1, 4, 16, ... back from it (and forward)."""
    owners, los, his = [], [], []
    index = np.arange(len(query_t))
    start, width = 0, 1
    while start <= seq - 1:
        hi = query_t - start
        lo = np.maximum(hi - width + 1, 0)
        ok = np.flatnonzero(hi >= 0)
        owners.append(index[ok]), los.append(lo[ok]), his.append(hi[ok])
        if forward and start > 0:  # the band of width 1 is the query, counted once
            lo = query_t + start
            hi = np.minimum(lo + width - 1, seq - 1)
            ok = np.flatnonzero(lo <= seq - 1)
            owners.append(index[ok]), los.append(lo[ok]), his.append(hi[ok])
        start += width
        width *= BAND_GROWTH
    return np.concatenate(owners), np.concatenate(los), np.concatenate(his)


def _split(owner: np.ndarray, lo: np.ndarray, hi: np.ndarray):
    """Each band cut in four (the last parts may be empty, and are dropped)."""
    part = -(-(hi - lo + 1) // BAND_GROWTH)
    # Filled a column at a time: much faster than broadcasting an (n, 4) sum.
    new_lo = np.empty((len(lo), BAND_GROWTH), dtype=np.int64)
    new_hi = np.empty_like(new_lo)
    for k in range(BAND_GROWTH):
        np.add(lo, k * part, out=new_lo[:, k])
        np.minimum(new_lo[:, k] + part - 1, hi, out=new_hi[:, k])
    new_lo, new_hi = new_lo.ravel(), new_hi.ravel()
    ok = np.flatnonzero(new_lo <= new_hi)
    return np.repeat(owner, BAND_GROWTH)[ok], new_lo[ok], new_hi[ok]


def _evaluate_at(keep: Expr, role_of: dict[str, str], rows: Rows, r, h, q, kv) -> np.ndarray:
    values = {(port, index): rows.at(role_of[port], r, q if index == "q" else kv)
              for port, index in tensor_reads(keep)}
    bound = bind_reads(keep, values)
    out = evaluate(bound, Env(b=r, h=h, q=q, kv=kv))
    return np.broadcast_to(out, np.shape(q)).astype(np.float64)


def bind_reads(expr: Expr, values: dict[tuple[str, str], np.ndarray]) -> Expr:
    """The expression with each tensor read replaced by its values at the sampled points.

    The rows are never materialised, so ``evaluate`` cannot index them; the
    reads are looked up first (``Rows.at``) and handed in as array-valued
    params named like the read, which ``evaluate`` returns as they are.
    """
    if isinstance(expr, Read) and not expr.table:
        index = expr.index[1].name  # type: ignore[union-attr]
        return Param(f"{expr.port}(b, {index})", values[(expr.port, index)])  # type: ignore[arg-type]
    if isinstance(expr, Unary):
        return replace(expr, operand=bind_reads(expr.operand, values))
    if isinstance(expr, (Binary, Compare)):
        return replace(expr, left=bind_reads(expr.left, values),
                       right=bind_reads(expr.right, values))
    if isinstance(expr, Call):
        return replace(expr, args=tuple(bind_reads(a, values) for a in expr.args))
    return expr


def clear_caches() -> None:
    """Forget every cached estimate and draw (benchmarks time the cold path)."""
    _sampled.cache_clear()
    packed_rows.cache_clear()
