"""A corpus in many files: its shards found, counted in worker processes, and their histograms merged exactly.

A source is a file, a directory (every corpus file under it, or the Arrow
shards a ``datasets`` ``save_to_disk`` wrote there, as its ``state.json``
lists them), or a glob (``'shards/*.jsonl.zst'``, ``**`` reaching into
folders). Each shard is read by ``reading.count_file`` into a small
histogram, in this process or, with ``workers`` > 1, in that many spawned
processes, one shard a task: each worker holds one shard's stream and one
histogram, the parent the merged histogram, so memory stays flat however many
shards and however large. Histograms of whole lengths add exactly, in any
order, so the merge is the histogram of the shards' concatenation.
"""

from __future__ import annotations

import glob
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from tensorcad.errors import TensorcadError

from .histogram import Lengths
from .reading import COMPRESSED, KINDS, Counting, count_file, lengths_of_counts

MAX_WORKERS = 256


@dataclass(frozen=True)
class Counted:
    """A corpus counted: its histogram, the empty documents skipped, and the shards and workers that read it."""

    lengths: Lengths
    empty: int
    shards: int
    workers: int


def is_shard(path: Path) -> bool:
    """A file a directory's corpus is made of: a corpus suffix (``.jsonl``, ``.parquet``, ...), maybe compressed."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in COMPRESSED:
        suffixes.pop()
    return not path.name.startswith(".") and bool(suffixes) and suffixes[-1] in KINDS


def _saved_dataset(folder: Path) -> list[Path] | None:
    """The Arrow files of a ``datasets`` ``save_to_disk`` folder, as its ``state.json`` lists them; None if it is not one."""
    if (folder / "dataset_dict.json").is_file():
        raise TensorcadError(str(folder), "is a DatasetDict: name one split's folder (e.g. train/)")
    state = folder / "state.json"
    if not state.is_file():
        return None
    try:
        files = [folder / f["filename"] for f in json.loads(state.read_text())["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise TensorcadError(str(state), f"not a datasets state.json: {e}") from None
    if any(f.parent != folder or not f.is_file() for f in files):
        raise TensorcadError(str(state), "names a data file that is not in its folder")
    return files


def shards_of(sources: Iterable[str | Path]) -> list[Path]:
    """Every shard the sources name, in order (each directory's and glob's sorted by path)."""
    found: list[Path] = []
    for source in sources:
        path = Path(source)
        if path.is_dir():
            files = _saved_dataset(path)
            if files is None:
                files = sorted(p for p in path.rglob("*") if p.is_file() and is_shard(p))
            if not files:
                raise TensorcadError(str(path), f"holds no corpus files ({', '.join(sorted(KINDS))}, "
                                                f"maybe {' or '.join(COMPRESSED)})")
        elif path.exists() or not any(ch in str(source) for ch in "*?["):
            if not path.is_file():
                raise TensorcadError(str(path), "is not a file, a directory or a glob that matches files")
            files = [path]
        else:
            files = sorted(Path(p) for p in glob.glob(str(source), recursive=True) if Path(p).is_file())
            if not files:
                raise TensorcadError(str(source), "matches no files")
        found.extend(files)
    if not found:
        raise TensorcadError("corpus", "no corpus files given")
    return found


def _name(sources: list[str], shards: list[Path]) -> str:
    return sources[0] if len(sources) == 1 and len(shards) == 1 else f"{len(shards):,} shards of {', '.join(sources)}"


def count_shards(sources: Iterable[str | Path], counting: Counting = Counting(), workers: int = 1,
                 progress: Callable[[int], None] | None = None) -> Counted:
    """The histogram of every shard the sources name, merged exactly, ``workers`` processes reading them."""
    sources = [str(s) for s in sources]
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS:
        raise TensorcadError("--workers", f"must be a whole number in 1..{MAX_WORKERS}, got {workers!r}")
    shards = shards_of(sources)
    seen = progress or (lambda n: None)
    workers = min(workers, len(shards))
    if workers == 1:
        parts = [count_file(shard, counting, seen) for shard in shards]
    else:
        parts = _in_processes(shards, counting, workers, seen)
    lengths, empty = lengths_of_counts(parts, _name(sources, shards))
    return Counted(lengths, empty, len(shards), workers)


def _in_processes(shards: list[Path], counting: Counting, workers: int, seen: Callable[[int], None]) -> list:
    """Each shard a task in a pool of spawned processes; a shard's bytes are seen when it is done."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # Spawned, not forked: a fork would copy this process's threads' locks (a progress bar's, a tokenizer's).
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        tasks = {pool.submit(count_file, shard, counting): shard for shard in shards}
        parts = []
        try:
            for task in as_completed(tasks):
                parts.append(task.result())  # a TensorcadError in a worker is raised here, naming its shard
                seen(tasks[task].stat().st_size)
        except BaseException:
            pool.shutdown(cancel_futures=True)  # the shards not yet begun are not read
            raise
    return parts
