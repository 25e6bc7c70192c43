"""Gradient isolation in three backward passes, whatever the number of documents (up to 33² = 1,089).

`gradients.check_gradient_isolation` takes each document's loss back alone (one
backward a document). Here the losses of all documents are taken back together,
each weighted: pass A weighs every document 1, pass B weighs document i by
2^{b_i}, pass C by 2^{c_i}, with (b_i, c_i) distinct for every document
(each in -16..16). With J_i[j] the gradient of document i's loss on document
j's embeddings, pass A gives Σ_i J_i[j] at document j and pass B Σ_i 2^{b_i} J_i[j].

Exactness. When no other document reaches j, both are j's own gradient, B's
scaled by 2^{b_j}: *bit for bit*, because every step of a backward pass is linear
in the incoming gradient and multiplying a float by a power of two commutes
with its rounding (no overflow, no subnormals: either would show as a mismatch,
and a mismatch is never trusted, see below); a masked score's exact zero stays
an exact zero. So B == 2^{b_j}·A, position by position, for an isolated model.
When document i reaches j, B - 2^{b_j}·A = Σ_{i≠j} (2^{b_i} - 2^{b_j}) J_i[j]: not
zero for a single source (b_i ≠ b_j, or in pass C c_i ≠ c_j), and for several only
if their gradients cancel bit for bit. A document not among the sampled ones has
no loss of its own, and its gradient must be exactly zero in every pass, as
before.

What it cannot see that one backward a document sees: a leak J_i[j] smaller than
the rounding of document j's own gradient (about 2^-24 of it in float32), which
adds nothing to j's sum; the one-a-document check sees any nonzero there. Any
mismatch (a leak, or a model whose backward is not linear in its incoming
gradient) is then taken back one document at a time by
`gradients.check_gradient_isolation`, whose verdict and leaks are reported, so
a failure names its source exactly and a false alarm cannot fail the check.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import torch
from torch import nn

from .gradients import GradientResult, _train_outputs, check_gradient_isolation, held_embeddings
from .isolation import _check_inputs, pick, segments

SPREAD = 16  # exponents -16..16: gradients scaled by at most 2^16 either way (float16 keeps 2^4)


def exponents(count: int, spread: int, seed: int) -> list[tuple[int, ...]]:
    """For each of ``count`` documents, its exponent in each weighted pass: distinct tuples, shuffled."""
    width = 2 * spread + 1
    passes = 2  # always two: the cost is the same at 10 documents and at 1,000
    order = torch.randperm(count, generator=torch.Generator().manual_seed(seed)).tolist()
    return [tuple((n // width ** p) % width - spread for p in range(passes)) for n in order]


def check_gradients_weighted(
    model_fn: Callable[..., Any],
    ids: torch.Tensor,
    documents: torch.Tensor,
    positions: torch.Tensor | None = None,
    *,
    embedding: nn.Module | None = None,
    sample: int | None = None,
    seed: int = 0,
) -> GradientResult:
    """`gradients.check_gradient_isolation`'s certificate in one forward and three backward passes."""
    _check_inputs(ids, documents, positions, vocab=2)
    pieces = segments(documents)
    chosen = pick(len(pieces), sample, seed)
    if not chosen:  # no document, no loss to take back (its gradient would have no token to lie on)
        return _said(check_gradient_isolation(model_fn, ids, documents, positions, embedding=embedding),
                     "no document: nothing taken back")
    with held_embeddings(model_fn, ids, embedding) as (leaf, note):
        with torch.enable_grad():
            out = _train_outputs(model_fn, ids, documents, positions, leaf)
            spread = 4 if out.dtype == torch.float16 else SPREAD
            scales = exponents(len(chosen), spread, seed)
            generator = torch.Generator().manual_seed(seed)
            # drawn in float32, so one seed gives one draw at any dtype, then cast to the outputs'
            weights = torch.randn(out.shape, generator=generator, dtype=torch.float32).to(out)
            passes = [out.new_zeros(ids.shape) for _ in range(1 + len(scales[0]))]
            for index, exps in zip(chosen, scales):
                row, _, first, end = pieces[index]
                passes[0][row, first:end] = 1
                for p, e in enumerate(exps, start=1):
                    passes[p][row, first:end] = 2.0 ** e
            grads = [] if len(chosen) <= (2 * spread + 1) ** 2 else None
            for n, scale in enumerate(passes if grads is not None else ()):
                cotangent = weights * scale.reshape(*ids.shape, *([1] * (out.dim() - 2)))
                (grad,) = torch.autograd.grad(out, leaf.leaf, grad_outputs=cotangent,
                                              retain_graph=n < len(passes) - 1, allow_unused=True)
                grads.append(grad.reshape(*ids.shape, -1) if grad is not None else None)
    if grads is None:
        result = check_gradient_isolation(model_fn, ids, documents, positions, embedding=embedding,
                                          sample=sample, seed=seed)
        return _said(result, f"one backward a document: {len(chosen)} documents need more than three passes")
    if any(g is None for g in grads) or not _consistent(grads, passes):
        result = check_gradient_isolation(model_fn, ids, documents, positions, embedding=embedding,
                                          sample=sample, seed=seed)
        return _said(result, f"the {len(passes)} weighted passes disagreed; each document's loss taken back "
                             "alone to name the leaks", extra=len(passes))
    own = grads[0]
    still = tuple((pieces[i][0], pieces[i][1]) for i in chosen
                  if not bool((own[pieces[i][0], pieces[i][2]:pieces[i][3]] != 0).any()))
    return GradientResult((), len(chosen), len(pieces), still, leaf.name, note, len(passes),
                          f"{len(passes)} weighted backward passes for {len(chosen)} documents")


def _consistent(grads: list[torch.Tensor], passes: list[torch.Tensor]) -> bool:
    """Pass p's gradient is its documents' weights times pass A's, bitwise, at every position
    (where a position's document has no loss, every pass must be exactly zero there)."""
    base = grads[0]
    if bool((base[passes[0] == 0] != 0).any()):  # a document without a loss got a gradient (NaN counts)
        return False
    for grad, scale in zip(grads[1:], passes[1:]):
        if not torch.equal(grad, base * scale.reshape(*scale.shape, 1)):
            return False
    return True


def _said(result: GradientResult, method: str, extra: int = 0) -> GradientResult:
    return replace(result, method=method, backwards=result.backwards + extra)

