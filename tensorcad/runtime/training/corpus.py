"""`smoke-train --corpus`: train on real documents, whose boundaries are recorded as they are tokenized.

The corpus is read document by document (``corpus.reading.documents``: JSONL,
Parquet or plain text) and tokenized by a local Hugging Face tokenizer
directory, or into UTF-8 bytes without one. Each document's start is recorded
as it goes, so the packed rows know where every document begins: rows are
filled by a packing strategy (``packers``: stream, bfd, ffd, split, pad), each
row's documents numbered from 0 and its positions restarting at each, as
``packing.draw`` lays them out. A row's padding is a document of its own and
is never scored.

The loss is next-token cross-entropy inside documents only: a token is never
asked to predict the first token of the next document. A **gradient probe**
then takes one row holding two documents or more and differentiates one
document's loss with respect to the token embeddings of the whole row: under a
mask that keeps documents apart every other document's entries are exactly
zero, and its own are not. Training runs the eager form (FlexAttention has no
backward on CPU).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from tensorcad.design import Design, load
from tensorcad.errors import TensorcadError, check_integer
from tensorcad.packing import DEFAULT_BUFFER, check_strategy

from .smoke import train_steps

WARMUP = 10
MAX_DOCUMENTS = 1 << 20
MAX_TOKENS = 1 << 26


@dataclass(frozen=True)
class Tokenized:
    """Documents as one array of ids, with each document's first index (``starts``, one past the last)."""

    ids: np.ndarray
    starts: np.ndarray

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.starts)


def tokenize(corpus: str | Path, tokenizer: str | Path | None = None, field: str = "text",
             separator: str = "\n\n") -> Tokenized:
    """Every non-empty document of the corpus, tokenized, its boundary recorded as it is read."""
    from tensorcad.packing.corpus.reading import documents

    if tokenizer is not None:
        encode = _encoder(tokenizer)
    else:
        encode = lambda text: np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)  # noqa: E731
    pieces, starts, total = [], [0], 0
    for text in documents(corpus, field, separator):
        ids = encode(text)
        if len(ids) == 0:
            continue
        pieces.append(ids)
        total += len(ids)
        starts.append(total)
        if len(pieces) > MAX_DOCUMENTS or total > MAX_TOKENS:
            raise TensorcadError(str(corpus), f"more than {MAX_DOCUMENTS:,} documents or {MAX_TOKENS:,} tokens "
                                              "is not a smoke test")
    if not pieces:
        raise TensorcadError(str(corpus), "holds no non-empty documents")
    return Tokenized(np.concatenate(pieces), np.asarray(starts, dtype=np.int64))


def _encoder(tokenizer: str | Path):
    from tokenizers import Tokenizer

    path = Path(tokenizer)
    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        raise TensorcadError("--tokenizer", f"{tokenizer}: no tokenizer.json (a local Hugging Face tokenizer directory)")
    try:
        encoder = Tokenizer.from_file(str(file))
    except Exception as e:  # tokenizers raises a bare Exception for a bad file
        raise TensorcadError("--tokenizer", f"{file}: not a tokenizer: {e}") from None
    return lambda text: np.asarray(encoder.encode(text, add_special_tokens=False).ids, dtype=np.int64)


def into_vocabulary(ids: np.ndarray, vocab: int) -> np.ndarray:
    """The corpus's ids mapped into a design's vocabulary: the vocab - 1 commonest kept, the rest one id."""
    values, counts = np.unique(ids, return_counts=True)
    keep = values[np.argsort(-counts, kind="stable")[: vocab - 1]]
    table = {int(v): i for i, v in enumerate(np.sort(keep))}
    unknown = vocab - 1
    return np.fromiter((table.get(int(i), unknown) for i in ids), dtype=np.int64, count=len(ids))


@dataclass(frozen=True)
class PackedCorpus:
    """Packed rows of real tokens: ids, documents (from 0 each row), positions, and where tokens are real."""

    ids: np.ndarray
    documents: np.ndarray
    positions: np.ndarray
    real: np.ndarray  # bool (rows, seq)

    @property
    def scored(self) -> np.ndarray:
        """(rows, seq - 1): position t predicts t + 1, both real and in one document."""
        same = self.documents[:, 1:] == self.documents[:, :-1]
        return same & self.real[:, 1:] & self.real[:, :-1]


def pack_corpus(tokens: Tokenized, seq: int, strategy: str = "stream",
                buffer: int = DEFAULT_BUFFER) -> PackedCorpus:
    """Rows of ``seq`` tokens from the tokenized documents under ``strategy``."""
    seq = check_integer(seq, "seq", 2, 1 << 16)
    strategy = check_strategy(strategy, "--pack-strategy")
    lengths = tokens.lengths
    if strategy == "stream":
        rows = len(tokens.ids) // seq
        if rows < 1:
            raise TensorcadError("--corpus", f"{len(tokens.ids):,} tokens do not fill one row of {seq}")
        ids = tokens.ids[: rows * seq].reshape(rows, seq)
        # A document index for every token from the recorded starts, then restarted at each row.
        owner = np.repeat(np.arange(len(lengths)), lengths)[: rows * seq].reshape(rows, seq)
        documents = owner - owner[:, :1]
        from tensorcad.packing import positions_of

        return PackedCorpus(ids, documents, positions_of(documents), np.ones((rows, seq), dtype=bool))
    from tensorcad.packing.strategies import pack

    bins = pack(lengths, seq, strategy, buffer)
    ids = np.zeros((bins.rows, seq), dtype=np.int64)
    documents = np.zeros((bins.rows, seq), dtype=np.int64)
    positions = np.zeros((bins.rows, seq), dtype=np.int64)
    real = np.zeros((bins.rows, seq), dtype=bool)
    fill = np.zeros(bins.rows, dtype=np.int64)
    count = np.zeros(bins.rows, dtype=np.int64)
    taken = np.zeros(len(lengths), dtype=np.int64)  # whole pieces of each document placed so far
    for r, d, n in zip(bins.row.tolist(), bins.document.tolist(), bins.length.tolist()):
        # A split document's whole pieces come in order; its short rest is its last piece.
        offset = taken[d] * seq if n == seq or strategy != "split" else (lengths[d] // seq) * seq
        if n == seq and strategy == "split":
            taken[d] += 1
        begin = tokens.starts[d] + offset
        at = fill[r]
        ids[r, at:at + n] = tokens.ids[begin:begin + n]
        documents[r, at:at + n] = count[r]
        positions[r, at:at + n] = np.arange(n)
        real[r, at:at + n] = True
        fill[r] += n
        count[r] += 1
    for r in np.flatnonzero(fill < seq):  # padding: one more document, never scored
        documents[r, fill[r]:] = count[r]
        positions[r, fill[r]:] = np.arange(seq - fill[r])
    return PackedCorpus(ids, documents, positions, real)


@dataclass(frozen=True)
class CorpusResult:
    design: str
    corpus: str
    strategy: str
    params: int
    steps: int
    rows: int
    seq: int
    documents: int
    tokens: int
    padding: float
    losses: tuple[float, ...]
    probe_cross: float  # largest |gradient| of one document's loss on another document's embeddings
    probe_own: float  # largest |gradient| on its own (so the probe could have seen a leak)
    probe_documents: int
    seconds: float
    unit: str = "UTF-8 bytes; tensorcad lengths --by bytes counts the same"  # what a token is, without a tokenizer

    @property
    def initial_loss(self) -> float:
        head = self.losses[: max(1, min(5, len(self.losses) // 10))]
        return float(sum(head) / len(head))

    @property
    def final_loss(self) -> float:
        tail = self.losses[-max(1, min(10, len(self.losses) // 10)):]
        return float(sum(tail) / len(tail))

    @property
    def passed(self) -> bool:
        return self.final_loss < self.initial_loss and self.probe_cross == 0.0 and self.probe_own > 0.0

    def to_json(self) -> dict:
        return {"design": self.design, "corpus": self.corpus, "strategy": self.strategy, "params": self.params,
                "steps": self.steps, "rows": self.rows, "seq": self.seq, "documents": self.documents,
                "tokens": self.tokens, "padding": self.padding, "initialLoss": self.initial_loss,
                "finalLoss": self.final_loss, "lossFell": self.final_loss < self.initial_loss,
                "gradientProbe": {"crossDocument": self.probe_cross, "ownDocument": self.probe_own,
                                  "documentsInRow": self.probe_documents},
                "passed": self.passed,
                "losses": [round(x, 5) for x in self.losses[:: max(1, len(self.losses) // 50)]],
                "seconds": round(self.seconds, 2)}

    def summary(self) -> str:
        verdict = "fell" if self.final_loss < self.initial_loss else "did NOT fall"
        probe = ("exactly zero" if self.probe_cross == 0.0 else f"{self.probe_cross:.3g} (LEAK)")
        return (f"{self.design}: {self.params:,} parameters, {self.steps} steps of {self.rows} x {self.seq} tokens "
                f"in {self.seconds:.0f} s\n"
                f"corpus {self.corpus}: {self.documents:,} documents, {self.tokens:,} tokens ({self.unit}), "
                f"packed {self.strategy} ({self.padding:.1%} padding)\n"
                f"loss {verdict}: {self.initial_loss:.3f} -> {self.final_loss:.3f}\n"
                f"gradient probe over {self.probe_documents} documents of one row: one document's loss on "
                f"another's embeddings {probe}, on its own {self.probe_own:.3g}")


def _loss(model, batch: dict[str, torch.Tensor], scored: torch.Tensor) -> torch.Tensor:
    logits = model(**{k: v for k, v in batch.items() if k != "targets"})  # (B, T, V)
    return F.cross_entropy(logits[:, :-1][scored], batch["targets"][:, 1:][scored])


def train_on_corpus(design: Design | str, corpus: str | Path, *, tokenizer: str | Path | None = None,
                    strategy: str = "stream", steps: int = 300, params: int = 2_000_000, seed: int = 0,
                    rows: int = 16, seq: int | None = None, field: str = "text", progress=None) -> CorpusResult:
    """Train ``design`` (scaled) on the corpus's packed documents, then probe its gradients."""
    from tensorcad.runtime.building.generated import build
    from tensorcad.runtime.building.scaling import scale

    design = load(design) if not isinstance(design, Design) else design
    steps = check_integer(steps, "steps", 1, 100_000)
    if design.input("documents") is None:
        raise TensorcadError("design", f"{design.name} has no documents input: a corpus's boundaries would "
                                       "mean nothing to it (train it with smoke-train alone)")
    strategy = check_strategy(strategy, "--pack-strategy")
    small = scale(design, params=params)
    start = time.perf_counter()
    model = build(small, form="eager", seed=seed)
    vocab = model.config.vocab_size
    rows = check_integer(rows, "rows", 1, 1024)
    seq = min(check_integer(seq, "seq", 2, 1 << 16) if seq is not None else 128, small.context)
    tokens = tokenize(corpus, tokenizer, field)
    packed = pack_corpus(Tokenized(into_vocabulary(tokens.ids, vocab), tokens.starts), seq, strategy)
    wants_positions = design.input("positions") is not None
    tensors = {"ids": torch.from_numpy(packed.ids), "documents": torch.from_numpy(packed.documents)}
    if wants_positions:
        tensors["positions"] = torch.from_numpy(packed.positions)
    scored_all = torch.from_numpy(packed.scored)
    if not scored_all.any():
        raise TensorcadError("--corpus", "no document is two tokens long: nothing to predict")
    rng = np.random.default_rng(seed)

    def loss_at(step: int) -> torch.Tensor:
        pick = torch.from_numpy(rng.choice(len(packed.ids), size=rows, replace=len(packed.ids) < rows))
        batch = {k: v[pick] for k, v in tensors.items()}
        batch["targets"] = batch["ids"]
        return _loss(model, batch, scored_all[pick])

    losses = train_steps(model, steps, loss_at, progress, warmup=WARMUP)
    model.eval()
    cross, own, count = gradient_probe(model, tensors, scored_all)
    real = packed.real.mean()
    return CorpusResult(small.name, str(corpus), strategy, sum(p.numel() for p in model.parameters()), steps,
                        rows, seq, len(tokens.lengths), int(len(tokens.ids)), float(1 - real), tuple(losses),
                        cross, own, count, time.perf_counter() - start,
                        *(("the tokenizer's",) if tokenizer is not None else ()))


def gradient_probe(model, tensors: dict[str, torch.Tensor], scored: torch.Tensor) -> tuple[float, float, int]:
    """One document's loss differentiated against every token embedding of its row.

    Takes the row with the most documents that have a scored token, the last
    such document as the probe (causal attention lets only earlier ones reach it), and returns the largest |gradient| on the
    other documents' embeddings (0 exactly, for a model that keeps them
    apart), on its own (not 0: the probe sees through the model), and how many
    documents the row holds. The token embedding is the model's first
    ``nn.Embedding``, the one generated code applies to the ids.
    """
    documents = tensors["documents"]
    has_scored = [len(torch.unique(documents[r, :-1][scored[r]])) for r in range(len(documents))]
    r = int(np.argmax(has_scored))
    row = {k: v[r:r + 1] for k, v in tensors.items()}
    doc = row["documents"][0]
    # The last scored document: under causal attention only earlier documents could leak into it.
    probe = int(torch.unique(doc[:-1][scored[r]])[-1])
    embedding = next(m for m in model.modules() if isinstance(m, torch.nn.Embedding))
    captured = []

    def keep(module, inputs, output):
        output.retain_grad()
        captured.append(output)

    handle = embedding.register_forward_hook(keep)
    try:
        model.zero_grad(set_to_none=True)
        logits = model(**row)  # (1, T, V)
        mine = scored[r] & (doc[:-1] == probe)
        loss = F.cross_entropy(logits[0, :-1][mine], row["ids"][0, 1:][mine], reduction="sum")
        loss.backward()
    finally:
        handle.remove()
    grad = captured[0].grad[0].abs().amax(dim=-1)  # (T,)
    return float(grad[doc != probe].max()), float(grad[doc == probe].max()), int(len(torch.unique(doc)))

