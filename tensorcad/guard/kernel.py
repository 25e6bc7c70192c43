"""``data[boundaries]`` at the kernel: what each attention call received, held to the packer's own lengths.

The batch can carry the packer's boundaries and the kernel still see others: an
all-ones 2D mask or a cache sends SDPA down ``is_causal`` (every document of a
row merged), a collator's positions restart late, a varlen call gets another
batch's ``cu_seq_lens``. Each recorded call's kept pairs (``path.kept_pairs``,
read as its kernel reads them) are compared with the documents the packer's
lengths make: a pair kept across two of the packer's documents merges them; a
causal pair inside one document (within the layer's window) not kept splits it.
Padding past a row's documents is no document and is not compared.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .audit import Finding
from .path import kept_pairs, window_of
from .recording import AttentionCall

CHECK = "data[boundaries] kernel"


def packer_documents(lengths: Sequence[Sequence[int]], tokens: int) -> torch.Tensor:
    """(rows, tokens): each token's document in its row by the packer's lengths; -1 where a row is padding."""
    documents = torch.full((len(lengths), tokens), -1, dtype=torch.long)
    for r, row in enumerate(lengths):
        start = 0
        for d, length in enumerate(row):
            documents[r, start:start + int(length)] = d
            start += int(length)
    return documents


def kernel_findings(calls: list[AttentionCall], lengths: Sequence[Sequence[int]]) -> list[Finding]:
    """One finding for each attention call whose kernel merges or splits the packer's documents (first pair named)."""
    findings = []
    for call in calls:
        how, kept = kept_pairs(call)
        if kept is None:
            continue
        rows, queries, keys = kept.shape
        flat = rows == 1 and len(lengths) > 1  # a varlen call: every row's tokens in one
        row_lengths = [[n for row in lengths for n in row]] if flat else lengths
        if len(row_lengths) != rows:
            continue
        documents = packer_documents(row_lengths, keys)
        q_docs, kv_docs = documents[:, -queries:, None], documents[:, None, :]
        real = (q_docs >= 0) & (kv_docs >= 0)
        same = (q_docs == kv_docs) & real
        q = torch.arange(keys - queries, keys)[:, None]
        kv = torch.arange(keys)[None, :]
        window = window_of(call)
        allowed = (kv <= q) & ((q - kv) < window if window is not None else True)
        where = f"layer {call.layer} ({call.implementation} with {how})"
        merged = kept & real & ~same
        split = ~kept & same & allowed
        if bool(merged.any()):
            r, i, j = (int(x) for x in torch.nonzero(merged)[0])
            findings.append(Finding(CHECK, f"{where}: row {r}'s token {i + keys - queries} (document "
                                           f"{int(q_docs[r, i, 0])}) sees token {j} (document {int(kv_docs[r, 0, j])}): "
                                           "the kernel merges documents the packer kept apart"))
        elif bool(split.any()):
            r, i, j = (int(x) for x in torch.nonzero(split)[0])
            findings.append(Finding(CHECK, f"{where}: row {r}'s token {i + keys - queries} cannot see token {j} of "
                                           f"its own document {int(q_docs[r, i, 0])}: the kernel splits a document "
                                           "the packer made whole"))
    return findings
