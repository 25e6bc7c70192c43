"""How training rows are packed, what that costs exactly, and in which forms a packing travels.

- ``settings``: ``Packing`` (the length distribution, gamma or a corpus's
  ``Lengths``, and the strategy) and ``packing_of``, which every surface reads
  settings with; its gamma lengths are evaluated where they step
  (``whole_quantiles``);
- ``drawing``: ``draw`` and ``draw_boundaries``, the one place packed rows are
  drawn (the engine's sampler, the runtime's made-up packing and the test
  harness all call it), over the ``stream`` (a circular stream cut into rows)
  or the bin-packing ``strategies`` (bfd, ffd, split, pad, and the libraries'
  own packers as they pack: ``library_packers``, TRL's and torchtune's);
- ``boundaries``: ``RowBoundaries``, where each row's documents begin;
- ``forms``: documents, ``position_ids``, ``cu_seqlens`` (and padded: ``cu_seqlens_padded``), ``seq_idx`` and
  EOS-delimited ids, each converted to and from the others;
- ``closed_form``: exact keys a query keeps and block counts, which hold the
  sampler honest;
- ``corpus``: a corpus's document lengths (``Lengths``, the files holding
  them, and the readers counting them from raw text).

No torch: numpy only, and a torch tensor given to a form comes back a tensor.
"""

from __future__ import annotations

from .boundaries import RowBoundaries
from .corpus.histogram import Lengths, load_lengths
from .drawing import MAX_DRAWN_TOKENS, draw, draw_boundaries
from .forms import (
    cu_seqlens_of,
    documents_of_cu_seqlens,
    documents_of_eos,
    documents_of_lengths,
    documents_of_positions,
    documents_of_seq_idx,
    eos_ids_of,
    flash_kwargs_of,
    padded_cu_seqlens_of,
    padded_layout_of,
    positions_of,
    row_lengths,
    seq_idx_of,
)
from .settings import (
    DEFAULT_BUFFER,
    MAX_BUFFER,
    MAX_MEAN,
    MAX_ROWS,
    MAX_SEQ,
    MAX_SPREAD,
    MIN_SPREAD,
    STRATEGIES,
    Packing,
    check_mean,
    check_spread,
    check_strategy,
    document_lengths,
    packing_of,
)
from .bins import Bins
from .strategies import Packed, draw_packed, pack
from .stream import MIN_STREAM_DOCUMENTS, Stream

__all__ = [
    "DEFAULT_BUFFER", "MAX_BUFFER", "MAX_DRAWN_TOKENS", "MAX_MEAN", "MAX_ROWS", "MAX_SEQ", "MAX_SPREAD",
    "MIN_SPREAD", "MIN_STREAM_DOCUMENTS", "STRATEGIES",
    "Bins", "Lengths", "Packed", "Packing", "RowBoundaries", "Stream",
    "check_mean", "check_spread", "check_strategy", "cu_seqlens_of", "document_lengths", "documents_of_cu_seqlens",
    "documents_of_eos", "documents_of_lengths", "documents_of_positions", "documents_of_seq_idx", "draw",
    "draw_boundaries", "draw_packed", "eos_ids_of", "flash_kwargs_of", "load_lengths", "pack", "packing_of",
    "padded_cu_seqlens_of", "padded_layout_of",
    "positions_of", "row_lengths", "seq_idx_of",
]
