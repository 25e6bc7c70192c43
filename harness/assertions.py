"""The plain assertion functions: usable from any test runner, no pytest needed.

Each raises ``AssertionError`` with a message that says what disagreed and by
how much. The work is done by the runtime that owns it: isolation by
``tensorcad.runtime.isolation``, block-mask agreement by the registry's
``block_agreements``, keys per query by ``runtime.closed_form_check``; this
module words the failure. torch is imported only when
an isolation or block-count check runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tensorcad.runtime.closed_form_check import (  # noqa: F401 - the public closed-form names
    EXACT_REL,
    GAMMA_REL,
    NoClosedForm,
    NotApplicable,
    assert_closed_form,
    closed_form_keys,
    engine_keys_per_query,
    expected_keys_per_query,
)


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

    from harness.adapters import adapt

    # A Hugging Face model is adapted (never called positionally by guess); a
    # callable that cannot take (ids, documents, positions) is refused saying what to wrap.
    model_fn = adapt(model_fn)
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
        from harness.hf_diagnosis import diagnose_failure

        hints = diagnose_failure(model_fn, ids, documents, positions)
        raise AssertionError("documents are not isolated\n" + "\n".join(failures + hints))
    return results


# --- block counts against create_block_mask: the runtime's check, worded -----------------------



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

    The masks are the model's own: the design is scaled to about ``params``
    parameters and built, and every distinct mask its forward pass hands to
    ``attend`` is made anew over ``rows`` rows of the operating point's packing
    (the rows the engine counts) by the factory the module's mask table names,
    then counted by ``create_block_mask`` and by the engine, each against the
    attention it belongs to (``runtime.certification.block_agreements``). Every
    row must agree block for block. Returns the ``BlockAgreement`` of each mask.
    """
    from tensorcad.design import load
    from tensorcad.runtime.certification import Skipped, block_agreements
    from tensorcad.runtime.settings import Settings
    from tensorcad.runtime.subject import Subject

    design = load(design)
    packing = operating_point.packing
    settings = Settings(seq=operating_point.seq, seed=operating_point.seed, rows=1, block_rows=rows,
                        pack=None if packing is None else packing.mean,
                        spread=1.0 if packing is None else packing.spread,
                        **({"params": params} if params is not None else {}))
    subject = Subject(design, settings)
    try:
        agreements = block_agreements(subject)
    except Skipped as skip:
        raise NotApplicable("nodes", str(skip)) from None
    failures = [f"{mask.name} ({attention.path}): {describe_blocks(result)}"
                for attention, mask, result in agreements if not result.passed]
    if failures:
        raise AssertionError(f"{design.name}: block counts disagree\n" + "\n".join(failures))
    return [result for _, _, result in agreements]


__all__: Sequence[str] = ("NoClosedForm", "NotApplicable", "assert_block_counts_agree", "assert_closed_form",
                          "assert_isolated", "describe_blocks", "closed_form_keys", "engine_keys_per_query",
                          "expected_keys_per_query", "EXACT_REL", "GAMMA_REL")
