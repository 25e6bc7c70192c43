"""data[coverage] on real loaders: datasets + torchdata's StatefulDataLoader resumed, TRL's packer, torch workers.

Every figure is held to a collections.Counter of the ids the same loader gives,
run again by the test itself (the loaders are seeded, so the run repeats), or
to the overflow the test sums from the documents' lengths.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest

from tensorcad.errors import TensorcadError
from tensorcad.runtime.certification.data.coverage import check_coverage, raised_line
from tensorcad.runtime.certification.data.pieces import Examples, Tokens, provenance

torch = pytest.importorskip("torch")

N = 2000  # the measured case: 2,000 examples, saved after 37 batches of 8
SAVE_AT, BATCH = 37, 8


def _stateful_loader(shuffle: bool, shards: int, workers: int = 2):
    datasets = pytest.importorskip("datasets", reason="datasets is in the trl extra")
    stateful = pytest.importorskip("torchdata.stateful_dataloader",
                                   reason="torchdata's StatefulDataLoader (pip install torchdata)")
    data = datasets.Dataset.from_dict({"id": list(range(N))}).to_iterable_dataset(num_shards=shards)
    if shuffle:
        data = data.shuffle(seed=0, buffer_size=100)
    return stateful.StatefulDataLoader(data, batch_size=BATCH, num_workers=workers)


def _resumed_ids(make) -> collections.Counter:
    """The test's own count: the same save and resume, every id kept."""
    first = make()
    it = iter(first)
    seen = [i for _ in range(SAVE_AT) for i in next(it)["id"].tolist()]
    state = first.state_dict()
    del it, first
    second = make()
    second.load_state_dict(state)
    seen += [i for batch in second for i in batch["id"].tolist()]
    return collections.Counter(seen)


def test_a_shuffled_resume_of_a_datasets_stream_loses_and_duplicates_examples():
    # huggingface/datasets #7901: 32 shards (16 a worker), a 100-example buffer, 2 workers, resumed after 37 batches
    make = lambda: _stateful_loader(shuffle=True, shards=32)  # noqa: E731
    result = check_coverage(range(N), make, resume_at=SAVE_AT)
    counts = _resumed_ids(make)
    lost = [i for i in range(N) if i not in counts]
    duplicated = [i for i in range(N) if counts[i] > 1]
    assert lost and duplicated  # the bug reproduced here: the test's own count sees it
    assert not result.passed
    assert result.lost == len(lost) and result.documents_lost == len(lost)
    assert result.duplicated == sum(counts[i] - 1 for i in duplicated)
    assert result.most_copies == max(counts.values())
    assert result.first_lost == lost[0] and result.first_duplicated == duplicated[0]
    assert f"{len(lost):,} examples lost" in result.message and "saved after 37 batches" in result.message


def test_a_resume_with_fewer_shards_than_the_buffer_reads_crashes_contained_naming_datasets():
    # 4 shards over 2 workers: the worker's load_state_dict indexes past its shard list (IndexError)
    result = check_coverage(range(N), lambda: _stateful_loader(shuffle=True, shards=4), resume_at=SAVE_AT)
    assert not result.passed and result.error is not None
    assert result.error.startswith("IndexError in datasets (datasets/iterable_dataset.py:")
    assert "DataLoader worker" in result.error and "\n" not in result.error
    assert result.message.startswith("the loader raised (saved after 37 batches and resumed): IndexError")


def test_an_unshuffled_resume_and_an_uninterrupted_epoch_pass():
    resumed = check_coverage(range(N), lambda: _stateful_loader(shuffle=False, shards=4), resume_at=SAVE_AT)
    assert resumed.passed, resumed.message
    assert resumed.seen == N and resumed.batches == N // BATCH
    whole = check_coverage(range(N), _stateful_loader(shuffle=True, shards=4))
    assert whole.passed, whole.message
    assert whole.seen == N


class _EveryWorkerYieldsAll(torch.utils.data.IterableDataset):
    """An IterableDataset that forgets get_worker_info(): each worker yields the whole dataset."""

    def __init__(self, n: int, shard: bool):
        self.n, self.shard = n, shard

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        ids = range(self.n)
        if self.shard and info is not None:
            ids = range(info.id, self.n, info.num_workers)
        return ({"id": i} for i in ids)


@pytest.mark.parametrize("workers", [2, 3])
def test_workers_that_each_yield_the_whole_dataset_duplicate_every_example(workers):
    loader = torch.utils.data.DataLoader(_EveryWorkerYieldsAll(300, shard=False), batch_size=16,
                                         num_workers=workers)
    result = check_coverage(range(300), loader)
    assert not result.passed
    assert result.duplicated == 300 * (workers - 1) and result.documents_duplicated == 300
    assert result.most_copies == workers and result.lost == 0 and result.first_duplicated == 0
    sharded = torch.utils.data.DataLoader(_EveryWorkerYieldsAll(300, shard=True), batch_size=16,
                                          num_workers=workers)
    assert check_coverage(range(300), sharded).passed


def _trl_packed(strategy: str, seq: int = 32):
    datasets = pytest.importorskip("datasets", reason="datasets is in the trl extra")
    trl_data = pytest.importorskip("trl.data_utils", reason="TRL is an optional extra (pip install 'tensorcad[trl]')")
    lengths = np.random.default_rng(0).integers(1, 60, size=80).tolist()
    documents = [{"id": i, "input_ids": list(range(1, n + 1))} for i, n in enumerate(lengths)]
    tokenised = datasets.Dataset.from_list([{"input_ids": d["input_ids"], **provenance(d["id"], len(d["input_ids"]))}
                                            for d in documents])
    packed = trl_data.pack_dataset(tokenised, seq, strategy=strategy)
    return documents, lengths, packed


def test_trls_default_packer_truncates_without_saying_so_and_the_count_is_named():
    # TRL #5076: pack_dataset's default "bfd" drops every token past seq_length
    documents, lengths, packed = _trl_packed("bfd")
    overflow = sum(max(0, n - 32) for n in lengths)
    assert overflow > 0
    silent = check_coverage(documents, packed, pieces="tokens", policy="split")
    assert not silent.passed
    assert silent.lost == overflow and silent.duplicated == 0
    assert silent.documents_lost == sum(n > 32 for n in lengths)
    assert silent.first_lost == next(i for i, n in enumerate(lengths) if n > 32)
    assert f"{overflow:,} tokens lost" in silent.message
    declared = check_coverage(documents, packed, pieces="tokens", policy="truncate", max_length=32)
    assert declared.passed, declared.message
    assert declared.dropped == overflow and declared.seen == sum(lengths) - overflow


def test_trls_split_packer_adds_up_but_is_not_whole():
    documents, lengths, packed = _trl_packed("bfd_split")
    split = check_coverage(documents, packed, pieces="tokens", policy="split")
    assert split.passed, split.message
    assert split.seen == sum(lengths)
    whole = check_coverage(documents, packed, pieces="tokens", policy="whole")
    assert not whole.passed and whole.lost == whole.duplicated == 0
    assert whole.split_documents == sum(n > 32 for n in lengths)


def test_tokens_reads_runs_of_offsets_and_skips_padding():
    batch = {"tensorcad_doc": np.array([[4, 4, 4, 7, 7, -1], [7, 7, 4, 4, 9, 9]]),
             "tensorcad_offset": np.array([[0, 1, 2, 0, 1, 0], [2, 3, 3, 4, 0, 2]])}
    pieces = Tokens()(batch)
    spans = sorted(zip(pieces.starts.tolist(), pieces.ends.tolist()))
    assert spans == sorted([(0, 3), (0, 2), (2, 4), (3, 5), (0, 1), (2, 3)])


def test_bad_input_is_named():
    with pytest.raises(TensorcadError, match="policy"):
        check_coverage(range(3), [], policy="drop")
    with pytest.raises(TensorcadError, match="max_length"):
        check_coverage(range(3), [], policy="truncate")
    with pytest.raises(TensorcadError, match="^loader"):
        check_coverage(range(3), [], resume_at=1)
    with pytest.raises(TensorcadError, match="batch.id"):
        check_coverage(range(3), [{"idx": [0]}])
    with pytest.raises(TensorcadError, match="length_of"):
        check_coverage([{"id": 0}], [], pieces="tokens")
    with pytest.raises(TensorcadError, match="resume_at"):
        check_coverage(range(3), lambda: [{"id": [0]}], resume_at=5)


def test_raised_line_names_the_last_frame_of_a_loaders_own_exception():
    def boom():
        raise KeyError("shard")

    try:
        boom()
    except KeyError as e:
        line = raised_line(e)
    assert line.startswith("KeyError in ") and "boom" in line and "'shard'" in line


def test_string_ids_name_the_first_example():
    ids = [f"doc-{i}" for i in range(50)]
    result = check_coverage(ids, [{"id": ids[:20] + ids[21:]}, {"id": ids[30:31]}], pieces=Examples())
    assert (result.first_lost, result.first_duplicated, result.lost, result.duplicated) == ("doc-20", "doc-30", 1, 1)


def test_a_map_style_dataset_shuffled_by_the_stateful_loaders_sampler_resumes_whole():
    # the recipe that passes: the sampler's permutation is in the state_dict, so the resume continues it
    datasets = pytest.importorskip("datasets", reason="datasets is in the trl extra")
    stateful = pytest.importorskip("torchdata.stateful_dataloader", reason="pip install torchdata")
    data = datasets.Dataset.from_dict({"id": list(range(N))})
    make = lambda: stateful.StatefulDataLoader(data, batch_size=BATCH, shuffle=True, num_workers=2,  # noqa: E731
                                               generator=torch.Generator().manual_seed(0))
    result = check_coverage(range(N), make, resume_at=SAVE_AT)
    assert result.passed, result.message
    counts = _resumed_ids(make)
    assert sorted(counts) == list(range(N)) and set(counts.values()) == {1}  # the test's own count agrees


def test_ranks_split_by_node_cover_the_epoch_and_unsplit_ranks_each_repeat_it():
    datasets = pytest.importorskip("datasets", reason="datasets is in the trl extra")
    from datasets.distributed import split_dataset_by_node

    stream = datasets.Dataset.from_dict({"id": list(range(300))}).to_iterable_dataset(num_shards=3)

    def ranks(split: bool):
        for rank in range(2):
            part = split_dataset_by_node(stream, rank=rank, world_size=2) if split else stream
            yield from torch.utils.data.DataLoader(part, batch_size=10)

    assert check_coverage(range(300), ranks(True)).passed
    unsplit = check_coverage(range(300), ranks(False))
    assert (unsplit.duplicated, unsplit.most_copies, unsplit.lost) == (300, 2, 0)
