"""Reading corpora: document lengths from files (histograms, lists), from raw text, from shards and engines.

``lengths`` holds ``Lengths``, the empirical length distribution a packing can
be drawn from (mergeable exactly: ``Lengths.merge``); ``histogram`` reads and
writes files of them; ``reading`` streams one corpus file (JSONL, plain text, Parquet, Arrow,
compressed or not) and counts each document's tokens, or reads a length column
(``text`` splits plain text into documents, counting one too long to hold as
it is read);
``shards`` finds a corpus's shards and counts them in worker processes;
``engines`` counts a Dask collection where it lives, or a Hugging Face
``Dataset`` (``lengths_on``). None imports torch; Parquet needs ``pyarrow``, a
tokenizer directory ``tokenizers``, ``.zst`` ``zstandard`` and an engine
``dask`` and ``distributed``, each optional and imported only when used.
"""

from .engines import count_on_cluster, lengths_on
from .histogram import Lengths, load_lengths, write_histogram
from .reading import Counting, count_file, count_lengths
from .shards import Counted, count_shards, shards_of

__all__ = ["Counted", "Counting", "Lengths", "count_file", "count_lengths", "count_on_cluster", "count_shards",
           "lengths_on", "load_lengths", "shards_of", "write_histogram"]
