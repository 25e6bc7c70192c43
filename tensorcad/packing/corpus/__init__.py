"""Reading corpora: document lengths from files (histograms, lists) and from raw text.

``histogram`` holds ``Lengths``, the empirical length distribution a packing can
be drawn from, and the loader for files of them; ``reading`` streams a corpus
(JSONL, plain text, Parquet) and counts each document's tokens. Neither imports
torch; Parquet needs ``pyarrow`` and a tokenizer directory ``tokenizers``, both
optional and imported only when used.
"""
