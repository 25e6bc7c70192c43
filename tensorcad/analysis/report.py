"""`tensorcad.analyze`: params, FLOPs per token, training and serving, as one report.

The report's JSON names are a public contract (the CLI's --json, MCP tools,
the editor and the goldens all print them), in the proposal's camelCase.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass

from ..design import load
from ..design.masks import reads_documents  # noqa: F401 - asked of the report by name (editor, older callers)
from ..design.mixers import mixers
from ..design.mixers import reads_documents as mixers_reset
from ..design.model import Design
from ..errors import TensorcadError, as_text
from ..packing import Packing
from .attention import ROWS, keys_per_query
from .blocks import block_counts
from .capacity import CapacityDrops, capacity_drops
from .context_parallel.report import ContextParallelReport, context_parallel_report
from .cost import attention_flops, chinchilla_tokens, matmul_flops, train_flops, training_time
from .layers import LayerFlops, layer_flops
from .mtp import MtpCost, mtp_cost
from .mixers import mixing_flops
from .operating_point import BYTES, OperatingPoint, check_budget
from .params import ParamCount, count_params
from .rows import packed_rows
from .serving import PerStream, per_stream
from ..format import binary_bytes, duration, money, quantity, si


@dataclass(frozen=True)
class Flops:
    fwd_per_token: float
    train_per_token: float
    fwd_attention: float
    keys_per_query: float
    attention_share: float
    fwd_attention_blocks: float
    block_ratio: float
    # Under a packing: what it did to the rows (packers.Packed.to_json), else None.
    packing: dict | None = None
    fwd_mixing: float = 0.0  # the stateful mixers' taps and scans (analysis.mixers), a real token

    @property
    def train_per_token_blocks(self) -> float:
        """Training FLOPs a token with attention counted in whole blocks."""
        return train_flops(self.fwd_per_token - self.fwd_attention + self.fwd_attention_blocks)

    def to_json(self) -> dict:
        out = {
            "fwdPerToken": self.fwd_per_token,
            "trainPerToken": self.train_per_token,
            "fwdAttention": self.fwd_attention,
            "keysPerQuery": self.keys_per_query,
            "attentionShare": self.attention_share,
            "fwdAttentionBlocks": self.fwd_attention_blocks,
            "blockRatio": self.block_ratio,
        }
        if self.packing is not None:
            out["packing"] = self.packing
        if self.fwd_mixing:
            out["fwdMixing"] = self.fwd_mixing
        return out


@dataclass(frozen=True)
class Report:
    design: str
    operating_point: OperatingPoint
    params: ParamCount
    flops: Flops
    packed: Flops | None  # training on packed rows; only when a mask reads documents
    training_tokens: float
    training_seconds: float
    gpu_hours: float
    cost: float
    serving_fwd_per_token: float
    per_stream: PerStream | None
    warnings: tuple[str, ...] = ()  # what the figures hold true only under (a sequence past the context)
    cp: ContextParallelReport | None = None  # training split across ranks: counted from the slowest
    layers: tuple[LayerFlops, ...] = ()  # a design with stateful mixers: each block, its FLOPs a token
    capacity: tuple[CapacityDrops, ...] = ()  # capacity-bound experts: the routings they drop (analysis.capacity)
    mtp: MtpCost | None = None  # multi-token prediction's modules, counted apart (analysis.mtp); trained beside

    @property
    def training_flops(self) -> Flops:
        return self.packed if self.packed is not None else self.flops

    def to_json(self) -> dict:
        flops = self.flops.to_json()
        if self.packed is not None:
            flops["packed"] = self.packed.to_json()
        serving = {"fwdPerToken": self.serving_fwd_per_token}
        if self.per_stream is not None:
            serving["perStream"] = self.per_stream.to_json()
        out = {
            "design": self.design,
            "operatingPoint": self.operating_point.to_json(),
            "params": self.params.to_json(),
            "flops": flops,
            "training": {
                "tokens": self.training_tokens,
                "seconds": self.training_seconds,
                "gpuHours": self.gpu_hours,
                "cost": self.cost,
                **({"count": self.operating_point.count} if self.operating_point.count != "kept" else {}),
            },
            "serving": serving,
            **({"warnings": list(self.warnings)} if self.warnings else {}),
        }
        if self.cp is not None:
            out["contextParallel"] = self.cp.to_json()
        if self.layers:
            out["layers"] = [layer.to_json() for layer in self.layers]
        if self.capacity:
            out["capacity"] = [drops.to_json() for drops in self.capacity]
        if self.mtp is not None:
            out["mtp"] = self.mtp.to_json()
        return out


def _flops(design: Design, matmul: float, seq: int, packing: Packing | None, op: OperatingPoint) -> Flops:
    """FLOPs a token; under a packing, a *real* token: padding is paid compute.

    Rows that end in padding spend every matmul on their padding too, so a
    real token carries 1 / (real share) of them; keys a query are over real
    tokens, and the blocks a row computes are shared among its real tokens.
    """
    attention = blocks = width = 0.0
    real = 1.0
    stats = None
    for a, layers in design.attentions():
        pack = packing if packing is not None and reads_documents(a) else None
        keys = keys_per_query(a, seq, pack, seed=op.seed).mean
        if pack is not None:
            drawn = packed_rows(seq, pack, op.seed, ROWS)
            real = drawn.real_fraction
            stats = {"strategy": pack.strategy, **drawn.packed.to_json()}
        share = real if pack is not None else 1.0
        computed = block_counts(a, seq, pack, seed=op.seed, block=op.block).computed / (seq * share)
        attention += layers * attention_flops(keys, a.flops_dim, a.heads)
        blocks += layers * attention_flops(computed, a.flops_dim, a.heads)
        width += layers * attention_flops(1.0, a.flops_dim, a.heads)
    mixing = sum(m.layers * mixing_flops(m.node, seq) for m in mixers(design))
    if packing is not None and stats is None and mixers_reset(design):
        drawn = packed_rows(seq, packing, op.seed, ROWS)  # no mask reads the documents; the mixers reset
        real = drawn.real_fraction
        stats = {"strategy": packing.strategy, **drawn.packed.to_json()}
    mixing /= real  # the padding of a row is scanned too
    forward = matmul / real + mixing + attention
    return Flops(
        fwd_per_token=forward,
        train_per_token=train_flops(forward),
        fwd_attention=attention,
        keys_per_query=attention / width if width else 0.0,
        attention_share=attention / forward if forward else 0.0,
        fwd_attention_blocks=blocks,
        block_ratio=blocks / attention if attention else 1.0,
        packing=stats,
        fwd_mixing=mixing,
    )


def analyze(design: Design | str | dict, op: OperatingPoint | None = None) -> Report:
    """The report of a design at an operating point (its own context, unpacked, by default).

    Reports are immutable and cached by the design's content and the operating
    point, so the editor, the rules and the harness can ask again for nothing.
    """
    design = load(design)
    op = op if op is not None else OperatingPoint(seq=design.context)
    check_budget(design, op)  # refused before any work, not after minutes of it
    key = (json.dumps(design.source, sort_keys=True, default=_plain), op)
    report = _CACHE.get(key)
    if report is None:
        report = _analyze(design, op)
        with _CACHE_LOCK:  # the editor's server analyses on several threads at once
            if len(_CACHE) >= _CACHE_SIZE:
                _CACHE.pop(next(iter(_CACHE)))
            _CACHE[key] = report
    return report


def packed_flops(design: Design, op: OperatingPoint) -> Flops | None:
    """The report's ``packed`` FLOPs alone, as ``analyze(design, op).packed`` holds them, or None.

    The same computation without the rest of the report (serving, cost, the
    context-parallel ranks): the editor's chart asks it at a dozen document
    lengths an edit and reads two of its figures.
    """
    found = _CACHE.get((json.dumps(design.source, sort_keys=True, default=_plain), op))
    if found is not None:
        return found.packed
    check_budget(design, op)
    if op.packing is None or not (any(reads_documents(a) for a, _ in design.attentions()) or mixers_reset(design)):
        return None
    return _flops(design, matmul_flops(count_params(design).matmul), op.seq, op.packing, op)


_CACHE: dict = {}
_CACHE_SIZE = 256
_CACHE_LOCK = threading.Lock()


def clear_caches() -> None:
    """Forget every cached report (the sampler and block counts keep their own caches)."""
    _CACHE.clear()


def _plain(value):
    return dict(value)  # the design's read-only mappings


def _analyze(design: Design, op: OperatingPoint) -> Report:
    params = count_params(design)
    matmul = matmul_flops(params.matmul)
    flops = _flops(design, matmul, op.seq, None, op)
    packed = None
    if op.packing is not None and (any(reads_documents(a) for a, _ in design.attentions()) or mixers_reset(design)):
        packed = _flops(design, matmul, op.seq, op.packing, op)
    train = packed if packed is not None else flops
    per_token = train.train_per_token if op.count == "kept" else train.train_per_token_blocks
    # a rank scans the positions it holds as it multiplies their weights (the state passed between ranks: not modelled)
    cp = _context_parallel(design, op, matmul + flops.fwd_mixing, train) if op.cp is not None else None
    if cp is not None:
        per_token = cp.train_per_token  # the step waits for the slowest rank's blocks
    mtp = mtp_cost(design, op.seq, op.packing, op.seed)
    if mtp is not None:  # the modules train beside the model, on every token it trains on
        per_token += mtp.train_per_token
    tokens = op.tokens if op.tokens is not None else chinchilla_tokens(params.total)
    time = training_time(tokens, per_token, op.gpus, op.peak, op.mfu, op.price_per_gpu_hour)
    return Report(
        design=design.name,
        operating_point=op,
        params=params,
        flops=flops,
        packed=packed,
        training_tokens=tokens,
        training_seconds=time.seconds,
        gpu_hours=time.gpu_hours,
        cost=time.cost,
        serving_fwd_per_token=flops.fwd_per_token,
        per_stream=per_stream(design, op.seq, matmul, BYTES[op.serve_dtype]),
        warnings=tuple(w for w in (design.past_context(op.seq),) if w is not None),
        cp=cp,
        layers=tuple(layer_flops(design, op.seq, op.packing if packed is not None else None, op.seed))
        if mixers(design) else (),
        capacity=capacity_drops(design, op.seq, op.packing, op.seed, ROWS),
        mtp=mtp,
    )


def _context_parallel(design: Design, op: OperatingPoint, matmul: float, train: Flops) -> ContextParallelReport:
    documents = op.packing is not None and any(reads_documents(a) for a, _ in design.attentions())
    if op.cp.shard == "per-document" and not documents:
        why = "packing is off" if op.packing is None else "no mask reads a documents input"
        raise TensorcadError("cp.shard", f"per-document sharding splits each document, but {why} "
                                         "(one document a row): use headtail")
    attention = train.fwd_attention if op.count == "kept" else train.fwd_attention_blocks
    return context_parallel_report(
        design, op, matmul, attention,
        lambda a: op.packing if documents and reads_documents(a) else None, BYTES[op.train_dtype])


def render(report: Report):
    """A readable table of the report (rich)."""
    from rich.table import Table

    op = report.operating_point
    pack = ""
    if op.packing:
        source = f" read from {op.packing.lengths.source}" if op.packing.lengths is not None else ""
        pack = (f", packed {op.packing.mean:,.4g}-token documents (spread {op.packing.spread:.3g}){source}"
                f", {op.packing.strategy}")
    t = Table(title=as_text(f"{report.design} at {op.seq:,} tokens{pack}"), box=None, show_header=False, pad_edge=False)
    t.add_column(style="bold")
    t.add_column(justify="right")
    t.add_column()
    p = report.params
    t.add_row("params", f"{p.total:,}", f"embedding {p.embedding:,}, matmul {p.matmul:,}")
    f = report.flops
    t.add_row("forward / token", si(f.fwd_per_token, "FLOP"), "one document a row")
    t.add_row("  attention", si(f.fwd_attention, "FLOP"),
              f"{f.keys_per_query:,.1f} keys a query, {f.attention_share:.1%} of the forward pass")
    t.add_row("  in whole blocks", si(f.fwd_attention_blocks, "FLOP"), f"{f.block_ratio:.2f}x the kept scores")
    if f.fwd_mixing:
        t.add_row("  mixers", si(f.fwd_mixing, "FLOP"), "convolution taps and scans: the same for every token, "
                  "whatever the document length")
    for layer in report.layers:
        moves = ("the document length moves it" if layer.moves_with_documents
                 else "resets at each document" if layer.documents and layer.mixer != "attention"
                 else "reads no documents" if not layer.documents else "")
        packed = (f", packed {si(layer.packed_fwd_per_token, 'FLOP')}" if layer.packed_fwd_per_token is not None else "")
        t.add_row(f"  one {layer.block or layer.name} layer", si(layer.fwd_per_token, "FLOP"),
                  f"{layer.mixer}, {layer.layers} layer{'s' if layer.layers != 1 else ''}{packed}; {moves}")
    t.add_row("train / token", si(f.train_per_token, "FLOP"), "3 x forward")
    for drops in report.capacity:  # analysis.capacity: what a capacity factor turns away
        group = "row" if drops.scope == "row" else f"micro-batch of {drops.micro_batch} row(s)"
        packed = ("" if drops.packed is None else f"; packed {drops.packed:.3%}"
                  + (f" ± {100 * drops.packed_error:.2g} points" if drops.packed_error else " (exact)"))
        t.add_row(f"  {drops.node} drops", f"{drops.unpacked:.3%}",
                  f"of routings at capacity {drops.factor:g} a {group}, a balanced router; one document a row{packed}")
    if report.packed is not None:
        k = report.packed
        t.add_row("packed train / token", si(k.train_per_token, "FLOP"), "the training figure: cost counts from it")
        t.add_row("  packed attention", si(k.fwd_attention, "FLOP"),
                  f"{k.keys_per_query:,.1f} keys a query, {k.attention_share:.1%} of the forward pass")
        t.add_row("  in whole blocks", si(k.fwd_attention_blocks, "FLOP"), f"{k.block_ratio:.2f}x the kept scores")
        if k.packing is not None:
            s = k.packing
            t.add_row("  rows", f"{s['padding']:.2%} padding",
                      f"{s['truncated']:.2%} of documents truncated ({s['tokensDropped']:.2%} of tokens dropped), "
                      f"{s['split']:.2%} split, {s['documentsPerRow']:.2f} a row; figures per real token")
        if op.packing is not None and op.packing.lengths is not None:
            L = op.packing.lengths.summary()
            t.add_row("  lengths", f"{L['documents']:,} documents",
                      f"mean {L['mean']:,.1f}, spread {L['spread']:.3f}, p50 {L['p50']:,}, p90 {L['p90']:,}, "
                      f"p99 {L['p99']:,}, max {L['max']:,}")
    elif op.packing is not None:
        # Packed figures never vanish: without a document mask, a packed row costs what one long document does.
        t.add_row("packed train / token", si(f.train_per_token, "FLOP"),
                  "no mask reads a documents input: packed documents attend to each other, as one document a row")
    if op.count == "blocks":
        t.add_row("training counts", "whole blocks", "attention as the kernel computes it (--count blocks)")
    if report.cp is not None:
        c = report.cp
        t.add_row("context parallel", f"{c.cp.size} ranks", f"{c.cp.shard} sharding")
        t.add_row("  slowest / mean rank", f"{c.max_over_mean:.3f}", f"computed blocks (± {c.max_over_mean_error:.3f})"
                  + ("" if c.kept_max_over_mean is None else f"; kept scores {c.kept_max_over_mean:.3f}"))
        t.add_row("  blocks a rank", f"{min(c.blocks):,.0f} .. {max(c.blocks):,.0f}", "a row, per layer")
        if c.padding_tokens:
            t.add_row("  padding", f"{c.padding_tokens:,.0f}", f"tokens a row ({c.padding_tokens / op.seq:.1%}); "
                      f"{c.document_padding_tokens:,.0f} take documents to multiples of {2 * c.cp.size}")
        t.add_row("  KV gathered", binary_bytes(c.kv_gather_bytes_per_layer), "a rank, a layer")
        t.add_row("  train / token", si(c.train_per_token, "FLOP"),
                  f"counted from the slowest rank ({c.slowest_over_balanced:.2f}x the row's own attention)")
        for case in c.pytorch:  # what PyTorch will do here, said before launch
            t.add_row("  PyTorch", case.case, case.message)
    if report.mtp is not None:
        m = report.mtp
        t.add_row(f"MTP modules ({m.depth})", f"{m.params.total:,}", f"params apart; train {si(m.train_per_token, 'FLOP')} "
                  "a token beside the model's, counted in the training time")
    budget = "the budget set" if op.tokens is not None else "default: Chinchilla's 20 a parameter (--tokens)"
    t.add_row("training tokens", f"{report.training_tokens:,.0f}", budget)
    t.add_row("training time", duration(report.training_seconds),
              f"{op.gpus:,} x {op.hardware} {op.train_dtype} at {op.mfu:.0%} MFU")
    t.add_row("GPU-hours", quantity(report.gpu_hours),
              f"{money(report.cost)} at ${op.price_per_gpu_hour:g}/GPU-hour")
    t.add_row("serving / token", si(report.serving_fwd_per_token, "FLOP"), "one document a sequence")
    if report.per_stream is not None:
        s = report.per_stream
        t.add_row("  KV cache / stream", binary_bytes(s.kv_cache_bytes), f"{op.serve_dtype} at full context")
        if s.state_bytes is not None:
            t.add_row("  mixer state / stream", binary_bytes(s.state_bytes), f"{op.serve_dtype}, the same at any context")
        t.add_row("  decode / token", si(s.decode_flops_per_token, "FLOP"), "at full context")
    return t
