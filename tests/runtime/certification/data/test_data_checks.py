"""The data checks through the one registry, on a DataSubject: the verdict the CLI and the harness give."""

from __future__ import annotations

import numpy as np

from tensorcad.runtime.certification import DataSubject, provenance, run_check


def _rows(lengths: list[int], seq: int, drop_last_token_of: int | None = None) -> list[dict]:
    """A packer the test writes: documents' provenance concatenated, one document a row here, padded with -1."""
    rows = []
    for d, n in enumerate(lengths):
        p = provenance(d, n - (d == drop_last_token_of))
        pad = seq - len(p["tensorcad_doc"])
        rows.append({"input_ids": np.ones((1, seq), dtype=np.int64),
                     "tensorcad_doc": np.asarray([p["tensorcad_doc"] + [-1] * pad]),
                     "tensorcad_offset": np.asarray([p["tensorcad_offset"] + [0] * pad]),
                     "position_ids": np.asarray([list(range(n - (d == drop_last_token_of))) + list(range(pad))])})
    return rows


def test_coverage_and_boundaries_through_the_registry():
    lengths = [5, 3, 8, 2]
    documents = [{"id": d, "input_ids": [1] * n} for d, n in enumerate(lengths)]
    subject = DataSubject(documents, _rows(lengths, 8), pieces="tokens")
    coverage = run_check(subject, "data[coverage]")
    assert coverage.passed, coverage.message
    assert coverage.figures["seen"] == sum(lengths)
    boundaries = run_check(subject, "data[boundaries]")
    assert boundaries.passed and "position_ids" in boundaries.message and "4 documents" in boundaries.message
    short = run_check(DataSubject(documents, _rows(lengths, 8, drop_last_token_of=2), pieces="tokens"),
                      "data[coverage]")
    assert not short.passed and short.figures["lost"] == 1 and short.figures["first_lost"] == 2


def test_boundaries_skip_without_the_packers_lengths_and_a_raising_loader_fails_in_one_line():
    bare = run_check(DataSubject([], [{"input_ids": np.ones((1, 4))}]), "data[boundaries]")
    assert bare.skipped and "lengths_of" in bare.message

    def broken():
        raise RuntimeError("shard 3 is gone")
        yield  # pragma: no cover

    raised = run_check(DataSubject([], broken), "data[boundaries]")
    assert not raised.passed and raised.message.startswith("the loader raised: RuntimeError in ")
    assert "shard 3 is gone" in raised.message and "\n" not in raised.message
