"""The engine's block counts against PyTorch's own ``create_block_mask``, row by row, exactly.

The mask_mod is written the way generated code writes it: a closure over the
(B, T) documents, indexed flat. Rows are the packing's own draws, fixed and
gamma lengths, means from 256 to 4,096 tokens.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.nn.attention.flex_attention import create_block_mask  # noqa: E402

from tensorcad.analysis.tiles import count_row_blocks  # noqa: E402
from tensorcad.design import load  # noqa: E402
from tensorcad.packing import draw  # noqa: E402

LLAMA = load("llama-3-8b-documents").attentions()[0][0]


def torch_counts(documents: np.ndarray, block: int = 128) -> tuple[np.ndarray, np.ndarray]:
    """(partial, full) blocks per (row, query block) from FlexAttention's BlockMask."""
    rows, seq = documents.shape
    doc = torch.from_numpy(documents)

    def same_document_causal(b, h, q_idx, kv_idx):
        flat = doc.view(-1)
        return (q_idx >= kv_idx) & (flat[b * seq + q_idx] == flat[b * seq + kv_idx])

    mask = create_block_mask(same_document_causal, B=rows, H=None, Q_LEN=seq, KV_LEN=seq,
                             device="cpu", BLOCK_SIZE=block)
    return mask.kv_num_blocks[:, 0].numpy(), mask.full_kv_num_blocks[:, 0].numpy()


# (seq, mean, spread, rows, seed). The default run compares three cases (64
# rows, fixed and gamma lengths) against create_block_mask itself; the rest
# (136 rows more, 200 in all) run with -m slow.
FAST = [(2048, 256, 1.0, 24, 1), (4096, 1024, 0.0, 16, 3), (2048, 300, 1.5, 24, 8)]
SLOW = [
    (2048, 256, 0.0, 24, 0), (4096, 512, 2.0, 16, 2), (4096, 1024, 1.0, 16, 4),
    (2048, 384, 0.5, 24, 5), (4096, 4096, 1.0, 16, 6), (4096, 2048, 0.0, 16, 7),
    (3072, 700, 1.0, 24, 9),
]
CASES = FAST + [pytest.param(*case, marks=pytest.mark.slow) for case in SLOW]


def test_cases_cover_two_hundred_rows():
    assert sum(case[3] for case in FAST + SLOW) >= 200
    assert sum(case[3] for case in FAST) >= 64


@pytest.mark.parametrize("seq,mean,spread,rows,seed", CASES)
def test_block_mask_agrees_exactly(seq, mean, spread, rows, seed):
    documents, _ = draw(rows, seq, mean, spread, seed)
    partial, full = torch_counts(documents)
    engine = count_row_blocks(LLAMA, documents)
    assert engine.full.shape == (rows, 1, seq // 128)
    assert (engine.partial[:, 0] == partial).all()
    assert (engine.full[:, 0] == full).all()
    assert ((engine.partial + engine.full)[:, 0].sum(axis=1) == (partial + full).sum(axis=1)).all()
