"""rl[metrics] word for word: every message, path and JSON field, each figure worked out here from the same
seeded draw (float64, one (B, T) tensor a metric, in the order the reductions are declared)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from rl_cases import packed_batch  # noqa: E402

from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.runtime.certification.rl.metrics import check_metrics  # noqa: E402

ROWS = [[3, 2], [4]]  # pad 3: row 0 is 3 + 2 + 2 padding, row 1 is 4 + 3 padding (width 7)


def batch():
    return packed_batch(ROWS, pad=2)


def drawn(names, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {n: torch.rand((2, 7), generator=g, dtype=torch.float64) for n in names}


def sequences(v):
    return [v[0, 0:3], v[0, 3:5], v[1, 0:4]]


def mask(inputs):
    return inputs["loss_mask"].bool()


def test_every_reduction_passes_and_is_listed():
    def fn(values, inputs):
        m = mask(inputs)
        a, b, c, d, e = (values[k] for k in "abcde")
        return {"a": a[m].mean(), "b": torch.stack([s.mean() for s in sequences(b)]).mean(), "c": c[m].sum(),
                "d": d[m].min(), "e": float(e[m].max().detach())}

    result = check_metrics(fn, batch(), {"a": "token-mean", "b": "seq-mean-token-mean", "c": "sum", "d": "min",
                                         "e": "max"})
    v = drawn("abcde")
    m = batch()["loss_mask"].bool()
    assert [c.reference for c in result.checks] == pytest.approx([
        float(v["a"][m].mean()), float(torch.stack([s.mean() for s in sequences(v["b"])]).mean()),
        float(v["c"][m].sum()), float(v["d"][m].min()), float(v["e"][m].max())], rel=1e-15)
    message = ("every logged metric equals its value on the sequences unpacked: `a` (token-mean), `b` "
               "(seq-mean-token-mean), `c` (sum), `d` (min), `e` (max)")
    assert result.to_json() == {"passed": True, "message": message, "metrics": [
        {"name": c.name, "reduction": c.reduction, "logged": c.logged, "reference": c.reference, "why": "",
         "passed": True} for c in result.checks]}
    assert result.checks[0].message() == f"`a` {result.checks[0].logged:.6g} is the `token-mean` of the sequences " \
                                         "unpacked"


def test_a_value_shifted_by_one_reads_boundary_tokens_and_says_so():
    def fn(values, inputs):
        m = mask(inputs)
        return {"entropy": values["entropy"][:, 1:][m[:, :-1]].mean()}  # TRL #5617: logits[t] for token t + 1

    result = check_metrics(fn, batch(), {"entropy": "token-mean"})
    v = drawn(["entropy"])["entropy"]
    logged = float(v[:, 1:][batch()["loss_mask"].bool()[:, :-1]].mean())
    reference = float(v[batch()["loss_mask"].bool()].mean())
    # row 0's tokens 1..5 and row 1's 1..4 are read: 5 (padding) and row 1's 4 (padding) are outside the mask
    assert result.message() == (
        f"`entropy` logs {logged:.6g} where the `token-mean` of the sequences unpacked is {reference:.6g}: it reads "
        "2 token(s) outside the loss mask: token 5 of row 0 (padding, outside every sequence), token 4 of row 1 "
        "(padding, outside every sequence), each beside a loss token: the values shifted by one against the mask "
        "(TRL #5617)")


def test_tokens_outside_the_mask_inside_a_sequence_and_far_from_one_are_told_where():
    b = batch()
    b["loss_mask"] = b["loss_mask"].clone()
    b["loss_mask"][0, 0] = 0  # sequence 0's first token is a prompt token
    b["loss_mask"][0, 4] = 0  # sequence 1's last

    def fn(values, inputs):
        v = values["kl"]
        return {"kl": v[0, 0] + v[0, 4] + v[0, 6] + v[1, 6] + v[mask(inputs)].sum()}

    why = check_metrics(fn, b, {"kl": "sum"}).checks[0].why
    # four read outside, three told; row 1's token 6 is two from its last loss token: not every one is beside
    assert why == ("it reads 4 token(s) outside the loss mask: token 0 of row 0 (the first of sequence 0, outside "
                   "the loss mask), token 4 of row 0 (the last of sequence 1, outside the loss mask), token 6 of "
                   "row 0 (padding, outside every sequence)")

    def middle(values, inputs):
        return {"kl": values["kl"][mask(inputs)].sum() + values["kl"][0, 1] * 0}

    assert check_metrics(middle, b, {"kl": "sum"}).passed


@pytest.mark.parametrize("declared,logged,why", [
    ("seq-mean-token-mean", "token-mean", "it is the `token-mean`"),
    ("token-mean", "seq-mean-token-mean", "it is the `seq-mean-token-mean`"),
    ("token-mean", "sum", "it is the `sum`"),
    ("sum", "twice", "its tokens weigh as no named reduction weighs them"),
    ("sum", "unrelated", "its tokens weigh as no named reduction weighs them"),
    ("sum", "detached", "logged detached, so what it read cannot be told"),
])
def test_a_linear_metric_of_another_reduction_is_named(declared, logged, why):
    def fn(values, inputs):
        v, m = values["x"], mask(inputs)
        return {"x": {"token-mean": v[m].mean(), "sum": v[m].sum(), "twice": 2 * v[m].sum(),
                      "seq-mean-token-mean": torch.stack([s.mean() for s in sequences(v)]).mean(),
                      "unrelated": torch.tensor(5.0, dtype=torch.float64, requires_grad=True),
                      "detached": float(v[m].mean().detach()) + 1}[logged]}

    check = check_metrics(fn, batch(), {"x": declared}).checks[0]
    assert not check.passed and check.why == why


def test_an_extreme_is_told_by_its_token_or_as_the_extremes_per_sequence():
    v = drawn(["x"])["x"]
    per = sequences(v)

    def fn(how):
        return lambda values, inputs: {"x": how(values["x"].detach())}

    # the draw's smallest is at row 1, token 4: padding, which a min over the whole row counts
    assert divmod(int(v.argmin()), 7) == (1, 4) and float(v.min()) < float(v[batch()["loss_mask"].bool()].min())
    at = check_metrics(fn(lambda x: x.min()), batch(), {"x": "min"}).checks[0]
    assert at.why == "it is the value at token 4 of row 1 (padding, outside every sequence)"
    summed = check_metrics(fn(lambda x: sum(s.min() for s in sequences(x))), batch(), {"x": "min"}).checks[0]
    assert summed.why == "it is the sum of each sequence's min (NeMo-RL's packed metrics)"
    mean = check_metrics(fn(lambda x: torch.stack([s.max() for s in sequences(x)]).mean()), batch(),
                         {"x": "max"}).checks[0]
    assert mean.why == "it is the mean of each sequence's max (NeMo-RL's packed metrics)"
    assert float(torch.stack([s.max() for s in per]).mean()) == pytest.approx(mean.logged, rel=1e-15)
    nothing = check_metrics(fn(lambda x: x.max() + 7), batch(), {"x": "max"}).checks[0]
    assert nothing.why == "" and nothing.message() == (f"`x` logs {nothing.logged:.6g} where the `max` of the "
                                                       f"sequences unpacked is {nothing.reference:.6g}")
    token = check_metrics(fn(lambda x: x[0, 6]), batch(), {"x": "max"}).checks[0]
    assert token.why == "it is the value at token 6 of row 0 (padding, outside every sequence)"
    middle = check_metrics(fn(lambda x: x[1, 1]), batch(), {"x": "min"}).checks[0]  # 0.58, the min is 0.29
    assert middle.why == "it is the value at token 1 of row 1 (token 1 of sequence 2)"
    last = check_metrics(fn(lambda x: x[0, 2]), batch(), {"x": "min"}).checks[0]
    assert last.why == "it is the value at token 2 of row 0 (the last of sequence 0)"


def test_failures_only_are_told_one_after_another_and_the_seed_is_the_draw():
    def fn(values, inputs):
        m = mask(inputs)
        return {"a": values["a"][m].sum(), "b": values["b"][m].mean(), "c": values["c"][m].sum()}

    result = check_metrics(fn, batch(), {"a": "token-mean", "b": "token-mean", "c": "token-mean"})
    assert result.message() == "; ".join(c.message() for c in (result.checks[0], result.checks[2]))
    assert [c.passed for c in result.checks] == [False, True, False]
    other = check_metrics(lambda values, inputs: {"a": values["a"][mask(inputs)].sum()}, batch(), {"a": "sum"},
                          seed=4).checks[0]
    assert other.reference == pytest.approx(float(drawn(["a"], 4)["a"][batch()["loss_mask"].bool()].sum()))


def test_bad_input_word_for_word():
    b = batch()
    cases = [
        (lambda: check_metrics(3, b, {"x": "sum"}), "metric_fn", "expected a callable (values, batch) -> "
         "{name: value}, got int"),
        (lambda: check_metrics(lambda v, i: {}, b, {}), "reductions", "expected {metric name: reduction}, at least "
         "one"),
        (lambda: check_metrics(lambda v, i: {}, b, ["x"]), "reductions", "expected {metric name: reduction}, at "
         "least one"),
        (lambda: check_metrics(lambda v, i: {}, b, {"x": "median"}), "reductions.x", "unknown reduction 'median' "
         "(reductions: token-mean, seq-mean-token-mean, sum, min, max)"),
        (lambda: check_metrics(lambda v, i: 1.0, b, {"x": "sum"}), "metric_fn", "expected a dict of metrics back, "
         "got float"),
        (lambda: check_metrics(lambda v, i: {"y": 1.0}, b, {"x": "sum"}), "metric_fn.x",
         "the metric is not among those logged"),
    ]
    for n, (call, path, message) in enumerate(cases):
        with pytest.raises(TensorcadError) as error:
            call()
        assert (error.value.path, error.value.message) == (path, message), n
