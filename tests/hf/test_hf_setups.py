"""The Hugging Face setups matrix: what the harness says about each way people pack, and why it is right.

Tiny random models (CPU, float32; hidden 32-64, 2 layers, vocab 128), one row of
160 tokens packed by ``DataCollatorWithFlattening`` itself from a feature list
(``hf_setups.collated``). Every expected verdict is established in the test by
running each document alone (``hf_setups.alone_gaps``), never assumed:

- equal to alone within 1e-5 everywhere: nothing crosses, so isolation must pass;
- the row's first document equal to alone but later ones not: the later ones
  read what came before them, so isolation must fail (causal models);
- differences only in documents longer than the window: the window is lost,
  which isolation cannot see (it passes) and a faithfulness check must.

Each setup is then held to the three certificates (``assert_isolated`` with its
boundary moves, ``assert_faithful``, ``assert_gradients_isolated``), whose verdicts
must agree with what running each document alone established.
docs/harness.md's table names each test here.
"""

from __future__ import annotations

import pytest
import torch

from tensorcad.testing import adapt, assert_faithful, assert_gradients_isolated, assert_isolated, hf_causal_lm

transformers = pytest.importorskip("transformers")

from hf_setups import (  # noqa: E402 - after the importorskip
    IMPLEMENTATIONS,
    MORE_FAMILIES,
    WINDOW,
    alone_gaps,
    block_diagonal,
    collated,
    one_token_shorter,
    straight_positions_with_mask,
    tiny_model,
)

DECODERS = ("llama", "mistral", "qwen2", "gpt2")
# The leaks are transformers' mask logic, the same under both implementations: sdpa in the default
# run, eager under -m slow (the matrix stays within its share of the default run's time).
LEAK_SETUPS = [(f, "sdpa") for f in DECODERS] + [pytest.param(f, "eager", marks=pytest.mark.slow) for f in DECODERS]
FAITHFUL = 1e-5  # float32: a document packed equals itself alone to rounding
APART = 1e-3  # a difference this large is a different computation, not rounding


@pytest.fixture(scope="module")
def batch():
    ids, documents, positions, collator_batch = collated()
    # The collator really packed: one row, position ids restarting at each of its 8 documents.
    assert ids.shape == (1, 160) and int((positions == 0).sum()) == 8
    return ids, documents, positions, collator_batch


_models: dict = {}


def model_of(family: str, implementation: str):
    if (family, implementation) not in _models:
        _models[family, implementation] = tiny_model(family, implementation)
    return _models[family, implementation]


def collator_fn(model):
    """``model(**collator_batch)`` with the cache off: input_ids and position_ids, nothing else."""
    def model_fn(ids, documents, positions):
        return model(input_ids=ids, position_ids=positions, use_cache=False).logits
    return model_fn


# --- the collator's packing with use_cache=False: isolated and faithful -------------------------


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("family", DECODERS)
def test_collator_packing_without_cache_is_isolated_and_faithful(family, implementation, batch):
    ids, documents, positions, _ = batch
    model = model_of(family, implementation)
    model_fn = collator_fn(model)
    gaps = alone_gaps(model, model_fn, ids, documents, positions)
    assert max(gaps) < FAITHFUL, gaps  # each document packed equals itself alone
    report = assert_isolated(model_fn, ids, documents, positions, vocab=128)
    assert report.passed and report[0].perturbed == report[0].documents == 8
    assert report.boundaries[0].moves > 0 and report.boundaries[0].largest <= FAITHFUL
    faithful = assert_faithful(model_fn, ids, documents, positions)
    assert faithful.compared == faithful.documents == 8 and faithful.largest <= FAITHFUL
    # A bare model is adapted (hf_causal_lm, packed position_ids), never called positionally: the same call.
    with torch.no_grad():
        assert torch.equal(adapt(model)(ids, documents, None), model_fn(ids, documents, positions))


GRADIENT_SETUPS = [(f, "sdpa") for f in DECODERS] + [pytest.param(f, "eager", marks=pytest.mark.slow) for f in DECODERS]


@pytest.mark.parametrize("family,implementation", GRADIENT_SETUPS)
def test_collator_packing_without_cache_keeps_gradients_apart(family, implementation, batch):
    ids, documents, positions, _ = batch
    model = model_of(family, implementation)
    result = assert_gradients_isolated(collator_fn(model), ids, documents, positions)
    assert result.passed and result.losses == result.documents == 8
    assert not model.training  # put back in eval mode


# Gemma 2 has no sdpa path in transformers (it refuses to load with one): eager only.
MORE_SETUPS = [pytest.param(f, i, marks=pytest.mark.slow) for f in MORE_FAMILIES
               for i in (("eager",) if f == "gemma2" else IMPLEMENTATIONS)]


@pytest.mark.parametrize("family,implementation", MORE_SETUPS)
def test_more_decoders_packed_by_the_collator_hold_all_three(family, implementation, batch):
    ids, documents, positions, _ = batch
    model = model_of(family, implementation)
    model_fn = collator_fn(model)
    assert max(alone_gaps(model, model_fn, ids, documents, positions)) < FAITHFUL
    assert assert_isolated(model_fn, ids, documents, positions, vocab=128).passed
    assert assert_faithful(model_fn, ids, documents, positions).passed
    assert assert_gradients_isolated(model_fn, ids, documents, positions).passed


@pytest.mark.slow
def test_the_4d_mask_wrapper_on_gemma2_loses_its_sliding_layers_window(batch):
    ids, documents, positions, _ = batch
    model = model_of("gemma2", "eager")

    def model_fn(ids, documents, positions):
        return model(input_ids=ids, attention_mask=block_diagonal(documents), position_ids=positions,
                     use_cache=False).logits

    lengths = torch.bincount(documents[0]).tolist()
    gaps = alone_gaps(model, model_fn, ids, documents, positions)
    for length, gap in zip(lengths, gaps):
        assert (gap > APART) if length > WINDOW else (gap < FAITHFUL), (length, gap)
    assert assert_isolated(model_fn, ids, documents, positions, vocab=128).passed
    with pytest.raises(AssertionError, match=r"differs from the same document run alone"):
        assert_faithful(model_fn, ids, documents, positions, alone_fn="model")
    # Its layers differ, so no single 4D mask is right: the mask adapter refuses, adapt() packs by position_ids.
    with pytest.raises(Exception, match=r"a 4D mask is shared by every layer"):
        hf_causal_lm(model, packing="mask")
    assert max(alone_gaps(model, adapt(model), ids, documents, positions)) < FAITHFUL


def test_mistrals_window_is_in_effect_in_the_matrix(batch):
    # Without this, "faithful" on Mistral could not tell a kept window from a lost one.
    ids, documents, positions, _ = batch
    windowed = model_of("mistral", "sdpa")
    assert windowed.config.sliding_window == WINDOW < 40
    unwindowed = tiny_model("mistral", "sdpa")
    unwindowed.config.sliding_window = None
    longest = slice(9, 49)  # document 1, 40 tokens
    with torch.no_grad():
        a = windowed(input_ids=ids[:, longest], use_cache=False).logits
        b = unwindowed(input_ids=ids[:, longest], use_cache=False).logits
    assert (a - b).abs().max() > APART


# --- the cache at its default, an all-ones 2D mask: leaks, and the setting named -------------------


def _assert_leaks_established(gaps):
    # The first document has nothing before it and equals itself alone; every later one reads its neighbours.
    assert gaps[0] < FAITHFUL and min(gaps[1:]) > APART, gaps


@pytest.mark.parametrize("family,implementation", LEAK_SETUPS)
def test_the_cache_at_its_default_leaks_and_the_message_says_use_cache_false(family, implementation, batch):
    ids, documents, positions, _ = batch
    model = model_of(family, implementation)
    assert model.config.use_cache  # the config's default, which model(**collator_batch) keeps

    def model_fn(ids, documents, positions):
        return model(input_ids=ids, position_ids=positions).logits

    _assert_leaks_established(alone_gaps(model, model_fn, ids, documents, positions))
    with pytest.raises(AssertionError, match=r"moved document \d+[^\n]*\n.*pass use_cache=False") as caught:
        assert_isolated(model_fn, ids, documents, positions, vocab=128, boundaries=False)
    assert type(model).__name__ in str(caught.value)


@pytest.mark.parametrize("family,implementation", LEAK_SETUPS)
def test_an_all_ones_attention_mask_leaks_and_the_message_says_drop_it(family, implementation, batch):
    ids, documents, positions, _ = batch
    model = model_of(family, implementation)

    def model_fn(ids, documents, positions):
        return model(input_ids=ids, attention_mask=torch.ones_like(ids), position_ids=positions,
                     use_cache=False).logits

    _assert_leaks_established(alone_gaps(model, model_fn, ids, documents, positions))
    with pytest.raises(AssertionError, match=r"drop the all-ones attention_mask"):
        assert_isolated(model_fn, ids, documents, positions, vocab=128, boundaries=False)


# --- the docs' 4D-mask wrapper on Mistral: isolated, but the window is lost -------------------------


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_the_4d_mask_wrapper_on_mistral_is_isolated_but_loses_the_window(implementation, batch):
    ids, documents, positions, _ = batch
    model = model_of("mistral", implementation)

    def model_fn(ids, documents, positions):
        return model(input_ids=ids, attention_mask=block_diagonal(documents), position_ids=positions,
                     use_cache=False).logits

    assert assert_isolated(model_fn, ids, documents, positions, vocab=128)[0].passed
    lengths = torch.bincount(documents[0]).tolist()
    gaps = alone_gaps(model, model_fn, ids, documents, positions)
    # transformers returns a 4D mask as it is: documents within the window equal themselves alone,
    # every document longer than the window does not (assert_faithful, #14b, names the largest).
    for length, gap in zip(lengths, gaps):
        assert (gap > APART) if length > WINDOW else (gap < FAITHFUL), (length, gap)
    worst = max(range(len(gaps)), key=gaps.__getitem__)
    # The wrapper loses the window on a document alone too, but the reference is transformers' own forward alone
    # (by default, as with alone_fn="model"): it keeps the window, and the worst document is named.
    for alone_fn in (None, "model"):
        with pytest.raises(AssertionError, match=rf"document {worst} of row 0 \({lengths[worst]} tokens from "
                                                 rf"position \d+\) differs from the same document run alone by "
                                                 rf"{gaps[worst]:.3g} at its position \d+ \(tolerance 1e-05\)"):
            assert_faithful(model_fn, ids, documents, positions, alone_fn=alone_fn)
    # The harness's mask adapter puts the window into the mask, and is faithful.
    adapted = hf_causal_lm(model, packing="mask")
    assert max(alone_gaps(model, adapted, ids, documents, positions)) < FAITHFUL
    assert assert_faithful(adapted, ids, documents, positions).passed


# --- GPT-2, a block-diagonal mask and positions counted straight through -----------------------------


def test_gpt2_with_straight_positions_is_isolated_but_a_shorter_neighbour_moves_it(batch):
    ids, documents, positions, _ = batch
    model = model_of("gpt2", "sdpa")
    model_fn = straight_positions_with_mask(model)
    # Token perturbation sees nothing: the mask keeps documents apart.
    assert assert_isolated(model_fn, ids, documents, positions, vocab=128, boundaries=False).passed
    # Each document alone: only the first, which starts at position 0 anyway, equals itself.
    gaps = alone_gaps(model, model_fn, ids, documents, positions)
    _assert_leaks_established(gaps)
    # Boundary moved, by hand: document 2 one token shorter, document 3 compared at the same relative positions.
    shorter_ids, shorter_documents = one_token_shorter(ids, documents, 2)
    with torch.no_grad():
        before = model_fn(ids, documents, None)[0, documents[0] == 3]
        after = model_fn(shorter_ids, shorter_documents, None)[0, shorter_documents[0] == 3]
        assert (before - after).abs().max() > APART
        # With the collator's restarting positions the same move leaves document 3 exactly where it was.
        restarting = hf_causal_lm(model, packing="mask")
        before = restarting(ids, documents, None)[0, documents[0] == 3]
        after = restarting(shorter_ids, shorter_documents, None)[0, shorter_documents[0] == 3]
        assert (before - after).abs().max() < FAITHFUL
    # The certificates see both: isolation[boundaries] names the move, faithful the largest difference.
    with pytest.raises(AssertionError, match=r"one token shorter .* moved document \d+'s outputs by .*\n"
                                             r"a document's outputs depend on where it starts in its row"):
        assert_isolated(model_fn, ids, documents, positions, vocab=128)
    with pytest.raises(AssertionError, match=rf"differs from the same document run alone by {max(gaps):.3g}"):
        assert_faithful(model_fn, ids, documents, positions)


# --- BERT: an encoder ---------------------------------------------------------------------------


@pytest.mark.parametrize("implementation", ["sdpa", pytest.param("eager", marks=pytest.mark.slow)])
def test_bert_ignores_packed_position_ids_and_the_harness_says_pass_a_4d_mask(implementation, batch):
    # transformers' BERT builds its mask with create_bidirectional_mask, which never calls
    # find_packed_sequence_indices: packed position_ids reset the position embeddings but every
    # token still attends to the whole row.
    ids, documents, positions, _ = batch
    model = model_of("bert", implementation)

    def model_fn(ids, documents, positions):
        return model(input_ids=ids, position_ids=positions).logits

    gaps = alone_gaps(model, model_fn, ids, documents, positions)
    assert min(gaps) > 10 * FAITHFUL, gaps  # bidirectional: every document, the first too, reads the others
    with pytest.raises(AssertionError, match=r"BertForMaskedLM is an encoder.*packing='mask'"):
        assert_isolated(model_fn, ids, documents, positions, vocab=128, boundaries=False)
    # adapt() gives an encoder the 4D document mask with no tril: isolated and faithful.
    assert assert_isolated(model, ids, documents, positions).passed
    assert assert_faithful(model, ids, documents, positions).largest <= FAITHFUL
    assert assert_gradients_isolated(model, ids, documents, positions).passed


def test_every_row_of_the_docs_table_names_a_test_that_exists():
    import re
    from pathlib import Path

    here = Path(__file__).parent
    page = (here.parent.parent / "docs" / "harness.md").read_text()
    start = page.index("## Certify a Hugging Face model")
    table = page[start:page.index("\n## ", start + 1)]  # this section's table, not the step section's below
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| setup")]
    assert len(rows) == 17
    for row in rows:
        cell = row.rstrip(" |").rsplit("|", 1)[-1]
        names = re.findall(r"`(?:(test_\w+)\.py::)?(test_\w+)`", cell)
        assert names, row
        module = "test_hf_setups"
        for file, name in names:
            module = file or module
            assert re.search(rf"^def {name}\(", (here / f"{module}.py").read_text(), re.M), (module, name)
