"""The generated module states its contract: MASKS, recording_attend, and the Model's attributes."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import tensorcad  # noqa: E402
from tensorcad.runtime.building.generated import build  # noqa: E402
from tensorcad.runtime.building.scaling import scale  # noqa: E402


@pytest.fixture(scope="module")
def nano():
    model = build(scale(tensorcad.load("nano-sort"), params=100_000), form="eager")
    type(model).compile_pieces.update(flex_attention=False, create_block_mask=False)
    return model


def test_a_factory_mask_is_stated_with_what_it_reads_and_who_runs_it(nano):
    (name, entry), = type(nano).masks.items()
    assert name == "causal_same_document"
    assert entry["mask_mod"] is None and entry["reads"] == ("documents",)
    assert entry["attentions"] == ("nodes[1].params.block.params.attention",)
    documents = torch.tensor([[0, 0, 1, 1]])
    mask_mod = entry["factory"](documents)
    assert mask_mod.__name__ == name and mask_mod.reads == (documents,)
    q, kv = torch.arange(4).view(4, 1), torch.arange(4).view(1, 4)
    keep = mask_mod(torch.zeros(1, dtype=torch.long), 0, q, kv)
    assert keep.tolist() == [[True, False, False, False], [True, True, False, False],
                             [False, False, True, False], [False, False, True, True]]


def test_a_mask_of_positions_only_is_the_mask_mod_itself():
    model = build(scale(tensorcad.load("gpt2-small"), params=100_000), form="eager")
    (name, entry), = type(model).masks.items()
    assert entry["factory"] is None and entry["reads"] == () and entry["mask_mod"].__name__ == name == "causal"


def test_recording_attend_sees_every_call_and_leaves_nothing_behind(nano):
    ids = torch.zeros(1, 8, dtype=torch.long)
    documents = torch.tensor([[0, 0, 0, 1, 1, 1, 2, 2]])
    layers = nano.config.n_layer
    with torch.no_grad(), type(nano).recording_attend() as outer:
        with type(nano).recording_attend() as inner:
            nano(ids, documents=documents)
        nano(ids, documents=documents)
    assert len(inner) == layers and len(outer) == 2 * layers
    assert {c["mask_mod"].__name__ for c in outer} == {"causal_same_document"}
    assert all(c["form"] == "eager" and c["q"][2] == 8 for c in outer)
    with torch.no_grad():
        nano(ids, documents=documents)
    assert len(outer) == 2 * layers  # closed recordings record nothing


def test_around_runs_in_place_of_each_call(nano):
    seen = []

    def around(run, q, k, v, **kwargs):
        seen.append(kwargs["mask_mod"].__name__)
        return run(q, k, v, **kwargs) * 0

    ids, documents = torch.zeros(1, 8, dtype=torch.long), torch.zeros(1, 8, dtype=torch.long)
    with torch.no_grad():
        plain = nano(ids, documents=documents)
        with type(nano).recording_attend(around=around):
            zeroed = nano(ids, documents=documents)
    assert seen == ["causal_same_document"] * nano.config.n_layer
    assert not torch.equal(plain, zeroed)


def test_the_runtime_reads_the_model_not_its_module():
    source = tensorcad.generate(tensorcad.load("nano-sort"))
    for attribute in ("masks = MASKS", "recording_attend = staticmethod(recording_attend)",
                      "compile_pieces = COMPILE", "runtime_paths = RUNTIME_PATHS"):
        assert f"    {attribute}\n" in source
    import pathlib

    package = pathlib.Path(tensorcad.__file__).parent
    for path in [*(package / "runtime").glob("*.py"), *(package / "testing").glob("*.py")]:
        text = path.read_text()
        assert "__globals__" not in text and "__qualname__" not in text, path.name
