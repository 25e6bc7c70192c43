"""The checks `tensorcad verify` runs besides certify's: forward, flops, fused-equals-eager.

(kept-scores, its fourth, is with block-counts in `mask_checks`.)
"""

from __future__ import annotations

import math

from tensorcad.runtime.building.subject import Subject

from ..outcome import Check, failed, passed

FUSED_TOLERANCE = 1e-5


def forward_check(s: Subject) -> Check:
    import torch

    model = s.model("flex").module
    with torch.no_grad():
        logits = model(**s.inputs)
    rows, seq = s.inputs["ids"].shape
    expected = (rows, seq, model.config.vocab_size)
    paths = dict(getattr(type(model), "runtime_paths", None) or {})
    figures = {"shape": list(logits.shape), "finite": bool(torch.isfinite(logits).all()),
               "inputs": sorted(s.inputs), "paths": paths}
    documents = s.inputs.get("documents")
    if documents is not None:
        figures["documents"] = int(sum(len(torch.unique(r)) for r in documents))
    if tuple(logits.shape) != expected:
        return failed("forward", f"logits shaped {tuple(logits.shape)}, expected {expected}", figures)
    if not figures["finite"]:
        return failed("forward", "logits hold NaN or infinity", figures)
    return passed("forward", f"logits {expected}, finite", figures)


def flops_check(s: Subject) -> Check:
    from tensorcad.design.masks import reads_documents
    from tensorcad.design.mixers import reads_documents as mixers_reset
    from tensorcad.runtime.building.profile import profile

    uses = any(reads_documents(a) for a, _ in s.small.attentions()) or mixers_reset(s.small)
    p = profile(s.model("flex").module, s.small, s.inputs, s.packing if uses else None, seed=s.settings.seed)
    figures = p.to_json()
    if not p.matmul_agrees:
        return failed("flops", f"linear layers counted {p.matmul:,} FLOPs; the analysis says "
                               f"2 × params.matmul × B × T = {p.expected_matmul:,}", figures)
    if not p.attention_agrees:
        mixing = f" and the mixers' taps and scans {p.mixing:,}" if p.mixing else ""
        return failed("flops", f"attention counted {p.attention:,} FLOPs; the eager form computes "
                               f"{p.dense_attention:,} (every score, then masked){mixing}", figures)
    if p.other:
        return failed("flops", f"{p.other:,} FLOPs in ops that are neither linear nor attention: {p.by_op}", figures)
    return passed("flops", f"linear {p.matmul:,} = 2·matmul params·B·T; attention {p.attention:,} dense "
                           f"(analysis: {p.kept_attention:,.0f} kept, {p.block_attention:,.0f} in blocks)", figures)


def fused_check(s: Subject) -> Check:
    import torch

    model = s.model("flex").module
    with torch.no_grad():
        model.form = "flex"
        flex = model(**s.inputs)
        model.form = "eager"
        eager = model(**s.inputs)
        model.form = "flex"
    largest = float((flex - eager).abs().max())
    figures = {"largestDifference": largest, "tolerance": FUSED_TOLERANCE}
    if not largest <= FUSED_TOLERANCE or math.isnan(largest):
        return failed("fused-equals-eager", f"flex and eager logits differ by {largest:.3g} "
                                            f"(tolerance {FUSED_TOLERANCE:g})", figures)
    return passed("fused-equals-eager", f"largest difference {largest:.3g}", figures)
