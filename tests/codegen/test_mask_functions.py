"""What codegen's mask and score functions say about themselves, held to what they compute.

``test_mask_content`` holds every generated mask_mod to the numpy interpreter point by
point. The functions also carry statements the runtime and the reader rely on: flags that
a mask ignores the row or the head (the prelude then builds one block mask for all rows or
heads), the ranges its block mask is built from, the comment saying what a window keeps,
a name of its own for each distinct mask or score, the factory call with every tensor it
reads. Each is checked here against what the function computes when run.
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tensorcad  # noqa: E402
from tensorcad.codegen.masks import mask_function, mask_table, score_function  # noqa: E402
from tensorcad.codegen.names import Namer  # noqa: E402
from tensorcad.design.expr import Env, evaluate  # noqa: E402
from tensorcad.design.load import read  # noqa: E402
from tensorcad.errors import TensorcadError  # noqa: E402

from test_mask_content import VARIANTS, design_of, ragged_rows  # noqa: E402  (tests/codegen)

ROLES = {"doc": "documents", "pos": "positions"}
SEQ = 97

MORE = {  # the row and the head read bare, and nothing that the ranges decide
    "by-row": {"causal": False, "mask": "(b % 2 == 0) | (q - kv < 5)"},
    "by-row-and-head": {"causal": False,
                        "mask": "(b % 2 == 0) | (q - kv < where(h < 2, 5, 30))"},
}
ALL = {**VARIANTS, **MORE}


def attention_of(name: str):
    (att, _), = design_of(ALL[name]).attentions()
    return att


def made(fn, documents=None, positions=None):
    """The mask_mod (or score_mod) the function's source makes, as the generated module runs it."""
    space: dict = {"torch": torch}
    exec(compile(fn.source, f"<{fn.name}>", "exec"), space)
    if fn.factory is None:
        return space[fn.name]
    tensors = {"documents": torch.from_numpy(documents), "positions": torch.from_numpy(positions)}
    return space[fn.factory](*(tensors[role] for role in fn.roles))


def mask_of(name: str, owner: str = "layer"):
    att = attention_of(name)
    roles = {port: wire.role for port, wire in att.tensors.items()}
    return att, mask_function(att, roles, Namer(), Namer(), owner)


def grid(mask_mod, rows: int = 2, heads: int = 4) -> np.ndarray:
    """What the mask_mod keeps at every (row, head, query, key)."""
    q, kv = torch.arange(SEQ).view(SEQ, 1), torch.arange(SEQ).view(1, SEQ)
    return np.array([[np.broadcast_to(mask_mod(torch.tensor(b), torch.tensor(h), q, kv).numpy(),
                                      (SEQ, SEQ)) for h in range(heads)] for b in range(rows)])


@pytest.mark.parametrize("name", sorted(ALL))
def test_a_mask_flagged_as_ignoring_the_row_or_head_is_the_same_at_every_one(name):
    att, fn = mask_of(name)
    documents, positions = ragged_rows(seed=5)
    mask_mod = made(fn, documents, positions)
    kept = grid(mask_mod, rows=2, heads=att.heads)
    rows_differ = not (kept == kept[:1]).all()
    heads_differ = not (kept == kept[:, :1]).all()
    # a flag set where the answer moves would give every row (head) the first one's blocks;
    # one missing where it does not would build a block mask a row (head) for nothing
    assert getattr(mask_mod, "uses_batch", True) == rows_differ
    assert getattr(mask_mod, "uses_head", True) == heads_differ


def test_each_distinct_mask_and_score_gets_a_function_of_its_own():
    # one generator's namespace: two windows are both "sliding_window", told apart by number;
    # the same mask asked again is the same function
    names, ports = Namer(), Namer()
    first = attention_of("sliding-window")
    (second, _), = design_of({**VARIANTS["sliding-window"], "window": 29}).attentions()
    a = mask_function(first, {}, ports, names, "one")
    b = mask_function(second, {}, ports, names, "two")
    again = mask_function(first, {}, ports, names, "three")
    assert (a.name, b.name, again.name) == ("sliding_window", "sliding_window_2", "sliding_window")
    keys = lambda fn: grid(made(fn), rows=1, heads=1)[0, 0].sum(axis=1)  # noqa: E731
    assert keys(a).max() == 13 and keys(b).max() == 29
    # documents and their factories likewise
    doc_a = mask_function(attention_of("document-window"), ROLES, ports, names, "one")
    doc_b = mask_function(attention_of("document-causal"), ROLES, ports, names, "two")
    assert len({doc_a.name, doc_b.name, a.name, b.name}) == 4
    assert doc_a.factory != doc_b.factory and doc_a.factory.endswith("_mask")


def test_a_custom_mask_is_named_for_its_owner():
    _, fn = mask_of("mixed", owner="encoder_layer")
    assert fn.name == "keeps_encoder_layer" and fn.factory == "keeps_encoder_layer_mask"


def test_a_factory_is_called_with_every_tensor_it_reads():
    _, fn = mask_of("positions")
    assert fn.roles == ("documents", "positions")
    assert fn.call({"doc": "documents", "pos": "positions"}) == f"{fn.factory}(documents, positions)"
    _, causal = mask_of("causal")
    assert causal.call({}) == causal.name == "causal"


@pytest.mark.parametrize("name,keys_each_side", [("local-window", 8), ("sliding-window", 12)])
def test_the_window_comment_says_what_the_mask_keeps(name, keys_each_side):
    _, fn = mask_of(name)
    kept = grid(made(fn), rows=1, heads=1)[0, 0]
    middle = SEQ // 2
    behind = int(kept[middle, :middle].sum())
    ahead = int(kept[middle, middle + 1:].sum())
    assert behind == keys_each_side and ahead == (keys_each_side if name == "local-window" else 0)
    if name == "local-window":
        assert f"(the query and {behind} keys each side)" in fn.source
    else:
        assert f"kv = q - {behind} is the oldest key kept and kv = q - {behind + 1} the first dropped" \
            in fn.source


def test_per_head_ranges_are_stated_for_every_head():
    att, fn = mask_of("per-head-windows")
    documents, positions = ragged_rows(seed=3)
    mask_mod = made(fn, documents, positions)
    # the distance each head keeps farthest back, from the mask itself on one document
    one = np.zeros_like(documents)
    kept = grid(made(fn, one, np.broadcast_to(np.arange(SEQ), one.shape).copy()), rows=1,
                heads=att.heads)[0]
    farthest = tuple(int(np.max(np.arange(SEQ)[:, None] - np.arange(SEQ)[None, :],
                                where=head, initial=0)) for head in kept)
    assert farthest == (4, 4, 29, 29)
    assert mask_mod.ranges["documents"] is mask_mod.reads[0]
    assert (mask_mod.ranges["behind"], mask_mod.ranges["ahead"]) == (farthest, 0)


def test_a_mask_without_flags_or_ranges_ends_its_text_once():
    _, fn = mask_of("by-row-and-head")
    assert fn.factory is None and "uses_" not in fn.source and ".ranges" not in fn.source
    assert fn.source.endswith(")\n") and not fn.source.endswith("\n\n")


def test_a_module_without_masks_states_an_empty_table():
    space: dict = {}
    exec(mask_table({}), space)
    assert space["MASKS"] == {}


@pytest.mark.parametrize("score", [
    "20 * tanh(score * 0.05)",    # soft-capping, Gemma 2 style
    "score - abs(q - kv) * 0.5",  # a linear distance penalty
    "score + 0.01 * (q - kv)",    # a sum with the score, but of no learned table
    "0.01 * (q - kv) + score",
])
def test_a_score_that_is_not_a_relative_bias_is_named_for_its_owner(score):
    (att, _), = design_of({"score": score}).attentions()
    names = Namer()
    fn = score_function(att, Namer(), names, "layer")
    assert fn.name == "score_layer" and fn.factory is None and "_score(" not in fn.source
    score_mod = made(fn)
    s = torch.linspace(-100, 100, 11)
    b = h = torch.tensor(0)
    q, kv = torch.tensor(40), torch.tensor(10)
    expected = evaluate(att.score, Env(b=0, h=0, q=40, kv=10, score=s.numpy()))
    assert np.allclose(score_mod(s, b, h, q, kv).numpy(), expected, rtol=0, atol=1e-5)
    # a second, different score in the same namespace is a function of its own
    (halved, _), = design_of({"score": "score * 0.5"}).attentions()
    other = score_function(halved, Namer(), names, "layer")
    assert other.name == "score_layer_2"


def test_a_window_without_causality_is_named_local():
    assert mask_of("local-window")[1].name == "local_window"
    assert mask_of("sliding-window")[1].name == "sliding_window"


def test_the_mask_table_states_every_attention_and_role():
    # one mask run by two attentions, one of its ports wired to an input of no role
    _, fn = mask_of("positions")
    shared = dataclasses.replace(fn, roles=("documents", None))
    space: dict = {"torch": torch}
    exec(fn.source + "\n" + mask_table({fn.name: (shared, ["nodes[1].attention", "nodes[2].attention"])}),
         space)
    entry = space["MASKS"][fn.name]
    assert entry["attentions"] == ("nodes[1].attention", "nodes[2].attention")
    assert entry["reads"] == ("documents", None) and entry["factory"] is space[fn.factory]
    assert entry["mask_mod"] is None
    with pytest.raises(TensorcadError) as error:
        mask_table({fn.name: (fn, ['nodes[1]"; import os'])})
    assert (error.value.path, error.value.message) == (
        'nodes[1]"; import os', "an attention's path holds characters codegen will not write")


def t5_attention(score: str):
    raw = copy.deepcopy(read("t5-bias"))
    raw["nodes"][2]["params"]["block"]["params"]["attention"]["score"] = score
    (att, _), *_ = tensorcad.load(raw).attentions()
    return att


def test_scores_reading_a_table_get_factories_of_their_own():
    names = Namer()
    t5 = score_function(t5_attention("score + bias(bucket(kv - q, 32, 128), h)"), Namer(), names, "a")
    other = score_function(t5_attention("score + bias(bucket(kv - q, 16, 64), h)"), Namer(), names, "b")
    assert t5.name == "relative_position_bias" and other.name == "relative_position_bias_2"
    assert t5.factory != other.factory and t5.factory.endswith("_score")
    # a table read at something other than a bucket is not the relative bias
    plain = score_function(t5_attention("score + bias(kv - q, h)"), Namer(), Namer(), "layer")
    assert plain.name == "score_layer"
