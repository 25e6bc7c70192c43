"""What people certify is not always logits: log-probabilities, a hidden state, a whole ModelOutput.

``assert_faithful`` compares a wrapper with the same wrapper on each document alone, so
whatever it returns is compared with itself, position by position. On tiny random models
of every family (eager and sdpa; the full matrix under ``-m slow``), three wrappers of a
model packed the way it keeps documents apart (the collator's position_ids for a decoder,
the 4D document mask for BERT) pass, and the planted faults fail: the cache at its
default, an all-ones 2D mask, BERT handed position_ids alone, the dynamic-rope Llama.
Each verdict is first established by running every document alone through
transformers' own forward in the test (``expected_gaps``), never by the certificate.
"""

from __future__ import annotations

import pytest
import torch

from tensorcad.testing import CertificateError, assert_faithful
from tensorcad.testing.adapters import document_mask

transformers = pytest.importorskip("transformers")

from hf_setups import (  # noqa: E402 - after the importorskip
    DYNAMIC,
    FAMILIES,
    IMPLEMENTATIONS,
    MORE_FAMILIES,
    NEW_FAMILIES,
    collated,
    tiny_model,
)

FAITHFUL = 1e-5
APART = 1e-4
SAMPLE = 3  # documents the certificate runs alone (seeded); the reference runs all six, a fault moves most
EVERY = FAMILIES + MORE_FAMILIES + NEW_FAMILIES
# Gemma 2 has no sdpa path in transformers. The default run: one family a kind of output path; the rest -m slow.
DEFAULT = {("llama", "sdpa"), ("gpt2", "eager"), ("bert", "sdpa"), ("olmo2", "sdpa"), ("cohere", "eager")}
SETUPS = [pytest.param(f, i, marks=() if (f, i) in DEFAULT else pytest.mark.slow)
          for f in EVERY for i in IMPLEMENTATIONS if not (f == "gemma2" and i == "sdpa")]


# One row packed by the collator: six documents, short and long (the dynamic-rope test takes the longer row).
LENGTHS = (9, 20, 3, 14, 1, 12)


@pytest.fixture(scope="module")
def batch():
    ids, documents, positions, _ = collated(LENGTHS)
    return ids, documents, positions


_models: dict = {}


def model_of(family, implementation):
    if (family, implementation) not in _models:
        _models[family, implementation] = tiny_model(family, implementation)
    return _models[family, implementation]


def packed_call(model, documents, positions, **fault):
    """The keywords that keep documents apart: the 4D document mask for an encoder, restarting positions
    otherwise; ``fault`` replaces some (``attention_mask="ones"``: an all-ones 2D mask)."""
    if family_of(model) == "bert":
        kwargs = {"attention_mask": document_mask(model, documents), "position_ids": positions}
    else:
        kwargs = {"position_ids": positions, "use_cache": False}
    if fault.get("attention_mask") == "ones":
        fault = {**fault, "attention_mask": torch.ones_like(documents)}
    return {**kwargs, **fault}


def family_of(model):
    return "bert" if isinstance(model, transformers.BertPreTrainedModel) else "decoder"


def log_softmax(model, **fault):
    return lambda ids, documents, positions: model(
        input_ids=ids, **packed_call(model, documents, positions, **fault)).logits.log_softmax(-1)


def hidden_state(model, **fault):
    return lambda ids, documents, positions: model(
        input_ids=ids, output_hidden_states=True, **packed_call(model, documents, positions, **fault)).hidden_states[-1]


def named_field(model, **fault):
    # the whole ModelOutput, as model(**batch) returns it: its logits are read by name
    return lambda ids, documents, positions: model(input_ids=ids, **packed_call(model, documents, positions, **fault))


WRAPPERS = {"log_softmax": (log_softmax, lambda out: out.logits.log_softmax(-1)),
            "hidden_state": (hidden_state, lambda out: out.hidden_states[-1]),
            "named_field": (named_field, lambda out: out.logits)}


_alone: dict = {}


def alone_runs(model, ids, documents):
    """transformers' own forward on each document of row 0 by itself (one run a document, kept per model)."""
    if id(model) not in _alone:
        extra = {} if family_of(model) == "bert" else {"use_cache": False}
        runs = []
        with torch.no_grad():
            for d in torch.unique(documents[0]).tolist():
                where = torch.nonzero(documents[0] == d).flatten()
                first, end = int(where[0]), int(where[-1]) + 1
                runs.append((first, end, model(input_ids=ids[:, first:end], output_hidden_states=True, **extra)))
        _alone[id(model)] = runs
    return _alone[id(model)]


def expected_gaps(model, wrapper, read, ids, documents, positions):
    """Each document of row 0: |the wrapper's packed output - transformers' own forward on it alone, read alike|."""
    with torch.no_grad():
        packed = wrapper(ids, documents, positions)
        packed = read(packed) if not isinstance(packed, torch.Tensor) else packed
    return [float((packed[0, first:end] - read(alone)[0]).abs().max())
            for first, end, alone in alone_runs(model, ids, documents)]


@pytest.mark.parametrize("family,implementation", SETUPS)
def test_every_output_a_wrapper_returns_is_faithful_to_itself_alone(family, implementation, batch):
    model = model_of(family, implementation)
    for name, (wrap, read) in WRAPPERS.items():
        wrapper = wrap(model)
        assert max(expected_gaps(model, wrapper, read, *batch)) < FAITHFUL, name
        result = assert_faithful(wrapper, *batch, sample=SAMPLE)
        assert result.compared == SAMPLE and result.documents == len(LENGTHS) and result.largest <= FAITHFUL, name


def _faults(family):
    if family == "bert":  # its encoder mask never reads packing from position_ids
        return {"position_ids only": {"attention_mask": None}}
    return {"the cache at its default": {"use_cache": None}, "an all-ones mask": {"attention_mask": "ones"}}


@pytest.mark.parametrize("family,implementation", SETUPS)
def test_the_planted_faults_still_fail_faithful(family, implementation, batch):
    model = model_of(family, implementation)
    for fault, change in _faults(family).items():
        wrapper = log_softmax(model, **change)
        gaps = expected_gaps(model, wrapper, lambda out: out.logits.log_softmax(-1), *batch)
        assert max(gaps) > APART, fault  # established: some document differs from itself alone
        with pytest.raises(CertificateError, match="differs from the same document run alone"):
            assert_faithful(wrapper, *batch, sample=SAMPLE)


def test_a_dynamic_rope_llama_is_unfaithful_by_construction_and_the_message_says_why():
    # The matrix's row (hf_setups.LENGTHS): its longest document (40 tokens) passes the 32 positions the dynamic
    # scaling starts at; transformers recomputes the frequencies from the largest position of the whole row, so
    # every shorter document moves.
    ids, documents, positions, _ = collated()
    batch = ids, documents, positions
    model = model_of(DYNAMIC, "sdpa")
    wrapper = log_softmax(model)
    gaps = expected_gaps(model, wrapper, lambda out: out.logits.log_softmax(-1), *batch)
    lengths = torch.bincount(documents[0]).tolist()
    # The longest equals itself alone (its own length sets the frequencies); a one-token document turns by 0.
    assert all((gap > APART) if 1 < n < 40 else (gap < FAITHFUL) for gap, n in zip(gaps, lengths)), gaps
    with pytest.raises(CertificateError, match=r"'dynamic' rope scaling recomputes the rotary frequencies from the "
                                               r"largest position in the batch \(40 > 32\)"):
        assert_faithful(wrapper, *batch)


def test_the_dynamic_rope_llamas_imported_design_is_warned_of_under_packing():
    import tensorcad
    from tensorcad.hf import design_from_config

    design = tensorcad.load(design_from_config(model_of(DYNAMIC, "sdpa").config.to_dict(), documents=True,
                                               positions=True))
    op = tensorcad.OperatingPoint(seq=64, packing=tensorcad.Packing(mean=16, spread=1.0))
    assert [d.severity for d in tensorcad.check(design, op) if d.rule == "ROPE-03"] == ["warn"]


def test_a_named_field_is_read_by_name_and_an_ambiguous_mapping_is_refused_in_one_line(batch):
    from tensorcad.errors import TensorcadError

    model = model_of("llama", "sdpa")

    def named(ids, documents, positions):
        return {"logprobs": log_softmax(model)(ids, documents, positions)}

    assert assert_faithful(named, *batch).largest <= FAITHFUL

    def two(ids, documents, positions):
        return {"a": torch.zeros(ids.shape), "b": torch.ones(ids.shape)}

    with pytest.raises(TensorcadError) as caught:
        assert_faithful(two, *batch)
    assert str(caught.value) == ("model_fn: returned a dict holding tensors a, b: return the outputs to compare, "
                                 "or pick them with tensorcad.testing.call(..., output=NAME)")


def test_outputs_that_cannot_be_compared_are_one_line_naming_the_shapes(batch):
    from tensorcad.errors import TensorcadError

    model = model_of("llama", "sdpa")
    wrapper = hidden_state(model)  # (1, 160, 64) packed; alone below gives the logits, (1, L, 128)
    with pytest.raises(TensorcadError) as caught:
        assert_faithful(wrapper, *batch, alone_fn="model")
    assert str(caught.value) == ("alone_fn: outputs alone shaped (9, 128) cannot be compared position by position "
                                 "with the packed row's (9, 64)")
