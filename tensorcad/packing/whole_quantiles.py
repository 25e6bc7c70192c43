"""A rising quantile function rounded to whole tokens at every stratum, evaluated at a fraction of them.

A corpus of 131,072 documents of mean 64 has a couple of hundred distinct
lengths: rounded, the quantile is a staircase, and between two strata of
the same length every stratum has that length too. So the quantile is
evaluated on a coarse grid and refined (8 times finer a level) only in the
gaps whose two ends differ; a gap whose ends agree is filled with their
length: 131,072 strata of mean 64 (spread 0.5) take 3 ms instead of 43.
The editor's chart draws eight corpora an edit, and the gamma quantile was
nearly half of what a spread edit took.

Exact, not an interpolation, where the computed quantile rises with the
stratum: then a stratum between two of the same length has that length. It
could differ only if the solver's error (scipy's ``gammaincinv``: about 1e-13
relative) outgrew the rise between neighbouring strata right at a rounding
boundary, which a gap's agreeing ends would then hide; a gap whose ends are
NaN never agrees, so it is evaluated stratum by stratum as before. For the
gamma, neighbouring strata's quantiles differ by at least 2.5 spread / count
of themselves (x times the density is at most sqrt(shape / 2 pi)), which
``document_lengths`` keeps 1,000 times that error or refines nothing.
``tests/packing/test_whole_quantiles.py`` holds the result to evaluating every
stratum, bit for bit, from a spread of 1e-4 to 10, means of 0.2 to 2**24
tokens and counts up to 300,000.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

COARSEST = 4096  # strata between the first grid's points
FINER = 8  # each level divides the stride by this
# The range of lengths overstates the distinct ones (the long tail skips most integers), so refining is
# tried up to a range of count / 4; past that nearly every stratum has a length of its own and is evaluated
# (refining those costs 2-5% more than evaluating them all, measured at 32,000 strata).
REFINE_BELOW = 4


def whole_quantiles(quantile: Callable[[np.ndarray], np.ndarray], strata: np.ndarray,
                    refine: bool = True) -> np.ndarray:
    """``max(floor(quantile(strata) + 0.5), 1)`` (floats) for rising ``strata``, as if every one were evaluated.

    ``refine=False``: every stratum evaluated, for a quantile not known to rise faster than its error.
    """
    count = len(strata)

    def whole(at: np.ndarray) -> np.ndarray:
        return np.maximum(np.floor(quantile(strata[at]) + 0.5), 1)

    if not refine or count <= 2 * COARSEST:
        return whole(np.arange(count))
    first, last = whole(np.array([0, count - 1]))
    if not (last - first + 1) * REFINE_BELOW < count:  # NaN too: evaluated stratum by stratum
        return whole(np.arange(count))
    at = np.unique(np.r_[np.arange(0, count, COARSEST), count - 1])
    value = whole(at)
    stride = COARSEST
    while stride > 1:
        stride //= FINER
        unequal = (value[:-1] != value[1:]) & (np.diff(at) > 1)
        if not unequal.any():
            break
        lo, hi = at[:-1][unequal], at[1:][unequal]
        inside = (hi - lo - 1) // stride  # lo + stride, lo + 2 stride, ... short of hi
        step = np.arange(int(inside.sum())) - np.repeat(np.cumsum(inside) - inside, inside) + 1
        new = np.repeat(lo, inside) + stride * step
        at, value = np.concatenate([at, new]), np.concatenate([value, whole(new)])
        order = np.argsort(at, kind="stable")
        at, value = at[order], value[order]
    # Every gap left has ends that agree: a stratum takes the value at or before it.
    return value[np.searchsorted(at, np.arange(count), side="right") - 1]
