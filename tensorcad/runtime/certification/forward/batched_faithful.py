"""Faithfulness in three calls: every document alone, as the rows of padded batches, beside the packed run.

`faithful.check_faithful` runs each document as a one-document row of its own
(one call a document). Here the documents, sorted by length, are cut into at
most two buckets (where the cut leaves the fewest padded tokens) and each
bucket runs as one batch: a row per document, its tokens first with positions
0..L-1 (None when the packed batch passed none), then padding to the bucket's
width as a second document of its own (id 1, token 0, positions restarting).

Exactness. A row's first L outputs are the document alone whenever nothing
after it in its row and nothing in another row reaches it: a causal model, or
any model that keeps documents apart (isolation's certificate). They then
differ from the lone run only by rounding (a wider row, a bigger batch): the
same tolerance holds. Where a document's padded row differs from its packed
outputs beyond the tolerance (a real difference, or padding that reaches it:
an encoder whose mask was forgotten, an ``alone_fn`` that ignores documents),
that document is run alone exactly as `faithful` runs it, and its verdict is
that run's; so a document is reported unfaithful only as the one-a-call check
reports it. A batch the model cannot take (it raises, or returns another
shape) is run one document a call, and the result says so.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import torch

from tensorcad.errors import TensorcadError

from .faithful import Difference, FaithfulResult, alone_outputs, check_faithful, default_tolerance, largest_difference
from .isolation import _check_inputs, pick, segments
from .calls import ModelRaised, run_model, same_positions


def buckets(lengths: list[int], most: int = 2) -> list[list[int]]:
    """Indices of ``lengths`` in at most ``most`` buckets (by length) with the fewest padded tokens."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    if most < 2 or len(order) < 2:
        return [order] if order else []

    def cost(part: list[int]) -> int:
        return len(part) * lengths[part[-1]] if part else 0

    cut = min(range(1, len(order) + 1), key=lambda k: cost(order[:k]) + cost(order[k:]))
    return [part for part in (order[:cut], order[cut:]) if part]


def padded_rows(ids, documents, positions, pieces: list[tuple[int, int, int, int]]):
    """(ids, documents, positions) of one batch: each piece alone in a row, padded as a second document."""
    width = max(end - first for _, _, first, end in pieces)
    B = len(pieces)
    rows_ids = torch.zeros(B, width, dtype=ids.dtype, device=ids.device)
    rows_docs = torch.ones(B, width, dtype=documents.dtype, device=documents.device)
    rows_pos = None if positions is None else torch.zeros(B, width, dtype=positions.dtype, device=positions.device)
    for k, (row, _, first, end) in enumerate(pieces):
        length = end - first
        rows_ids[k, :length] = ids[row, first:end]
        rows_docs[k, :length] = 0
        if rows_pos is not None:
            rows_pos[k, :length] = torch.arange(length)
            rows_pos[k, length:] = torch.arange(width - length)
    return rows_ids, rows_docs, rows_pos


def check_faithful_batched(
    model_fn: Callable[..., Any],
    ids: torch.Tensor,
    documents: torch.Tensor,
    positions: torch.Tensor | None = None,
    *,
    alone_fn: Callable[..., Any] | None = None,
    atol: float | None = None,
    sample: int | None = None,
    seed: int = 0,
) -> FaithfulResult:
    """`faithful.check_faithful`'s certificate with the documents alone as rows of at most two padded batches."""
    from .model_reference import reference_of

    _check_inputs(ids, documents, positions, vocab=2)
    who = "alone_fn" if alone_fn is not None else "model_fn"
    pieces = segments(documents)
    chosen = pick(len(pieces), sample, seed)
    differences: list[Difference] = []
    largest, calls, doubted = 0.0, 1, []
    with torch.no_grad():
        packed, lone, reference = reference_of(model_fn, alone_fn, ids, documents, positions)
        lone = lone or model_fn
        if packed is None:
            packed = run_model(model_fn, (ids, documents, positions))
        if packed.shape[:2] != ids.shape:
            raise TensorcadError("model_fn", f"outputs shaped {tuple(packed.shape)} do not start with "
                                             f"(B, T) = {tuple(ids.shape)}")
        tolerance = default_tolerance(packed.dtype) if atol is None else float(atol)
        for bucket in buckets([pieces[i][3] - pieces[i][2] for i in chosen]):
            group = [pieces[chosen[k]] for k in bucket]
            batch = padded_rows(ids, documents, positions, group)
            try:
                out = run_model(lone, batch, f"{who} (documents alone as rows of a padded batch)")
            except ModelRaised as error:  # a model that cannot take a padded batch runs one a call
                return _one_a_call(model_fn, ids, documents, positions, alone_fn, atol, sample, seed,
                                   f"the padded batch raised {type(error.__cause__).__name__}")
            calls += 1
            if out.shape[:2] != batch[0].shape or out.shape[2:] != packed.shape[2:]:
                return _one_a_call(model_fn, ids, documents, positions, alone_fn, atol, sample, seed,
                                   f"the padded batch gave outputs shaped {tuple(out.shape)}")
            for k, (row, document, first, end) in enumerate(group):
                diff, position = largest_difference(packed[row, first:end], out[k, :end - first])
                if diff <= tolerance:
                    largest = max(largest, diff)
                else:
                    doubted.append((row, document, first, end))
        for row, document, first, end in doubted:  # each run alone, as `faithful` runs it: that run's verdict
            alone = alone_outputs(lone, ids, documents, positions, (row, document, first, end), who)
            same_positions(alone, packed[row, first:end], who)
            calls += 1
            diff, position = largest_difference(packed[row, first:end], alone)
            largest = max(largest, diff)
            if not diff <= tolerance:
                differences.append(Difference(row, document, first, end - first, position, diff))
    method = f"{calls} calls: the documents alone as rows of padded batches"
    if doubted:
        method += f" ({len(doubted)} beyond the tolerance there run alone)"
    return FaithfulResult(tuple(differences), len(chosen), len(pieces), tolerance, largest, calls, method, reference)



def _one_a_call(model_fn, ids, documents, positions, alone_fn, atol, sample, seed, why) -> FaithfulResult:
    result = check_faithful(model_fn, ids, documents, positions, alone_fn=alone_fn, atol=atol, sample=sample, seed=seed)
    return replace(result, method=f"one call a document: {why}")
