"""build(): generated models run, agree across forms, keep documents apart, count right.

Real torch on CPU. FlexAttention runs uncompiled (the module's COMPILE switched
off), so no test waits on a compiler; models are scaled to ~100k-300k parameters
and sequences are short.
"""

from __future__ import annotations

import inspect
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")

import tensorcad  # noqa: E402
from tensorcad.analysis.params import count_params  # noqa: E402
from tensorcad.design import resolve  # noqa: E402
from tensorcad.runtime import build, load_module, scale  # noqa: E402

PRESETS = tensorcad.preset_names()


@pytest.fixture(autouse=True)
def quiet_uncompiled_flex():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        yield


def namespace(model):
    return vars(sys.modules[type(model).__module__])


def small(design, params=150_000, form="flex", depth=None):
    if not isinstance(design, tensorcad.Design):
        design = tensorcad.load(design)
    scaled = scale(design, params)
    if depth is not None:  # after scaling, which picks its own depth
        raw = scaled.to_dict()
        for node in raw["nodes"]:
            if node["kind"] == "stack":  # a hybrid's one whole cycle of its layers
                node["params"]["repeat"] = max(depth, len(node["params"].get("layers") or ()))
        scaled = resolve(raw)
    model = build(scaled, form=form)
    namespace(model)["COMPILE"].update(flex_attention=False, create_block_mask=False)
    return scaled, model


def vocab(design):
    return next(n.params["vocab"] for n, _ in design.walk() if n.kind == "embedding")


def packed(T=48, lengths=(10, 17, 21), B=2):
    docs = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])[:T]
    positions = torch.cat([torch.arange(n) for n in lengths])[:T]
    return docs.expand(B, T).clone(), positions.expand(B, T).clone()


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_builds_and_forms_agree(preset):
    scaled, model = small(preset, 60_000, depth=2)
    assert sum(p.numel() for p in model.parameters()) == count_params(scaled).total
    args = list(inspect.signature(model.forward).parameters)
    assert args == ["ids", "documents", "positions"]
    ids = torch.randint(0, vocab(scaled), (2, 32), generator=torch.Generator().manual_seed(0))
    kwargs = {"documents": packed(32)[0]} if scaled.input("documents") else {}
    with torch.no_grad():
        flex = model(ids, **kwargs)
        model.form = "eager"
        eager = model(ids, **kwargs)
    assert flex.shape == (2, 32, scaled.node(scaled.output).dim)
    assert namespace(model)["RUNTIME_PATHS"]["attend"] == "eager"
    torch.testing.assert_close(flex, eager, atol=1e-5, rtol=0)


def test_contract_config_form_and_errors():
    scaled, model = small("llama-3-8b-documents")
    ns = namespace(model)
    assert isinstance(ns["CONFIG"], ns["Config"])
    again = ns["Model"](config=ns["CONFIG"], form="eager")
    assert again.form == "eager"
    with pytest.raises(ValueError, match="form"):
        model.form = "fused"
    with pytest.raises(ValueError, match="documents"):
        model(torch.zeros(1, 8, dtype=torch.long))
    ids = torch.zeros(1, 8, dtype=torch.long)
    with pytest.raises(ValueError, match="this design has no positions input: .* pass positions=None"):
        model(ids, torch.zeros_like(ids), positions=torch.arange(8)[None])
    context = ns["CONFIG"].context
    long = torch.zeros(1, context + 1, dtype=torch.long)
    # Past the context the message names the option that sets the row length, as `rules` does.
    with pytest.raises(ValueError, match=rf"{context + 1} positions; the model holds {context} .*\(--seq\)"):
        model(long, torch.zeros_like(long))
    with pytest.raises(tensorcad.TensorcadError):
        build(scaled, form="fast")
    assert load_module("X = 1").X == 1


def test_seeded_init_is_deterministic():
    scaled = scale(tensorcad.load("gpt2-small"), 100_000)
    a, b, c = build(scaled, seed=3), build(scaled, seed=3), build(scaled, seed=4)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert not torch.equal(a.wte.weight, c.wte.weight)


def test_gpt2_tied_head_shares_the_embedding_storage():
    _, model = small("gpt2-small")
    assert model.lm_head.weight.data_ptr() == model.wte.weight.data_ptr()


def _document_changes(model, ids, docs, form, changed=1):
    model.form = form
    other = ids.clone()
    inside = docs == changed
    other[inside] = (other[inside] + 1) % 16
    with torch.no_grad():
        before, after = model(ids, documents=docs), model(other, documents=docs)
    outside = ~inside
    return (before - after)[outside].abs().max().item(), (before - after)[inside].abs().max().item()


@pytest.mark.parametrize("form", ["flex", "eager"])
def test_documents_are_isolated(form):
    _, model = small("llama-3-8b-documents", 150_000)
    docs, _ = packed(48)
    ids = torch.randint(0, 16, (2, 48), generator=torch.Generator().manual_seed(1))
    leaked, moved = _document_changes(model, ids, docs, form)
    assert leaked == 0.0 and moved > 0


@pytest.mark.parametrize("form", ["flex", "eager"])
def test_a_leaking_mask_is_caught_by_the_same_check(form):
    raw = tensorcad.load("llama-3-8b-documents").to_dict()
    raw["nodes"][1]["params"]["block"]["params"]["attention"]["mask"] = "doc(b, q) >= doc(b, kv)"
    _, model = small(resolve(raw), 150_000)
    docs, _ = packed(48)
    ids = torch.randint(0, 16, (2, 48), generator=torch.Generator().manual_seed(1))
    leaked, _ = _document_changes(model, ids, docs, form, changed=0)
    assert leaked > 0


def test_block_mask_built_once_per_forward_and_kept_once_per_mask():
    scaled, model = small("llama-3-8b-documents", 60_000, depth=8)
    assert sum(n.repeat for n in scaled.nodes if n.kind == "stack") == 8
    ns = namespace(model)
    calls, pointwise = [], []
    real = ns["_block_mask_from_ranges"]
    ns["_block_mask_from_ranges"] = lambda *a, **k: calls.append(1) or real(*a, **k)
    ns["create_block_mask"] = lambda *a, **k: pointwise.append(1)
    ids = torch.zeros(1, 16, dtype=torch.long)
    with torch.no_grad():
        for step in range(3):
            docs = (torch.arange(16) // (4 + step)).view(1, 16)  # a fresh batch's documents
            model(ids, documents=docs)
            assert len(calls) == step + 1
    assert len(ns["_BLOCK_MASKS"]) == 1
    # document-causal is decided from the documents' ranges, never score by score
    assert ns["RUNTIME_PATHS"]["block_mask"] == "from_ranges" and not pointwise


def _many_forward_passes(n):
    _, model = small("llama-3-8b-documents", 30_000, depth=1)
    ns = namespace(model)
    ids = torch.zeros(1, 16, dtype=torch.long)
    with torch.no_grad():
        for step in range(n):
            model(ids, documents=(torch.arange(16) // (1 + step % 15)).view(1, 16))
    assert list(ns["_BLOCK_MASKS"]) == ["causal_same_document"]


def test_fresh_documents_leave_one_cache_entry():
    _many_forward_passes(25)


@pytest.mark.slow
def test_fresh_documents_leave_one_cache_entry_after_1000_passes():
    _many_forward_passes(1000)


def _restarting_positions_match_documents_alone(raw, tol):
    design = resolve(raw)
    scaled = scale(design, 150_000)
    for form in ("eager", "flex"):
        model = build(scaled, form=form)
        namespace(model)["COMPILE"].update(flex_attention=False, create_block_mask=False)
        docs, positions = packed(48, B=1)
        ids = torch.randint(0, vocab(scaled), (1, 48), generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            whole = model(ids, documents=docs, positions=positions)
            for d in docs.unique():
                keep = docs[0] == d
                alone = model(ids[:, keep], documents=torch.zeros_like(ids[:, keep]),
                              positions=positions[:, keep])
                assert (whole[:, keep] - alone).abs().max().item() <= tol


def test_rope_turned_by_restarting_positions():
    raw = tensorcad.load("llama-3-8b-documents").to_dict()
    raw["inputs"]["positions"] = {"role": "positions"}
    raw["nodes"][1]["in"]["pos"] = "positions"
    source = tensorcad.generate(resolve(raw))
    assert "rotate(q, self.cos, self.sin, pos)" in source
    _restarting_positions_match_documents_alone(raw, 2e-6)


def test_learned_table_read_by_restarting_positions():
    raw = tensorcad.load("gpt2-small").to_dict()
    raw["inputs"].update(documents={"role": "documents"}, positions={"role": "positions"})
    raw["nodes"][1]["in"]["pos"] = "positions"
    raw["nodes"][2]["in"]["doc"] = "documents"
    raw["nodes"][2]["params"]["block"]["params"]["attention"]["mask"] = "doc(b, q) == doc(b, kv)"
    _restarting_positions_match_documents_alone(raw, 2e-6)


def test_hostile_design_builds_and_runs():
    from tests.codegen.test_generate import _hostile_design

    scaled, model = small(_hostile_design(), 60_000, depth=1)
    docs, _ = packed(16, B=1)
    with torch.no_grad():
        out = model(torch.zeros(1, 16, dtype=torch.long), documents=docs)
    assert out.shape == (1, 16, vocab(scaled))
