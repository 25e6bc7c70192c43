"""`tensorcad smoke-train`: train the scaled model a few hundred steps on a task it can learn.

The made-up data is sorting, which any language model can be scored on: a
document is ``digits SEP sorted-digits`` and many documents are packed into
each row, with their boundaries known, so a design with a documents input
trains on packed rows with its mask keeping them apart (and a positions input
gets positions restarting at each). The loss counts only the sorted half,
whose every token is determined by the digits before it; held-out problems,
scored greedily under teacher forcing, say whether the model learned to sort
rather than to guess (chance is one digit in ``digits``).

Training runs the eager form: FlexAttention has no backward on CPU.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from tensorcad.design import Design, load
from tensorcad.errors import TensorcadError, check_integer
from tensorcad.runtime.certification import NEXT_TOKEN_REDUCTION, next_token_labels, next_token_loss

PROBLEM = 8  # digits to sort in each problem
ROWS = 16  # rows a step
MAX_SEQ = 128  # tokens a row (fewer when the design's context is shorter)
LEARNING_RATE = 3e-3
WARMUP = 20
# The loss's reduction, declared (docs/harness.md, "Certify the training step"): a mean over
# every scored target of the step; tests/runtime/training/test_smoke_train.py holds the step to it.
LOSS_REDUCTION = NEXT_TOKEN_REDUCTION


@dataclass(frozen=True)
class SortBatch:
    ids: torch.Tensor  # (B, T)
    documents: torch.Tensor  # (B, T) document index, rising at each problem
    positions: torch.Tensor  # (B, T) position within the document
    scored: torch.Tensor  # (B, T) True where the NEXT token is a sorted digit to predict


def sort_batch(rng: np.random.Generator, rows: int, seq: int, digits: int, problem: int = PROBLEM) -> SortBatch:
    """Rows of packed sorting problems; the tail of a row too short for one is a filler document."""
    sep = digits  # the token after the digits
    length = 2 * problem + 1
    per_row = seq // length
    if per_row < 1:
        raise TensorcadError("seq", f"{seq} tokens cannot hold one {length}-token sorting problem")
    ids = np.full((rows, seq), sep, dtype=np.int64)
    documents = np.zeros((rows, seq), dtype=np.int64)
    positions = np.zeros((rows, seq), dtype=np.int64)
    scored = np.zeros((rows, seq), dtype=bool)
    values = rng.integers(0, digits, size=(rows, per_row, problem))
    for k in range(per_row):
        start = k * length
        ids[:, start:start + problem] = values[:, k]
        ids[:, start + problem + 1:start + length] = np.sort(values[:, k], axis=1)
        documents[:, start:start + length] = k
        positions[:, start:start + length] = np.arange(length)
        # the SEP and every sorted digit but the last predict the next sorted digit
        scored[:, start + problem:start + length - 1] = True
    tail = per_row * length
    documents[:, tail:] = per_row
    positions[:, tail:] = np.arange(seq - tail)
    return SortBatch(*(torch.from_numpy(a) for a in (ids, documents, positions, scored)))


@dataclass(frozen=True)
class TrainResult:
    design: str
    params: int
    steps: int
    rows: int
    seq: int
    losses: tuple[float, ...]  # every step's loss
    token_accuracy: float  # held-out sorted digits predicted right
    problem_accuracy: float  # held-out problems with every digit right (greedy decoding sorts them)
    chance: float
    seconds: float

    @property
    def initial_loss(self) -> float:
        return self.losses[0]

    @property
    def final_loss(self) -> float:
        tail = self.losses[-max(1, min(10, len(self.losses) // 10)):]
        return float(sum(tail) / len(tail))

    @property
    def passed(self) -> bool:
        return self.final_loss < self.initial_loss

    def to_json(self) -> dict:
        return {"design": self.design, "params": self.params, "steps": self.steps, "rows": self.rows,
                "seq": self.seq, "initialLoss": self.initial_loss, "finalLoss": self.final_loss,
                "lossFell": self.passed, "tokenAccuracy": self.token_accuracy,
                "problemAccuracy": self.problem_accuracy, "chance": self.chance,
                "losses": [round(x, 5) for x in self.losses[:: max(1, len(self.losses) // 50)]],
                "seconds": round(self.seconds, 2)}

    def summary(self) -> str:
        verdict = "fell" if self.passed else "did NOT fall"
        return (f"{self.design}: {self.params:,} parameters, {self.steps} steps of {self.rows} x {self.seq} tokens "
                f"in {self.seconds:.0f} s\n"
                f"loss {verdict}: {self.initial_loss:.3f} -> {self.final_loss:.3f}\n"
                f"sorting, held out: {self.token_accuracy:.1%} of digits, {self.problem_accuracy:.1%} of problems "
                f"(chance {self.chance:.0%} of digits)")


def _inputs_of(design: Design) -> tuple[bool, bool]:
    tokens = [i.name for i in design.inputs if i.role == "tokens"]
    others = [f"{i.name} ({i.role})" for i in design.inputs if i.role not in ("tokens", "documents", "positions")]
    if len(tokens) != 1 or others:
        raise TensorcadError("inputs", f"smoke-train makes up one token-ids input, and documents and positions; "
                                       f"{design.name} takes {', '.join(i.name for i in design.inputs)}. "
                                       "Train it on your own data")
    return design.input("documents") is not None, design.input("positions") is not None


def _feed(batch: SortBatch, documents: bool, positions: bool) -> dict[str, torch.Tensor]:
    inputs = {"ids": batch.ids}
    if documents:
        inputs["documents"] = batch.documents
    if positions:
        inputs["positions"] = batch.positions
    return inputs


def sort_labels(batch: SortBatch) -> torch.Tensor:
    """(B, T), already shifted: at each scored position the next (sorted) token, -100 elsewhere."""
    return next_token_labels(batch.ids, batch.documents, batch.scored)


def _loss(model, batch: SortBatch, documents: bool, positions: bool) -> torch.Tensor:
    logits = model(**_feed(batch, documents, positions))  # (B, T, V)
    return next_token_loss(logits, sort_labels(batch))


def smoke_train(design: Design | str, *, steps: int = 300, params: int = 2_000_000, seed: int = 0,
                rows: int = ROWS, seq: int | None = None, progress=None) -> TrainResult:
    """Train ``design`` scaled to about ``params`` parameters for ``steps`` AdamW steps on sorting.

    Rows of ``seq`` tokens (default 128, or the scaled design's context if shorter).
    ``progress(name, done, total, note)``, when given, hears of every step and its loss (the CLI's progress).
    """
    from tensorcad.runtime.building.generated import build
    from tensorcad.runtime.building.scaling import scale

    design = load(design) if not isinstance(design, Design) else design
    check_integer(steps, "steps", 1, 100_000)
    documents, positions = _inputs_of(design)
    small = scale(design, params=params)
    start = time.perf_counter()
    model = build(small, form="eager", seed=seed)
    vocab = model.config.vocab_size
    digits = min(10, vocab - 1)
    if digits < 2:
        raise TensorcadError("vocab", f"{small.name} has {vocab} tokens; sorting needs at least 3")
    check_integer(rows, "rows", 1, 1024)
    seq = min(check_integer(seq, "seq", 2, 1 << 16) if seq is not None else MAX_SEQ, small.context)
    rng = np.random.default_rng(seed)
    losses = train_steps(model, steps, lambda step: _loss(model, sort_batch(rng, rows, seq, digits), documents,
                                                        positions), progress)
    model.eval()
    token_accuracy, problem_accuracy = _accuracy(model, np.random.default_rng((seed, 1)), seq, digits,
                                                 documents, positions)
    model.form = "flex"
    return TrainResult(small.name, sum(p.numel() for p in model.parameters()), steps, rows, seq,
                       tuple(losses), token_accuracy, problem_accuracy, 1.0 / digits,
                       time.perf_counter() - start)


def train_steps(model, steps: int, loss_at, progress=None, warmup: int = WARMUP) -> list[float]:
    """AdamW for ``steps`` steps on ``loss_at(step)``, the model in train mode; every step's loss.

    The one training loop (smoke-train on sorting and on a corpus): linear warm-up,
    then cosine down to a tenth (nanoGPT's schedule), gradients clipped at 1.
    """
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, betas=(0.9, 0.95), weight_decay=0.01)

    def rate(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
    losses = []
    for step in range(steps):
        loss = loss_at(step)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(float(loss.detach()))
        if progress is not None:
            progress("training", step + 1, steps, f"loss {losses[-1]:.3f}")
    return losses


def _accuracy(model, rng: np.random.Generator, seq: int, digits: int, documents: bool, positions: bool,
              rows: int = 32) -> tuple[float, float]:
    """Held-out problems (a generator the training never drew from): digits and whole problems right."""
    batch = sort_batch(rng, rows, seq, digits)
    with torch.no_grad():
        logits = model(**_feed(batch, documents, positions))
    right = (logits[:, :-1].argmax(-1) == batch.ids[:, 1:]) & batch.scored[:, :-1]
    scored = batch.scored[:, :-1]
    token = float(right.sum()) / float(scored.sum())
    # A problem is sorted when every scored digit of its document is right: teacher-forced
    # argmax equal to the target at each step is exactly what greedy decoding would write.
    doc = batch.documents[:, :-1]
    problems = solved = 0
    for d in torch.unique(doc[scored]).tolist():
        mine = scored & (doc == d)
        per_row = mine.sum(dim=1)
        has = per_row > 0
        problems += int(has.sum())
        solved += int(((right & mine).sum(dim=1) == per_row)[has].sum())
    return token, solved / problems if problems else 0.0
