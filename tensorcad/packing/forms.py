"""The representations of a packing, and the conversions between them, both ways.

One packing — which tokens of a row belong to which document — is written down
in five ways by the tools people train with:

- **documents** (B, T): tensorcad's own form, a document id at every position; a
  document is a run of equal ids. Converted *to*, it numbers each row's
  documents 0, 1, 2, ... (int64).
- **position_ids** (B, T): each token's position in its document, restarting at
  every document (Hugging Face ``DataCollatorWithFlattening``'s
  ``position_ids``; transformers detects packing from them). int64.
- **cu_seqlens** (N + 1,): cumulative document lengths over the flattened batch,
  from 0 to B*T (FlashAttention's varlen ``cu_seqlens``, the collator's
  ``cu_seq_lens_q``/``cu_seq_lens_k``). int32. A row boundary is always a
  document boundary, so the batch's shape is needed to read them back.
- **seq_idx** (B, T): each token's document number within its row, from 0
  (the collator's ``seq_idx``, Mamba's ``seq_idx``). int32.
- **padded cu_seqlens** (``cu_seqlens``, ``cu_seqlens_padded``): Transformer Engine's THD
  form, each document padded to a multiple (2 x cp under context parallelism, 16 for
  FP8): document i's token k sits at slot ``cu_seqlens_padded[i] + k`` of the padded
  buffer; ``cu_seqlens`` counts the real tokens. Every reader of the padded buffer
  (positions, labels, a conv/SSM ``seq_idx``, the loss mask) must read the padded one.
- **EOS-delimited ids** (B, T): token ids in which an end-of-sequence token
  closes every document (torchtitan's way: each sample is tokenised with an
  EOS at its end and the stream is cut into rows; its document mask numbers a
  row's documents by the EOS tokens *before* each position, so the EOS belongs
  to the document it ends).

Every function takes numpy arrays or torch tensors and returns the same kind;
torch is never imported here (a tensor is converted through ``.numpy()`` and
back with its own module's ``from_numpy``). Impossible input is a
``TensorcadError`` naming the argument and, where one exists, the position.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from tensorcad.errors import TensorcadError

# The dtypes the collator gives: int64 for ids and position_ids, int32 for seq_idx and cu_seq_lens.
DOCUMENTS_DTYPE = np.int64
POSITIONS_DTYPE = np.int64
SEQ_IDX_DTYPE = np.int32
CU_SEQLENS_DTYPE = np.int32


# --- numpy or torch in, the same out ------------------------------------------------------


def _is_torch(value: Any) -> bool:
    # torch is never imported by the engine: a tensor is recognised by the module that made its type.
    return type(value).__module__.startswith("torch") and hasattr(value, "numpy")


def _as_numpy(value: Any, name: str) -> np.ndarray:
    if _is_torch(value):
        return value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return value
    raise TensorcadError(name, f"expected a numpy array or a torch tensor, got {type(value).__name__}")


def _like(result: np.ndarray, example: Any) -> Any:
    """``result`` as the kind of array ``example`` is: a tensor (on its device) for a tensor."""
    if not _is_torch(example):
        return result
    torch = sys.modules["torch"]  # imported already: example is one of its tensors
    return torch.from_numpy(np.ascontiguousarray(result)).to(example.device)


def _integers(value: Any, name: str) -> tuple[np.ndarray, bool]:
    """(the array as 2D, whether it was 1D), refusing anything but an integer (B, T) or (T,)."""
    array = _as_numpy(value, name)
    if array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.integer):
        raise TensorcadError(name, f"expected integers, got {array.dtype}")
    if array.ndim not in (1, 2):
        raise TensorcadError(name, f"expected shape (B, T) or (T,), got {tuple(array.shape)}")
    return (array[None, :] if array.ndim == 1 else array), array.ndim == 1


def _shaped(grid: np.ndarray, flat: bool) -> np.ndarray:
    return grid[0] if flat else grid


def _where(row: int, t: int, flat: bool) -> str:
    return f"[{t}]" if flat else f"[{row}, {t}]"


# --- documents <-> position_ids -------------------------------------------------------------


def _positions_from_cuts(rows: int, seq: int, row_of_cut: np.ndarray, cuts: np.ndarray) -> np.ndarray:
    # A document's first position is a running sum of the gaps between
    # boundaries, which a cumulative sum builds in one pass (much faster than
    # a running maximum); cuts are sorted by row, then by position.
    gaps = np.zeros((rows, seq), dtype=np.int64)
    if len(cuts):
        previous = np.empty_like(cuts)
        previous[0] = 0
        previous[1:] = cuts[:-1]
        row_begins = np.ones(len(cuts), dtype=np.bool_)
        row_begins[1:] = row_of_cut[1:] != row_of_cut[:-1]
        previous[row_begins] = 0
        gaps[row_of_cut, cuts] = cuts - previous
    begin = np.cumsum(gaps, axis=1, out=gaps)
    return np.subtract(np.arange(seq, dtype=np.int64), begin, out=begin)


def positions_of(documents: Any) -> Any:
    """Each token's position in its document, restarting at every change of id and every row.

    This is Hugging Face ``DataCollatorWithFlattening``'s ``position_ids``
    for whole examples. Accepts an integer array or tensor of shape (B, T) or (T,).
    """
    grid, flat = _integers(documents, "documents")
    rows, seq = grid.shape
    if seq == 0:
        return _like(np.zeros(grid.shape, dtype=POSITIONS_DTYPE)[0 if flat else slice(None)], documents)
    change = np.not_equal(grid[:, 1:], grid[:, :-1])
    row_of_cut, cuts = np.nonzero(change)
    positions = _positions_from_cuts(rows, seq, row_of_cut, cuts + 1)
    return _like(_shaped(positions, flat), documents)


def documents_of_positions(positions: Any, start: int = 0) -> Any:
    """The documents that restarting ``position_ids`` describe: a new one wherever a position is ``start``.

    Every other position must be one more than the one before it, and every
    row must begin at ``start`` (the collator's ``position_ids_start``, 0
    unless set for a RoBERTa-like model): anything else is not a packing of
    whole documents, and is refused naming the first position that breaks it.
    """
    grid, flat = _integers(positions, "positions")
    if grid.shape[1] == 0:
        return _like(np.zeros(grid.shape, dtype=DOCUMENTS_DTYPE)[0 if flat else slice(None)], positions)
    begins = grid == start
    follows = np.zeros_like(begins)
    follows[:, 1:] = grid[:, 1:] == grid[:, :-1] + 1
    bad = ~(begins | follows)
    if bad.any():
        row, t = (int(i) for i in np.argwhere(bad)[0])
        if t == 0:
            raise TensorcadError(f"positions{_where(row, t, flat)}",
                                 f"a row begins at position {int(grid[row, 0])}, not {start}: "
                                 "its first document has no beginning")
        raise TensorcadError(f"positions{_where(row, t, flat)}",
                             f"{int(grid[row, t])} follows {int(grid[row, t - 1])}: positions of packed documents "
                             f"restart at {start} or count up by one")
    documents = np.cumsum(begins, axis=1, dtype=DOCUMENTS_DTYPE) - 1
    return _like(_shaped(documents, flat), positions)


# --- documents <-> seq_idx ------------------------------------------------------------------


def _numbered(grid: np.ndarray) -> np.ndarray:
    """Each row's runs of equal ids numbered 0, 1, 2, ... (int64)."""
    change = np.zeros(grid.shape, dtype=DOCUMENTS_DTYPE)
    change[:, 1:] = grid[:, 1:] != grid[:, :-1]
    return np.cumsum(change, axis=1, out=change)


def seq_idx_of(documents: Any) -> Any:
    """The collator's ``seq_idx``: each token's document number in its row, from 0, int32."""
    grid, flat = _integers(documents, "documents")
    return _like(_shaped(_numbered(grid).astype(SEQ_IDX_DTYPE), flat), documents)


def documents_of_seq_idx(seq_idx: Any) -> Any:
    """The documents ``seq_idx`` numbers: it must begin each row at 0 and rise by 0 or 1."""
    grid, flat = _integers(seq_idx, "seq_idx")
    if grid.shape[1]:
        if (grid[:, 0] != 0).any():
            row = int(np.flatnonzero(grid[:, 0] != 0)[0])
            raise TensorcadError(f"seq_idx{_where(row, 0, flat)}",
                                 f"a row's documents are numbered from 0, got {int(grid[row, 0])}")
        step = np.diff(grid, axis=1)
        bad = (step != 0) & (step != 1)
        if bad.any():
            row, t = (int(i) for i in np.argwhere(bad)[0])
            raise TensorcadError(f"seq_idx{_where(row, t + 1, flat)}",
                                 f"{int(grid[row, t + 1])} follows {int(grid[row, t])}: "
                                 "seq_idx rises by one at each new document")
    return _like(_shaped(grid.astype(DOCUMENTS_DTYPE), flat), seq_idx)


# --- documents <-> lengths <-> cu_seqlens ----------------------------------------------------


def row_lengths(documents: Any) -> list[list[int]]:
    """Each row's document lengths, in order (what the collator's feature list holds)."""
    grid, _ = _integers(documents, "documents")
    out = []
    for row in grid:
        starts = np.flatnonzero(np.r_[True, row[1:] != row[:-1]]) if len(row) else np.zeros(0, dtype=np.int64)
        out.append(np.diff(np.r_[starts, len(row)]).astype(int).tolist())
    return out


def documents_of_lengths(lengths: Any) -> np.ndarray:
    """(B, T) documents numbered from 0 in each row, from each row's document lengths (a list of lists)."""
    if not isinstance(lengths, (list, tuple)) or not lengths:
        raise TensorcadError("lengths", "expected a non-empty list of rows, each a list of document lengths")
    rows = []
    for r, row in enumerate(lengths):
        if not isinstance(row, (list, tuple)) or not row:
            raise TensorcadError(f"lengths[{r}]", "expected a non-empty list of document lengths")
        for d, n in enumerate(row):
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
                raise TensorcadError(f"lengths[{r}][{d}]", f"a document holds at least one token, got {n!r}")
        rows.append(np.repeat(np.arange(len(row), dtype=DOCUMENTS_DTYPE), np.asarray(row, dtype=np.int64)))
    seq = len(rows[0])
    for r, row in enumerate(rows):
        if len(row) != seq:
            raise TensorcadError(f"lengths[{r}]", f"the row holds {len(row)} tokens, row 0 holds {seq}")
    return np.stack(rows)


def cu_seqlens_of(documents: Any) -> Any:
    """Cumulative document lengths over the flattened batch, from 0 to B*T, int32 (FlashAttention's varlen form).

    A row's end always ends a document: varlen kernels see the batch as one
    long row, so a document may not run on into the next row.
    """
    grid, _ = _integers(documents, "documents")
    rows, seq = grid.shape
    begins = np.zeros(grid.shape, dtype=np.bool_)
    if seq:  # rows of no token begin nothing: cu_seqlens is [0]
        begins[:, 0] = True
        begins[:, 1:] = grid[:, 1:] != grid[:, :-1]
    flat_begins = np.flatnonzero(begins.reshape(-1))
    cu = np.r_[flat_begins, rows * seq].astype(CU_SEQLENS_DTYPE)
    return _like(cu, documents)


def documents_of_cu_seqlens(cu_seqlens: Any, seq: int, rows: int = 1) -> Any:
    """(rows, seq) documents numbered from 0 in each row, from cumulative lengths over the flattened batch.

    ``cu_seqlens`` must begin at 0, rise strictly (no empty document), end at
    ``rows * seq`` and hold every row's end (a document cannot cross rows).
    Returns (seq,) when ``rows`` is 1 and ``cu_seqlens`` came with no batch (a
    1D array always: it is the batch that is flattened).
    """
    cu = _as_numpy(cu_seqlens, "cu_seqlens")
    if cu.ndim != 1 or cu.dtype == np.bool_ or not np.issubdtype(cu.dtype, np.integer):
        raise TensorcadError("cu_seqlens", f"expected a 1D integer array, got {cu.dtype} {tuple(cu.shape)}")
    for name, value in (("seq", seq), ("rows", rows)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise TensorcadError(name, f"expected a positive integer, got {value!r}")
    total = int(rows) * int(seq)
    if len(cu) < 2:
        raise TensorcadError("cu_seqlens", f"expected at least [0, {total}], got {cu.tolist()}")
    if int(cu[0]) != 0:
        raise TensorcadError("cu_seqlens[0]", f"cumulative lengths begin at 0, got {int(cu[0])}")
    if int(cu[-1]) != total:
        raise TensorcadError(f"cu_seqlens[{len(cu) - 1}]",
                             f"ends at {int(cu[-1])}, but {rows} x {seq} tokens end at {total}")
    steps = np.diff(cu.astype(np.int64))
    if (steps <= 0).any():
        i = int(np.flatnonzero(steps <= 0)[0]) + 1
        raise TensorcadError(f"cu_seqlens[{i}]", f"{int(cu[i])} after {int(cu[i - 1])}: "
                                                 "cumulative lengths rise at every document (none is empty)")
    begins = np.zeros(total, dtype=np.bool_)
    begins[cu[:-1].astype(np.int64)] = True
    grid = begins.reshape(rows, seq)
    if not grid[:, 0].all():
        row = int(np.flatnonzero(~grid[:, 0])[0])
        raise TensorcadError("cu_seqlens", f"a document crosses from row {row - 1} into row {row} "
                                           f"(no boundary at {row * seq}); a row's end ends its document")
    documents = np.cumsum(grid, axis=1, dtype=DOCUMENTS_DTYPE) - 1
    return _like(documents, cu_seqlens)


def flash_kwargs_of(documents: Any) -> dict[str, Any]:
    """The keyword arguments ``DataCollatorWithFlattening(return_flash_attn_kwargs=True)`` gives for these documents.

    ``cu_seq_lens_q`` and ``cu_seq_lens_k`` (int32, the flattened batch's
    cumulative lengths) and ``max_length_q`` / ``max_length_k`` (Python ints,
    the longest document).
    """
    cu = cu_seqlens_of(documents)
    longest = int(np.diff(_as_numpy(cu, "cu_seqlens").astype(np.int64)).max(initial=0))
    return {"cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": longest, "max_length_k": longest}


# --- padded layouts: cu_seqlens beside cu_seqlens_padded --------------------------------------


def _multiple(multiple: Any) -> int:
    if isinstance(multiple, bool) or not isinstance(multiple, (int, np.integer)) or multiple < 1:
        raise TensorcadError("multiple", f"expected a positive integer, got {multiple!r}")
    return int(multiple)


def padded_cu_seqlens_of(documents: Any, multiple: int) -> tuple[Any, Any]:
    """(cu_seqlens, cu_seqlens_padded), int32: every document (of every row, in order) padded to ``multiple``.

    ``cu_seqlens`` cumulates the documents' real lengths, ``cu_seqlens_padded`` their
    lengths rounded up to the multiple: the THD layout Transformer Engine and Megatron
    read under context parallelism (``multiple`` = 2 x cp).
    """
    multiple = _multiple(multiple)
    lengths = np.asarray([n for row in row_lengths(documents) for n in row], dtype=np.int64)
    padded = -(-lengths // multiple) * multiple
    cu = np.r_[0, np.cumsum(lengths)].astype(CU_SEQLENS_DTYPE)
    cu_padded = np.r_[0, np.cumsum(padded)].astype(CU_SEQLENS_DTYPE)
    return _like(cu, documents), _like(cu_padded, documents)


def padded_layout_of(cu_seqlens: Any, cu_seqlens_padded: Any, multiple: int | None = None) -> Any:
    """(T_padded,): the real token (its index in the unpadded batch) each slot of the padded buffer holds, -1 padding.

    Both must begin at 0 and hold the same documents; each padded length must hold
    its real one, and with ``multiple`` be exactly it rounded up: anything else is
    refused naming the document.
    """
    cu, padded = (_as_numpy(v, n).astype(np.int64) for v, n in ((cu_seqlens, "cu_seqlens"),
                                                                  (cu_seqlens_padded, "cu_seqlens_padded")))
    for name, array in (("cu_seqlens", cu), ("cu_seqlens_padded", padded)):
        if array.ndim != 1 or len(array) < 1 or array[0] != 0:
            raise TensorcadError(name, "expected 1D cumulative lengths beginning at 0")
        if (np.diff(array) < 0).any():
            i = int(np.flatnonzero(np.diff(array) < 0)[0]) + 1
            raise TensorcadError(f"{name}[{i}]", f"{int(array[i])} after {int(array[i - 1])}: cumulative lengths never fall")
    if len(cu) != len(padded):
        raise TensorcadError("cu_seqlens_padded", f"{len(padded) - 1} documents, cu_seqlens {len(cu) - 1}")
    real, room = np.diff(cu), np.diff(padded)
    if (room < real).any():
        d = int(np.flatnonzero(room < real)[0])
        raise TensorcadError(f"cu_seqlens_padded[{d + 1}]", f"document {d} of {int(real[d])} tokens padded to "
                                                            f"{int(room[d])}: padding never drops a token")
    if multiple is not None:
        want = -(-real // _multiple(multiple)) * int(multiple)
        if (room != want).any():
            d = int(np.flatnonzero(room != want)[0])
            raise TensorcadError(f"cu_seqlens_padded[{d + 1}]", f"document {d} of {int(real[d])} tokens padded to "
                                                                f"{int(room[d])}, not to {int(want[d])} (a multiple of {multiple})")
    layout = np.full(int(padded[-1]), -1, dtype=np.int64)
    for start, first, n in zip(padded[:-1], cu[:-1], real):
        layout[start:start + n] = np.arange(first, first + n)
    return _like(layout, cu_seqlens)


# --- documents <-> EOS-delimited ids (torchtitan) ---------------------------------------------


def _eos(eos_id: Any) -> int:
    if isinstance(eos_id, bool) or not isinstance(eos_id, (int, np.integer)) or eos_id < 0:
        raise TensorcadError("eos_id", f"expected a non-negative token id, got {eos_id!r}")
    return int(eos_id)


def documents_of_eos(ids: Any, eos_id: int) -> Any:
    """The documents an EOS token delimits, read as torchtitan's document mask reads them.

    A document ends *at* each EOS (the EOS is its last token) and the next
    begins after it; a row's last document ends with the row, EOS or not.
    """
    eos_id = _eos(eos_id)
    grid, flat = _integers(ids, "ids")
    ends = grid == eos_id
    documents = np.zeros(grid.shape, dtype=DOCUMENTS_DTYPE)
    documents[:, 1:] = np.cumsum(ends[:, :-1], axis=1)
    return _like(_shaped(documents, flat), ids)


def eos_ids_of(ids: Any, documents: Any, eos_id: int) -> Any:
    """``ids`` with the last token of each document replaced by ``eos_id``: the EOS-delimited form.

    The row's last document ends with the row and gets no EOS (torchtitan's
    mask reads it the same either way). A token already equal to ``eos_id``
    anywhere else would end a document where ``documents`` says none ends, so
    it is refused, naming where it sits.
    """
    eos_id = _eos(eos_id)
    grid, flat = _integers(ids, "ids")
    docs, docs_flat = _integers(documents, "documents")
    if docs.shape != grid.shape or docs_flat != flat:
        raise TensorcadError("documents", f"shape {tuple(_shaped(docs, docs_flat).shape)} differs from ids "
                                          f"{tuple(_shaped(grid, flat).shape)}")
    ends = np.zeros(grid.shape, dtype=np.bool_)
    ends[:, :-1] = docs[:, 1:] != docs[:, :-1]
    stray = (grid == eos_id) & ~ends
    if grid.shape[1]:
        stray[:, -1] = False  # the row's end ends a document whatever token sits there
    if stray.any():
        row, t = (int(i) for i in np.argwhere(stray)[0])
        raise TensorcadError(f"ids{_where(row, t, flat)}",
                             f"token {eos_id} is the EOS id but sits inside a document; it would end one there")
    out = np.where(ends, np.asarray(eos_id, dtype=grid.dtype), grid).astype(grid.dtype)
    return _like(_shaped(out, flat), ids)


__all__ = (
    "cu_seqlens_of", "documents_of_cu_seqlens", "documents_of_eos", "documents_of_lengths",
    "documents_of_positions", "documents_of_seq_idx", "eos_ids_of", "flash_kwargs_of", "padded_cu_seqlens_of",
    "padded_layout_of", "positions_of",
    "row_lengths", "seq_idx_of",
)
