"""A capacity leak is told apart from an attention leak (issue 44): isolation names the expert and the token.

A two-layer design whose attention keeps documents apart and whose experts take at most a capacity of
each row's routed tokens: packed, one document's tokens fill an expert's slots another needed. The
token the hint names is checked here by a walk of the test's own over the router's choices (the MoE's
input captured by a forward hook, its gate, top-k): dropped in the packed row, kept in its document
alone. With the capacity raised until nothing drops, isolation passes and nothing is named.
"""

from __future__ import annotations

import math
import re
import warnings

import pytest

torch = pytest.importorskip("torch")

from moe_designs import BASE, design  # noqa: E402 - tests/, on sys.path

from tensorcad.runtime.building.settings import Settings  # noqa: E402
from tensorcad.runtime.building.subject import Subject  # noqa: E402
from tensorcad.runtime.certification.design.capacity import capacity_cause  # noqa: E402
from tensorcad.runtime.certification.registry import certify  # noqa: E402

SETTINGS = Settings(seq=64, pack=12.0, spread=1.0, params=200_000)
HINT = re.compile(r"(\S+): its experts' capacity \(factor ([0-9.]+), counted over each row\) drops token (\d+) of "
                  r"document (\d+) of row (\d+) at expert (\d+), which that document alone keeps: in a packed row "
                  r"documents compete for each expert's slots; a capacity of null is dropless and keeps them apart")


def capped(factor):
    return design({**BASE, "capacity": factor, "drop": "position", "capacity_scope": "row"}, documents=True)


def _isolation(d):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return certify(d, SETTINGS, only=["isolation[eager]"])[0]


def walk(chosen, capacity_factor, experts=4):
    """1 for each (token, slot) of one group within its expert's capacity, the earlier tokens first."""
    capacity = math.ceil(capacity_factor * chosen.numel() / experts)
    taken, kept = [0] * experts, torch.zeros_like(chosen)
    for t in range(chosen.shape[0]):
        for s in range(chosen.shape[1]):
            e = int(chosen[t, s])
            taken[e] += 1
            kept[t, s] = int(taken[e] <= capacity)
    return kept


def routed(subject, name, ids, documents, positions):
    """The router's top-k choices at the MoE ``name``, from its input as the model ran (a hook of the test's)."""
    model = subject.model("eager")
    module = dict(model.module.named_modules())[name]
    seen = []
    handle = module.register_forward_hook(lambda m, args, out: seen.append(args[0].detach()))
    try:
        with torch.no_grad():
            model.module(**subject._inputs((ids, documents, positions)))
    finally:
        handle.remove()
        model.form = "flex"
    x = seen[0]
    return module.gate(x.reshape(-1, x.shape[-1])).float().softmax(-1).topk(2, dim=-1).indices.reshape(
        x.shape[0], x.shape[1], 2)


def test_a_capacity_shared_across_a_packed_row_is_named_at_the_dropped_token():
    d = capped(0.5)
    check = _isolation(d)
    assert check.status == "failed"
    [hint] = [line for line in check.message.splitlines() if HINT.fullmatch(line)]
    name, factor, position, document, row, expert = HINT.fullmatch(hint).groups()
    position, document, row, expert = int(position), int(document), int(row), int(expert)
    assert float(factor) == 0.5 and name.endswith(".mlp")
    subject = Subject(d, SETTINGS)
    ids, documents, positions = subject.batch
    where = torch.nonzero(documents[row] == document).flatten()
    first, end = int(where[0]), int(where[-1]) + 1
    packed = routed(subject, name, ids, documents, positions)[row]  # (T, K)
    alone = routed(subject, name, ids[row:row + 1, first:end], torch.zeros_like(ids[row:row + 1, first:end]),
                   torch.arange(end - first)[None])[0]
    slot = int(torch.nonzero(packed[first + position] == expert)[0])
    assert walk(packed, 0.5)[first + position, slot] == 0  # the packed row drops it
    assert walk(alone, 0.5)[position, slot] == 1  # its document alone keeps it


def test_a_capacity_nothing_fills_passes_and_names_nothing():
    d = capped(8.0)
    assert _isolation(d).status == "passed"
    assert capacity_cause(Subject(d, SETTINGS)) is None


def test_a_dropless_design_has_no_capacity_to_name():
    assert capacity_cause(Subject(design(dict(BASE), documents=True), SETTINGS)) is None
