"""The training step's certificates, as plain assertions: labels, loss, gradients, accumulation, eval parity.

Each takes a model and a batch dict, as a training loop hands one to its
model, and the loop's choices: ``loss`` (None: a Hugging Face model's own,
else next-token cross-entropy; or ``loss(logits, labels)``), ``reduction``
(``"token"``, ``"document"``, ``"sequence"`` or ``reduce(tokens, rows)``),
``shift`` (None: the loss's own, or detected from the labels; ``"inside"``,
``"shifted"``), and for accumulation ``accumulation`` (``"num_items_in_batch"``,
``"mean"`` or ``weight(micro_batch, micro_batches)``), and ``call``: how the loop
calls a Hugging Face model (``"trainer"``: ``use_cache=False`` as transformers'
Trainer passes it, the default; ``"plain"``: ``model(**batch)``, the config's own
``use_cache``), which the report names. Each returns its
result and raises ``CertificateError`` (an ``AssertionError``, the result as
``err.report``) saying what differs, where and by how much.

The work is the runtime's (``tensorcad.runtime.certification.certify_step``);
this module hands it the model as the other certificates do (a Hugging Face
model bare, for its own loss; anything else adapted) and words the failure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .certificates import CertificateError, alone_function, model_function


def _certified(model: Any, batch: Any, only: tuple[str, ...] | None, *, alone_fn: Any = None,
               call: str = "trainer", **options: Any) -> Any:
    from tensorcad.hf import is_hf_model
    from tensorcad.runtime.certification import certify_step

    if is_hf_model(model):
        # its own loss, called as a Trainer calls it; alone, its own forward ("model"): any other alone_fn is
        # refused by certify_step rather than ignored
        step_model, alone = model, None if alone_fn == "model" else alone_fn
    else:
        step_model = model_function(model, call)
        alone = alone_function(model, step_model, alone_fn)
    return certify_step(step_model, batch, alone=alone, only=only, call=call, **options)


def _one(name: str, model: Any, batch: Any, **options: Any) -> Any:
    __tracebackhide__ = True
    report = _certified(model, batch, (name,), **options)
    result = report.results[name]
    if not result.passed:
        from tensorcad.runtime.certification import STEP_HEADLINES

        cause = report.causes.get(name)
        raise CertificateError(f"{STEP_HEADLINES[name]}\n{result.message()}" + (f"\n{cause}" if cause else ""),
                               result)
    return result


def assert_step_faithful(
    model: Any,
    batch: Mapping[str, Any],
    *,
    loss: Callable[..., Any] | None = None,
    reduction: Any = "token",
    shift: str | None = None,
    accumulation: Any = None,
    micro_batches: int = 2,
    alone_fn: Callable[..., Any] | None = None,
    atol: float | None = None,
    rtol: float | None = None,
    call: str = "trainer",
) -> Any:
    """The whole training step equals training on the documents alone, under the reduction declared.

    Runs ``step[labels]``, ``step[loss]``, ``step[gradients]``, ``eval[parity]`` and,
    when ``accumulation`` says how the loop accumulates, ``step[accumulation]`` on
    ``batch`` split into ``micro_batches``. Returns a ``StepReport`` (``.results`` by
    check name); raises ``CertificateError`` naming every certificate that fails.
    """
    __tracebackhide__ = True
    report = _certified(model, batch, None, loss=loss, reduction=reduction, shift=shift,
                        accumulation=accumulation, micro_batches=micro_batches, alone_fn=alone_fn,
                        atol=atol, rtol=rtol, call=call)
    if not report.passed:
        raise CertificateError("the training step is not the documents' own\n" + report.message(), report)
    return report


def assert_step_labels(model: Any, batch: Mapping[str, Any], *, loss: Callable[..., Any] | None = None,
                       shift: str | None = None, call: str = "trainer") -> Any:
    """Every supervised target is predicted from a position of its own document (``step[labels]``).

    The shift is the loss's (a Hugging Face model's own shifts inside), declared, or
    detected from the labels; the failure names the row, the document, the position
    and what the collator must write (-100). Returns a ``LabelsResult``.
    """
    __tracebackhide__ = True
    return _one("step[labels]", model, batch, loss=loss, shift=shift, call=call)


def assert_step_loss(model: Any, batch: Mapping[str, Any], *, loss: Callable[..., Any] | None = None,
                     reduction: Any = "token", shift: str | None = None, alone_fn: Callable[..., Any] | None = None,
                     atol: float | None = None, rtol: float | None = None, call: str = "trainer") -> Any:
    """The packed loss equals the documents run alone, reduced as declared (``step[loss]``).

    When the loss is another named reduction, the message names it and what each
    weighs a document's targets. Returns a ``LossResult``.
    """
    __tracebackhide__ = True
    return _one("step[loss]", model, batch, loss=loss, reduction=reduction, shift=shift, alone_fn=alone_fn,
                atol=atol, rtol=rtol, call=call)


def assert_step_gradients(model: Any, batch: Mapping[str, Any], *, loss: Callable[..., Any] | None = None,
                          reduction: Any = "token", shift: str | None = None,
                          alone_fn: Callable[..., Any] | None = None, rtol: float | None = None,
                          call: str = "trainer") -> Any:
    """Every parameter's gradient from the packed step equals the documents' alone (``step[gradients]``).

    The failure names the parameter with the largest relative gap, and both gradient
    norms. Returns a ``StepGradientResult``.
    """
    __tracebackhide__ = True
    return _one("step[gradients]", model, batch, loss=loss, reduction=reduction, shift=shift, alone_fn=alone_fn,
                rtol=rtol, call=call)


def assert_step_accumulation(model: Any, batch: Mapping[str, Any] | Sequence[Mapping[str, Any]], *,
                             accumulation: Any = "num_items_in_batch", micro_batches: int = 2,
                             loss: Callable[..., Any] | None = None, reduction: Any = "token",
                             shift: str | None = None, alone_fn: Callable[..., Any] | None = None,
                             rtol: float | None = None,
    call: str = "trainer",
) -> Any:
    """Micro-batches accumulated as the loop does give the whole batch's gradient (``step[accumulation]``).

    ``batch``: one batch dict, split into ``micro_batches`` (whole rows, or one row
    cut between documents), or the loop's own micro-batches (a list of dicts). The
    failure gives the relative gap and each micro-batch's targets. Returns an
    ``AccumulationResult``.
    """
    __tracebackhide__ = True
    return _one("step[accumulation]", model, batch, accumulation=accumulation, micro_batches=micro_batches,
                loss=loss, reduction=reduction, shift=shift, alone_fn=alone_fn, rtol=rtol, call=call)


def assert_eval_parity(model: Any, batch: Mapping[str, Any], *, loss: Callable[..., Any] | None = None,
                       reduction: Any = "token", shift: str | None = None, atol: float | None = None,
                       rtol: float | None = None,
    call: str = "trainer",
) -> Any:
    """The packed eval loss equals the documents evaluated unpacked, one a padded row (``eval[parity]``).

    Returns a ``LossResult``.
    """
    __tracebackhide__ = True
    return _one("eval[parity]", model, batch, loss=loss, reduction=reduction, shift=shift, atol=atol, rtol=rtol,
                call=call)


__all__ = ["assert_eval_parity", "assert_step_accumulation", "assert_step_faithful", "assert_step_gradients",
           "assert_step_labels", "assert_step_loss"]
