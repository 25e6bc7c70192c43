"""``torch.export`` of a built model, in each of its forms.

The eager form is the one expected to export everywhere: plain matmuls and
indexing. The flex form is tried too and reported for what it is. A failure is
reported by the first line of its message, never a traceback, and an exported
program is run once and held to the model it came from.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ExportResult:
    form: str
    exported: bool
    ops: int  # call_function nodes in the exported graph
    seconds: float
    attention: str | None  # the path attend took while tracing (RUNTIME_PATHS), e.g. "flex" or "eager"
    matches: bool | None  # the exported program's outputs equal the model's (None when not exported)
    largest_difference: float | None
    error: str | None  # first line of the failure

    def to_json(self) -> dict:
        return {"form": self.form, "exported": self.exported, "ops": self.ops, "attention": self.attention,
                "seconds": round(self.seconds, 3), "matches": self.matches,
                "largestDifference": self.largest_difference, "error": self.error}


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(error).__name__}: {line}"[:300]


def export_form(model: torch.nn.Module, inputs: dict[str, torch.Tensor], form: str, *,
                atol: float = 1e-5) -> ExportResult:
    """Export ``model`` in ``form`` with ``inputs`` (forward's keyword arguments) as its example."""
    previous = getattr(model, "form", None)
    paths = getattr(type(model), "runtime_paths", None)
    paths = paths if paths is not None else {}
    start = time.perf_counter()
    try:
        if previous is not None:
            model.form = form
        paths.pop("attend", None)
        # Traced without grad: with it, the flex form on CPU would fall back to the eager
        # arithmetic (flex_attention has no CPU backward) and "flex" would export eager.
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            program = torch.export.export(model, (), kwargs=dict(inputs))
        attention = paths.get("attend")
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            expected = model(**inputs)
            got = program.module()(**inputs)
        ops = sum(1 for node in program.graph.nodes if node.op == "call_function")
        difference = float((got - expected).abs().max()) if got.shape == expected.shape else float("inf")
        return ExportResult(form, True, ops, time.perf_counter() - start, attention,
                            difference <= atol, difference, None)
    except Exception as error:  # noqa: BLE001 - any failure to export is the finding
        return ExportResult(form, False, 0, time.perf_counter() - start, paths.get("attend"), None, None,
                            first_line(error))
    finally:
        if previous is not None:
            model.form = previous


def export_model(model: torch.nn.Module, inputs: dict[str, torch.Tensor], forms=("eager", "flex")) -> list[ExportResult]:
    return [export_form(model, inputs, form) for form in forms]
