"""What the step certificates accept before any work: tolerances, ``alone``, the batch's size and vocabulary.

Each is checked where `certify_step` is entered, so a bad value is one line
naming it (``rtol: ...``, ``batch.labels: ...``) instead of torch's error from
deep inside a check, or worse, a pass: ``rtol=1e300`` passed a model whose
documents see each other.

- Tolerances are finite, not negative, and at most ``MAX_RTOL`` / ``MAX_ATOL``:
  bfloat16's own gradient tolerance is 0.1 (`loop.GRADIENT_RTOL`); past it a
  tolerance stops meaning "the same computation, rounded differently"
  (``rtol=1e300`` and ``atol=inf`` passed a model whose documents see each other).
- ``alone`` is callable; on a Hugging Face model a document alone is the
  model's own forward, so an ``alone`` there would be ignored: refused.
- A batch holds at most ``MAX_STEP_DOCUMENTS`` documents: each runs alone, once
  a certificate, with a backward for the gradients (4,096 two-token documents
  took 14 s on a one-layer model and past 60 s a certificate on a tiny Llama).
- Ids and labels lie in the model's vocabulary (labels may be -100): found from
  a Hugging Face model's embeddings, else from the width of one forward's
  outputs on the batch (no gradient), whose own index error names the ids.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from tensorcad.errors import TensorcadError, shown

MAX_RTOL = 0.1  # bfloat16's gradient tolerance, the loosest the certificates use themselves
# On a loss (added to rtol x |loss|): a one-layer model attending across documents moved its loss by 0.049, which
# 0.01 still catches; rtol = 0.1 on that loss would not (its gradient, 0.41 of its norm off, fails at any rtol here).
MAX_ATOL = 0.01
MAX_STEP_DOCUMENTS = 1_024  # documents of one certified batch (micro-batches together), each run alone


def check_tolerance(name: str, value: Any, ceiling: float) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 <= value <= ceiling:
        raise TensorcadError(name, f"expected a finite tolerance in 0..{ceiling:g}, got {shown(value)}: a looser one "
                                   "passes documents that see each other")


def check_alone(alone: Any, hf: bool) -> None:
    if alone is None:
        return
    if hf:
        raise TensorcadError("alone_fn", "a Hugging Face model runs each document alone through its own forward "
                                         "(model(input_ids=...)); an alone_fn would be ignored: drop it, or certify "
                                         "an adapted model_fn")
    if not callable(alone) or isinstance(alone, (str, bytes)):
        raise TensorcadError("alone", f"expected a callable (ids, documents, positions) -> outputs, got "
                                      f"{shown(alone, 60)}")


def check_documents(count: int) -> None:
    if count > MAX_STEP_DOCUMENTS:
        raise TensorcadError("batch", f"{count:,} documents, more than the {MAX_STEP_DOCUMENTS:,} the step "
                                      "certificates run alone one by one: certify a smaller batch (a few rows)")


def _first_outside(values: torch.Tensor, bad: torch.Tensor) -> str:
    row, t = (int(i) for i in torch.nonzero(bad)[0])
    return f"row {row}, position {t}: {int(values[row, t]):,}"


def check_ids(ids: torch.Tensor, vocab: int | None) -> None:
    bad = ids < 0 if vocab is None else (ids < 0) | (ids >= vocab)
    if bool(bad.any()):
        within = "at least 0" if vocab is None else f"in 0..{vocab - 1:,} (the model's vocabulary)"
        raise TensorcadError("batch.input_ids", f"ids must be {within}; {_first_outside(ids, bad)}")


def check_labels(labels: torch.Tensor, key: str, vocab: int | None, ignore: int) -> None:
    bad = (labels < 0) & (labels != ignore)
    if vocab is not None:
        bad |= labels >= vocab
    if bool(bad.any()):
        within = "" if vocab is None else f"0..{vocab - 1:,} (the model's vocabulary) or "
        raise TensorcadError(f"batch.{key}", f"labels must be {within}{ignore} (nothing to predict); "
                                             f"{_first_outside(labels, bad)}")


def hf_vocabulary(model: Any) -> tuple[int | None, int | None]:
    """(ids, labels) bounds of a Hugging Face model: its input embeddings' rows, its output's width."""
    inputs = getattr(model.get_input_embeddings(), "num_embeddings", None)
    head = model.get_output_embeddings()
    outputs = getattr(head, "out_features", None) or getattr(getattr(model, "config", None), "vocab_size", None)
    return inputs, outputs if isinstance(outputs, int) else None


def probed_vocabulary(step: Any, batch: Any) -> int:
    """The width of ``step``'s outputs on ``batch`` (one forward, no gradient, eval mode)."""
    try:
        with torch.no_grad(), step.mode(False):
            logits = step.logits(batch)
    except IndexError as error:  # an embedding's lookup past its rows
        raise TensorcadError("batch.input_ids", f"the model refused the ids ({shown(str(error), 80)}); the largest "
                                                f"is {int(batch.ids.max()):,}") from None
    return int(logits.shape[-1])
