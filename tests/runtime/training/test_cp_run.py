"""The real context-parallel run: processes on gloo, each rank's attention against the gathered keys.

Small here (2 ranks, 512 tokens, the ranks' attention block by block through their
BlockMasks in plain matmuls, nothing compiled, so its times do not follow blocks): every sharding's outputs, gathered from the
ranks, equal the unsharded row's to 1e-6, and each rank's blocks, read from the BlockMask
the rank ran, are the engine's. ``-m slow`` runs 4 ranks with a window. That the
measured slowest/mean follows the engine's prediction (compiled FlexAttention, which
skips the blocks a mask skips) is benchmarks/bench_cp_run.py's.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from tensorcad.analysis.context_parallel.ranks import SHARDINGS, ContextParallel, row_work  # noqa: E402
from tensorcad.runtime.training import RunSpec, run_context_parallel  # noqa: E402
from tensorcad.runtime.training.cp_rank import batch  # noqa: E402
from tensorcad.runtime.training.cp_run import _design, main  # noqa: E402


def check(spec: RunSpec) -> None:
    result = run_context_parallel(spec)
    assert [s.shard for s in result.shards] == list(spec.shards)
    documents, *_ = batch(spec)
    attention = _design(spec.window).attentions()[0][0]
    for s in result.shards:
        assert s.max_difference <= 1e-6, (s.shard, s.max_difference)
        engine = row_work(attention, documents, ContextParallel(spec.world_size, s.shard)).blocks.sum(axis=0)
        assert list(s.blocks) == engine.tolist(), s.shard
        assert s.predicted == pytest.approx(spec.world_size * max(s.blocks) / row_work(
            attention, documents, ContextParallel(1, "contiguous")).blocks.sum())
        assert len(s.seconds) == spec.world_size and min(s.seconds) > 0


def test_two_ranks_give_the_unsharded_outputs_under_every_sharding():
    check(RunSpec(world_size=2, shards=SHARDINGS, seq=512, pack=150, heads=2, head_dim=16, kernel="blockwise",
                  repeats=1))


@pytest.mark.slow
def test_four_ranks_with_a_window_over_two_rows():
    check(RunSpec(world_size=4, shards=SHARDINGS, seq=1024, rows=2, pack=300, window=200, heads=2, head_dim=16,
                  kernel="blockwise", repeats=1))


@pytest.mark.parametrize("argv,line", [
    (["--shard", "zigzag"], "cp_run: --shard: unknown sharding 'zigzag' (contiguous, headtail, per-document, ptrr)"),
    (["--world-size", "3", "--shard", "headtail", "--seq", "1000"],
     "cp_run: cp.size: head-tail cuts the row in 2 x 3 = 6 chunks, which does not divide 1,000 tokens"),
])
def test_bad_input_is_one_line_before_launch(argv, line, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.strip() == line
