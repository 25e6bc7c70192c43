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


class Resumable:
    """A loader of rows that saves and restores where it is, as torchdata's StatefulDataLoader does."""

    def __init__(self, rows):
        self.rows, self.at = rows, 0

    def __iter__(self):
        while self.at < len(self.rows):
            self.at += 1
            yield self.rows[self.at - 1]

    def state_dict(self):
        return {"at": self.at}

    def load_state_dict(self, state):
        self.at = state["at"]


def test_every_setting_of_the_subject_reaches_the_coverage_count():
    from tensorcad.runtime.certification import check_coverage

    # documents named by "doc", their lengths read from "tokens", each truncated to 4 by the packer
    documents = [{"doc": d, "tokens": [1] * n} for d, n in enumerate([6, 3, 5])]
    rows = [{"input_ids": np.ones((1, 4)), **{k: np.asarray([v]) for k, v in provenance(d, min(n, 4)).items()}}
            for d, n in enumerate([6, 3, 5])]
    settings = dict(pieces="tokens", policy="truncate", max_length=4, resume_at=1, id_key="doc", length_of="tokens")
    result = run_check(DataSubject(documents, lambda: Resumable(rows), **settings), "data[coverage]")
    direct = check_coverage(documents, lambda: Resumable(rows), **settings).to_json()
    assert result.passed and result.name == "data[coverage]" and result.message == direct["message"]
    assert {k: v for k, v in result.figures.items() if k != "seconds"} == {
        k: v for k, v in direct.items() if k != "seconds"}
    assert result.figures["dropped"] == 3 and result.figures["resumed_at"] == 1 and result.figures["batches"] == 3
    # and the count fails as the direct call does when the packer drops a token it should keep
    short = [dict(rows[0]), *rows[1:]]
    short[0] = {k: v[:, :3] for k, v in rows[0].items()}
    failed = run_check(DataSubject(documents, lambda: Resumable(short), **settings), "data[coverage]")
    assert not failed.passed and failed.name == "data[coverage]"
    assert failed.message == check_coverage(documents, lambda: Resumable(short), **settings).message
