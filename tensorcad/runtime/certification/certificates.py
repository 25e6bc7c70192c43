"""The certificates a packed model is held to, as registry checks: on a design's model or a user's own.

Each reads a subject's ``model()``, ``batch``, ``vocab``, ``settings`` and
``alone`` (a design's `Subject`, a user's `ModelSubject`) and returns a
`Check` with the result's figures. `certification.REGISTRY` holds them under
these names, with the marker ``isolation`` on the three isolation checks, so
``-m isolation`` selects every isolation item.
"""

from __future__ import annotations

from typing import Any

from .outcome import Check, Skipped, failed, passed

# The training step's certificates (`step_certificates`), marked ``step``.
STEP_CHECKS = ("step[labels]", "step[loss]", "step[gradients]", "step[accumulation]", "eval[parity]")
# What a user's model becomes under pytest: these items, in this order.
MODEL_CHECKS = ("isolation", "isolation[boundaries]", "faithful", "isolation[gradients]", *STEP_CHECKS)


def _packed(s: Any) -> tuple[Any, Any, Any]:
    design = getattr(s, "design", None)
    if design is not None and design.input("documents") is None:
        raise Skipped(f"{design.name} has no documents input: no packed documents to check")
    if s.settings.pack is None and getattr(s, "given_batch", None) is None:
        raise Skipped("packing is off (pack=None): one document a row, nothing to check across documents")
    return s.batch


def _model(s: Any) -> Any:
    return s.model("flex") if getattr(s, "design", None) is not None else s.model()


def _verdict(name: str, result: Any, headline: str, s: Any = None, certificate: str = "",
             **known: Any) -> Check:
    verdicts = getattr(s, "verdicts", None)
    if verdicts is not None:
        verdicts[name] = result.passed
    if not result.passed:
        message = f"{headline}\n{result.message()}"
        if s is not None:
            from .causes import failure_hints

            hints = failure_hints(_model(s), *s.batch, certificate, vocab=s.vocab, sample=s.settings.sample,
                                  seed=s.settings.seed, **known)
            if certificate in ("isolation", "gradients"):
                from .design.crossing import cause_lines

                hints += cause_lines(s)  # a design's masks say why its tokens leak
            message += "".join(f"\n{hint}" for hint in hints)
        return failed(name, message, result.to_json())
    return passed(name, result.message(), result.to_json())


def _method(s: Any) -> str:
    return getattr(s.settings, "method", "grouped")


def tokens_check(s: Any) -> Check:
    from .methods import certificate

    batch = _packed(s)
    result = certificate("isolation", _method(s))(_model(s), *batch, vocab=s.vocab, sample=s.settings.sample,
                                                  seed=s.settings.seed)
    return _verdict("isolation", result, "documents are not isolated", s, "isolation")


def boundaries_check(s: Any) -> Check:
    from .methods import certificate

    batch = _packed(s)
    result = certificate("boundaries", _method(s))(_model(s), *batch, vocab=s.vocab, sample=s.settings.sample, seed=s.settings.seed)
    if result.moves == 0:
        raise Skipped(result.message())
    return _verdict("isolation[boundaries]", result, "documents are not isolated", s, "boundaries",
                    tokens_leak=_known_leak(s), boundaries_moved=not result.passed)


def faithful_check(s: Any) -> Check:
    from .methods import certificate

    batch = _packed(s)
    result = certificate("faithful", _method(s))(_model(s), *batch, alone_fn=getattr(s, "alone", None), sample=s.settings.sample,
                            seed=s.settings.seed)
    boundaries = getattr(s, "verdicts", {}).get("isolation[boundaries]")
    return _verdict("faithful", result, "documents are not computed as if alone", s, "faithful",
                    tokens_leak=_known_leak(s), boundaries_moved=None if boundaries is None else not boundaries)


def gradients_check(s: Any) -> Check:
    from .methods import certificate

    batch = _packed(s)
    result = certificate("gradients", _method(s))(_model(s), *batch, sample=s.settings.sample, seed=s.settings.seed)
    return _verdict("isolation[gradients]", result, "gradients cross documents", s, "gradients")


def _known_leak(s: Any) -> bool | None:
    """Whether changing tokens leaked, when the isolation check already ran on this subject."""
    passed = getattr(s, "verdicts", {}).get("isolation")
    return None if passed is None else not passed
