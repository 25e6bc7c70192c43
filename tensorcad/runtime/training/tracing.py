"""`tensorcad trace`: each op of a forward pass, with its shapes and FLOPs beside the analysis.

The eager form runs under FlopCounterMode (the flex form cannot be counted on
CPU, see ``profile``). Forward hooks on every leaf module and a wrapper round
the generated module's ``attend`` read the counter before and after each, so
every row's FLOPs are PyTorch's own count for that op. Beside it:

- a linear layer: ``2 · in · out · tokens``, from its weight's shape;
- an attention: the dense ``2 · T · S · (D + Dv) · H · B`` the eager form computes,
  and the analysis's kept-score figure for it (``2 · keysPerQuery · (D + Dv) · H``
  a token);
- embeddings and norms: no matmul, 0.

The totals close it: the linear rows sum to ``2 × params.matmul × tokens``.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass

import torch
from torch.utils.flop_counter import FlopCounterMode

from tensorcad.design import Design, load
from tensorcad.errors import TensorcadError, as_text


@dataclass(frozen=True)
class Op:
    name: str  # module path, or "<module>.attend" for attention
    kind: str  # Linear, Embedding, RMSNorm, attention, ...
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    flops: int  # FlopCounterMode's count
    expected: int  # the closed form for this op
    kept: float | None = None  # attention: the analysis's kept-score FLOPs

    @property
    def agrees(self) -> bool:
        return self.flops == self.expected

    def to_json(self) -> dict:
        out = {"name": self.name, "kind": self.kind, "input": list(self.input_shape),
               "output": list(self.output_shape), "flops": self.flops, "expected": self.expected,
               "agrees": self.agrees}
        if self.kept is not None:
            out["keptFlops"] = self.kept
        return out


@dataclass(frozen=True)
class Trace:
    design: str
    rows: int
    seq: int
    ops: tuple[Op, ...]
    total: int  # FlopCounterMode's total for the pass
    analysis_matmul: int  # 2 × params.matmul × tokens
    analysis_attention: float  # the analysis's kept-score attention × tokens

    @property
    def linear(self) -> int:
        return sum(op.flops for op in self.ops if op.kind == "Linear")

    @property
    def passed(self) -> bool:
        return (all(op.agrees for op in self.ops) and self.linear == self.analysis_matmul
                and sum(op.flops for op in self.ops) == self.total)

    def to_json(self) -> dict:
        return {"design": self.design, "rows": self.rows, "seq": self.seq, "total": self.total,
                "linear": self.linear, "analysisMatmul": self.analysis_matmul,
                "analysisAttention": self.analysis_attention, "passed": self.passed,
                "ops": [op.to_json() for op in self.ops]}


def _shape(value) -> tuple[int, ...]:
    return tuple(value.shape) if isinstance(value, torch.Tensor) else ()


def trace(design: Design | str, *, seq: int | None = None, params: int = 2_000_000, seed: int = 0,
          rows: int = 1) -> Trace:
    """Each op of one forward pass beside the analysis's figure; ``seq`` defaults to 256 (or the context)."""
    from tensorcad.analysis.operating_point import OperatingPoint
    from tensorcad.analysis.report import analyze
    from tensorcad.packing import Packing
    from tensorcad.runtime.building.generated import build
    from tensorcad.runtime.building.scaling import scale
    from tensorcad.runtime.building.settings import Settings
    from tensorcad.runtime.building.subject import draw_batch
    from tensorcad.runtime.certification.verification import _validate

    design = load(design) if not isinstance(design, Design) else design
    small = scale(design, params=params)
    seq = min(256, small.context) if seq is None else seq
    _validate(small, seq, rows)
    if not 1 <= seq <= small.context:
        raise TensorcadError("seq", f"expected tokens a row in 1..{small.context:,} (the scaled "
                                    f"design's context), got {seq!r}")
    packing = Packing(seq / 4, 1.0)  # a trace shows shapes: documents a quarter of the row
    model = build(small, form="eager", seed=seed)
    ids, documents, positions = draw_batch(small, Settings(seq=seq, pack=packing.mean, spread=packing.spread,
                                                          params=params, seed=seed, rows=rows))
    inputs = {"ids": ids, **{role: t for role, t in (("documents", documents), ("positions", positions))
                             if small.input(role) is not None}}
    uses = small.input("documents") is not None
    report = analyze(small, OperatingPoint(seq=seq, packing=packing if uses else None, seed=seed))
    flops = report.training_flops
    tokens = rows * seq
    # per layer kept attention: the analysis's keys a query for each attention, in layer order
    kept_per_call = []
    from tensorcad.analysis.attention import keys_per_query
    from tensorcad.design.masks import reads_documents

    for attention, layers in small.attentions():
        pack = packing if uses and reads_documents(attention) else None
        keys = keys_per_query(attention, seq, pack, seed=seed).mean
        kept_per_call += [4 * keys * attention.flops_dim * attention.heads * tokens] * layers

    ops: list[Op] = []
    counter = FlopCounterMode(display=False)
    names = {module: name for name, module in model.named_modules()}
    before: dict[int, int] = {}

    def pre(module, args):
        before[id(module)] = counter.get_total_flops()

    def post(module, args, output):
        flops_here = counter.get_total_flops() - before.pop(id(module))
        x = args[0] if args else None
        expected = 0
        if isinstance(module, torch.nn.Linear):
            expected = 2 * module.in_features * module.out_features * (x.numel() // module.in_features)
        ops.append(Op(names[module], type(module).__name__, _shape(x), _shape(output), flops_here, expected))

    handles = []
    for module in model.modules():
        if not list(module.children()):
            handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    calls = iter(range(10**9))

    def traced_attend(run, q, k, v, **kwargs):
        start = counter.get_total_flops()
        out = run(q, k, v, **kwargs)
        B, H, T, D = q.shape
        S = k.shape[-2]
        index = next(calls)
        kept = kept_per_call[index] if index < len(kept_per_call) else None
        dense = 2 * T * S * (D + v.shape[-1]) * H * B  # scores over D features, weighted sums over Dv
        ops.append(Op(f"attend[{index}]", "attention", tuple(q.shape), tuple(out.shape),
                      counter.get_total_flops() - start, dense, kept))
        return out

    recording = getattr(type(model), "recording_attend", None)
    try:
        with warnings.catch_warnings(), torch.no_grad(), counter, (
                recording(around=traced_attend) if recording is not None else contextlib.nullcontext()):
            warnings.simplefilter("ignore")
            model(**inputs)
    finally:
        for h in handles:
            h.remove()
    return Trace(small.name, rows, seq, tuple(ops), counter.get_total_flops(),
                 2 * report.params.matmul * tokens, flops.fwd_attention * tokens)


def render(result: Trace):
    from rich.markup import escape
    from rich.table import Table

    table = Table("op", "kind", "input", "output", "FLOPs (torch)", "expected", "analysis (kept)",
                  title=f"{as_text(result.design)}: one forward pass, {result.rows} x {result.seq} tokens (eager form)",
                  box=None, title_justify="left")
    for op in result.ops:
        mark = "" if op.agrees else " [bold red]≠[/]"
        table.add_row(escape(op.name), op.kind, "×".join(map(str, op.input_shape)), "×".join(map(str, op.output_shape)),
                      f"{op.flops:,}{mark}", f"{op.expected:,}", "" if op.kept is None else f"{op.kept:,.0f}")
    table.add_row("linear, all", "", "", "", f"{result.linear:,}", f"{result.analysis_matmul:,}",
                  "= 2 × params.matmul × tokens")
    table.add_row("total", "", "", "", f"{result.total:,}", "", f"attention kept {result.analysis_attention:,.0f}")
    return table
