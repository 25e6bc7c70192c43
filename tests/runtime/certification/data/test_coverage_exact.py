"""``data[coverage]`` to the letter: the result's JSON, the pieces read from a batch (examples and provenance
columns) and each refusal's path and words, counted out by hand on batches small enough to write down."""

from __future__ import annotations

import numpy as np
import pytest

from tensorcad.errors import TensorcadError
from tensorcad.packing.corpus.digest import hash_ids
from tensorcad.runtime.certification import check_coverage, provenance
from tensorcad.runtime.certification.data.pieces import DOC_KEY, OFFSET_KEY, Examples, Tokens


def row(*pieces, pad=0):
    """One packed row of provenance: each piece (doc, first offset, length), then ``pad`` padding tokens."""
    docs = [d for d, first, n in pieces for _ in range(n)] + [-1] * pad
    offsets = [first + i for d, first, n in pieces for i in range(n)] + [0] * pad
    return {DOC_KEY: np.asarray([docs]), OFFSET_KEY: np.asarray([offsets])}


def without_seconds(result) -> dict:
    out = result.to_json()
    assert isinstance(out.pop("seconds"), float)
    return out


def test_the_json_of_an_epoch_that_lost_and_duplicated_tokens():
    documents = [{"id": 10, "input_ids": [0] * 4}, {"id": 11, "input_ids": [0] * 3}, {"id": 12, "input_ids": [0] * 2}]
    # document 10 whole, 11 missing its last token, 12 twice
    batches = [row((10, 0, 4), (11, 0, 2), pad=2), row((12, 0, 2), (12, 0, 2), pad=4)]
    result = check_coverage(documents, batches, pieces="tokens", policy="split")
    assert without_seconds(result) == {
        "passed": False,
        "message": "of 9 tokens due from 3 documents: 1 tokens lost from 1 documents (first: 11); 2 tokens "
                   "duplicated in 1 documents, up to 2 copies (first: 12)",
        "policy": "split", "unit": "token", "documents": 3, "due": 9, "seen": 10, "lost": 1, "duplicated": 2,
        "documents_lost": 1, "documents_duplicated": 1, "most_copies": 2, "split_documents": 0, "dropped": 0,
        "first_lost": 11, "first_duplicated": 12, "batches": 2, "resumed_at": None, "error": None}
    assert type(result.to_json()["first_lost"]) is int  # a numpy id comes back a plain int, JSON's own


def test_the_json_of_a_whole_epoch_and_of_a_truncated_one():
    documents = [{"id": 0, "input_ids": [0] * 5}, {"id": 1, "input_ids": [0] * 2}]
    whole = check_coverage(documents, [row((0, 0, 5)), row((1, 0, 2), pad=3)], pieces="tokens")
    assert whole.passed and whole.message == "every token of 2 documents came out once (7 tokens in 2 batches)"
    truncated = check_coverage(documents, [row((0, 0, 3), (1, 0, 2))], pieces="tokens", policy="truncate",
                               max_length=3)
    assert without_seconds(truncated) == {
        "passed": True,
        "message": "every token of 2 documents came out once (5 tokens in 1 batches); 2 tokens dropped by the "
                   "declared truncation",
        "policy": "truncate", "unit": "token", "documents": 2, "due": 5, "seen": 5, "lost": 0, "duplicated": 0,
        "documents_lost": 0, "documents_duplicated": 0, "most_copies": 1, "split_documents": 0, "dropped": 2,
        "first_lost": None, "first_duplicated": None, "batches": 1, "resumed_at": None, "error": None}


def test_examples_are_read_from_any_shape_of_their_id_column():
    pieces = Examples("doc")({"doc": np.array([[3, 4], [5, 3]])})
    assert pieces.keys.tolist() == hash_ids([3, 4, 5, 3]).tolist()
    assert pieces.starts.tolist() == [0, 0, 0, 0] and pieces.ends.tolist() == [1, 1, 1, 1]
    named = Examples()({"id": np.array(["x", "y"])})
    assert named.keys.tolist() == hash_ids(["x", "y"]).tolist()
    with pytest.raises(TensorcadError) as e:
        Examples("doc")({"doc": np.array([1.5])}, path="batch[3]")
    assert str(e.value) == "batch[3].doc: document ids are integers or strings, got float64"


def test_tokens_read_runs_of_consecutive_offsets_in_every_shape():
    # (2, 1, 5): rows are every dimension but the last; a run breaks at a new document, at an offset that
    # does not follow on, and at padding
    docs = np.array([[[7, 7, 8, 8, -1]], [[7, 7, 7, -1, 7]]])
    offsets = np.array([[[0, 1, 0, 2, 0]], [[2, 3, 4, 0, 5]]])
    pieces = Tokens()({DOC_KEY: docs, OFFSET_KEY: offsets})
    assert pieces.keys.tolist() == hash_ids([7, 8, 8, 7, 7]).tolist()
    assert pieces.starts.tolist() == [0, 0, 2, 2, 5]
    assert pieces.ends.tolist() == [2, 1, 3, 5, 6]
    one = Tokens()({DOC_KEY: np.int64(4), OFFSET_KEY: np.int64(9)})  # a 0-d batch: one token
    assert (one.keys.tolist(), one.starts.tolist(), one.ends.tolist()) == (hash_ids([4]).tolist(), [9], [10])
    renamed = Tokens("d", "o")({"d": np.array([[1, 1]]), "o": np.array([[0, 1]])})
    assert renamed.starts.tolist() == [0] and renamed.ends.tolist() == [2]


@pytest.mark.parametrize("batch, words", [
    ({DOC_KEY: np.array([[1, 1]]), OFFSET_KEY: np.array([[0, 1, 2]])},
     f"b.{OFFSET_KEY}: shape (1, 3) differs from {DOC_KEY}'s (1, 2)"),
    ({DOC_KEY: np.array([[1.0, 1.0]]), OFFSET_KEY: np.array([[0, 1]])},
     f"b.{DOC_KEY}: document ids and offsets are integers, got float64 and int64"),
    ({DOC_KEY: np.array([[1, 1]]), OFFSET_KEY: np.array([[0.0, 1.0]])},
     f"b.{DOC_KEY}: document ids and offsets are integers, got int64 and float64"),
    ({OFFSET_KEY: np.array([[0, 1]])}, f"b.{DOC_KEY}: the batch has no '{DOC_KEY}' column (it has ['{OFFSET_KEY}'])"),
    ({DOC_KEY: np.array([[0, 1]])}, f"b.{OFFSET_KEY}: the batch has no '{OFFSET_KEY}' column (it has ['{DOC_KEY}'])"),
    ([1, 2], "b: a batch is a mapping of columns, got list"),
])
def test_a_bad_batch_of_tokens_names_its_column(batch, words):
    with pytest.raises(TensorcadError) as e:
        Tokens()(batch, path="b")
    assert str(e.value) == words


@pytest.mark.parametrize("doc", [True, -1, 1.0, "3"])
def test_provenance_ids_are_non_negative_integers(doc):
    with pytest.raises(TensorcadError) as e:
        provenance(doc, 2)
    assert str(e.value) == f"doc: a document's provenance id is a non-negative integer, got {doc!r}"


def test_provenance_of_a_numpy_id():
    assert provenance(np.int64(3), 2) == {DOC_KEY: [3, 3], OFFSET_KEY: [0, 1]}
    assert provenance(0, 0) == {DOC_KEY: [], OFFSET_KEY: []}


# --- a loader's exception in one line -------------------------------------------------------------------


def _shard_gone():
    raise ValueError("shard 3 is gone")


def test_an_exception_raised_here_is_named_by_its_last_frame():
    import inspect

    from tensorcad.runtime.certification.data.coverage import raised_line

    with pytest.raises(ValueError) as e:
        _shard_gone()
    line = inspect.getsourcelines(_shard_gone)[1] + 1
    assert raised_line(e.value) == f"ValueError in data (data/test_coverage_exact.py:{line}, _shard_gone): shard 3 is gone"


def test_a_workers_traceback_names_the_library_the_worker_and_the_message():
    from tensorcad.runtime.certification.data.coverage import raised_line

    text = ("Caught IndexError in DataLoader worker process 1.\nOriginal Traceback (most recent call last):\n"
            '  File "/usr/lib/python3/site-packages/torch/utils/data/_utils/worker.py", line 349, in _worker_loop\n'
            '  File "C:\\env\\site-packages\\datasets\\iterable_dataset.py", line 12, in load_state_dict\n'
            "IndexError: list index out of range")
    assert raised_line(IndexError(text)) == ("IndexError in datasets (datasets/iterable_dataset.py:12, "
                                             "load_state_dict) in DataLoader worker 1: list index out of range")
    assert raised_line(OSError('File "x.py", line 3, in f\nOSError: disk')) == "OSError in x.py (x.py:3, f): disk"
    assert raised_line(RuntimeError()) == "RuntimeError: RuntimeError"
    assert raised_line(KeyError("a\nb")) == "KeyError: 'a\\nb'"
    assert raised_line(ValueError("first\nsecond: third")) == "ValueError: second: third"


def test_a_loader_that_raises_is_the_finding_in_one_line():
    def loader():
        yield row((0, 0, 2))
        _shard_gone()

    result = check_coverage([{"id": 0, "input_ids": [0, 0]}], loader, pieces="tokens")
    assert not result.passed and result.batches == 0
    assert result.error.startswith("ValueError in data (data/test_coverage_exact.py:")
    assert result.message == f"the loader raised: {result.error}"


# --- settings, readers and the verdict's corners ------------------------------------------------------------


class Resumable:
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


@pytest.mark.parametrize("settings, words", [
    (dict(policy="all"), "policy: expected one of whole, split, truncate, got 'all'"),
    (dict(policy="truncate"), "max_length: the policy 'truncate' needs a positive max_length, got None"),
    (dict(policy="truncate", max_length=0), "max_length: the policy 'truncate' needs a positive max_length, got 0"),
    (dict(policy="truncate", max_length=True), "max_length: the policy 'truncate' needs a positive max_length, "
                                               "got True"),
    (dict(resume_at=-1), "resume_at: expected a number of batches >= 0, got -1"),
    (dict(resume_at=True), "resume_at: expected a number of batches >= 0, got True"),
    (dict(resume_at=1.5), "resume_at: expected a number of batches >= 0, got 1.5"),
    (dict(resume_at=1, loader=[]), "loader: a resume needs a function making the loader (one to save, one to "
                                   "restore)"),
    (dict(resume_at=5, loader=lambda: Resumable([row((0, 0, 2))])), "resume_at: the epoch ended after 1 batches, "
                                                                    "before the save at 5"),
    (dict(pieces="spans"), "pieces: expected 'examples', 'tokens' or a reader of a batch, got 'spans'"),
])
def test_bad_settings_are_refused_naming_them(settings, words):
    loader = settings.pop("loader", lambda: Resumable([row((0, 0, 2))]))
    with pytest.raises(TensorcadError) as e:
        check_coverage([{"id": 0, "input_ids": [0, 0]}], loader, **{"pieces": "tokens", **settings})
    assert str(e.value) == words


def test_the_edges_of_the_settings_are_taken():
    one = check_coverage([{"id": 0, "input_ids": [0, 0]}], [row((0, 0, 1))], pieces="tokens", policy="truncate",
                         max_length=1)
    assert one.passed and one.dropped == 1
    rows = [row((0, 0, 2)), row((1, 0, 3))]
    at_zero = check_coverage([{"id": 0, "input_ids": [0] * 2}, {"id": 1, "input_ids": [0] * 3}],
                             lambda: Resumable(rows), pieces="tokens", resume_at=0)
    assert at_zero.passed and at_zero.resumed_at == 0
    assert at_zero.message.endswith("(5 tokens in 2 batches) (saved after 0 batches and resumed)")


def test_a_reader_of_the_users_own_counts_tokens_and_a_whole_epoch_losing_one_splits_nothing():
    from tensorcad.runtime.certification.data.pieces import Tokens

    documents = [{"id": 0, "input_ids": [0] * 4}, {"id": 1, "input_ids": [0] * 3}]
    reader = Tokens()
    result = check_coverage(documents, [row((0, 0, 4)), row((1, 0, 2))], pieces=lambda b: reader(b))
    assert result.unit == "token"  # a reader without a unit of its own counts tokens
    assert not result.passed and result.lost == 1 and result.split_documents == 0
    assert result.message == "of 7 tokens due from 2 documents: 1 tokens lost from 1 documents (first: 1)"
    assert 0 < result.seconds < 60 and result.figures == {"digest_events": 2}


def test_a_raising_loader_names_no_first_example_and_numpy_ids_come_back_plain():
    def loader():
        yield row((0, 0, 2))
        raise OSError("disk")

    raised = check_coverage([{"id": 0, "input_ids": [0, 0]}, {"id": 1, "input_ids": [0]}], loader, pieces="tokens")
    assert raised.error is not None and raised.first_lost is None and raised.first_duplicated is None
    numpy_ids = check_coverage([{"id": np.int64(5), "input_ids": [0, 0]}], [], pieces="tokens").to_json()
    assert numpy_ids["first_lost"] == 5 and type(numpy_ids["first_lost"]) is int


def test_the_verdict_without_a_namer_names_nothing():
    from tensorcad.packing.corpus.digest import due_of
    from tensorcad.runtime.certification.data.coverage import seen_of, verdict

    documents = [{"id": 0, "input_ids": [0, 0]}]
    counted = seen_of([], "tokens").merge(due_of(documents, "token", "whole", None, "id", None))
    result = verdict(counted, policy="whole", unit="token")
    assert result.lost == 2 and result.first_lost is None and result.seconds == 0.0


def test_a_run_breaks_at_a_new_document_even_where_the_offsets_follow_on_and_after_leading_padding():
    pieces = Tokens()({DOC_KEY: np.array([[7, 7, 8]]), OFFSET_KEY: np.array([[0, 1, 2]])})
    assert pieces.keys.tolist() == hash_ids([7, 8]).tolist()
    assert (pieces.starts.tolist(), pieces.ends.tolist()) == ([0, 2], [2, 3])
    led = Tokens()({DOC_KEY: np.array([[-1, 7, 7, 7]]), OFFSET_KEY: np.array([[0, 0, 1, 2]])})
    assert (led.starts.tolist(), led.ends.tolist()) == ([0], [3])


def test_a_tensor_with_a_graph_is_read_through_its_values():
    torch = pytest.importorskip("torch")
    with pytest.raises(TensorcadError) as e:
        Examples()({"id": torch.tensor([1.0], requires_grad=True)})
    assert str(e.value) == "batch.id: document ids are integers or strings, got float32"


def test_the_readers_and_the_count_at_their_defaults():
    from tensorcad.runtime.certification.data.coverage import seen_of

    with pytest.raises(TensorcadError) as e:
        Tokens()({OFFSET_KEY: np.array([[0]])})
    assert str(e.value).startswith(f"batch.{DOC_KEY}: the batch has no")
    batches = [{"id": np.array([1, 2])}, {"id": np.array([2])}]
    default = seen_of(batches)  # examples, whole: pieces counted as well as units
    assert default.units == 3 and len(default.digest) == len(seen_of(batches, "examples", "whole").digest)
    assert len(default.digest) > len(seen_of(batches, "examples", "split").digest)
