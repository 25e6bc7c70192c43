"""The plain assertion functions: usable from any test runner, no pytest needed.

Each raises ``AssertionError`` with a message that says what disagreed and by
how much. The work is done by the pieces that own it: isolation by
``tensorcad.runtime.isolation``, block-mask agreement by
``tensorcad.runtime.blockmask``, keys per query by the analysis; this module
chooses the right oracle and words the failure. torch is imported only when
an isolation or block-count check runs.
"""

from __future__ import annotations

from dataclasses import replace

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tensorcad.design.expr.nodes import Compare, Read, Var
from tensorcad.design.model import Attention, Design
from tensorcad.errors import TensorcadError


class NotApplicable(TensorcadError):
    """The check has nothing to hold the design to (a certifier reports it as a skip)."""


class NoClosedForm(NotApplicable):
    """The design keeps scores no closed form in ``tensorcad.closed_form`` describes."""


# --- isolation --------------------------------------------------------------------------


def _vocab_of(model_fn: Any, ids: Any) -> int:
    """The token range a perturbation may draw from: the model's own, else what the batch shows."""
    config = getattr(model_fn, "config", None)
    for name in ("vocab", "vocab_size"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 1:
            return value
    return max(2, int(ids.max()) + 1)


def assert_isolated(
    model_fn: Callable[..., Any],
    ids: Any,
    documents: Any = None,
    positions: Any = None,
    *,
    forms: Iterable[str] | None = None,
    vocab: int | None = None,
    sample: int | None = None,
    seed: int = 0,
) -> list[Any]:
    """Packed documents never see each other: changing one moves no other's outputs.

    ``model_fn(ids, documents, positions) -> (B, T, ...)``: a generated model,
    a hand-written one, or a Hugging Face model wrapped to take position ids
    and a 4D mask. ``ids`` may be the whole batch ``(ids, documents[, positions])``
    (the ``tensorcad_batch`` fixture). Every document of every row is changed in
    turn (at most ``sample`` a row, seeded, for long rows). With ``forms``, a
    model with a ``form`` attribute is checked in each form and left as it was.
    Returns the ``IsolationResult`` of each form checked.
    """
    if documents is None and isinstance(ids, (tuple, list)):
        if not 2 <= len(ids) <= 3:
            raise TypeError("a batch is (ids, documents) or (ids, documents, positions)")
        ids, documents, *rest = ids
        positions = rest[0] if rest else positions
    if documents is None:
        raise TypeError("assert_isolated needs the documents of each position (B, T)")
    from tensorcad.runtime.isolation import check_isolation  # torch, on first use

    vocab = vocab if vocab is not None else _vocab_of(model_fn, ids)
    wanted = list(forms) if forms is not None else [None]
    if forms is not None and not hasattr(model_fn, "form"):
        raise TypeError(
            f"forms={wanted!r} asks for a model with a 'form' attribute (a generated model); "
            f"{type(model_fn).__name__} has none"
        )
    original = getattr(model_fn, "form", None)
    results, failures = [], []
    try:
        for form in wanted:
            if form is not None:
                model_fn.form = form
            result = check_isolation(model_fn, ids, documents, positions,
                                     vocab=vocab, sample=sample, seed=seed)
            results.append(result)
            if not result.passed:
                label = f"form {form!r}: " if form is not None else ""
                failures.append(label + result.message())
    finally:
        if forms is not None:
            model_fn.form = original
    if failures:
        raise AssertionError("documents are not isolated\n" + "\n".join(failures))
    return results


# --- keys per query against a closed form -----------------------------------------------


def _is_document_equality(attention: Attention) -> bool:
    """Whether the design's mask is exactly ``doc(b, q) == doc(b, kv)`` over a documents input."""
    mask = attention.mask
    if not isinstance(mask, Compare) or mask.op != "==":
        return False
    sides = (mask.left, mask.right)
    if not all(isinstance(s, Read) and not s.table and len(s.index) == 2 for s in sides):
        return False
    if sides[0].port != sides[1].port:
        return False
    wire = attention.tensors.get(sides[0].port)
    if wire is None or wire.role != "documents":
        return False
    indices = {tuple(i.name if isinstance(i, Var) else None for i in s.index) for s in sides}
    return indices == {("b", "q"), ("b", "kv")}


def closed_form_keys(attention: Attention, seq: int, packing: Any) -> tuple[float, str]:
    """The exact keys a query keeps for one attention, and the closed form that gave it."""
    from tensorcad import closed_form as cf
    from tensorcad.analysis.report import reads_documents

    packed = packing is not None and reads_documents(attention)
    if attention.mask is not None and not _is_document_equality(attention):
        raise NoClosedForm(attention.path, "the mask is not doc(b, q) == doc(b, kv); no closed form applies")
    if not packed:
        # One document a row: the document mask keeps everything causality and the window keep.
        if attention.window is not None:
            w = min(attention.window, seq)
            return cf.window(seq, w, attention.causal), f"window(seq={seq}, w={w}, causal={attention.causal})"
        if attention.causal:
            return cf.causal(seq), f"causal(seq={seq})"
        return cf.full(seq), f"full(seq={seq})"
    if not attention.causal or attention.window is not None:
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


EXACT_REL = 1e-6  # causal, window, full and fixed-length packing: the engine counts them exactly
GAMMA_REL = 0.01  # gamma lengths: the stream's quantile strata against the continuous distribution


def assert_closed_form(design: Any, operating_point: Any, rel: float | None = None) -> tuple[float, float]:
    """The engine's keys per query equals the closed form for the design, within ``rel``.

    Causal, window and full attention are exact; fixed-length packed
    documents are held to the phase average, gamma lengths to the
    edge-corrected form. ``rel`` defaults to what the engine achieves: 1e-6
    for the exact forms, 1% for gamma lengths (docs/packing.md measures
    under 0.1% at ordinary lengths). Raises ``NoClosedForm`` for a mask none
    describes. Returns (engine, closed form).
    """
    from tensorcad.design import load

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
    return got, expected


# --- block counts against create_block_mask ------------------------------------------------


def describe_blocks(result: Any) -> str:
    """One line of a ``BlockAgreement``: both counts, and the rows they differ on."""
    line = (f"{result.rows} rows x {result.heads} heads at {result.seq}: create_block_mask computes "
            f"{result.torch_full} full + {result.torch_partial} partial blocks, the engine "
            f"{result.engine_full} + {result.engine_partial}")
    if result.mismatched_rows:
        shown = ", ".join(str(r) for r in result.mismatched_rows[:8])
        line += f"; rows that differ: {shown}{' ...' if len(result.mismatched_rows) > 8 else ''}"
    line += (f"; scores in computed blocks a row: engine {result.engine_total_computed:.6g}, "
             f"torch {result.torch_computed:.6g}")
    return line


def assert_block_counts_agree(design: Any, operating_point: Any, rows: int = 64, *,
                              params: int | None = None) -> list[Any]:
    """The engine's blocks computed equal those of FlexAttention's ``create_block_mask``.

    The mask is the model's own: the design is scaled to about ``params``
    parameters, built, and the mask_mod its forward pass hands to ``attend`` is
    rebuilt over ``rows`` rows of the operating point's packing (the rows the
    engine counts), then counted by ``create_block_mask`` and by the engine
    (``tensorcad.runtime.blockmask``). Every row must agree block for block.
    Returns the ``BlockAgreement`` of each mask compared.
    """
    from tensorcad.design import load
    from tensorcad.runtime.blockmask import captured_masks, compare_blocks, mask_factory

    from .fixtures import Settings, build_model, draw_batch

    design = load(design)
    settings = Settings(seq=operating_point.seq, seed=operating_point.seed, rows=1,
                        **({"params": params} if params is not None else {}))
    model = build_model(design, settings, "flex")
    small = model.design
    # The forward pass only hands over the mask: a short batch the scaled model holds will
    # do; the mask is then rebuilt over rows of the operating point's own length.
    capture = replace(settings, seq=min(operating_point.seq, small.context))
    ids, documents, positions = draw_batch(small, capture)
    inputs = {"ids": ids, **{role: t for role, t in (("documents", documents), ("positions", positions))
                             if small.input(role) is not None}}
    masks = captured_masks(model.module, inputs)
    if not masks:
        raise NotApplicable("nodes", "the model hands no mask to attention: no blocks to compare")
    # One mask_mod per distinct mask, in the order the layers call them; the design's
    # attentions with distinct masks come in the same order.
    attentions: list[Attention] = []
    for attention, _ in small.attentions():
        if attention.keep is not None and all(a.keep != attention.keep for a in attentions):
            attentions.append(attention)
    pairs = list(zip(attentions, masks)) if len(attentions) == len(masks) else [(attentions[0], masks[0])]
    namespace = type(model.module).forward.__globals__
    results, failures = [], []
    for attention, mask_mod in pairs:
        maker = mask_factory(mask_mod, namespace, {"documents": inputs.get("documents"),
                                                   "positions": inputs.get("positions")})
        result = compare_blocks(attention, maker, operating_point.seq, operating_point.packing,
                                seed=operating_point.seed, rows=rows)
        results.append(result)
        if not result.passed:
            failures.append(f"{attention.path}: {describe_blocks(result)}")
    if failures:
        raise AssertionError(f"{design.name}: block counts disagree\n" + "\n".join(failures))
    return results


__all__: Sequence[str] = ("NoClosedForm", "NotApplicable", "assert_block_counts_agree", "assert_closed_form", "assert_isolated")
