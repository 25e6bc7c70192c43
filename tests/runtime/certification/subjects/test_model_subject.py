"""A user's model as a subject: factories imported by name, batches drawn or packed by the user's collator."""

from __future__ import annotations

import pytest
import torch

from tensorcad.errors import TensorcadError
from tensorcad.runtime.certification.subjects.model import ModelSubject, collated_batch, drawn_batch, import_factory, vocab_of_model
from tensorcad.runtime.building.settings import Settings


def test_a_factory_by_name():
    assert import_factory("collections:OrderedDict") is __import__("collections").OrderedDict
    assert import_factory("os.path:join.__call__")  # attributes of attributes
    for bad, says in (("no_colon", "expected 'pkg.module:factory'"), ("a:b:c", "expected"),
                      ("no_such_module_here:f", "cannot import"), ("collections:nothing", "has no 'nothing'"),
                      ("math:pi", "not callable")):
        with pytest.raises(TensorcadError, match=says) as caught:
            import_factory(bad, "tensorcad_models")
        assert str(caught.value).startswith("tensorcad_models")


def test_settings_refuse_a_bad_factory_name():
    with pytest.raises(TensorcadError, match=r"tensorcad\.model: expected 'pkg\.module:factory'"):
        Settings(model="nothing")
    with pytest.raises(TensorcadError, match=r"tensorcad\.collator"):
        Settings(collator=3)


def test_the_vocabulary_is_the_models():
    class Config:
        vocab_size = 77

    class Model:
        config = Config()

    class Wrapped:
        model = Model()

    assert vocab_of_model(Model()) == vocab_of_model(Wrapped()) == 77
    assert vocab_of_model(object()) is None
    with pytest.raises(TensorcadError, match="names no vocabulary"):
        ModelSubject(lambda i, d, p: i, Settings()).vocab


def test_a_hand_written_model_without_vocab_gives_its_embeddings_rows():
    """Before: a collected hand-written model needed an undocumented ``.vocab`` (issue 42's friction)."""
    import torch

    class Hand(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens, self.places = torch.nn.Embedding(91, 8), torch.nn.Embedding(64, 8)

        def forward(self, ids, documents, positions=None):
            return self.tokens(ids)

    assert vocab_of_model(Hand()) == ModelSubject(Hand(), Settings()).vocab == 91


def test_the_drawn_batch_is_the_engines_packing():
    from tensorcad.packing import draw

    settings = Settings(seq=96, pack=12.0, spread=1.0, seed=3, rows=2)
    ids, documents, positions = drawn_batch(settings, 50)
    want_docs, want_pos = draw(2, 96, 12.0, 1.0, 3)
    assert torch.equal(documents, torch.from_numpy(want_docs)) and torch.equal(positions, torch.from_numpy(want_pos))
    assert ids.shape == (2, 96) and 0 <= int(ids.min()) and int(ids.max()) < 50


def test_a_collators_batch_read_back():
    transformers = pytest.importorskip("transformers")
    collator = transformers.DataCollatorWithFlattening(return_position_ids=True)
    drawn = drawn_batch(Settings(seq=96, pack=12.0, seed=1, rows=2), 50)
    ids, documents, positions = collated_batch(collator, drawn)
    # The collator lays each row's documents end to end, restarting position ids: the same batch.
    for got, want in zip((ids, documents, positions), drawn):
        assert torch.equal(got, want)


def test_a_collator_without_position_ids_is_refused():
    drawn = drawn_batch(Settings(seq=32, pack=8.0, rows=1), 10)
    with pytest.raises(TensorcadError, match="tensorcad.collator: .* no input_ids and position_ids"):
        collated_batch(lambda examples: {"input_ids": [sum((e["input_ids"] for e in examples), [])]}, drawn)
