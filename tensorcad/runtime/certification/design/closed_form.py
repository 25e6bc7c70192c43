"""The engine's keys per query held to closed forms, and to a brute-force count.

`closed-form` (a check of `runtime.certification`, and `tensorcad.testing.assert_closed_form`):
causal, window and full attention over one document a row are held to
`tensorcad.closed_form` and, at a small length, to every score of the
attention's own mask evaluated one by one (numpy, no engine), so a formula is
never compared only with its own copy; packed document-causal attention to the
phase average (fixed lengths) or the edge-corrected form (gamma lengths). No torch.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tensorcad.design import load
from tensorcad.design.masks import facts, reads_documents
from tensorcad.design.model import Attention, Design
from tensorcad.errors import TensorcadError

EXACT_REL = 1e-6  # causal, window, full and fixed-length packing: the engine counts them exactly
GAMMA_REL = 0.01  # gamma lengths: the stream's quantile strata against the continuous distribution
BRUTE_SEQ = 256  # the length at which every score of an unpacked mask is counted one by one


class NotApplicable(TensorcadError):
    """The check has nothing to hold the design to (a certifier reports it as a skip)."""


class NoClosedForm(NotApplicable):
    """The design keeps scores no closed form in ``tensorcad.closed_form`` describes."""


def closed_form_keys(attention: Attention, seq: int, packing: Any) -> tuple[float, str]:
    """The exact keys a query keeps for one attention, and the closed form that gave it."""
    from tensorcad.packing import closed_form as cf

    mask = facts(attention)
    packed = packing is not None and mask.reads_documents
    if attention.mask is not None and not mask.same_document:
        raise NoClosedForm(attention.path, "the mask is not doc(b, q) == doc(b, kv); no closed form applies")
    if not packed:
        # One document a row: the document mask keeps everything causality and the window keep.
        if attention.window is not None:
            w = min(attention.window, seq)
            return cf.window(seq, w, attention.causal), f"window(seq={seq}, w={w}, causal={attention.causal})"
        if attention.causal:
            return cf.causal(seq), f"causal(seq={seq})"
        return cf.full(seq), f"full(seq={seq})"
    if not mask.document_causal:
        raise NoClosedForm(attention.path, "packed documents with a window or without causality have no closed form")
    if packing.spread == 0:
        # The packing draws whole-token lengths, the mean rounded half up (packing.document_lengths).
        length = max(1, math.floor(packing.mean + 0.5))
        return cf.fixed_phase_average(seq, length), f"fixed_phase_average(seq={seq}, length={length})"
    return (cf.edge_corrected(seq, packing.mean, packing.spread),
            f"edge_corrected(seq={seq}, mean={packing.mean:g}, spread={packing.spread:g})")


def expected_keys_per_query(design: Design, op: Any) -> tuple[float, list[str]]:
    """The closed-form keysPerQuery of the whole design: attentions weighted as the report weights them."""
    total = weight = 0.0
    names = []
    for attention, layers in design.attentions():
        keys, name = closed_form_keys(attention, op.seq, op.packing)
        w = layers * attention.heads * attention.head_dim  # attention FLOPs are linear in keys x this
        total += w * keys
        weight += w
        if name not in names:
            names.append(name)
    if not weight:
        raise NoClosedForm("nodes", "the design has no attention")
    return total / weight, names


def engine_keys_per_query(design: Design, op: Any) -> tuple[float, str]:
    """The engine's keysPerQuery: packed when packing is on and a mask reads documents."""
    from tensorcad.analysis.report import analyze

    flops = analyze(design, op).to_json()["flops"]
    if "packed" in flops:
        return flops["packed"]["keysPerQuery"], "flops.packed.keysPerQuery"
    return flops["keysPerQuery"], "flops.keysPerQuery"


def brute_force_keys(attention: Attention, seq: int) -> float:
    """Keys a query keeps in one row holding one document, every score of the mask evaluated.

    The attention's own kept-score expression at every (query, key) through the numpy
    interpreter, with the documents of the row all 0 and its positions 0..seq-1: no
    formula, no sampler, no engine.
    """
    from tensorcad.design.expr import Const, Env, evaluate

    keep = attention.keep if attention.keep is not None else Const(True)
    row = {"documents": np.zeros((1, seq), dtype=np.int64),
           "positions": np.arange(seq, dtype=np.int64)[None, :]}
    tensors = {port: row[role] for port, role in facts(attention).reads.items() if role in row}
    q, kv = np.arange(seq)[:, None], np.arange(seq)[None, :]
    kept = np.broadcast_to(evaluate(keep, Env(b=0, h=0, q=q, kv=kv, tensors=tensors)), (seq, seq))
    return float(np.count_nonzero(kept)) / seq


def _check_brute_force(design: Design, op: Any) -> None:
    """Unpacked attentions: the engine and the closed form at BRUTE_SEQ against counting every score."""
    from tensorcad.analysis.attention import keys_per_query

    seq = min(op.seq, BRUTE_SEQ)
    for attention, _ in design.attentions():
        if op.packing is not None and reads_documents(attention):
            continue
        counted = brute_force_keys(attention, seq)
        closed, name = closed_form_keys(attention, seq, None)
        engine = keys_per_query(attention, seq, None, seed=op.seed).mean
        if not (math.isclose(closed, counted, rel_tol=1e-12) and math.isclose(engine, counted, rel_tol=1e-12)):
            raise AssertionError(
                f"{attention.path}: at seq {seq}, counting every score keeps {counted:.6g} keys a query; "
                f"the closed form {name} gives {closed:.6g} and the engine {engine:.6g}")


def assert_closed_form(design: Any, operating_point: Any, rel: float | None = None) -> tuple[float, float]:
    """The engine's keys per query equals the closed form for the design, within ``rel``.

    Causal, window and full attention are exact, and are also counted score by
    score at a small length; fixed-length packed documents are held to the phase
    average, gamma lengths to the edge-corrected form. ``rel`` defaults to what
    the engine achieves: 1e-6 for the exact forms, 1% for gamma lengths
    (docs/packing.md measures under 0.1% at ordinary lengths). Raises
    ``NoClosedForm`` for a mask none describes. Returns (engine, closed form).
    """
    __tracebackhide__ = True  # under pytest a failure shows the test's line and this message
    design = load(design)
    expected, names = expected_keys_per_query(design, operating_point)
    if rel is None:
        rel = GAMMA_REL if any(n.startswith("edge_corrected") for n in names) else EXACT_REL
    got, figure = engine_keys_per_query(design, operating_point)
    difference = abs(got - expected) / expected
    if not difference <= rel:
        raise AssertionError(
            f"{design.name}: {figure} is {got:.6g} but the closed form {' + '.join(names)} "
            f"gives {expected:.6g} (relative difference {difference:.3g} > rel={rel:g})"
        )
    _check_brute_force(design, operating_point)
    return got, expected
