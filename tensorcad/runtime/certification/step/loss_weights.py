"""What a loss trains: each output position's target and weight, read from the loss's gradient at the logits.

A loss's value can agree with the documents' own by coincidence: a random
model's cross-entropies all sit near log V, so a mean over a few targets more
or less, or weighted otherwise, moves it by less than rounding. Its gradient
at the logits cannot: a cross-entropy weighted ``w`` at position t with target
y has gradient ``w (softmax(logits[t]) - onehot(y))`` there, so the most
negative entry names the target and ``w = g[y] / (p[y] - 1)`` its weight, to
rounding. One backward through the loss alone (not the model) then says which
positions the loss trains, on which tokens, weighted how, and that is held to
the documents' own targets weighed by the declared reduction: a target across
a boundary, a position trained on its own token (a loss that does not shift),
a mean over the wrong count, or another reduction, each named exactly.

A loss that is not a weighted cross-entropy (label smoothing, a z-loss) leaves
a residual; its weights are then not read, and the value alone is compared.
Nor are they from half-precision logits, whose gradient holds three digits.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import torch

from .batch import IGNORE_INDEX

RESIDUAL = 1e-3  # the largest |g - w (p - e_y)| / |g| a weighted cross-entropy's gradient leaves (float32: ~1e-6)
WEIGHT_RTOL = 1e-4  # weights read back agree with the reduction's to rounding (float32: ~1e-6)


@dataclass(frozen=True)
class Trained:
    """The target and weight of each output position (B, T); IGNORE_INDEX and 0 where it is not trained."""

    targets: torch.Tensor
    weights: torch.Tensor  # float64
    exact: bool  # every gradient was a weighted cross-entropy's


def trained_by(logits: torch.Tensor, gradient: torch.Tensor) -> Trained:
    """Read the targets and weights off the gradient of a loss at its logits (B, T, V)."""
    g = gradient.detach().double().reshape(*logits.shape[:2], -1)
    p = logits.detach().double().reshape(g.shape).softmax(-1)
    target = g.argmin(-1)
    at = lambda t: t.gather(-1, target[..., None])[..., 0]  # noqa: E731
    weights = at(g) / (at(p) - 1)
    trained = (g != 0).any(-1)
    weights = torch.where(trained, weights, torch.zeros_like(weights))
    model = weights[..., None] * (p - torch.nn.functional.one_hot(target, g.shape[-1]).double())
    scale = g.abs().amax(-1).clamp_min(1e-300)
    residual = float(((g - model).abs().amax(-1) / scale)[trained].max()) if bool(trained.any()) else 0.0
    targets = torch.where(trained, target, torch.full_like(target, IGNORE_INDEX))
    readable = logits.dtype in (torch.float32, torch.float64)
    return Trained(targets.cpu(), weights.cpu(), readable and residual <= RESIDUAL)


@dataclass(frozen=True)
class Mistrained:
    """A position the packed loss trains otherwise than the documents alone."""

    row: int
    position: int
    document: int
    got: int  # the packed loss's target (IGNORE_INDEX: none)
    want: int  # the documents' own (IGNORE_INDEX: none)
    last: bool  # the position is its document's last

    def message(self) -> str:
        where = f"position {self.position} of row {self.row} (document {self.document}"
        where += ", its last)" if self.last else ")"
        if self.want == IGNORE_INDEX:
            return (f"the loss trains {where} on token {self.got}, a target the documents alone do not have"
                    + (": the next document's first token" if self.last else ""))
        if self.got == IGNORE_INDEX:
            return f"the loss never trains {where}, which the documents alone train on token {self.want}"
        return (f"the loss trains {where} on token {self.got} where the documents alone train it on "
                f"{self.want}: does the loss shift the labels as they are written?")

    def to_json(self) -> dict:
        return {"row": self.row, "position": self.position, "document": self.document, "got": self.got,
                "want": self.want}


def fraction(weight: float) -> str:
    """A weight as people write it: 1/9 (or 2/9) when it is one to rounding, else its digits.

    The reductions weigh a target 1/m; a numerator under 10 covers their means too, and
    leaves a value that is no such fraction in digits (any number is p/q for some large q).
    """
    if weight == 0:
        return "0"
    for numerator in range(1, 10):
        denominator = round(numerator / weight)
        if 0 < denominator <= 10**9 and abs(numerator / denominator - weight) <= 1e-6 * abs(weight):
            return str(Fraction(numerator, denominator))
    return f"{weight:.6g}"


@dataclass(frozen=True)
class WeightCheck:
    """The packed loss's targets and weights against the documents' own under the declared reduction."""

    mistrained: tuple[Mistrained, ...]
    largest: float  # the largest relative gap of a shared target's weight
    per_document: tuple[float, ...]  # each piece's mean packed weight over its own targets (0: none)
    exact: bool = True

    @property
    def passed(self) -> bool:
        return not self.mistrained and self.largest <= WEIGHT_RTOL

    def to_json(self) -> dict:
        return {"exact": self.exact, "passed": self.passed, "mistrained": len(self.mistrained),
                "first": self.mistrained[0].to_json() if self.mistrained else None, "largestGap": self.largest,
                "perDocument": [fraction(w) for w in self.per_document]}


def expected_grid(shape: torch.Size, where: tuple, weights: tuple, targets: torch.Tensor) -> tuple:
    """(targets, weights) grids (B, T) of the documents' own targets, each weighted as given (a number a
    document, or one a target); a target weighted 0 is none."""
    want_t = torch.full(shape, IGNORE_INDEX, dtype=torch.long)
    want_w = torch.zeros(shape, dtype=torch.float64)
    for (row, positions), w in zip(where, weights):
        w = torch.as_tensor(w, dtype=torch.float64).cpu().expand(positions.shape)
        kept = positions[w != 0]
        want_t[row, kept] = targets[row, kept]
        want_w[row, kept] = w[w != 0]
    return want_t, want_w


def check_weights(trained: Trained, want_targets: torch.Tensor, want_weights: torch.Tensor,
                  documents: torch.Tensor, pieces) -> WeightCheck:
    """Every position trained on the documents' own target with the reduction's weight."""
    documents = documents.cpu()
    last = torch.ones_like(documents, dtype=torch.bool)
    last[:, :-1] = documents[:, 1:] != documents[:, :-1]
    wrong = trained.targets != want_targets
    mistrained = tuple(Mistrained(r, t, int(documents[r, t]), int(trained.targets[r, t]), int(want_targets[r, t]),
                                  bool(last[r, t])) for r, t in torch.nonzero(wrong).tolist())
    shared = (~wrong) & (want_targets != IGNORE_INDEX)
    gaps = ((trained.weights - want_weights).abs() / want_weights.clamp_min(1e-300))[shared]
    largest = float(gaps.max()) if gaps.numel() else 0.0
    per_document = []
    for row, _, first, end in pieces:
        mine = want_targets[row, first:end] != IGNORE_INDEX
        per_document.append(float(trained.weights[row, first:end][mine].mean()) if bool(mine.any()) else 0.0)
    return WeightCheck(mistrained, largest, tuple(per_document), trained.exact)
