"""The editor's block overlay against FlexAttention's own ``BlockMask`` for the same sampled row.

The overlay says, for each 128 x 128 block, what the kernel does with it;
here the kernel's own planner (``create_block_mask``) says it: a block in
``full_kv_indices`` is computed whole, one in ``kv_indices`` computed and
masked, any other skipped.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.nn.attention.flex_attention import create_block_mask  # noqa: E402

from tensorcad.editor import api  # noqa: E402
from tensorcad.views.preview import sample_row  # noqa: E402
from tensorcad.packing import Packing  # noqa: E402


def _block_mask_letters(documents: np.ndarray, block: int = 128) -> list[str]:
    seq = len(documents)
    doc = torch.from_numpy(documents)

    def same_document_causal(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (doc[q_idx] == doc[kv_idx])

    mask = create_block_mask(same_document_causal, B=None, H=None, Q_LEN=seq, KV_LEN=seq, device="cpu",
                             BLOCK_SIZE=block)
    n = -(-seq // block)
    letters = np.full((n, n), "s")
    for i in range(n):
        partial = mask.kv_indices[0, 0, i, : int(mask.kv_num_blocks[0, 0, i])]
        full = mask.full_kv_indices[0, 0, i, : int(mask.full_kv_num_blocks[0, 0, i])]
        letters[i, partial.numpy()] = "p"
        letters[i, full.numpy()] = "f"
    return ["".join(line) for line in letters]


@pytest.mark.parametrize("seq, mean, spread", [(2048, 300, 1.0), (4096, 1024, 0.0), (2048, 128, 2.0)])
def test_the_overlay_is_flexattention_s_block_mask_for_the_row(seq, mean, spread):
    op = {"seq": seq, "packing": {"mean": mean, "spread": spread}}
    answer = api.preview({"design": "llama-3-8b-documents", "op": op})["kernelBlocks"]
    row = sample_row(seq, Packing(mean, spread), 0)
    assert answer["states"] == _block_mask_letters(row.documents)
