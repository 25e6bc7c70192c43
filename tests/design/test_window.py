"""The window's bounds, pinned: a window W keeps q - kv < W (exclusive), W keys with the query itself.

docs/attention-expressions.md states the convention; these tests hold the design
language, the numpy interpreter and the generated torch mask to it.
"""

import numpy as np
import pytest

from tensorcad.design import load
from tensorcad.design.expr import Env, evaluate


def _window_attention(w, causal=True):
    raw = load("nano-sort").to_dict()
    attention = raw["nodes"][1]["params"]["block"]["params"]["attention"]
    attention.update(window=w, causal=causal, mask=None)
    raw["nodes"][1]["in"].pop("doc")
    [(a, _)] = load(raw).attentions()
    return a


def _kept_keys(attention, q, seq):
    kv = np.arange(seq)
    env = Env(b=np.zeros(1, np.int64), h=np.zeros(1, np.int64), q=np.array([q]), kv=kv)
    return kv[np.broadcast_to(evaluate(attention.keep, env), kv.shape)]


@pytest.mark.parametrize("w", [1, 4, 100])
def test_a_causal_window_keeps_w_keys_ending_at_the_query(w):
    kept = _kept_keys(_window_attention(w), q=200, seq=256)
    assert kept.tolist() == list(range(200 - w + 1, 201))  # q - W is out, q is in


def test_a_window_without_causal_keeps_both_sides_exclusively():
    kept = _kept_keys(_window_attention(4, causal=False), q=100, seq=256)
    assert kept.tolist() == list(range(97, 104))  # |q - kv| < 4


def test_the_generated_torch_mask_agrees():
    torch = pytest.importorskip("torch")
    from tensorcad.codegen import generate
    from tensorcad.runtime import load_module

    raw = load("mistral-7b").to_dict()
    raw["nodes"][1]["params"]["block"]["params"]["attention"]["window"] = 8
    module = load_module(generate(load(raw)))
    [mask] = [f for name, f in vars(module).items() if callable(f) and "window" in name]
    q_idx, kv_idx = torch.arange(64)[:, None], torch.arange(64)[None, :]
    keep = mask(0, 0, q_idx, kv_idx)
    assert torch.equal(keep, (q_idx >= kv_idx) & (q_idx - kv_idx < 8))
    assert keep.sum(dim=1)[-1].item() == 8
