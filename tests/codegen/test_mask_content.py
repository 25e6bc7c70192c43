"""Every generated mask_mod keeps exactly what the design says, point by point.

The generated module's masks (its MASKS table: the mask_mod, or the factory making it
from the row's documents and positions) are evaluated by torch at every (row, head,
query, key) of a small batch, and held to the design's own ``keep`` expression
evaluated by the numpy interpreter (design/expr/numpy_eval.py), which shares no code
with codegen's torch printer. A mask whose causal conjunct went missing, a window off
by one or a head condition flipped differs at some point here. Lengths are not
multiples of 128 and documents are ragged, so no block structure hides a point.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tensorcad  # noqa: E402
from tensorcad.codegen.generate import generate  # noqa: E402
from tensorcad.design.expr import Env, evaluate  # noqa: E402
from tensorcad.design.load import read  # noqa: E402
from tensorcad.runtime.building.generated import load_module  # noqa: E402

SEQ, ROWS = 97, 2

# Attention params put in place of nano-sort's (a causal document mask), one variant a case.
VARIANTS = {
    "document-causal": {},
    "causal": {"mask": None},
    "bidirectional-documents": {"causal": False},
    "sliding-window": {"window": 13, "mask": None},
    "local-window": {"causal": False, "window": 9, "mask": None},
    "document-window": {"window": 7},
    "per-head-windows": {"mask": "(doc(b, q) == doc(b, kv)) & (q - kv < where(h < 2, 5, 30))"},
    "mixed": {"causal": False, "mask": "((doc(b, q) == doc(b, kv)) & (kv <= q + 3)) | (kv < 2)"},
    "positions": {"mask": "(doc(b, q) == doc(b, kv)) & (pos(b, q) - pos(b, kv) < 11)",
                  "positions": True},
}


def design_of(variant: dict):
    raw = copy.deepcopy(read("nano-sort"))
    params = raw["nodes"][1]["params"]["block"]["params"]["attention"]
    variant = dict(variant)
    if variant.pop("positions", False):
        raw["inputs"]["pos"] = {"role": "positions"}
        raw["nodes"][1]["in"]["pos"] = "pos"
    mask = variant.get("mask", params.get("mask"))
    if mask is None or "doc(" not in mask:  # nothing reads the documents
        del raw["nodes"][1]["in"]["doc"]
    for key, value in variant.items():
        if value is None:
            params.pop(key, None)
        else:
            params[key] = value
    return tensorcad.load(raw)


def ragged_rows(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(documents, positions) of ROWS rows: document ids that never fall, positions restarting."""
    rng = np.random.default_rng(seed)
    starts = rng.random((ROWS, SEQ)) < 0.12
    starts[:, 0] = True
    documents = np.cumsum(starts, axis=1) - 1
    index = np.arange(SEQ)
    first = np.maximum.accumulate(np.where(starts, index, 0), axis=1)
    return documents, index - first


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_generated_masks_equal_the_numpy_interpreter_at_every_point(name):
    design = design_of(VARIANTS[name])
    module = load_module(generate(design), name)
    by_path = {att.path: att for att, _ in design.attentions()}
    documents, positions = ragged_rows(seed=len(name))
    by_role = {"documents": documents, "positions": positions}
    checked = 0
    for entry in module.MASKS.values():
        for path in entry["attentions"]:
            att = by_path[path]
            if entry["factory"] is None:
                mask_mod = entry["mask_mod"]
            else:
                mask_mod = entry["factory"](*(torch.from_numpy(by_role[r]) for r in entry["reads"]))
            b = torch.arange(ROWS).view(ROWS, 1, 1, 1)
            h = torch.arange(att.heads).view(1, att.heads, 1, 1)
            q = torch.arange(SEQ).view(1, 1, SEQ, 1)
            kv = torch.arange(SEQ).view(1, 1, 1, SEQ)
            got = torch.broadcast_to(mask_mod(b, h, q, kv), (ROWS, att.heads, SEQ, SEQ)).numpy()
            tensors = {port: by_role[wire.role] for port, wire in att.tensors.items()}
            want = evaluate(att.keep, Env(b=b.numpy(), h=h.numpy(), q=q.numpy(), kv=kv.numpy(),
                                          tensors=tensors))
            want = np.broadcast_to(want, got.shape)
            assert got.dtype == np.bool_
            mismatch = np.argwhere(got != want)
            assert len(mismatch) == 0, f"{path}: differs first at (b, h, q, kv) = {tuple(mismatch[0])}"
            # the mask is not trivial: some scores kept, some dropped
            assert want.any() and not want.all()
            checked += 1
    assert checked == len(by_path) >= 1
