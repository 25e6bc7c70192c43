"""rl[logprobs]: a per-token log-prob function on a packed batch equals the model's own forward on each sequence alone.

The framework's log-prob path (TRL's ``selective_log_softmax`` over the
logits, verl's ``log_probs_from_logits_response_rmpad``, a user's own) runs
*after* the model: a forward certificate never sees it. Here
``logprob_fn(model, batch) -> (B, T)`` (or ``(logprobs, entropies)``, both
(B, T), as TRL's ``_get_per_token_logps_and_entropies`` returns them) is
called once on the packed batch, and held to the model's own forward with
``log_softmax`` on each sequence alone, in the ``next`` convention: position t
holds log p(token t+1 | tokens up to t) of its own sequence, and the entropy of
that distribution.

- every position with its target inside its sequence must equal the lone
  run's, within the dtype's tolerance;
- a sequence's last position has no target of its own: it must hold no score
  of the token that follows it in the packed row (the next sequence's first
  token: the shift across a boundary, verl #6475's ``torch.roll`` on the flat
  packed tensor);
- every entropy, where the function gives them, equals the lone run's.

The references come from at most two padded batches (the sequences sorted by
length and cut where the fewest tokens are padded, `forward.batched_faithful`):
with the function's own forward, at most three forward passes whatever the
number of sequences. Only on a failure is one more call made, to tell the
cause: the function called a second time (a cache left on changes it), and the
model on the packed row with its positions counted through the row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch

from tensorcad.errors import TensorcadError

from ..forward.batched_faithful import buckets, padded_rows
from ..forward.calls import run_model
from ..forward.faithful import default_tolerance
from .batch import read_rl_batch

SHOWN = 3  # differences a message names


@dataclass(frozen=True)
class Gap:
    """Position ``position`` of sequence ``sequence`` (row ``row``, from ``first``) differs from the lone run."""

    what: str  # "log-prob" or "entropy"
    sequence: int
    row: int
    first: int
    position: int  # within the sequence
    got: float
    want: float

    @property
    def nats(self) -> float:
        return abs(self.got - self.want) if self.got == self.got else float("inf")

    def message(self) -> str:
        target = f"of token {self.position + 1}" if self.what == "log-prob" else "at"
        return (f"sequence {self.sequence} (row {self.row}, from token {self.first}), the {self.what} {target} "
                f"position {self.position}: {self.got:.6g} where the sequence alone gives {self.want:.6g}, a gap "
                f"of {self.nats:.3g} nats")


@dataclass(frozen=True)
class Crossing:
    """The last position of a sequence scores the token that follows it in the packed row."""

    sequence: int
    row: int
    column: int  # in the packed row
    next_row: int
    next_column: int
    got: float

    def message(self) -> str:
        return (f"position {self.column} of row {self.row}, the last token of sequence {self.sequence}, holds "
                f"{self.got:.6g}, the log-prob of token {self.next_column} of row {self.next_row}: the first "
                "token of the next sequence, across the boundary")


@dataclass(frozen=True)
class LogprobResult:
    sequences: int
    gaps: tuple[Gap, ...]
    crossings: tuple[Crossing, ...]
    largest: float  # the largest gap in nats over the positions compared
    tolerance: float
    forwards: int  # model forward passes the check made (the function's own counted as one a call)
    entropy: bool  # entropies were compared too
    cause: str = ""

    @property
    def passed(self) -> bool:
        return not self.gaps and not self.crossings

    def message(self) -> str:
        what = "log-probs" + (" and entropies" if self.entropy else "")
        if self.passed:
            return (f"the {what} of {self.sequences} packed sequences equal the model's own forward on each "
                    f"alone (largest gap {self.largest:.3g} nats, tolerance {self.tolerance:.3g}; "
                    f"{self.forwards} forward passes)")
        told = [c.message() for c in self.crossings[:SHOWN]] + [g.message() for g in self.gaps[:SHOWN]]
        more = len(self.crossings) + len(self.gaps) - len(told)
        return (f"the {what} of the packed batch are not the model's own on each sequence alone: " + "; ".join(told)
                + (f"; and {more} more" if more > 0 else "") + (f". {self.cause}" if self.cause else ""))

    def to_json(self) -> dict:
        return {"passed": self.passed, "sequences": self.sequences, "largest_gap_nats": self.largest,
                "tolerance": self.tolerance, "forwards": self.forwards, "entropy": self.entropy,
                "gaps": [g.__dict__ for g in self.gaps], "crossings": [c.__dict__ for c in self.crossings],
                "cause": self.cause, "message": self.message()}


def _called(logprob_fn: Callable, model: Any, batch: Mapping[str, Any], shape) -> tuple[torch.Tensor, Any]:
    out = logprob_fn(model, batch)
    logprobs, entropies = out if isinstance(out, tuple) else (out, None)
    for name, value in (("logprobs", logprobs), ("entropies", entropies)):
        if value is not None and (not isinstance(value, torch.Tensor) or tuple(value.shape) != tuple(shape)):
            raise TensorcadError(f"logprob_fn.{name}", f"expected a (B, T) = {tuple(shape)} tensor, got "
                                                       f"{getattr(value, 'shape', type(value).__name__)}")
    return logprobs.detach().double(), None if entropies is None else entropies.detach().double()


def _model_fn(model: Any) -> Callable:
    from tensorcad.hf import adapt

    try:
        return adapt(model)
    except TypeError as error:
        raise TensorcadError("model", str(error)) from None


def _cause(logprob_fn, model, model_fn, batch, rl, ids, first_call, crossings, gaps, tolerance) -> str:
    if crossings:
        return ("The cause: a shift across a boundary (labels made by torch.roll on the flat packed tensor, verl "
                "#6475): shift inside each sequence (by cu_seqlens or position_ids), never across the row")
    again, _ = _called(logprob_fn, model, batch, rl.shape)
    if not torch.allclose(again, first_call, atol=tolerance, rtol=0, equal_nan=True):
        return ("The cause: the function gives another answer on a second call on the same batch: a cache left on "
                "(past_key_values kept from a previous call or from generation: call the model with "
                "past_key_values=None, use_cache=False)")
    B, T = rl.shape
    positions = torch.as_tensor(batch["position_ids"]).reshape(B, T) if "position_ids" in batch else None
    tried = [("positions counted through the row (position_ids 0..T-1 across the pack, not restarting at each "
              "sequence): pass the batch's restarting position_ids to the model",
              lambda: run_model(model_fn, (ids, torch.zeros_like(ids), torch.arange(T).expand(B, T)), "model"))]
    from tensorcad.hf import is_hf_model

    if is_hf_model(model) and positions is not None:  # transformers reads packing off position_ids only uncached
        tried.append(("the cache left on: called with use_cache=True, transformers makes a DynamicCache and then "
                      "reads no packing from position_ids, so every sequence attends to those before it in its row; "
                      "call the model with use_cache=False",
                      lambda: model(input_ids=ids, position_ids=positions, use_cache=True).logits))
    later = [g for g in gaps if g.what == "log-prob"]
    for says, logits_of in tried:
        with torch.no_grad():
            logits = logits_of()
        scored = torch.log_softmax(logits.double(), -1)[:, :-1].gather(-1, ids[:, 1:, None])[..., 0]
        if later and all(abs(float(scored[g.row, g.first + g.position]) - g.got) <= tolerance for g in later):
            return f"The cause: {says}"
    return ""


def check_logprobs(logprob_fn: Callable[[Any, Mapping[str, Any]], Any], model: Any, batch: Mapping[str, Any], *,
                   atol: float | None = None) -> LogprobResult:
    """``logprob_fn(model, batch)`` on the packed batch against the model's own forward on each sequence alone."""
    if not callable(logprob_fn):
        raise TensorcadError("logprob_fn", f"expected a callable (model, batch) -> (B, T) log-probs, got "
                                           f"{type(logprob_fn).__name__}")
    rl = read_rl_batch(batch)
    if "input_ids" not in batch:
        raise TensorcadError("batch.input_ids", "the batch holds no input_ids: nothing to score")
    ids = torch.as_tensor(batch["input_ids"]).reshape(rl.shape).cpu()
    model_fn = _model_fn(model)
    with torch.no_grad():
        logprobs, entropies = _called(logprob_fn, model, batch, rl.shape)
        pieces = [(p.row, p.document, p.first, p.end) for p in rl.pieces if p.count]
        positions = torch.as_tensor(batch["position_ids"]).reshape(rl.shape).cpu() if "position_ids" in batch else None
        alone_lp, alone_h, tail = {}, {}, {}
        forwards = 1
        for bucket in buckets([end - first for _, _, first, end in pieces]):
            group = [pieces[k] for k in bucket]
            rows = padded_rows(ids, rl.documents, positions, group)
            logits = run_model(model_fn, rows, "model (each sequence alone, as rows of a padded batch)").double()
            forwards += 1
            logp = torch.log_softmax(logits, -1)
            for j, k in enumerate(bucket):
                row, _, first, end = pieces[k]
                n = end - first
                own = ids[row, first:end]
                alone_lp[k] = logp[j, :n - 1].gather(-1, own[1:, None])[:, 0]
                alone_h[k] = -(logp[j, :n].exp() * logp[j, :n]).sum(-1)
                tail[k] = logp[j, n - 1]
    parameters = list(model.parameters())[:1] if hasattr(model, "parameters") else []
    tolerance = (default_tolerance(parameters[0].dtype if parameters else torch.float32) if atol is None
                 else float(atol))
    starts = {p.row * rl.shape[1] + p.first for p in rl.pieces if p.count}
    flat = ids.reshape(-1)
    gaps, crossings, largest = [], [], 0.0
    for k, (row, _, first, end) in enumerate(pieces):
        checks = [("log-prob", logprobs[row, first:end - 1], alone_lp[k])]
        if entropies is not None:
            checks.append(("entropy", entropies[row, first:end], alone_h[k]))
        for what, got, want in checks:
            diff = torch.nan_to_num((got - want).abs(), nan=float("inf"))
            if len(diff):
                largest = max(largest, float(diff.max()))
                bad = (diff > tolerance).nonzero().flatten()
                if len(bad):
                    t = int(bad[0])
                    gaps.append(Gap(what, k, row, first, t, float(got[t]), float(want[t])))
        after = (row * rl.shape[1] + end) % flat.numel()  # the token after it in the flattened batch
        across = float(tail[k][flat[after]])
        got = float(logprobs[row, end - 1])
        # A sequence's first token after it is another sequence's: only then is a score of it a crossing (a
        # function wrapping inside its own sequence scores its own first token, told apart by the token id)
        if after in starts and flat[after] != ids[row, first] and abs(got - across) <= tolerance:
            crossings.append(Crossing(k, row, end - 1, after // rl.shape[1], after % rl.shape[1], got))
    cause = ""
    if gaps or crossings:
        cause = _cause(logprob_fn, model, model_fn, batch, rl, ids, logprobs, crossings, gaps, tolerance)
    return LogprobResult(len(pieces), tuple(gaps), tuple(crossings), largest, tolerance, forwards,
                         entropies is not None, cause)
