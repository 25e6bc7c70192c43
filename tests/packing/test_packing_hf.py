"""positions_of and draw against Hugging Face's DataCollatorWithFlattening itself."""

import numpy as np
import pytest

from tensorcad.packing import draw, positions_of

transformers = pytest.importorskip("transformers")


def _collate(lengths):
    collator = transformers.DataCollatorWithFlattening(return_seq_idx=True)
    examples = [{"input_ids": list(range(1, n + 1))} for n in lengths]
    out = collator(examples)
    return out["position_ids"].numpy()[0], out["seq_idx"].numpy()[0]


CASES = [(seq, mean, spread, seed) for seed, (seq, mean, spread) in enumerate(
    [(s, m, c) for s in (64, 512, 2048) for m in (8, 96, 700) for c in (0.0, 0.5, 1.0, 2.0)])]


@pytest.mark.parametrize("seq,mean,spread,seed", CASES)
def test_positions_and_documents_equal_the_collators(seq, mean, spread, seed):
    documents, positions = draw(rows=3, seq=seq, mean=mean, spread=spread, seed=seed)
    for row in range(3):
        # The row's documents, each handed to the collator as a whole example.
        lengths = np.bincount(documents[row]).tolist()
        position_ids, seq_idx = _collate(lengths)
        assert np.array_equal(positions_of(documents[row:row + 1])[0], position_ids)
        assert np.array_equal(positions[row], position_ids)
        # seq_idx numbers the examples from 0, as draw numbers a row's documents.
        relabel = {}
        ours = np.array([relabel.setdefault(int(d), len(relabel)) for d in documents[row]])
        assert np.array_equal(ours, seq_idx)


def test_positions_of_random_lengths_equal_the_collators():
    rng = np.random.default_rng(0)
    for _ in range(200):
        lengths = rng.integers(1, 40, size=rng.integers(1, 12)).tolist()
        documents = np.repeat(np.arange(len(lengths)), lengths)[None, :]
        position_ids, _ = _collate(lengths)
        assert np.array_equal(positions_of(documents)[0], position_ids)
