"""The operating point: the conditions a design is costed under.

Sequence length, dtypes, hardware, cluster, price, token budget, and packing
(a condition of training only: serving is one document a sequence).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...design.masks import BLOCK
from ...errors import TensorcadError, shown
from ...packing import Packing
from ..context_parallel.ranks import ContextParallel

MAX_SEQ = 1 << 24
# The analysis budget (docs/security.md): a packed operating point draws a
# stream of documents for ROWS rows of seq tokens; past these it would take
# minutes and gigabytes, so it is refused up front, naming seq or the mean.
MAX_PACKED_SEQ = 1 << 22
MAX_STREAM_DOCUMENTS = 1 << 22
# The bin-packers (bfd, ffd, split) place each document in turn: a quarter of the stream's documents
# (at 2^22, --seq 4194304 --pack 1024, they took over 90 s).
MAX_BINNED_DOCUMENTS = 1 << 20
# Context parallelism counts (documents, 2 x ranks) cells, several arrays of them, whatever the sharding
# (about 45 bytes a cell measured: 2^24 cells, 0.8 GB): per-document at 2^22 documents and 1,024 ranks was a
# 64 GiB allocation, head-tail at 2^15 documents and 1,024 ranks ran out of 3 GiB. 2^25 cells: about 1.6 GB.
MAX_CP_CELLS = 1 << 25
# A mask that reads made-up rows (documents, positions) is sampled over rows
# of seq tokens whose lookup tables grow with rows x seq (1.1 GB at 2^22).
MAX_MADE_UP_SEQ = 1 << 22


def check_budget(design, op: "OperatingPoint") -> None:
    """Refuse, up front, an operating point this design could not be analysed at within the budget."""
    from ...design.expr import reads

    if op.seq <= MAX_MADE_UP_SEQ:
        return
    for attention, _ in design.attentions():
        if attention.keep is not None and reads(attention.keep) & set(attention.tensors):
            raise TensorcadError("seq", f"{op.seq:,} tokens is more than {MAX_MADE_UP_SEQ:,} (2^22), the longest "
                                        f"row the analysis samples made-up documents over within its budget "
                                        f"({attention.path} reads them)")

# Dense (no structured sparsity) peak FLOP/s per dtype and memory bandwidth per GPU.
# Sources: NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB); NVIDIA H100 Tensor Core
# GPU datasheet (SXM5); NVIDIA H200 Tensor Core GPU datasheet (SXM); NVIDIA HGX B200
# datasheet (per GPU). The datasheets print sparse Tensor Core figures with "*";
# the dense figure is half of it.
HARDWARE: dict[str, dict] = {
    "A100": {"peak": {"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12}, "bandwidth": 2.039e12},
    "H100": {"peak": {"fp32": 67e12, "tf32": 494.5e12, "bf16": 989.5e12, "fp16": 989.5e12, "fp8": 1979e12},
             "bandwidth": 3.35e12},
    "H200": {"peak": {"fp32": 67e12, "tf32": 494.5e12, "bf16": 989.5e12, "fp16": 989.5e12, "fp8": 1979e12},
             "bandwidth": 4.8e12},
    "B200": {"peak": {"fp32": 75e12, "tf32": 1.1e15, "bf16": 2.25e15, "fp16": 2.25e15, "fp8": 4.5e15, "fp4": 9e15},
             "bandwidth": 8e12},
}

BYTES = {"fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5}

COUNTS = ("kept", "blocks")

DEFAULTS = {
    "hardware": "H100",
    "gpus": 1024,
    "mfu": 0.4,
    "price": 2.5,  # USD per GPU-hour
    "train_dtype": "bf16",
    "serve_dtype": "bf16",
    "tokens_per_param": 20,  # Chinchilla (Hoffmann et al. 2022)
}


def _number(value: object, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TensorcadError(path, f"{shown(value)} is not a finite number")
    return float(value)


@dataclass(frozen=True)
class OperatingPoint:
    seq: int = 8192
    packing: Packing | None = None
    hardware: str = DEFAULTS["hardware"]
    gpus: int = DEFAULTS["gpus"]
    mfu: float = DEFAULTS["mfu"]
    price_per_gpu_hour: float = DEFAULTS["price"]
    tokens: float | None = None  # None: Chinchilla's 20 per parameter
    train_dtype: str = DEFAULTS["train_dtype"]
    serve_dtype: str = DEFAULTS["serve_dtype"]
    seed: int = 0
    block: int = BLOCK  # FlexAttention's default (design.masks)
    # What the training figure counts: the scores the mask keeps ("kept"), or
    # every score of every block a kernel computes ("blocks"); docs/packing.md
    # holds the evidence for the default.
    count: str = "kept"
    cp: ContextParallel | None = None  # context parallelism: ranks splitting each training row

    def __post_init__(self) -> None:
        if isinstance(self.seq, bool) or not isinstance(self.seq, int):
            raise TensorcadError("seq", f"{shown(self.seq)} is not an integer")
        if not 1 <= self.seq <= MAX_SEQ:
            raise TensorcadError("seq", f"{self.seq} is outside 1..{MAX_SEQ:,} (2^24)")
        if self.packing is not None and not isinstance(self.packing, Packing):
            raise TensorcadError("packing", "expected Packing(mean, spread) or None")
        if self.packing is not None:
            self._check_packed_work()
        if not isinstance(self.hardware, str) or self.hardware not in HARDWARE:
            raise TensorcadError("hardware", f"unknown hardware {shown(self.hardware)} ({', '.join(HARDWARE)})")
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or not 1 <= self.gpus <= 1_000_000:
            raise TensorcadError("gpus", f"{shown(self.gpus)} is not an integer in 1..1,000,000")
        mfu = _number(self.mfu, "mfu")
        if not 0 < mfu <= 1:
            raise TensorcadError("mfu", f"{mfu} is outside (0, 1]")
        price = _number(self.price_per_gpu_hour, "pricePerGpuHour")
        if not 0 <= price <= 1e6:
            raise TensorcadError("pricePerGpuHour", f"{price} is outside 0..1,000,000")
        if self.tokens is not None:
            tokens = _number(self.tokens, "tokens")
            if not 1 <= tokens <= 1e18:
                raise TensorcadError("tokens", f"{tokens:g} is outside 1..1e18")
        for name, dtype in (("trainDtype", self.train_dtype), ("serveDtype", self.serve_dtype)):
            if not isinstance(dtype, str) or dtype not in BYTES:
                raise TensorcadError(name, f"unknown dtype {shown(dtype)} ({', '.join(BYTES)})")
        if self.train_dtype not in HARDWARE[self.hardware]["peak"]:
            raise TensorcadError(
                "trainDtype", f"{self.hardware} has no {self.train_dtype} peak ({', '.join(HARDWARE[self.hardware]['peak'])})"
            )
        if self.count not in COUNTS:
            raise TensorcadError("count", f"unknown count {self.count!r} ({', '.join(COUNTS)})")
        if isinstance(self.block, bool) or not isinstance(self.block, int) or not 1 <= self.block <= 4096:
            raise TensorcadError("block", f"{shown(self.block)} is not an integer in 1..4096")
        if self.cp is not None:
            if not isinstance(self.cp, ContextParallel):
                raise TensorcadError("cp", "expected ContextParallel(size, shard) or None")
            self.cp.fits(self.seq, self.block)
            self._check_sharded_work()

    def _check_packed_work(self) -> None:
        from ..attention import ROWS

        if self.seq > MAX_PACKED_SEQ:
            raise TensorcadError("seq", f"{self.seq:,} tokens a packed row is more than {MAX_PACKED_SEQ:,} (2^22), "
                                        "the most the packed analysis samples within its budget")
        documents = ROWS * self.seq / max(self.packing.mean, 1.0)
        most = MAX_STREAM_DOCUMENTS if self.packing.strategy in ("stream", "pad") else MAX_BINNED_DOCUMENTS
        if documents > most:
            least = ROWS * self.seq / most
            # Named for what was given: lengths read from a file have a mean nobody typed.
            read = self.packing.lengths is not None
            raise TensorcadError("packing.lengths" if read else "packing.mean",
                                 f"documents of mean {self.packing.mean:g} tokens fill {ROWS:,} rows of "
                                 f"{self.seq:,} with {documents:,.0f} documents, more than the {most:,} "
                                 f"(2^{most.bit_length() - 1}) {self.packing.strategy} packing draws within the "
                                 f"analysis's budget: give "
                                 f"{'lengths whose mean is' if read else 'a mean of'} at least {least:,.0f} or a shorter seq")

    def _check_sharded_work(self) -> None:
        from ..attention import ROWS

        # Every row is at least one piece; a packed row holds seq / mean documents besides.
        documents = ROWS * (1 + (0 if self.packing is None else self.seq / max(self.packing.mean, 1.0)))
        cells = documents * 2 * self.cp.size
        if cells > MAX_CP_CELLS:
            raise TensorcadError("cp.size", f"{self.cp.shard} sharding of {documents:,.0f} documents over "
                                            f"{self.cp.size:,} ranks counts {cells:,.0f} cells, more than the "
                                            f"{MAX_CP_CELLS:,} (2^25) within the analysis's budget: "
                                            "give fewer ranks, longer documents or a shorter seq")

    @property
    def peak(self) -> float:
        return HARDWARE[self.hardware]["peak"][self.train_dtype]

    def to_json(self) -> dict:
        out = {
            "seq": self.seq,
            "trainDtype": self.train_dtype,
            "serveDtype": self.serve_dtype,
            "hardware": self.hardware,
            "gpus": self.gpus,
            "mfu": self.mfu,
            "pricePerGpuHour": self.price_per_gpu_hour,
            "tokens": self.tokens,
            "packing": None if self.packing is None else self.packing.to_json(),
        }
        if self.count != "kept":
            out["count"] = self.count
        if self.cp is not None:
            out["cp"] = self.cp.to_json()
        return out
