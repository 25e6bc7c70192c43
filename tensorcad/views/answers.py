"""What each command answers as JSON: one function a command, called by the CLI's ``--json`` and the MCP tools alike.

So that a figure cannot differ between the two surfaces, neither builds its
JSON itself: ``tensorcad analyze --json`` and the MCP ``analyze`` tool both
print ``analysis(design, op)``. Each takes engine values (a loaded design, an
``OperatingPoint``) and returns plain JSON; bad input is a ``TensorcadError``.
Nothing here imports torch, except ``certificate``'s caller.
"""

from __future__ import annotations

from typing import Any

from tensorcad.errors import TensorcadError, did_you_mean, shown


def presets() -> list[dict]:
    """Every shipped design: name, parameters, context and description."""
    from tensorcad.analysis.params import count_params
    from tensorcad.design import load, preset_names

    rows = []
    for name in preset_names():
        design = load(name)
        rows.append({"name": name, "params": count_params(design).total, "context": design.context,
                     "description": design.source.get("description", "")})
    return rows


def check_kind(kind: str | None, path: str = "kind") -> None:
    from tensorcad.design.catalog import KINDS

    if kind is not None and kind not in KINDS:
        raise TensorcadError(path, f"unknown kind {shown(kind)}{did_you_mean(kind, KINDS)} (kinds: {', '.join(KINDS)})")


def catalog(kind: str | None = None) -> dict:
    """The catalog's text (of every kind, or one) and the kinds it describes."""
    from tensorcad.design.catalog import KINDS, catalog_text

    check_kind(kind)
    names = [kind] if kind is not None else list(KINDS)
    return {"kinds": [{"name": n, "doc": KINDS[n].doc} for n in names], "text": catalog_text(kind)}


def show(design) -> dict:
    """The resolved design as `tensorcad show` prints it."""
    from tensorcad.design import show as show_design

    return {"name": design.name, "text": show_design(design)}


def validation(design) -> dict:
    """What `validate` says of a design that loads: its name, nodes, context and inputs."""
    return {"ok": True, "name": design.name, "nodes": len(design.nodes), "context": design.context,
            "inputs": [{"name": i.name, "role": i.role} for i in design.inputs]}


def analysis(design, op) -> dict:
    """The report: params, FLOPs, training, serving, and the context-parallel figures when op.cp is set."""
    from tensorcad.analysis.report import analyze

    return analyze(design, op).to_json()


def diagnostics(design, op) -> list[dict]:
    """Every rule's finding at the operating point: [{rule, severity, message, path}]."""
    from tensorcad.rules import check

    return [d.to_json() for d in check(design, op)]


def codegen(design, scale: int | None = None, scale_path: str = "scale") -> dict:
    """The design's PyTorch module (shrunk to about ``scale`` parameters first, when given)."""
    from tensorcad.codegen import generate

    if scale is not None:
        from tensorcad.runtime.building.scaling import scale as shrink  # no torch: scaling rewrites the design

        try:
            design = shrink(design, params=scale)
        except TensorcadError as e:
            raise TensorcadError(scale_path if e.path == "params" else e.path, e.message) from None
    return {"name": design.name, "scale": scale, "source": generate(design)}


def walkthrough(design, op) -> dict:
    """What each stage a token meets does, in words with its figures, at the operating point."""
    from tensorcad.analysis.report import analyze

    from .walkthrough import walkthrough as steps

    return {"design": design.name, "operatingPoint": op.to_json(), "steps": steps(design, analyze(design, op))}


def mask_preview(design, op, attention: Any = 0, cells: Any = None, head: Any = 0) -> dict:
    """One sampled row's mask for one attention, as the kept fraction of each of ``cells x cells`` cells."""
    from tensorcad.design.expr import to_text
    from tensorcad.design.masks import reads_documents

    from .preview import DEFAULT_CELLS, mask_preview as preview, sample_row

    attentions = design.attentions()
    if not attentions:
        raise TensorcadError("attention", "the design has no attention to preview")
    if isinstance(attention, bool) or not isinstance(attention, int) or not 0 <= attention < len(attentions):
        raise TensorcadError("attention", f"expected an integer in [0, {len(attentions) - 1}], got {shown(attention)}")
    chosen, layers = attentions[attention]
    # Packing is a condition of training: only a mask that reads documents sees it.
    packing = op.packing if reads_documents(chosen) else None
    row = sample_row(op.seq, packing, op.seed)
    result = preview(chosen, row, DEFAULT_CELLS if cells is None else cells, head)
    starts = [int(t) for t in (row.documents[1:] != row.documents[:-1]).nonzero()[0] + 1]
    return {
        "design": design.name, "attention": attention, "path": chosen.path, "layers": layers, "head": head,
        "keeps": to_text(chosen.keep) if chosen.keep is not None else "every score",
        "seq": result.seq, "cells": result.fractions.shape[0], "cellTokens": result.cell, "exact": result.exact,
        "stride": result.stride, "sampled": row.sampled,
        "sample": "one sampled row of the packing" if row.sampled else "one document fills the row",
        "packing": None if packing is None else packing.to_json(),
        "documents": len(starts) + 1, "documentStarts": starts[:4096],
        "fractions": [[round(float(x), 6) for x in line] for line in result.fractions],
    }


def lengths_summary(lengths) -> dict:
    """What `tensorcad lengths` says of a length distribution: documents, tokens, mean, spread, quantiles, max."""
    summary = lengths.summary()
    return {"documents": lengths.documents, "tokens": lengths.tokens,
            **{k: v for k, v in summary.items() if k != "documents"}}


def certificate(subject, checks) -> dict:
    """One design's (or model's) certification: whether it passed, at which settings, and each check's outcome."""
    name = subject.design.name if subject.design is not None else subject.name
    answer = {"design": name, "passed": all(c.status != "failed" for c in checks),
              "settings": subject.settings.to_json(), "checks": [c.to_json() for c in checks]}
    if subject.design is None:  # a user's model: which call of it was certified (tensorcad.hf.calls)
        answer["call"] = subject.call_line
    return answer


def certify_subject(design, settings, seq_path: str = "--seq"):
    """The design scaled and built at ``settings``, refusing a seq the scaled model cannot hold (one line)."""
    from tensorcad.runtime.building.subject import Subject

    subject = Subject(design, settings)
    context = subject.small.context
    if settings.seq is not None and not 1 <= settings.seq <= context:
        raise TensorcadError(seq_path, f"{settings.seq} is outside 1..{context:,}, the positions "
                                       f"{design.name} holds once scaled")
    return subject


def certify_checks(export: bool = False) -> tuple[str, ...]:
    """What `tensorcad certify` runs: the registry's certify checks less the goldens (pytest owns those
    files), and the opt-in ones (``export``) when asked for."""
    from tensorcad.runtime.certification.registry import CERTIFY, GOLDENS, OPT_IN  # no torch at import

    return tuple(n for n in CERTIFY if n not in GOLDENS) + (OPT_IN if export else ())
