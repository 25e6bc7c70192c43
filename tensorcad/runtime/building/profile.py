"""FLOPs of a real forward pass, counted by PyTorch, held to the analysis.

``torch.utils.flop_counter.FlopCounterMode`` counts the matmuls the eager form
runs. The flex form cannot be counted on CPU: FlopCounterMode raises around an
uncompiled flex_attention there, and counts nothing for CPU SDPA
(pytorch#195460), which is why the generated module has an eager form computing
attention with plain matmuls.

The counts split by op: ``mm``/``addmm`` are the linear layers (a (B, T, C)
input is folded to 2-D first), ``bmm``/``baddbmm`` the attention's q @ kᵀ and
probs @ v. The linear layers must equal the analysis exactly,
``2 × params.matmul × B × T``. The eager form scores every (query, key) pair
and masks afterwards, so its attention is the dense ``2 × T × S × (head_dim +
value_dim) × heads × B`` per layer, not the analysis's kept-score figure; both are reported,
with the analysis's whole-block figure, which is what a block-sparse kernel runs.
A stateful mixer's convolution taps and chunked scan are batched matmuls too: the
``bmm`` count is then the dense attention plus the analysis's mixing
(``flops.fwdMixing``), exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils.flop_counter import FlopCounterMode

from tensorcad.design.model import Design

MATMUL_OPS = frozenset({"aten.mm", "aten.addmm"})
ATTENTION_OPS = frozenset({"aten.bmm", "aten.baddbmm"})


@dataclass(frozen=True)
class FlopProfile:
    """FLOPs of one forward pass over B × T tokens, counted and expected."""

    rows: int
    seq: int
    by_op: dict[str, int]  # every counted op, e.g. {"aten.mm": …}
    matmul: int  # counted: linear layers
    attention: int  # counted: q @ kᵀ and probs @ v, and the mixers' taps and scans
    other: int  # counted: anything else (convolutions, SDPA on another device)
    expected_matmul: int  # 2 × params.matmul × B × T
    dense_attention: int  # what the eager form computes: every score, then masked
    kept_attention: float  # the analysis's fwdAttention × B × T (scores the mask keeps)
    block_attention: float  # the analysis's fwdAttentionBlocks × B × T (whole 128 × 128 blocks)
    mixing: int = 0  # the analysis's fwdMixing × B × T: the mixers' taps and scans

    @property
    def total(self) -> int:
        return self.matmul + self.attention + self.other

    @property
    def matmul_agrees(self) -> bool:
        return self.matmul == self.expected_matmul

    @property
    def attention_agrees(self) -> bool:
        return self.attention == self.dense_attention + self.mixing

    @property
    def passed(self) -> bool:
        return self.matmul_agrees and self.attention_agrees and self.other == 0

    def to_json(self) -> dict:
        return {
            "rows": self.rows, "seq": self.seq, "byOp": dict(self.by_op),
            "matmul": self.matmul, "expectedMatmul": self.expected_matmul,
            "attention": self.attention, "denseAttention": self.dense_attention,
            "keptAttention": self.kept_attention, "blockAttention": self.block_attention,
            "other": self.other, "total": self.total, **({"mixing": self.mixing} if self.mixing else {}),
        }


def count_flops(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> dict[str, int]:
    """FlopCounterMode's count of one forward pass of the eager form, by op name."""
    form = getattr(model, "form", None)
    try:
        if form is not None:
            model.form = "eager"
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(**inputs)
    finally:
        if form is not None:
            model.form = form
    return {str(op): int(n) for op, n in counter.get_flop_counts().get("Global", {}).items()}


def dense_attention_flops(design: Design, rows: int, seq: int) -> int:
    """Every score computed: 2·T·S·D for q @ kᵀ and as much for probs @ v, per head and layer."""
    # a score multiplies head_dim features, a weighted sum value_dim (a latent attention's differ)
    return sum(layers * 2 * seq * seq * (a.head_dim + a.values) * a.heads * rows
               for a, layers in design.attentions())


def profile(model: torch.nn.Module, design: Design, inputs: dict[str, torch.Tensor], packing=None,
            seed: int = 0) -> FlopProfile:
    """Count a forward pass of ``model`` (built from ``design``) on ``inputs`` (forward's keyword
    arguments: ids, and documents / positions as the design takes them) beside the analysis."""
    from tensorcad.analysis.operating_point import OperatingPoint
    from tensorcad.analysis.report import analyze

    ids = inputs["ids"]
    rows, seq = (int(n) for n in ids.shape)
    by_op = count_flops(model, inputs)
    matmul = sum(n for op, n in by_op.items() if op in MATMUL_OPS)
    attention = sum(n for op, n in by_op.items() if op in ATTENTION_OPS)
    other = sum(by_op.values()) - matmul - attention
    report = analyze(design, OperatingPoint(seq=seq, packing=packing, seed=seed))
    flops = report.training_flops  # packed figures when a mask reads the documents
    tokens = rows * seq
    return FlopProfile(
        rows=rows, seq=seq, by_op=by_op, matmul=matmul, attention=attention, other=other,
        expected_matmul=2 * report.params.matmul * tokens,
        dense_attention=dense_attention_flops(design, rows, seq),
        kept_attention=flops.fwd_attention * tokens,
        block_attention=flops.fwd_attention_blocks * tokens,
        mixing=round(report.flops.fwd_mixing * tokens),  # a row's own work: the same packed or not
    )
