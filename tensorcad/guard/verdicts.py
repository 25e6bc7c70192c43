"""One-line verdicts: what a layer did wrong, the setting that made it, and the fix.

The recorded path is the ground truth of what happened (documents kept apart or
not, a window kept or lost); the batch audit says why. A finding that would
switch packing off is reported through the first layer it reached, so the
verdict reads "layer 0 (full) ran sdpa with is_causal: packing is off because
an all-ones attention_mask was passed beside position_ids; drop it". Where the
kernel was given the documents and the certificates still fail (run on a
replica with the same attention implementation, or on the model), the kernel
itself ignores them.
"""

from __future__ import annotations

from typing import Any

from .audit import Finding
from .path import LayerPath


def _because(finding: Finding) -> str:
    line = finding.line
    return f"packing is off because {line[0].lower()}{line[1:]}"


def _also(count: int) -> str:
    return f" (and {count} more layer{'s' if count > 1 else ''})" if count else ""


def path_verdicts(paths: list[LayerPath], findings: list[Finding]) -> list[str]:
    """The lines for layers that let documents see each other or lost their window."""
    lines = []
    crossing = [p for p in paths if p.documents_apart is False]
    if crossing:
        cause = next((f for f in findings if f.switches_packing_off), None)
        if cause:
            why = _because(cause)
        elif crossing[0].mask in ("mask_mod", "BlockMask"):
            why = (f"the {crossing[0].mask} reaching it keeps keys of other documents: its document conjunct "
                   "(doc(b, q) == doc(b, kv)) is missing")
        else:
            why = ("documents see each other there, and nothing in the batch or its settings explains it: check "
                   "the attention implementation")
        lines.append(f"{crossing[0].ran()}: {why}{_also(len(crossing) - 1)}")
    lost = [p for p in paths if p.window_lost and p.documents_apart is not False]
    if lost:
        p = lost[0]
        given = next((f for f in findings if f.setting == "attention_mask" and not f.switches_packing_off), None)
        fix = ("the 4D attention_mask the batch passes holds no window: pass restarting position_ids and no mask "
               "(transformers builds each layer's own), or build the window into the mask") if given else (
               "the mask reaching the kernel holds no window")
        lines.append(f"{p.ran()}: its window of {p.window} is lost (a query reached {p.reach} tokens back inside "
                     f"its document); {fix}{_also(len(lost) - 1)}")
    return lines


def certificate_verdicts(results: dict[str, Any], paths: list[LayerPath], on: str,
                         router: str | None = None) -> list[str]:
    """The lines for failed certificates; ``on``: what they ran on ('the replica', 'the model'); ``router``: a
    mixture-of-experts layer that dropped routings on the batch (then it, not the attention, is the cause)."""
    lines = []
    apart = bool(paths) and not any(p.documents_apart is False or p.window_lost for p in paths)
    labels = "step[labels]" in results and not results["step[labels]"].passed  # then the loss fails for them
    for name, result in results.items():
        if result.passed:
            continue
        head = result.message().splitlines()[0]
        if apart and not labels and router is not None:
            lines.append(f"{name} failed on {on}: {head}; {router}")
        elif apart and not labels:
            implementations = sorted({p.implementation for p in paths})
            lines.append(f"{name} failed on {on}: {head}; no mask reaching {', '.join(implementations)} lets "
                         "documents see each other, so the attention implementation itself ignores them "
                         "(position_ids and mask): use sdpa, eager or flex_attention")
        else:
            lines.append(f"{name} failed on {on}: {head}")
    return lines


def verdicts(paths: list[LayerPath], findings: list[Finding], results: dict[str, Any] | None = None,
             on: str = "the replica", router: str | None = None) -> list[str]:
    """Every failing line: the path's, then the findings that stand alone, then the certificates'."""
    lines = path_verdicts(paths, findings)
    for f in findings:
        if f.switches_packing_off and paths:
            continue  # the path says whether it did: reported above through the layer it reached
        if f.setting == "attention_mask" and not f.switches_packing_off:
            continue  # a 4D mask is a cause only: the path shows what it did
        lines.append(f"{f.setting}: {f.line}")
    if results:
        covered = bool(lines)
        certificate_lines = certificate_verdicts(results, paths, on, router)
        lines += certificate_lines if not covered else [f"(confirmed: {line})" for line in certificate_lines]
    return lines
