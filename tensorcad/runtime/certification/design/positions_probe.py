"""The positions probe: does a packed row compute what each of its documents computes alone?

Phase 3 of the packed-sequences proposal. A row is packed as Hugging Face's
flattening collator packs whole examples; the model runs it with positions
that restart per document, and with positions counted straight through the
row; each is held against every document run on its own. Rotary attention
under a document mask sees only distances within a document, so both agree
to float32 noise; a learned position table is looked up by the position
itself, so only restarting positions agree. The same probe measures what
large positions cost a rotation in float32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tensorcad.design import load
from tensorcad.design.model import Design
from tensorcad.errors import TensorcadError
from tensorcad.packing import draw, positions_of
from tensorcad.runtime.building.generated import build


@dataclass(frozen=True)
class ProbeResult:
    restarting: float  # largest |packed - alone| over every document's outputs
    straight: float  # the same with positions 0..T-1 through the row
    output_scale: float  # largest |output| of the documents run alone, for scale
    offsets: dict[int, float]  # each document alone, positions counted from an offset


def _alone(model, ids, start: int = 0) -> torch.Tensor:
    T = ids.shape[-1]
    positions = torch.arange(start, start + T)[None]
    return model(ids[None], torch.zeros(1, T, dtype=torch.long), positions)[0]


def probe(design: Design | str, *, seq: int = 256, mean: float = 48, seed: int = 0,
          offsets: tuple[int, ...] = ()) -> ProbeResult:
    """Run `design` (with documents and positions inputs, already small) three ways on one packed row."""
    design = load(design)
    if design.input("documents") is None or design.input("positions") is None:
        raise TensorcadError("inputs", "the probe needs a design with documents and positions inputs")
    documents, _ = draw(rows=1, seq=seq, mean=mean, spread=1.0, seed=seed)
    documents = torch.from_numpy(documents)
    positions = torch.from_numpy(positions_of(documents.numpy()))  # the collator's position_ids
    generator = torch.Generator().manual_seed(seed)
    vocab = next(n.params["vocab"] for n, _ in design.walk() if n.kind == "embedding")
    ids = torch.randint(0, vocab, (1, seq), generator=generator)
    model = build(design, form="eager", seed=seed)
    with torch.no_grad():
        restarting = model(ids, documents, positions)[0]
        straight = model(ids, documents, torch.arange(seq)[None])[0]
        worst_restart = worst_straight = scale = 0.0
        for d in documents[0].unique():
            inside = documents[0] == d
            alone = _alone(model, ids[0, inside])
            scale = max(scale, alone.abs().max().item())
            worst_restart = max(worst_restart, (restarting[inside] - alone).abs().max().item())
            worst_straight = max(worst_straight, (straight[inside] - alone).abs().max().item())
        shifted = {}
        for offset in offsets:
            # Only a rotation can be counted from anywhere: a table holds `context` positions.
            big = build(_with_context(design, offset + seq), form="eager", seed=seed)
            worst = 0.0
            for d in documents[0].unique():
                piece = ids[0, documents[0] == d]
                worst = max(worst, (_alone(big, piece, offset) - _alone(big, piece)).abs().max().item())
            shifted[offset] = worst
    return ProbeResult(worst_restart, worst_straight, scale, shifted)


def _with_context(design: Design, context: int) -> Design:
    raw = design.to_dict()
    raw["context"] = context
    return load(raw)
