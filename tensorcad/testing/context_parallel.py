"""The context-parallel shard plan certificate as a plain assertion: ``assert_cp_plan``.

The work is the runtime's (``tensorcad.runtime.certification``'s ``check_cp_plan``:
the plan read in any of its forms, held to the batch, each rank's attention held to
the unsharded); this module words the failure.
"""

from __future__ import annotations

from typing import Any

from .certificates import CertificateError


def assert_cp_plan(plan: Any, batch: Any, world_size: int, *, causal: bool = True, window: int | None = None,
                   atol: float | None = None, seed: int = 0, pad_multiple: int | None = None) -> Any:
    """A context-parallel split of ``batch`` over ``world_size`` ranks loses, doubles and leaks nothing.

    ``plan`` is an index map ((T') or (B, T'): the position each gathered slot holds,
    -1 for padding), a PyTorch load balancer (``_HeadTailLoadBalancer``,
    ``_PerDocumentHeadTailLoadBalancer``, ``_PTRRLoadBalancer``: its
    ``_generate_indices()``), or a callable ``plan(batch, rank, world_size)`` returning
    the rank's ``indices`` into the plan's row and, where it has them, the ``row``,
    ``input_ids``, ``labels``, ``position_ids`` and ``cu_seqlens`` it gives that rank (for a
    padded layout ``cu_seqlens_padded`` beside the real ``cu_seqlens``, and the other readers
    of the boundaries: ``seq_idx``, ``loss_mask``).
    ``batch`` is ``(ids, documents[, positions])`` or a mapping with ``input_ids``,
    ``documents`` or ``position_ids``, and ``labels``. Every position must be on exactly
    one rank, no document's token dropped, each rank's ids, labels (the targets shifted
    within each document before the split), position ids and cu_seqlens those of its
    positions, padding never supervised; and each rank's attention over its shard
    with the gathered keys (a document mask, causal and windowed as asked) equal to the
    unsharded; with ``pad_multiple`` every document's slots a multiple of it. Each reader is
    held to the padded layout, and one that reads the unpadded boundaries is named. Returns a
    ``CpPlanResult``; raises ``CertificateError`` naming the rank, row, document and position
    of each fault.
    """
    __tracebackhide__ = True
    from tensorcad.runtime.certification import check_cp_plan

    result = check_cp_plan(plan, batch, world_size, causal=causal, window=window, atol=atol, seed=seed,
                           pad_multiple=pad_multiple)
    if not result.passed:
        raise CertificateError("the context-parallel plan loses or leaks\n" + result.message(), result)
    return result


__all__ = ["assert_cp_plan"]
