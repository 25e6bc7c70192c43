"""A real context-parallel run: N processes on gloo, each rank's attention timed, held to the engine.

``python -m tensorcad.runtime.training.cp_run --world-size 4 --seq 8192 --pack 4096``
launches ``world_size`` processes (``torch.multiprocessing``, a ``torch.distributed``
group on gloo over 127.0.0.1), each running ``cp_rank.run_rank``: for every
sharding, its shard's attention with its own BlockMask after an all-gather of
keys and values, through PyTorch's own context-parallel API where it runs on CPU
(``_context_parallel_shard``, ``flex_cp_allgather``, ``context_parallel_unshard``).
The outputs are gathered and compared with the unsharded row's attention
(``maxDifference``), and each rank's attention is timed in turn, one thread a
rank, so the measured imbalance is the compute's and not the processes'
contention for the machine's cores.

Beside the measured slowest/mean stands what the engine predicts before
launch: ``slowestOverBalanced`` for these very rows (``analysis.row_work``: N x
the slowest rank's blocks over the row's own) and for the operating point (the
analysis's 1,024 rows). Times are ratios only: no figure here depends on how
fast the machine is.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import socket
import sys
import tempfile
from dataclasses import dataclass

import numpy as np

from tensorcad.errors import TensorcadError, check_integer, shown

from .cp_rank import RunSpec, batch, finished_mark

SCHEDULING = ("one thread a rank (torch.set_num_threads(1)); each rank's attention timed in turn while the "
              "others wait at a barrier, {repeats} rounds of every rank in turn, each rank's best counting")


@dataclass(frozen=True)
class ShardRun:
    """One sharding's run: what was measured, beside what the engine predicted."""

    shard: str
    max_difference: float  # largest |sharded - unsharded| over every output
    seconds: tuple[float, ...]  # each rank's attention, best of the repeats
    blocks: tuple[int, ...]  # each rank's computed blocks, from its BlockMask
    predicted: float  # slowestOverBalanced for these rows (the engine, before launch)
    predicted_max_over_mean: float  # the engine's slowest / mean rank for these rows
    analysis: float | None  # slowestOverBalanced of the operating point (1,024 rows), None if not counted

    @property
    def measured(self) -> float:
        """The slowest rank's attention time over the mean rank's (the engine's max/mean)."""
        return max(self.seconds) / (sum(self.seconds) / len(self.seconds))

    def to_json(self) -> dict:
        return {"shard": self.shard, "maxDifference": self.max_difference, "seconds": list(self.seconds),
                "blocks": list(self.blocks), "measuredSlowestOverMean": self.measured,
                "predictedSlowestOverBalanced": self.predicted, "predictedMaxOverMean": self.predicted_max_over_mean,
                "analysisSlowestOverBalanced": self.analysis, "measuredOverPredicted": self.measured / self.predicted}


@dataclass(frozen=True)
class CpRun:
    spec: RunSpec
    shards: tuple[ShardRun, ...]

    def to_json(self) -> dict:
        return {"spec": self.spec.to_json(), "scheduling": SCHEDULING.format(repeats=self.spec.repeats),
                "attention": "compiled flex_attention" if self.spec.kernel == "flex"
                else "block by block in plain matmuls (times do not follow blocks)",
                "shards": [s.to_json() for s in self.shards]}


# A run's size, refused before any rank spawns. Every rank builds the whole batch's q, k, v (B, H, T, D) and
# rank 0 the unsharded reference, whose BlockMask evaluates T x T scores (create_block_mask): 64 rows of 2^20
# tokens failed after the ranks spawned.
MAX_SEQ = 1 << 15
MAX_ELEMENTS = 1 << 27  # ranks x rows x heads x tokens x head_dim: about 3 GiB of float32 across the ranks
MAX_LINE = 200  # an option's value is cut in a message (a 5,000-character --shard was echoed whole)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (it printed the usage, then the error)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise TensorcadError("", f"{_cut(message)} (see --help)")


def _cut(text: str) -> str:
    return text if len(text) <= MAX_LINE else text[:MAX_LINE - 3] + "..."


def check_spec(spec: RunSpec) -> None:
    """What a run may be, in one line naming the option, before any rank spawns."""
    if not spec.shards:
        raise TensorcadError("--shard", "no sharding given")
    if spec.window is not None:
        check_integer(spec.window, "--window", 1, spec.seq)
    if spec.pack is not None and (not math.isfinite(spec.pack) or not 1 <= spec.pack <= MAX_SEQ):
        raise TensorcadError("--pack", f"expected 0 (one document a row) or a mean length in 1..{MAX_SEQ:,}, "
                                       f"got {spec.pack:g}")
    if not math.isfinite(spec.spread) or not (spec.spread == 0 or 1e-4 <= spec.spread <= 10):
        raise TensorcadError("--spread", f"expected 0 or 1e-4..10, got {spec.spread:g}")
    check_integer(spec.seq, "--seq", 128, MAX_SEQ)
    elements = spec.world_size * spec.rows * spec.heads * spec.seq * spec.head_dim
    if elements > MAX_ELEMENTS:
        raise TensorcadError("--seq", f"{spec.world_size} ranks x {spec.rows} rows x {spec.heads} heads x "
                                      f"{spec.seq:,} tokens x {spec.head_dim} is {elements:,} values, more than "
                                      f"the {MAX_ELEMENTS:,} a run holds: fewer rows, tokens or heads")


def _rank_failure(error: Exception) -> TensorcadError:
    """A rank that died or raised, as one line (torch's message carries the rank's whole traceback)."""
    rank = getattr(error, "error_index", "?")
    signal_name = getattr(error, "signal_name", None)
    if signal_name:
        return TensorcadError(f"rank {rank}", f"killed by {signal_name}; the other ranks were stopped")
    code = getattr(error, "exit_code", None)
    lines = [line for line in str(getattr(error, "msg", error)).splitlines() if line.strip()]
    last = lines[-1].strip() if lines else f"exit {code}"
    return TensorcadError(f"rank {rank}", f"failed: {_cut(last)}; the other ranks were stopped")


def every_rank_finished(out_path: str, world_size: int) -> bool:
    """Whether the results were written and every rank passed its last collective."""
    return os.path.exists(out_path) and all(os.path.exists(finished_mark(out_path, rank))
                                            for rank in range(world_size))


def _design(window: int | None):
    """Llama 3's document-causal design, with the run's window and a context as long as any row:
    the engine's model of the attention the ranks run (``document_mask``)."""
    from tensorcad.design import load

    source = load("llama-3-8b-documents").to_dict()
    layers = next(n for n in source["nodes"] if n["id"] == "layers")
    if window is not None:
        layers["params"]["block"]["params"]["attention"]["window"] = window
    source["context"] = 1 << 20
    return load(source)


def predictions(spec: RunSpec, shard: str) -> tuple[float, float, float | None]:
    """(slowestOverBalanced and max/mean for the run's rows, slowestOverBalanced of the operating point)."""
    from tensorcad.analysis.context_parallel.ranks import ContextParallel, query_block_counts, row_work
    from tensorcad.analysis.operating_point import OperatingPoint
    from tensorcad.analysis.report import analyze
    from tensorcad.analysis.rows import Rows
    from tensorcad.packing import Packing

    design = _design(spec.window)
    attention = design.attentions()[0][0]
    documents, *_ = batch(spec)
    cp = ContextParallel(spec.world_size, shard)
    per_rank = row_work(attention, documents, cp).blocks.sum(axis=0)  # the step: every row, rank by rank
    own = query_block_counts(attention, Rows.from_arrays(documents), 128).sum()
    slowest = float(spec.world_size * per_rank.max() / own)
    try:
        packing = None if spec.pack is None else Packing(spec.pack, spec.spread)
        analysis = analyze(design, OperatingPoint(seq=spec.seq, packing=packing, cp=cp, seed=spec.seed)).cp
        figure = analysis.slowest_over_balanced
    except TensorcadError:  # a sharding the analysis does not count at this operating point
        figure = None
    return slowest, float(per_rank.max() / per_rank.mean()), figure


def run(spec: RunSpec) -> CpRun:
    """Launch the ranks, wait for them, and set the engine's predictions beside what they measured."""
    import torch.multiprocessing as mp

    from tensorcad.runtime.building.cp_layouts import cp_layout

    check_integer(spec.world_size, "world_size", 1, 64)
    check_spec(spec)
    documents, *_ = batch(spec)
    for shard in spec.shards:  # refuse a row a sharding cannot lay out here, in one line, before launch
        cp_layout(documents, shard, spec.world_size, np.ones((spec.rows, spec.seq // 128 or 1)))
    # The engine's side first: a sharding it refuses at these rows is refused before launch, not after the ranks ran.
    predicted = {shard: predictions(spec, shard) for shard in spec.shards}
    if "lo" not in {name for _, name in socket.if_nameindex()}:
        raise TensorcadError("world_size", "no loopback interface ('lo'): gloo would listen on another one")
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "ranks.json")
        from .cp_rank import run_rank

        # torch logs "Terminating process ... via signal SIGTERM" when a rank dies: the failure is our one line
        logging.getLogger("torch.multiprocessing.spawn").setLevel(logging.ERROR)
        try:
            mp.start_processes(run_rank, args=(spec, os.path.join(folder, "store"), out), nprocs=spec.world_size,
                               join=True, start_method="spawn")
        except (mp.ProcessExitedException, mp.ProcessRaisedException) as error:
            # A rank that died after every rank finished (gloo's threads torn down at exit: "terminate called
            # without an active exception", SIGABRT, once in hundreds of runs under load) lost nothing measured.
            if not every_rank_finished(out, spec.world_size):
                raise _rank_failure(error) from None
        with open(out) as f:
            measured = json.load(f)
    runs = []
    for m in measured:
        slowest, ratio, analysis = predicted[m["shard"]]
        runs.append(ShardRun(m["shard"], m["maxDifference"], tuple(m["seconds"]), tuple(m["blocks"]), slowest,
                             ratio, analysis))
    return CpRun(spec, tuple(runs))


def render(result: CpRun) -> str:
    spec = result.spec
    lines = [f"context parallelism over {spec.world_size} gloo ranks: {spec.rows} row(s) of {spec.seq:,} tokens"
             + (f", {spec.pack:g}-token documents (spread {spec.spread:g})" if spec.pack else ", one document")
             + (f", window {spec.window}" if spec.window else ""),
             f"  {result.to_json()['attention']}; {SCHEDULING.format(repeats=spec.repeats)}",
             f"  {'sharding':<14}{'max |diff|':>11}{'measured':>10}{'predicted':>11}{'max/mean':>10}{'analysis':>10}"
             "  blocks a rank"]
    for s in result.shards:
        analysis = "-" if s.analysis is None else f"{s.analysis:.3f}"
        lines.append(f"  {s.shard:<14}{s.max_difference:>11.1e}{s.measured:>10.3f}{s.predicted:>11.3f}"
                     f"{s.predicted_max_over_mean:>10.3f}{analysis:>10}  " + ", ".join(str(b) for b in s.blocks))
    lines.append("  measured: the slowest rank's attention time over the mean rank's; predicted: the engine's "
                 "slowestOverBalanced for these rows, before launch (max/mean: its slowest rank's blocks over the "
                 "mean rank's); analysis: slowestOverBalanced of the operating point's 1,024 rows")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from tensorcad.analysis.context_parallel.ranks import SHARDINGS

    parser = _Parser(
        prog="python -m tensorcad.runtime.training.cp_run",
        description="Run context-parallel attention on N gloo processes: each rank's shard against the gathered "
                    "keys with its own block mask, outputs held to the unsharded, times beside the engine's "
                    "prediction.")
    parser.add_argument("--world-size", type=int, default=2, help="ranks (processes), default 2")
    parser.add_argument("--shard", default=",".join(SHARDINGS), help=f"comma-separated ({', '.join(SHARDINGS)})")
    parser.add_argument("--seq", type=int, default=4096, help="tokens a row, default 4096")
    parser.add_argument("--rows", type=int, default=1, help="rows of the batch, default 1")
    parser.add_argument("--pack", type=float, default=1024.0, help="mean document length (0: one document a row)")
    parser.add_argument("--spread", type=float, default=1.0, help="coefficient of variation of the lengths")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--window", type=int, default=None, help="a causal sliding window within documents")
    parser.add_argument("--kernel", choices=("flex", "blockwise"), default="flex",
                        help="flex: compiled FlexAttention (the default; its times follow the blocks); blockwise: "
                             "the same arithmetic block by block in plain matmuls, nothing compiled (quick; dense "
                             "in time)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs a rank (the best counts), default 3")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    try:
        args = parser.parse_args(argv)
        shards = tuple(s.strip() for s in args.shard.split(",") if s.strip())
        unknown = [s for s in shards if s not in SHARDINGS]
        if unknown:
            raise TensorcadError("--shard", f"unknown sharding {shown(unknown[0])} ({', '.join(SHARDINGS)})")
        spec = RunSpec(world_size=check_integer(args.world_size, "--world-size", 1, 64), shards=shards,
                       seq=check_integer(args.seq, "--seq", 128, MAX_SEQ), rows=check_integer(args.rows, "--rows", 1, 64),
                       pack=args.pack or None, spread=args.spread, heads=check_integer(args.heads, "--heads", 1, 64),
                       head_dim=check_integer(args.head_dim, "--head-dim", 1, 256), window=args.window,
                       kernel=args.kernel, repeats=check_integer(args.repeats, "--repeats", 1, 100),
                       seed=check_integer(args.seed, "--seed", 0, 2**31))
        result = run(spec)
    except TensorcadError as error:
        print(f"cp_run: {error}", file=sys.stderr)
        return 2
    print(json.dumps(result.to_json(), indent=2) if args.json else render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
