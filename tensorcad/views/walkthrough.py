"""The walkthrough: what each part of a design does, in plain words, with its figures.

One step per stage a token goes through (inputs, embedding, blocks, the
stateful mixers where a design has them, attention, head). The attention step says what the mask is for: that it
keeps packed documents apart when it reads a documents input, and that the
positions restart when a positions input is wired; under a packing it adds
what the attention then costs and what a block-sparse kernel computes.
"""

from __future__ import annotations

from tensorcad.analysis.report import Report
from tensorcad.design.expr import to_text
from tensorcad.design.masks import reads_documents
from tensorcad.design.mixers import RESET, mixers
from tensorcad.design.model import Design, Node

ROLE_WORDS = {
    "tokens": "token ids, one a position",
    "documents": "which document each position belongs to: a packed training row holds several "
                 "documents laid end to end",
    "positions": "each token's position in its own document, restarting at 0 where a document begins",
}


def _flop(x: float) -> str:
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:,.2f} {unit}"
    return f"{x:,.0f} FLOP"


def _step(step: str, title: str, lines: list[str]) -> dict:
    return {"step": step, "title": title, "text": " ".join(line for line in lines if line)}


def _reads_positions(design: Design) -> list[Node]:
    """Nodes that turn or look up by a positions input (rope, pos_embedding)."""
    return [n for n, _ in design.walk() if n.kind in ("rope", "pos_embedding")
            and any(w.role == "positions" for w in n.wires)]


def _inputs(design: Design) -> dict:
    parts = [f"{i.name}: {ROLE_WORDS.get(i.role, i.role)}" for i in design.inputs]
    lines = [f"The model reads {len(design.inputs)} input{'s' if len(design.inputs) != 1 else ''}, "
             f"each B x T (rows by positions). " + "; ".join(parts) + "."]
    if design.input("documents") is None:
        lines.append("It has no documents input, so every row is taken to be one document.")
    return _step("inputs", "Inputs", lines)


def _embedding(design: Design, report: Report) -> dict:
    lines = []
    for n, _ in design.walk():
        if n.kind == "embedding":
            lines.append(f"{n.id} looks up a learned vector of {n.params['dim']:,} numbers for each of "
                         f"{n.params['vocab']:,} token ids.")
        elif n.kind == "pos_embedding":
            by = ("the positions input, which restarts at each document" if any(
                w.role == "positions" for w in n.wires) else "the index 0..T-1 along the row")
            lines.append(f"{n.id} adds a learned vector for each of {n.params['context']:,} positions, "
                         f"looked up by {by}.")
    p = report.params
    lines.append(f"Embedding tables hold {p.embedding:,} of the {p.total:,} parameters; a lookup "
                 "multiplies nothing, so they cost no FLOPs.")
    return _step("embedding", "Embedding", lines)


def _block_words(block: Node) -> str:
    mlp = block.params.get("mlp") or {}
    norm = block.params.get("norm", "rmsnorm")
    return (f"each block normalises its input ({norm}), attends, and adds the result back; then "
            f"normalises again and runs an MLP {mlp.get('hidden', '?'):,} wide ({mlp.get('activation', 'swiglu')}), "
            "adding that back too")


def _blocks(design: Design, report: Report) -> dict:
    lines = []
    for n in design.nodes:
        if n.kind == "stack" and n.params.get("layers") is not None:
            cycle = n.params["layers"]
            counts = ", ".join(f"{name} ({child.kind}) {n.repeat * cycle.count(name)}"
                               for name, child in dict(zip(cycle, n.children)).items())
            lines.append(f"{n.id} runs {n.repeat * len(cycle)} layers, {len(cycle)} taken in turn "
                         f"({', '.join(cycle)}): {counts}.")
        elif n.kind == "stack" and n.children:
            block = n.children[0]
            what = _block_words(block) if block.kind == "transformer_block" else f"each is a {block.kind}"
            layers = n.repeat * sum(c.repeat for c in n.children)
            turns = f" ({len(n.children)} kinds in turn)" if len(n.children) > 1 else ""
            lines.append(f"{n.id} repeats one {block.kind} {layers} times{turns}: {what}.")
        elif n.kind == "transformer_block":
            lines.append(f"{n.id} is one transformer block: {_block_words(n)}.")
    f = report.flops
    lines.append(f"Every weight a token multiplies costs 2 FLOPs a token: {report.params.matmul:,} such "
                 f"weights, {_flop(f.fwd_per_token - f.fwd_attention)} a token before attention.")
    return _step("blocks", "Blocks", lines)


def _attention(design: Design, report: Report) -> dict:
    op = report.operating_point
    lines = []
    seen: set[str] = set()
    for a, layers in design.attentions():
        if a.path in seen:
            continue
        seen.add(a.path)
        grouped = (f"{a.heads} query heads sharing {a.kv_heads} key/value heads (grouped-query)"
                   if a.kv_heads != a.heads else f"{a.heads} heads")
        lines.append(f"{layers} layer{'s' if layers != 1 else ''} attend with {grouped}, each "
                     f"{a.head_dim} wide.")
        if a.causal:
            lines.append("Causal: a query sees only keys at or before it.")
        if a.window is not None:
            lines.append(f"Windowed: only the {a.window:,} keys nearest the query, itself included.")
        if reads_documents(a):
            lines.append(f"The mask ({to_text(a.mask) if a.mask is not None else to_text(a.keep)}) keeps "
                         "packed documents apart: a query sees only keys of its own document, so the "
                         "documents sharing a training row never see each other.")
        elif a.mask is not None:
            lines.append(f"The mask keeps only scores where {to_text(a.mask)}.")
        if a.score is not None:
            lines.append(f"Each score is rewritten as {to_text(a.score)}.")
    turning = [n for n in _reads_positions(design) if n.kind == "rope"]
    if turning:
        lines.append("The positions restart at each document: the rotation turns by each token's "
                     "position in its own document (the positions input), not its index in the row.")
    f = report.flops
    lines.append(f"With one document filling the {op.seq:,}-token row, a query keeps "
                 f"{f.keys_per_query:,.1f} keys on average: attention is {_flop(f.fwd_attention)} a "
                 f"token, {f.attention_share:.1%} of the forward pass.")
    if report.packed is not None:
        k = report.packed
        pack = op.packing
        lines.append(f"Packed in {pack.mean:,g}-token documents (spread {pack.spread:g}), a query keeps "
                     f"{k.keys_per_query:,.1f} keys: the attention costs {_flop(k.fwd_attention)} a "
                     f"token, {k.attention_share:.1%} of the forward pass.")
        lines.append(f"A kernel that computes whole {op.block} x {op.block} blocks does "
                     f"{k.block_ratio:.2f}x that: {_flop(k.fwd_attention_blocks)} a token.")
    elif op.packing is not None:
        lines.append("A packing is set, but no mask here reads the documents: attention crosses "
                     "documents, so packing changes nothing.")
    return _step("attention", "Attention", lines)


def _head(design: Design, report: Report) -> dict:
    out = design.node(design.output)
    lines = []
    if out.kind == "linear":
        tie = out.params.get("tie")
        tied = f", sharing its weights with {tie}" if tie else ""
        lines.append(f"{out.id} turns each position's vector into {out.params['out']:,} scores, one per "
                     f"token id: the prediction of the next token{tied}.")
    else:
        lines.append(f"The output is {out.id} ({out.kind}).")
    t = report.training_flops
    lines.append(f"Training costs 3x the forward pass (the backward pass is two more): "
                 f"{_flop(t.train_per_token)} a token"
                 f"{' on packed rows' if report.packed is not None else ''}. Serving is one document "
                 f"a sequence: {_flop(report.serving_fwd_per_token)} a token.")
    return _step("head", "Head", lines)


def _mixers(design: Design, report: Report) -> dict:
    lines = []
    for m in mixers(design):
        kept = (RESET if m.resets else
                "it reads no documents, so its state carries from one packed document into the next")
        lines.append(f"{m.layers} layer{'s' if m.layers != 1 else ''} mix tokens with a {m.kind} mixer, "
                     f"which carries {m.state} from each position to the next; {kept}.")
    f = report.flops
    lines.append(f"Their taps and scans cost {_flop(f.fwd_mixing)} a token, and the document length moves "
                 "none of it: a reset zeroes numbers, it skips no multiply.")
    stream = report.per_stream
    if stream is not None and stream.state_bytes is not None:
        lines.append(f"Serving, a stream keeps {stream.state_bytes / 2**20:,.2f} MiB of their state at any "
                     "context, where attention keeps a cache growing with it.")
    return _step("mixers", "Mixers", lines)


def walkthrough(design: Design, report: Report) -> list[dict]:
    """The steps, in the order a token meets them: [{step, title, text}] (mixers only where there are)."""
    steps = [_inputs(design), _embedding(design, report), _blocks(design, report)]
    if mixers(design):
        steps.append(_mixers(design, report))
    return steps + [_attention(design, report), _head(design, report)]
