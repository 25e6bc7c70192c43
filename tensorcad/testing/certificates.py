"""The three certificates of a packed model, as plain assertions: isolated, faithful, gradients isolated.

Usable from any test runner. Each returns a result object when it holds and
raises ``CertificateError`` (an ``AssertionError``) when it does not: a message
that says what moved, where and by how much, with the result attached as
``err.report`` (``err.report.leaks``, ``err.report.differences``). Under pytest
the helpers hide their own frames (``__tracebackhide__``), so a failure shows
the test's line and the message, not the harness's source.

The work is the runtime's (``tensorcad.runtime.certification.forward.isolation``, ``.boundaries``,
``.faithful``, ``.gradients``); this module takes the batch in the forms a test
has it, adapts a Hugging Face model (``tensorcad.testing.adapters``), and words the failure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any


class CertificateError(AssertionError):
    """A certificate that does not hold; ``report`` is its result (what the function returns on a pass)."""

    def __init__(self, message: str, report: Any):
        super().__init__(message)
        self.report = report


def unpack_batch(ids: Any, documents: Any, positions: Any, who: str) -> tuple[Any, Any, Any]:
    """(ids, documents, positions) from the arguments or from a whole batch passed as ``ids``."""
    if documents is None and isinstance(ids, (tuple, list)):
        if not 2 <= len(ids) <= 3:
            raise TypeError("a batch is (ids, documents) or (ids, documents, positions)")
        ids, documents, *rest = ids
        positions = rest[0] if rest else positions
    if documents is None:
        raise TypeError(f"{who} needs the documents of each position (B, T)")
    return ids, documents, positions


def model_function(model: Any, call: str = "trainer") -> Any:
    """What the checks call as ``model_fn(ids, documents, positions)``: a Hugging Face model adapted.

    ``tensorcad.testing.adapters.adapt`` recognises a Hugging Face model and wraps it, called as
    ``call`` says (``tensorcad.hf.calls``: ``trainer``, ``plain``), or refuses, saying what
    to wrap; anything else is called as it is.
    """
    from tensorcad.hf import adapt

    return adapt(model, call)


def alone_function(model: Any, model_fn: Any, alone_fn: Any = None) -> Any:
    """How a document runs alone: by default ``model_fn`` itself on the document by itself.

    So whatever ``model_fn`` returns (logits, log-probabilities, a hidden state) is compared
    with itself. ``alone_fn`` runs it another way: a callable (adapted like ``model_fn``), or
    ``"model"``, the one Hugging Face model behind ``model_fn`` (bare, adapted, or held by a
    wrapper's closure) through its own forward, nothing packed (``model(input_ids=ids)``:
    transformers' own mask, window and positions), which catches a wrapper that loses
    what transformers would do even on one document. Without ``alone_fn``, an ``alone`` the
    model_fn carries; else None (the checks run ``model_fn`` itself).
    """
    if alone_fn is None:
        return getattr(model_fn, "alone", None)
    if alone_fn != "model":
        if isinstance(alone_fn, str):
            raise TypeError(f"alone_fn: expected a callable or 'model', got {alone_fn!r}")
        return model_function(alone_fn)
    from tensorcad.hf import is_hf_model, reachable_hf_models

    found = [model] if is_hf_model(model) else reachable_hf_models(model_fn)
    if len(found) != 1:
        raise TypeError(f"alone_fn='model' runs the one Hugging Face model behind model_fn; "
                        f"{'none' if not found else len(found)} found: pass alone_fn=a callable")
    hf = found[0]

    def alone(ids, documents, positions):
        out = hf(input_ids=ids)
        logits = getattr(out, "logits", None)
        return logits if logits is not None else out.last_hidden_state

    return alone


def vocab_of(model_fn: Any, ids: Any) -> int:
    """The token range a perturbation may draw from: the model's own, else what the batch shows."""
    for holder in (model_fn, getattr(model_fn, "model", None), getattr(model_fn, "module", None)):
        config = getattr(holder, "config", None)
        for name in ("vocab", "vocab_size"):
            value = getattr(config, name, None)
            if isinstance(value, int) and value > 1:
                return value
    return max(2, int(ids.max()) + 1)


@dataclass(frozen=True)
class IsolationReport(Sequence):
    """``assert_isolated``'s result: the token perturbations of each form, then the boundary moves.

    A sequence of the ``IsolationResult`` of each form checked (as the function always
    returned); ``boundaries`` holds each form's ``BoundaryResult`` (empty when not run).
    """

    tokens: tuple[Any, ...]
    boundaries: tuple[Any, ...] = ()
    forms: tuple[str | None, ...] = (None,)
    failures: tuple[str, ...] = field(default=())

    def __getitem__(self, index):
        return self.tokens[index]

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def leaks(self) -> tuple[Any, ...]:
        """Every leak found by changing a document's tokens, over every form."""
        return tuple(leak for result in self.tokens for leak in result.leaks)

    @property
    def moved(self) -> tuple[Any, ...]:
        """Every boundary move that changed the next document, over every form."""
        return tuple(move for result in self.boundaries for move in result.moved)

    def message(self) -> str:
        if self.failures:
            return "documents are not isolated\n" + "\n".join(self.failures)
        lines = [r.message() for r in self.tokens] + [r.message() for r in self.boundaries]
        return "\n".join(lines)


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
    boundaries: bool = True,
    atol: float | None = None,
    method: str = "grouped",
) -> IsolationReport:
    """Packed documents never see each other: changing one, or moving its end, moves no other's outputs.

    ``model_fn(ids, documents, positions) -> (B, T, ...)``: a generated model, a
    hand-written one, or a Hugging Face model (adapted by ``tensorcad.testing.adapters``).
    ``ids`` may be the whole batch ``(ids, documents[, positions])``. Every document
    of every row is changed in turn (at most ``sample``, seeded): every output
    outside it must stay bitwise equal. With ``boundaries``, each document is then
    made one token shorter and longer: the next document's outputs, at its own
    positions, must stay within ``atol`` (the dtype's rounding: float32 1e-5).
    With ``forms``, a model with a ``form`` attribute is checked in each form and
    left as it was. ``method="each"`` runs one forward a document (and a boundary) instead of
    group testing's few (``tensorcad.runtime.certification.methods``). Returns an
    ``IsolationReport``; raises ``CertificateError``.
    """
    __tracebackhide__ = True
    ids, documents, positions = unpack_batch(ids, documents, positions, "assert_isolated")
    from tensorcad.runtime.certification import certificate  # torch, on first use

    check_isolation, check_boundaries = certificate("isolation", method), certificate("boundaries", method)

    model_fn = model_function(model_fn)
    vocab = vocab if vocab is not None else vocab_of(model_fn, ids)
    wanted = tuple(forms) if forms is not None else (None,)
    if forms is not None and not hasattr(model_fn, "form"):
        raise TypeError(
            f"forms={list(wanted)!r} asks for a model with a 'form' attribute (a generated model); "
            f"{type(model_fn).__name__} has none"
        )
    original = getattr(model_fn, "form", None)
    tokens, moves, failures = [], [], []
    try:
        for form in wanted:
            if form is not None:
                setattr(model_fn, "form", form)  # a generated model's switch (checked above), any callable's type
            label = f"form {form!r}: " if form is not None else ""
            result = check_isolation(model_fn, ids, documents, positions, vocab=vocab, sample=sample, seed=seed)
            tokens.append(result)
            if not result.passed:
                failures.append(label + result.message())
            if boundaries:
                moved = check_boundaries(model_fn, ids, documents, positions, vocab=vocab, atol=atol,
                                         sample=sample, seed=seed)
                moves.append(moved)
                if not moved.passed and moved.moves > 0:
                    failures.append(label + moved.message())
    finally:
        if forms is not None:
            setattr(model_fn, "form", original)
    if failures:
        from tensorcad.runtime.certification import failure_hints

        leaked = any(not result.passed for result in tokens)
        # The one cause, when one is known: a Hugging Face setting, or positions counted through the row.
        failures += failure_hints(model_fn, ids, documents, positions, "isolation" if leaked else "boundaries",
                                  vocab=vocab, sample=sample, seed=seed, tokens_leak=leaked,
                                  boundaries_moved=any(m.moved for m in moves) if moves else None)
    report = IsolationReport(tuple(tokens), tuple(moves), wanted, tuple(failures))
    if failures:
        raise CertificateError(report.message(), report)
    return report


def assert_faithful(
    model_fn: Callable[..., Any],
    ids: Any,
    documents: Any = None,
    positions: Any = None,
    *,
    alone_fn: Callable[..., Any] | str | None = None,
    atol: float | None = None,
    sample: int | None = None,
    seed: int = 0,
    method: str = "grouped",
) -> Any:
    """Each packed document's outputs equal the same document run alone, within ``atol``.

    Alone is ``model_fn`` on the document by itself: a one-document row, positions 0, 1, ...,
    so what it returns (logits, log-probabilities, a hidden state, a tuple or ``ModelOutput``
    holding them) is compared with itself, position by position. ``alone_fn`` runs the
    document another way: ``alone_fn(ids, documents, positions)``, or ``"model"`` for the
    Hugging Face model behind ``model_fn`` through its own forward (``model(input_ids=ids)``).
    The tolerance defaults to the outputs' dtype (float32: 1e-5) and is stated in the
    message, with the row, document, position and largest difference. The documents run
    alone as rows of padded batches (``method="each"``: one call a document). Returns a
    ``FaithfulResult``; raises ``CertificateError``.
    """
    __tracebackhide__ = True
    ids, documents, positions = unpack_batch(ids, documents, positions, "assert_faithful")
    from tensorcad.runtime.certification import certificate

    check_faithful = certificate("faithful", method)
    model = model_fn
    model_fn = model_function(model)
    alone_fn = alone_function(model, model_fn, alone_fn)
    result = check_faithful(model_fn, ids, documents, positions, alone_fn=alone_fn, atol=atol,
                            sample=sample, seed=seed)
    if not result.passed:
        raise CertificateError(_worded("documents are not computed as if alone", result, "faithful", model_fn,
                                       ids, documents, positions, sample, seed), result)
    return result


def assert_gradients_isolated(
    model_fn: Callable[..., Any],
    ids: Any,
    documents: Any = None,
    positions: Any = None,
    *,
    embedding: Any = None,
    sample: int | None = None,
    seed: int = 0,
    method: str = "grouped",
) -> Any:
    """In train mode, the loss on one document has exactly zero gradient on every other's embeddings.

    The embeddings are the output of the module that reads ``ids`` (found by a forward
    hook on the model's ``nn.Embedding`` modules; ``embedding=`` names it). The model
    is put in train mode for the check and left as it was; a generated model on CPU is
    checked in its eager form (FlexAttention has no backward there), which the result
    says. The losses go back in three weighted passes (``method="each"``: one a
    document). Returns a ``GradientResult``; raises ``CertificateError``.
    """
    __tracebackhide__ = True
    ids, documents, positions = unpack_batch(ids, documents, positions, "assert_gradients_isolated")
    from tensorcad.runtime.certification import certificate

    check_gradient_isolation = certificate("gradients", method)
    model_fn = model_function(model_fn)
    result = check_gradient_isolation(model_fn, ids, documents, positions, embedding=embedding,
                                      sample=sample, seed=seed)
    if not result.passed:
        raise CertificateError(_worded("gradients cross documents", result, "gradients", model_fn, ids,
                                       documents, positions, sample, seed), result)
    return result


def _worded(headline: str, result: Any, certificate: str, model_fn: Any, ids: Any, documents: Any,
            positions: Any, sample: Any, seed: int) -> str:
    """A failed certificate's message: the headline, what moved, and the one cause's hint when one is known."""
    from tensorcad.runtime.certification import failure_hints

    hints = failure_hints(model_fn, ids, documents, positions, certificate, vocab=vocab_of(model_fn, ids),
                          sample=sample, seed=seed)
    return "\n".join([headline, result.message(), *hints])


def model_subject(factory: str, settings: Any, batch: Any = None) -> Any:
    """The `ModelSubject` of the model ``factory`` makes, at ``settings`` (its collator, if one is named)."""
    from tensorcad.runtime.certification import ModelSubject, import_factory

    made = import_factory(factory, "tensorcad_models")()
    model_fn = model_function(made, settings.call)
    collator = import_factory(settings.collator, "tensorcad_collator")() if settings.collator else None
    return ModelSubject(model_fn, settings, given_batch=batch, collator=collator,
                        alone=alone_function(made, model_fn), name=factory, call=settings.call)


__all__ = ["CertificateError", "IsolationReport", "assert_faithful", "assert_gradients_isolated",
           "assert_isolated", "model_function", "model_subject", "unpack_batch", "vocab_of"]
