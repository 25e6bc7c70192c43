"""packing-unused and document-blocks, on the presets the proposal names."""

import numpy as np
import pytest

from tensorcad.packing import closed_form
from tensorcad.analysis.operating_point import OperatingPoint
from tensorcad.packing import Packing
from tensorcad.rules import check


def _rules(design, **op):
    return {d.rule: d for d in check(design, OperatingPoint(**op))}


def test_llama_documents_in_1024_token_documents_gets_the_note():
    found = _rules("llama-3-8b-documents", seq=8192, packing=Packing(1024, 0))
    d = found["document-blocks"]
    assert d.severity == "note"
    ratio = closed_form.fixed_phase_block_ratio(8192, 1024)
    assert ratio == pytest.approx(1.37, abs=0.005)
    assert f"{ratio:.2f}x" in d.message
    # The difference on the whole forward pass, from closed forms alone.
    keys = closed_form.fixed_phase_average(8192, 1024)
    attention = 32 * 4 * keys * 128 * 32
    share = (ratio - 1) * attention / (2 * 7_504_658_432 + attention)
    assert share == pytest.approx(0.006, abs=0.0005)
    assert f"{share:.1%}" in d.message
    assert "packing-unused" not in found


def test_nano_sort_in_128_token_documents_is_warned_about():
    d = _rules("nano-sort", seq=1024, packing=Packing(128, 0))["document-blocks"]
    assert d.severity == "warn"


@pytest.mark.parametrize("design,seq", [("llama-3-8b-documents", 8192), ("nano-sort", 1024)])
def test_neither_fires_without_packing(design, seq):
    assert "document-blocks" not in _rules(design, seq=seq)


def test_packing_on_a_design_without_a_document_mask_is_a_note():
    d = _rules("llama-3-8b", seq=8192, packing=Packing(1024))["packing-unused"]
    assert d.severity == "note" and "no mask reads a documents input" in d.message


# -- packing-drops-tokens and packing-pads -----------------------------------------------------------


def _corpus(seed: int = 0) -> "Lengths":
    """TRL's report of its packer doing nothing at 8192 n + 1 (huggingface/trl#3887): 3,000 documents of
    about 4,096 tokens, clipped to 100..8,192, and 60 longer than any row here."""
    from tensorcad.packing import Lengths

    rng = np.random.default_rng(seed)
    lengths = np.concatenate([rng.normal(4096, 512, 3000).astype(int).clip(100, 8192),
                              rng.integers(20_000, 60_000, 60)])
    return Lengths.of(lengths)


def _cut_off(lengths, seq):
    """Brute force: the tokens past a row's end over all tokens, document by document."""
    every = np.repeat(lengths.values, lengths.counts)
    return np.maximum(every - seq, 0).sum() / every.sum()


def _padding_one_a_row(lengths, seq):
    every = np.repeat(lengths.values, lengths.counts)
    return 1 - np.minimum(every, seq).mean() / seq


@pytest.mark.parametrize("strategy, keeper", [("bfd", "split"), ("trl-bfd", "trl-bfd-split"),
                                              ("torchtune", "torchtune-split"), ("pad", "split")])
def test_a_truncating_packer_is_told_the_tokens_it_drops_and_who_keeps_them(strategy, keeper):
    corpus = _corpus()
    found = _rules("llama-3-8b-documents", seq=8192, packing=Packing(None, None, lengths=corpus, strategy=strategy))
    d = found["packing-drops-tokens"]
    lost = _cut_off(corpus, 8192)
    assert lost == pytest.approx(0.127, abs=0.005)  # 2% of documents hold an eighth of the tokens, past 8,192
    assert d.severity == "warn" and d.path == "packing.strategy"
    assert d.message.startswith(f"{strategy} drops {lost:.2%} of the corpus's tokens")
    assert f"{keeper} keeps every token" in d.message
    assert "packing-drops-tokens" not in _rules("llama-3-8b-documents", seq=8192,
                                                packing=Packing(None, None, lengths=corpus, strategy=keeper))


@pytest.mark.parametrize("seq", [8193, 16385])
def test_at_8192_n_plus_1_trl_bfd_packs_and_a_packer_that_does_not_is_reported(seq):
    """TRL's segment tree once left every document its own row at 8192 n + 1 (what ``pad`` does); TRL 1.16 packs
    there (test_library_packers holds trl-bfd to it row by row at 8,193 and 16,385), and the rule tells them apart."""
    corpus = _corpus()
    packed = _rules("llama-3-8b-documents", seq=seq, packing=Packing(None, None, lengths=corpus, strategy="trl-bfd"))
    assert "packing-pads" not in packed
    assert packed["packing-drops-tokens"].message.startswith(f"trl-bfd drops {_cut_off(corpus, seq):.2%}")
    unpacked = _rules("llama-3-8b-documents", seq=seq, packing=Packing(None, None, lengths=corpus, strategy="pad"))
    d = unpacked["packing-pads"]
    padding = _padding_one_a_row(corpus, seq)
    assert padding > 0.45
    assert d.message.startswith(f"pad leaves {padding:.1%} of its rows ({seq:,} tokens) padding")
    assert f"{1 / (1 - padding):.2f}x the matmul work" in d.message and "bfd fills them" in d.message


@pytest.mark.parametrize("strategy", ["stream", "split", "trl-bfd-split", "torchtune-split"])
def test_packers_that_keep_every_token_and_fill_rows_say_nothing(strategy):
    found = _rules("llama-3-8b-documents", seq=8192, packing=Packing(None, None, lengths=_corpus(), strategy=strategy))
    assert "packing-drops-tokens" not in found and "packing-pads" not in found


def test_below_a_thousandth_of_the_tokens_nothing_is_said():
    from tensorcad.packing import Lengths

    # One document in 100,000 is 100 tokens over the row: 100 / (1e5 * 1000) of the tokens, far under 0.1%.
    corpus = Lengths((1000, 8292), (99_999, 1))
    found = _rules("llama-3-8b-documents", seq=8192, packing=Packing(None, None, lengths=corpus, strategy="bfd"))
    assert "packing-drops-tokens" not in found


def test_both_rules_are_registered_with_their_thresholds_in_their_docs():
    from tensorcad.rules import RULES

    assert "0.1% of the corpus's tokens" in RULES["packing-drops-tokens"].doc
    assert "10% padding" in RULES["packing-pads"].doc
