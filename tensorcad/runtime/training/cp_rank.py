"""What one rank of a context-parallel run does: its shard's attention, against the gathered keys, timed.

Each rank is a process of a ``torch.distributed`` group on gloo (CPU). For each
sharding it lays the row out (``cp_layout``: the analysis's sharding as an index
map), takes its shard of the laid-out queries, keys and values with PyTorch's
own ``_context_parallel_shard`` (no balancer: the layout is already
rearranged), gathers every rank's keys and values with PyTorch's
``flex_cp_allgather`` (the all-gather of its FlexAttention context-parallel
style), builds its BlockMask from the documents (``cp_block_mask``, the
generated runtime's; PyTorch's ``_create_cp_block_mask`` compiles
``create_block_mask`` and evaluates every score), and runs compiled
``flex_attention`` (or, quick and untimed, the same arithmetic block by block).
The outputs come back through ``context_parallel_unshard`` and rank 0 compares
them, position by position, with the unsharded row's attention (through
``create_block_mask``'s BlockMask of the same mask: the reference owes nothing
to ``cp_block_mask``).

Timing measures compute, not contention: every rank runs one thread
(``torch.set_num_threads(1)``) and the ranks take turns, each timing its
attention while the others wait at a barrier, in ``repeats`` rounds of every
rank in turn (each rank's best counts); compiling is done in turn too, so
later ranks load the kernel from inductor's cache.
"""

from __future__ import annotations

import json
import time
import warnings
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.distributed as dist


@dataclass(frozen=True)
class RunSpec:
    """One run: the ranks, the shardings, the row and the attention."""

    world_size: int
    shards: tuple[str, ...]
    seq: int
    rows: int = 1
    pack: float | None = 1024.0  # mean document length; None: one document a row
    spread: float = 1.0
    heads: int = 4
    head_dim: int = 64
    window: int | None = None
    # "flex": compiled FlexAttention, which on CPU computes only the blocks a mask keeps, so its
    # times follow them; "blockwise": the same arithmetic through the BlockMask in plain matmuls
    # (cp_faithful.blockwise_attention), nothing compiled or traced: quick, but dense in time
    kernel: str = "flex"
    repeats: int = 3
    seed: int = 0

    def to_json(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


def batch(spec: RunSpec) -> tuple[np.ndarray, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(documents (B, T), q, k, v (B, H, T, D)): the same on every rank, seeded."""
    from tensorcad.packing import draw

    if spec.pack is None:
        documents = np.zeros((spec.rows, spec.seq), dtype=np.int64)
    else:
        documents, _ = draw(spec.rows, spec.seq, spec.pack, spec.spread, spec.seed)
    generator = torch.Generator().manual_seed(spec.seed)
    shape = (spec.rows, spec.heads, spec.seq, spec.head_dim)
    q, k, v = (torch.randn(shape, generator=generator) for _ in range(3))
    return documents, q, k, v


def _at(x: torch.Tensor, layout: torch.Tensor) -> torch.Tensor:
    """x (B, H, T, D) at the layout's positions (B, L), zero at padding."""
    index = layout.clamp(min=0)[:, None, :, None].expand(-1, x.shape[1], -1, x.shape[3])
    return x.gather(2, index) * (layout >= 0)[:, None, :, None]


def _in_turn(rank: int, world_size: int, work):
    """work() on each rank in turn, the others waiting at a barrier; this rank's result."""
    out = None
    for turn in range(world_size):
        if turn == rank:
            out = work()
        dist.barrier()
    return out


def _timed_in_turn(rank: int, world_size: int, work, repeats: int) -> float:
    """This rank's best time of work() over ``repeats`` rounds, each round every rank in turn.

    Rounds interleave the ranks, so a spell of load on the machine falls on every
    rank's samples alike instead of on whichever rank was being timed then.
    """
    times = []
    for _ in range(repeats):
        for turn in range(world_size):
            if turn == rank:
                start = time.perf_counter()
                work()
                times.append(time.perf_counter() - start)
            dist.barrier()
    return min(times)


def finished_mark(out_path: str, rank: int) -> str:
    """The file a rank writes once its last collective is done (the launcher's test of a finished run)."""
    return f"{out_path}.{rank}.finished"


def run_rank(rank: int, spec: RunSpec, store_path: str, out_path: str) -> None:
    """The spawn target: join the group, run every sharding, and (rank 0) write the results.

    The ranks meet through a file (``FileStore``), not a TCP store: torch's TCPStore server binds the wildcard
    address whatever host ``tcp://`` names (rank 0 listened on ``*:PORT``). gloo's own pairs listen on the
    interface GLOO_SOCKET_IFNAME names: the loopback, set here for this process whatever the caller's was.
    """
    import os
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.distributed_c10d import _get_process_group_name
    from torch.distributed.tensor.experimental._context_parallel import (
        _context_parallel_shard,
        context_parallel_unshard,
        flex_cp_allgather,
    )
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    from tensorcad.runtime.building.cp_layouts import cp_layout
    from tensorcad.runtime.building.cp_masks import cp_block_mask, document_mask
    from tensorcad.runtime.certification.parallel.faithful import blockwise_attention

    warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
    torch.set_num_threads(1)
    n = spec.world_size
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    dist.init_process_group("gloo", store=dist.FileStore(store_path, n), rank=rank, world_size=n)
    try:
        mesh = init_device_mesh("cpu", (n,))
        group = _get_process_group_name(mesh.get_group())
        if spec.kernel == "flex":
            # dynamic=False: a second shape would otherwise compile a dynamic kernel, which fails on CPU here.
            attend = torch.compile(flex_attention, dynamic=False)
        else:
            def attend(q, k, v, block_mask):
                return blockwise_attention(q, k, v, block_mask)
        documents, q, k, v = batch(spec)
        mask = document_mask(torch.from_numpy(documents), window=spec.window)
        rows = spec.rows
        whole = cp_block_mask(mask, torch.arange(spec.seq), 0, 1, rows, spec.heads)
        counts = (whole.kv_num_blocks + whole.full_kv_num_blocks)[:, 0]
        unsharded = None
        if rank == 0:  # the unsharded run, its BlockMask PyTorch's own: nothing of cp_block_mask in the reference
            reference = create_block_mask(mask, rows, None, spec.seq, spec.seq, device="cpu")
            unsharded = attend(q, k, v, block_mask=reference)
        results = []
        for shard in spec.shards:
            layout = cp_layout(documents, shard, n, counts).expand(rows, -1)
            q_local, k_local, v_local = _context_parallel_shard(
                mesh, [_at(q, layout), _at(k, layout), _at(v, layout)], [2, 2, 2])
            block_mask = cp_block_mask(mask, layout, rank, n, rows, spec.heads)
            keys, values = flex_cp_allgather(k_local, v_local, 2, group)

            def attention():
                return attend(q_local, keys, values, block_mask=block_mask)

            out = _in_turn(rank, n, attention)  # compiles (or not) in turn: the cache serves the rest
            seconds = _timed_in_turn(rank, n, attention, spec.repeats)
            (gathered,) = context_parallel_unshard(mesh, [out.contiguous()], [2])
            blocks = int((block_mask.kv_num_blocks + block_mask.full_kv_num_blocks).sum())
            every = [None] * n
            dist.all_gather_object(every, (seconds, blocks))
            if rank == 0:
                real = layout >= 0
                want = _at(unsharded, layout)
                difference = (gathered - want).abs().amax(dim=(1, 3))[real]
                results.append({"shard": shard, "slots": int(layout.shape[1]),
                                "maxDifference": float(difference.max()),
                                "seconds": [s for s, _ in every], "blocks": [b for _, b in every]})
        if rank == 0:
            with open(out_path, "w") as f:
                json.dump(results, f)
        # Every rank done with gloo before any tears it down: a rank that destroyed its group while
        # another's last collective was in flight died in gloo's threads (SIGABRT, in 1 of 4 runs here under load).
        dist.barrier()
        # Past here every collective is done and rank 0 has written the results: the launcher reads this mark
        # to tell a crash in torch's teardown (gloo's threads at exit, rarer still) from a failed run.
        open(finished_mark(out_path, rank), "w").close()
    finally:
        dist.destroy_process_group()
