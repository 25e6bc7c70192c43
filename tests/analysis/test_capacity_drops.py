"""Expected routings a capacity factor drops (issue 44), held to a router simulated token by token.

The brute force here routes each real token of a row, in position order, to top_k distinct experts by
i.i.d. random scores (a balanced router) and lets each expert take routings until its capacity is full, as
a 'position' drop policy does; it counts what is turned away. The rows are the packer's own, drawn by the
test with another seed than the analysis's sampler.
"""

import math

import numpy as np
import pytest

from tensorcad import OperatingPoint, analyze
from tensorcad.analysis.capacity import capacity_drops, capacity_of, dropped_share, expected_dropped
from tensorcad.design import load
from tensorcad.errors import TensorcadError
from tensorcad.packing import Packing, draw_packed
from moe_designs import BASE, design  # tests/, on sys.path (its conftest)


def routed_dropped(tokens: int, experts: int, top_k: int, factor: float, rng) -> int:
    """One group of ``tokens`` routed tokens, routed one token at a time: the routings past capacity."""
    capacity = capacity_of(tokens, experts, top_k, factor)
    load = [0] * experts
    dropped = 0
    for scores in rng.random((tokens, experts)):
        for expert in np.argsort(-scores)[:top_k]:
            if load[expert] < capacity:
                load[expert] += 1
            else:
                dropped += 1
    return dropped


def test_capacity_is_the_ceiling_of_the_factor_times_the_fair_share():
    assert capacity_of(64, 8, 2, 1.0) == 16 and capacity_of(64, 8, 2, 1.25) == 20
    assert capacity_of(10, 4, 1, 1.0) == 3  # 2.5 rounds up: a fractional capacity is never a fraction of a token


@pytest.mark.parametrize("tokens, experts, top_k", [(64, 8, 2), (40, 16, 1), (9, 4, 2)])
@pytest.mark.parametrize("factor", [1.0, 1.25])
def test_the_closed_form_equals_the_router_simulated_token_by_token(tokens, experts, top_k, factor):
    rng = np.random.default_rng(tokens * 7 + experts)
    trials = 1500
    draws = np.array([routed_dropped(tokens, experts, top_k, factor, rng) for _ in range(trials)])
    expected = float(expected_dropped(tokens, experts, top_k, factor))
    error = draws.std(ddof=1) / math.sqrt(trials)
    assert expected > 0
    assert abs(draws.mean() - expected) <= 4 * error + 1e-12, (draws.mean(), expected, error)


def test_the_closed_form_is_exact_on_a_group_counted_out_in_full():
    # 3 tokens, 2 experts, top-1, capacity ceil(1.0 x 3 / 2) = 2: an expert drops 1 only when all 3 go to it,
    # 2 of the 8 equally likely routings, so 2 x 1 / 8 = 0.25 routings dropped on average
    assert float(expected_dropped(3, 2, 1, 1.0)) == pytest.approx(0.25, abs=1e-12)
    # a capacity of every token drops nothing; no token, nothing
    assert float(expected_dropped(5, 4, 1, 4.0)) == 0.0 and float(expected_dropped(0, 4, 1, 1.0)) == 0.0


@pytest.mark.parametrize("strategy", ["bfd", "pad"])
@pytest.mark.parametrize("factor", [1.0, 1.25])
def test_under_a_packing_the_share_equals_the_router_on_the_packers_rows(strategy, factor):
    seq, experts, top_k = 64, 8, 2
    packing = Packing(mean=24.0, spread=1.0, strategy=strategy)
    d = load(design({**BASE, "experts": experts, "top_k": top_k, "capacity": factor, "drop": "position"}))
    [drops] = capacity_drops(d, seq, packing, seed=0, rows=1024)
    # the brute force: other rows of the same packer, every row routed token by token
    padding = draw_packed(packing, 600, seq, seed=11).boundaries.padding
    real = seq - (padding if padding is not None else np.zeros(600, dtype=np.int64))
    rng = np.random.default_rng(5)
    dropped = np.array([routed_dropped(int(n), experts, top_k, factor, rng) for n in real])
    share = dropped.sum() / (real.sum() * top_k)
    residual = dropped - share * real * top_k
    error = math.sqrt(np.var(residual, ddof=1) / len(real)) / (real.mean() * top_k)
    assert drops.packed_error > 0  # rows of differing real tokens: a sampled figure, with its error
    assert abs(drops.packed - share) <= 4 * math.hypot(error, drops.packed_error), (drops.packed, share, error)


def test_full_rows_are_exact_and_packing_short_documents_drops_less_than_padding_each():
    d = load(design({**BASE, "capacity": 1.0, "drop": "position"}))
    [stream] = capacity_drops(d, 64, Packing(mean=8.0, spread=1.0, strategy="stream"))
    assert stream.packed_error == 0.0 and stream.packed == pytest.approx(stream.unpacked, rel=1e-12)
    assert stream.unpacked == pytest.approx(float(expected_dropped(64, 4, 2, 1.0)) / (64 * 2), rel=1e-12)
    [padded] = capacity_drops(d, 64, Packing(mean=8.0, spread=1.0, strategy="pad"))
    assert padded.packed > 1.5 * stream.packed  # 1.87x: an 8-token group's excess over its capacity is relatively larger


def test_a_batch_scope_groups_the_micro_batchs_rows():
    d = load(design({**BASE, "capacity": 1.0, "drop": "probs", "capacity_scope": "batch"}))
    [one] = capacity_drops(d, 64, micro_batch=1)
    [four] = capacity_drops(d, 64, micro_batch=4)
    assert four.micro_batch == 4 and four.unpacked == pytest.approx(
        float(expected_dropped(256, 4, 2, 1.0)) / (256 * 2), rel=1e-12)
    assert four.unpacked < one.unpacked


def test_the_report_carries_the_drops_of_capacity_bound_experts_only():
    op = OperatingPoint(seq=64, packing=Packing(mean=24.0, spread=1.0, strategy="bfd"))
    report = analyze(design({**BASE, "capacity": 1.25, "drop": "position"}), op).to_json()
    [entry] = report["capacity"]
    assert entry["node"] == "mlp" and entry["layers"] == 2 and entry["capacity"] == 1.25
    assert entry["droppedUnpacked"] == pytest.approx(float(expected_dropped(64, 4, 2, 1.25)) / 128, rel=1e-12)
    assert 0 < entry["droppedPacked"] and entry["droppedPackedError"] > 0
    assert "capacity" not in analyze(design(BASE), op).to_json()  # dropless: nothing to say, the goldens unmoved


def test_the_ratio_estimators_error_is_zero_for_equal_groups_and_no_tokens_drops_nothing():
    assert dropped_share(np.array([64, 64, 64]), 4, 2, 1.0)[1] == 0.0
    assert dropped_share(np.array([0, 0]), 4, 2, 1.0) == (0.0, 0.0)


@pytest.mark.parametrize("micro_batch", [0, 1.5, True, 2000])
def test_a_bad_micro_batch_is_named(micro_batch):
    d = load(design({**BASE, "capacity": 1.0, "drop": "position", "capacity_scope": "batch"}))
    with pytest.raises(TensorcadError) as e:
        capacity_drops(d, 64, Packing(mean=24.0, spread=1.0, strategy="bfd"), micro_batch=micro_batch)
    assert e.value.path == "micro_batch"


def _by_pmf(tokens: int, experts: int, top_k: int, factor: float) -> float:
    """Expected routings dropped in one group, summed over the binomial's probabilities written out here."""
    p, capacity = top_k / experts, math.ceil(factor * tokens * top_k / experts)
    return experts * sum((x - capacity) * math.comb(tokens, x) * p ** x * (1 - p) ** (tokens - x)
                         for x in range(capacity + 1, tokens + 1))


@pytest.mark.parametrize("tokens, experts, top_k, factor", [(1, 4, 1, 1.0), (1, 2, 1, 0.5), (2, 4, 2, 1.0),
                                                            (17, 8, 2, 1.25), (40, 16, 1, 1.0)])
def test_the_closed_form_is_the_binomials_sum(tokens, experts, top_k, factor):
    assert float(expected_dropped(tokens, experts, top_k, factor)) == pytest.approx(
        _by_pmf(tokens, experts, top_k, factor), abs=1e-12)


def test_the_ratio_estimators_error_for_unequal_groups():
    groups = np.array([8, 4, 6])
    drops = [_by_pmf(int(n), 4, 2, 1.0) for n in groups]
    share = sum(drops) / (groups.sum() * 2)
    residual = [d - share * n * 2 for d, n in zip(drops, groups)]
    mean = sum(residual) / 3
    error = math.sqrt(sum((r - mean) ** 2 for r in residual) / 2 / 3) / (groups.mean() * 2)
    assert dropped_share(groups, 4, 2, 1.0) == pytest.approx((share, error), rel=1e-12)
    assert dropped_share(np.array([8]), 4, 2, 1.0) == pytest.approx((_by_pmf(8, 4, 2, 1.0) / 16, 0.0))
    two = dropped_share(np.array([8, 4]), 4, 2, 1.0)
    assert two[1] > 0


def test_a_batch_scope_under_a_packing_groups_the_samplers_rows():
    from tensorcad.analysis.rows import packed_rows

    packing = Packing(mean=12.0, spread=1.0, strategy="pad")
    d = load(design({**BASE, "capacity": 1.0, "drop": "probs", "capacity_scope": "batch"}))
    [drops] = capacity_drops(d, 32, packing, seed=3, rows=64, micro_batch=4)
    padding = packed_rows(32, packing, 3, 64).boundaries.padding
    groups = [int(sum(32 - padding[g * 4:g * 4 + 4])) for g in range(16)]  # 16 micro-batches of 4 rows
    want = sum(_by_pmf(n, 4, 2, 1.0) for n in groups) / (sum(groups) * 2)
    assert drops.packed == pytest.approx(want, rel=1e-9) and drops.micro_batch == 4
    # a row scope ignores the micro-batch: each row its own group
    row = load(design({**BASE, "capacity": 1.0, "drop": "probs"}))
    [alone] = capacity_drops(row, 32, packing, seed=3, rows=64, micro_batch=4)
    rows = [int(32 - n) for n in padding]
    assert alone.micro_batch == 1
    assert alone.packed == pytest.approx(sum(_by_pmf(n, 4, 2, 1.0) for n in rows) / (sum(rows) * 2), rel=1e-9)


def test_the_json_of_each_node_and_its_layers_over_every_stack():
    raw = design({**BASE, "capacity": 1.25, "drop": "position"})
    second = {**raw["nodes"][1], "id": "more", "in": {"x": "layers"}}
    second["params"] = {**second["params"], "repeat": 3}
    raw["nodes"] = [raw["nodes"][0], raw["nodes"][1], second, {**raw["nodes"][2], "in": {"x": "more"}},
                    raw["nodes"][3]]
    [drops] = capacity_drops(load(raw), 64)
    assert drops.to_json() == {"node": "mlp", "layers": 5, "capacity": 1.25, "scope": "row", "microBatch": 1,
                               "droppedUnpacked": float(expected_dropped(64, 4, 2, 1.25)) / 128}


def test_the_micro_batch_may_be_every_row_and_no_more():
    d = load(design({**BASE, "capacity": 1.0, "drop": "position", "capacity_scope": "batch"}))
    assert capacity_drops(d, 64, rows=8, micro_batch=8)[0].micro_batch == 8
    with pytest.raises(TensorcadError) as e:
        capacity_drops(d, 64, rows=8, micro_batch=9)
    assert str(e.value) == "micro_batch: expected a whole number of rows in 1..8, got 9"
    assert capacity_drops(d, 64)[0].micro_batch == 1  # the default: one row
