"""The torch printer, held against numpy and against PyTorch itself.

The generated source is executed here (tests only) on small tensors, inside
FlexAttention's own ``create_mask``/``create_block_mask``, and the bucket
helper is compared with T5's published algorithm.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hypothesis_profiles import scaled  # tests/: the profile's example counts

torch = pytest.importorskip("torch")
flex = pytest.importorskip("torch.nn.attention.flex_attention")

from test_expr_properties import parse_or_skip  # noqa: E402  (the same skip the property suite uses)
from tensorcad.design.expr import (  # noqa: E402
    RELATIVE_BUCKET_SOURCE,
    Box,
    Env,
    Scope,
    evaluate,
    interval,
    parse,
    read_range,
    relative_bucket,
    to_torch,
)

NAMES = {"b": "b", "h": "h", "q": "q_idx", "kv": "kv_idx", "score": "score",
         "doc": "doc", "pos": "pos", "bias": "bias"}
MASK = Scope("mask", params={"window": 5, "heads": 4}, tensors={"doc", "pos"})
SCORE = Scope("score", params={"window": 5, "cap": 2.5}, tensors={"doc"}, tables={"bias": 2})
B, H, T = 2, 4, 32



def hf_t5_relative_position_bucket(relative_position, num_buckets=32, max_distance=128):
    """HF ``T5Attention._relative_position_bucket`` with bidirectional=False,
    written out from T5's published algorithm (Raffel et al., mesh-tensorflow)."""
    relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    if_large = torch.min(if_large, torch.full_like(if_large, num_buckets - 1))
    return torch.where(is_small, relative_position, if_large)


def helper_namespace() -> dict:
    namespace = {"torch": torch, "math": math}
    exec(RELATIVE_BUCKET_SOURCE, namespace)  # test only: the generated helper
    return namespace


def compile_mod(expr, **ports):
    """``mod(score, b, h, q_idx, kv_idx)`` from the printed body (test only)."""
    namespace = helper_namespace()
    namespace.update(ports)
    body = to_torch(expr, NAMES)
    exec(f"def mod(score, b, h, q_idx, kv_idx):\n    return {body}\n", namespace)
    return namespace["mod"], body


def packing(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    docs = np.cumsum(rng.random((B, T)) < 0.2, axis=1) + rng.integers(0, 3)
    pos = np.zeros_like(docs)
    for r in range(B):
        for t in range(1, T):
            pos[r, t] = pos[r, t - 1] + 1 if docs[r, t] == docs[r, t - 1] else 0
    return docs, pos


def grids_np():
    return (np.arange(B)[:, None, None, None], np.arange(H)[None, :, None, None],
            np.arange(T)[None, None, :, None], np.arange(T)[None, None, None, :])


def grids_torch():
    return tuple(torch.from_numpy(g.copy()) for g in grids_np())


# -- the bucket helper -------------------------------------------------------


@pytest.mark.parametrize("num_buckets, max_distance", [(32, 128), (16, 64), (8, 20), (2, 5),
                                                        (64, 1000)])
def test_relative_bucket_matches_t5(num_buckets, max_distance):
    relative = torch.arange(-20_000, 50)
    expected = hf_t5_relative_position_bucket(relative, num_buckets, max_distance)
    helper = helper_namespace()["_relative_bucket"]
    assert torch.equal(helper(relative, num_buckets, max_distance), expected)
    assert np.array_equal(relative_bucket(relative.numpy(), num_buckets, max_distance),
                          expected.numpy())
    # int32 indices (as FlexAttention may pass them) give the same buckets.
    assert torch.equal(helper(relative.to(torch.int32), num_buckets, max_distance).long(),
                       expected)


def test_relative_bucket_runs_under_vmap():
    helper = helper_namespace()["_relative_bucket"]
    relative = torch.arange(-300, 10)
    got = torch.vmap(lambda x: helper(x, 32, 128))(relative)
    assert torch.equal(got, hf_t5_relative_position_bucket(relative))


# -- printed masks and scores against numpy ---------------------------------


@pytest.mark.parametrize("text", [
    "q >= kv",
    "(q >= kv) & (doc(b, q) == doc(b, kv))",
    "q >= kv and q - kv < window",
    "abs(q - kv) < window",
    "not (q < kv) or h == heads - 1",
    "where(h % 2 == 0, q >= kv, doc(b, q) == doc(b, kv))",
    "min(q, 10) - max(kv, 3) >= pos(b, kv) - pos(b, q)",
    "min(3, window) <= q - kv",
    "q // 8 == kv // 8",
    "(q - kv) % 7 != 3",
    "bucket(kv - q, 8, 20) < 6",
    "True",
    "False | (q == kv)",
    "where(True, q, 0) >= kv",
    "~~(q >= kv)",
])
def test_printed_mask_agrees_with_numpy(text):
    docs, pos = packing(1)
    expr = parse_or_skip(text, MASK)
    mod, body = compile_mod(expr, doc=torch.from_numpy(docs), pos=torch.from_numpy(pos))
    b, h, q, kv = grids_torch()
    got = torch.broadcast_to(mod(None, b, h, q, kv), (B, H, T, T))
    expected = np.broadcast_to(evaluate(expr, Env(*grids_np(), tensors={"doc": docs, "pos": pos})),
                               (B, H, T, T))
    assert got.dtype == torch.bool, body
    assert np.array_equal(got.numpy(), expected), body


@pytest.mark.parametrize("text", [
    "score + bias(bucket(kv - q), h)",
    "cap * tanh(score // cap)",
    "where(q >= kv, score, score - 1000.0)",
    "score * 0.5 + abs(q - kv) % 3 - min(score, 1.5)",
    "max(score, 0) + doc(b, q) - doc(b, kv)",
])
def test_printed_score_agrees_with_numpy(text):
    docs, _ = packing(2)
    rng = np.random.default_rng(0)
    table = rng.normal(size=(32, H))
    score = rng.normal(size=(B, H, T, T)) * 10
    expr = parse_or_skip(text, SCORE)
    mod, body = compile_mod(expr, doc=torch.from_numpy(docs), bias=torch.from_numpy(table))
    got = mod(torch.from_numpy(score), *grids_torch())
    expected = evaluate(expr, Env(*grids_np(), score=score, tensors={"doc": docs},
                                  tables={"bias": table}))
    np.testing.assert_allclose(torch.broadcast_to(got, (B, H, T, T)).numpy(),
                               np.broadcast_to(expected, (B, H, T, T)), rtol=1e-12, atol=1e-12,
                               err_msg=body)


def test_constant_score_prints_a_tensor():
    expr = parse("where(cap > 1.0, 2, 3)", SCORE)
    mod, body = compile_mod(expr)
    score = torch.zeros(2, 3, dtype=torch.float64)
    assert body == "torch.full_like(score, 2)"
    assert torch.equal(mod(score, 0, 0, 0, 0), torch.full_like(score, 2))


def test_printer_never_copies_design_text():
    # Ports and params are printed only through ``names`` or as numbers.
    scope = Scope("mask", params={"evil_param": 3}, tensors={"evil_port"})
    expr = parse("evil_port(b, q) + evil_param > kv", scope)
    body = to_torch(expr, {"b": "b", "h": "h", "q": "q_idx", "kv": "kv_idx",
                           "evil_port": "t0"})
    assert "evil" not in body and body == "t0[b, q_idx] + 3 > kv_idx"


# -- inside FlexAttention ---------------------------------------------------


def test_document_mask_inside_create_block_mask():
    docs, _ = packing(3)
    expr = parse("(q >= kv) & (doc(b, q) == doc(b, kv))", MASK)
    mod, body = compile_mod(expr, doc=torch.from_numpy(docs))

    def mask_mod(b, h, q_idx, kv_idx):
        return mod(None, b, h, q_idx, kv_idx)

    dense = flex.create_mask(mask_mod, B, None, T, T, device="cpu")
    expected = evaluate(expr, Env(*grids_np(), tensors={"doc": docs}))
    assert np.array_equal(dense[:, 0].numpy(), np.broadcast_to(expected, (B, 1, T, T))[:, 0])

    block = 8
    block_mask = flex.create_block_mask(mask_mod, B, None, T, T, device="cpu",
                                        BLOCK_SIZE=block)
    # The interval interpreter decides the same blocks FlexAttention keeps.
    n = T // block
    b, qi, ki = (g.ravel() for g in np.meshgrid(np.arange(B), np.arange(n), np.arange(n),
                                                indexing="ij"))
    q_lo, k_lo = qi * block, ki * block
    q_hi, k_hi = q_lo + block - 1, k_lo + block - 1
    box = Box((b, b), (0 * b, 0 * b), (q_lo, q_hi), (k_lo, k_hi),
              {("doc", "q"): read_range(docs, b, q_lo, q_hi, monotone=True),
               ("doc", "kv"): read_range(docs, b, k_lo, k_hi, monotone=True)})
    verdict = interval(expr, box)
    kept_blocks = (block_mask.kv_num_blocks + (block_mask.full_kv_num_blocks
                                               if block_mask.full_kv_num_blocks is not None
                                               else 0))
    assert np.array_equal(kept_blocks[:, 0].numpy().ravel(),
                          verdict.can_true.reshape(B, n, n).sum(axis=2).ravel())
    if block_mask.full_kv_num_blocks is not None:
        assert np.array_equal(block_mask.full_kv_num_blocks[:, 0].numpy().ravel(),
                              verdict.always.reshape(B, n, n).sum(axis=2).ravel())


def test_score_mod_inside_flex_attention():
    torch.manual_seed(0)
    table = torch.randn(32, H, dtype=torch.float64)
    expr = parse("score + bias(bucket(kv - q), h)", SCORE)
    mod, _ = compile_mod(expr, bias=table, doc=torch.zeros(B, T, dtype=torch.long))
    qkv = [torch.randn(B, H, T, 16, dtype=torch.float64) for _ in range(3)]
    got = flex.flex_attention(*qkv, score_mod=lambda s, b, h, q, kv: mod(s, b, h, q, kv))
    scores = qkv[0] @ qkv[1].transpose(-1, -2) / math.sqrt(16)
    bias = evaluate(expr, Env(*grids_np(), score=0.0, tables={"bias": table.numpy()}))
    expected = torch.softmax(scores + torch.from_numpy(np.broadcast_to(bias, scores.shape).copy()),
                             dim=-1) @ qkv[2]
    torch.testing.assert_close(got, expected)


# -- random masks: printed torch against numpy ------------------------------


@settings(max_examples=scaled(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.deferred(lambda: _mask_text()), seed=st.integers(0, 1000))
def test_random_printed_masks_agree_with_numpy(text, seed):
    from test_expr_properties import MASK as GENERATED_SCOPE

    docs, pos = packing(seed)
    expr = parse_or_skip(text, GENERATED_SCOPE)
    mod, body = compile_mod(expr, doc=torch.from_numpy(docs), pos=torch.from_numpy(pos))
    try:
        got = mod(None, *grids_torch())
    except RuntimeError as error:  # torch refuses integer division by zero; numpy yields 0
        assume("ZeroDivisionError" not in str(error))
        raise
    expected = evaluate(expr, Env(*grids_np(), tensors={"doc": docs, "pos": pos}))
    assert np.array_equal(torch.broadcast_to(got, (B, H, T, T)).numpy(),
                          np.broadcast_to(expected, (B, H, T, T))), body


def _mask_text():
    from test_expr_properties import bools  # the same generator as the property suite
    return bools(3)
