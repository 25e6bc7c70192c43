"""Context parallelism: what each rank of a CP group computes for a packed row, and what the report says of it.

- ``ranks``: the shardings (contiguous, head-tail, per-document head-tail, PTRR),
  each rank's kept scores and blocks;
- ``documents``: per-document head-tail sharding, counted on the reordered layout;
- ``pytorch``: what PyTorch's context parallelism will do with an operating point;
- ``report``: the report's ``contextParallel`` section (each rank's work, the step's
  imbalance, the cost).

This face exports what ``tensorcad.analysis.context_parallel`` held when it was one module.
"""

from __future__ import annotations

from tensorcad.faces import lazy

_LAZY = {name: f".ranks:{name}" for name in (
    "SHARDINGS", "DEFAULT_SHARD", "MAX_SIZE", "ContextParallel", "RankWork", "falls_back", "query_block_counts",
    "causal_block_counts", "query_block_kept", "kept_before", "ptrr_ranks", "block_ranks", "rank_work", "row_work")}

__all__ = list(_LAZY)
__getattr__, __dir__ = lazy(__name__, _LAZY)
