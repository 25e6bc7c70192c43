"""The plain assertion functions: usable from any test runner, no pytest needed.

Each raises ``AssertionError`` with a message that says what disagreed and by
how much. The work is done by the runtime that owns it: the three certificates
(isolated, faithful, gradients isolated) by ``tensorcad.testing.certificates`` over
``tensorcad.runtime.certification.forward.isolation``, ``.boundaries``, ``.faithful`` and ``.gradients``, block-mask agreement by the registry's
``block_agreements``, keys per query by ``runtime.closed_form_check``; this
module words the failure. torch is imported only when
an isolation or block-count check runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tensorcad.runtime.certification import (  # noqa: F401 - the public closed-form names
    EXACT_REL,
    GAMMA_REL,
    NoClosedForm,
    NotApplicable,
    assert_closed_form,
    closed_form_keys,
    engine_keys_per_query,
    expected_keys_per_query,
)


# --- the three certificates (isolated, faithful, gradients isolated): tensorcad.testing.certificates ---

from .certificates import (  # noqa: E402,F401 - the public certificate names
    CertificateError,
    IsolationReport,
    assert_faithful,
    assert_gradients_isolated,
    assert_isolated,
)


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
    __tracebackhide__ = True
    from tensorcad import load
    from tensorcad.runtime.building import Settings, Subject
    from tensorcad.runtime.certification import Skipped, block_agreements

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


__all__: Sequence[str] = ("CertificateError", "IsolationReport", "NoClosedForm", "NotApplicable",
                          "assert_block_counts_agree", "assert_closed_form", "assert_faithful",
                          "assert_gradients_isolated", "assert_isolated", "describe_blocks", "closed_form_keys", "engine_keys_per_query",
                          "expected_keys_per_query", "EXACT_REL", "GAMMA_REL")
