"""The parser: what it builds, what it refuses, and how it words a refusal."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from tensorcad.design.expr import (
    Binary,
    Call,
    Compare,
    Const,
    Env,
    Param,
    Read,
    Scope,
    Unary,
    Var,
    all_of,
    evaluate,
    kind_of,
    parse,
    reads,
    to_text,
    variables,
)
from tensorcad.errors import TensorcadError

MASK = Scope("mask", params={"window": 256, "heads": 8}, tensors={"doc", "pos"},
             tables={"bias": 2})
SCORE = Scope("score", params={"window": 256, "softcap": 30.0}, tensors={"doc"},
              tables={"bias": 2, "alibi": 1})
PATH = "nodes[2].params.mask"
# The package re-exports the function ``parse``, which shadows the module's name.
parse_module = importlib.import_module("tensorcad.design.expr.parse")


def refusal(text: str, scope: Scope = MASK) -> str:
    with pytest.raises(TensorcadError) as info:
        parse(text, scope, PATH)
    error = info.value
    assert error.path == PATH
    assert str(error).startswith(PATH + ": ")
    return error.message


# -- what it builds ----------------------------------------------------------


def test_document_causal_mask_builds_the_expected_tree():
    expr = parse("q >= kv and doc(b, q) == doc(b, kv)", MASK)
    assert expr == Binary("&", Compare(">=", Var("q"), Var("kv")),
                          Compare("==", Read("doc", (Var("b"), Var("q"))),
                                  Read("doc", (Var("b"), Var("kv")))))
    assert variables(expr) == {"b", "q", "kv"}
    assert reads(expr) == {"doc"}


def test_chained_comparison_splits_into_a_conjunction():
    expr = parse("0 <= q - kv < window", MASK)
    diff = Binary("-", Var("q"), Var("kv"))
    assert expr == Binary("&", Compare("<=", Const(0), diff),
                          Compare("<", diff, Param("window", 256)))


def test_and_or_not_are_the_elementwise_operators():
    expr = parse("not (q < kv) or h == 0", MASK)
    assert expr == Binary("|", Unary("~", Compare("<", Var("q"), Var("kv"))),
                          Compare("==", Var("h"), Const(0)))


def test_negative_literal_folds_so_it_round_trips():
    expr = parse("-3 * q > -kv", MASK)
    assert expr.left == Binary("*", Const(-3), Var("q"))
    assert expr.right == Unary("-", Var("kv"))
    assert parse(to_text(expr), MASK) == expr


def test_bucket_fills_in_t5_defaults_and_prints_them_back_out():
    expr = parse("score + bias(bucket(kv - q), h)", SCORE)
    bucket = expr.right.index[0]
    assert bucket == Call("bucket", (Binary("-", Var("kv"), Var("q")), Const(32), Const(128)))
    assert to_text(expr) == "score + bias(bucket(kv - q), h)"
    explicit = parse("bucket(kv - q, 16, 64) + score", SCORE)
    assert to_text(explicit) == "bucket(kv - q, 16, 64) + score"


def test_min_max_with_several_arguments_nest_left():
    expr = parse("min(q, kv, window) > 0", MASK)
    assert expr.left == Call("min", (Call("min", (Var("q"), Var("kv"))), Param("window", 256)))


def test_booleans_ints_and_floats_are_distinct_constants():
    assert Const(True) != Const(1) and Const(1) != Const(1.0)
    assert len({Const(True), Const(1), Const(1.0)}) == 3
    assert kind_of(parse("softcap * tanh(score // softcap)", SCORE)) == "float"
    assert kind_of(parse("where(q > kv, q, kv) + 1 > 0", MASK)) == "bool"


def test_score_may_read_tensors_and_tables():
    expr = parse("score + alibi(h) * (doc(b, q) - doc(b, kv))", SCORE)
    assert reads(expr) == {"alibi", "doc"}
    assert variables(expr) == {"score", "h", "b", "q", "kv"}


def test_all_of_drops_none_and_conjoins():
    a, b = parse("q >= kv", MASK), parse("q - kv < window", MASK)
    assert all_of(None, None) is None
    assert all_of(a, None) == a
    assert all_of(a, None, b) == Binary("&", a, b)


@pytest.mark.parametrize("text", [
    "(q >= kv) & (doc(b, q) == doc(b, kv))",
    "(q - kv < window) & (kv - q < window)",
    "abs(q - kv) < window",
    "where(h % 2 == 0, q >= kv, True)",
    "~((q < kv) | (h == 1))",
    "(q < kv) == (h > 0)",
    "q // 128 == kv // 128",
    "-(q - kv) * 2 >= -5",
    "pos(b, q) - pos(b, kv) >= 0",
    "max(q, 3) - min(kv, 1) != 0",
])
def test_canonical_text_round_trips(text):
    expr = parse(text, MASK)
    assert parse(to_text(expr), MASK) == expr
    assert to_text(parse(to_text(expr), MASK)) == to_text(expr)


def test_numpy_semantics_follow_python():
    scope = Scope("score")
    q, kv = np.meshgrid(np.arange(-7, 8), np.arange(-4, 5), indexing="ij")
    env = Env(b=0, h=0, q=q, kv=kv, score=np.zeros(q.shape))
    got_div = evaluate(parse("q // where(kv == 0, 1, kv) + score", scope), env)
    got_mod = evaluate(parse("q % where(kv == 0, 1, kv) + score", scope), env)
    for i, j in np.ndindex(q.shape):
        d = kv[i, j] if kv[i, j] != 0 else 1
        assert got_div[i, j] == q[i, j] // d
        assert got_mod[i, j] == q[i, j] % d


def test_evaluate_reads_tensors_at_row_and_position_and_checks_tables():
    doc = np.array([[0, 0, 1, 1], [5, 6, 6, 6]])
    expr = parse("doc(b, q) == doc(b, kv)", MASK)
    b, q, kv = np.arange(2)[:, None, None], np.arange(4)[None, :, None], np.arange(4)[None, None]
    got = evaluate(expr, Env(b=b, h=0, q=q, kv=kv, tensors={"doc": doc}))
    assert got.shape == (2, 4, 4)
    assert np.array_equal(got, doc[:, :, None] == doc[:, None, :])
    table = parse("score + alibi(h)", SCORE)
    with pytest.raises(TensorcadError, match="outside"):
        evaluate(table, Env(b=0, h=np.arange(5), q=0, kv=0, score=0.0,
                            tables={"alibi": np.zeros(4)}))


# -- what it refuses, and how it says so ----------------------------------


@pytest.mark.parametrize("text, scope, fragments", [
    ("q.__class__ == kv", MASK, ["attribute access", "'q.__class__'"]),
    ("__import__('os') == 0", MASK, ["dunder", "__import__('os')"]),
    ("__builtins__ > 0", MASK, ["dunder", "'__builtins__'"]),
    ("open('x') == 1", MASK, ["unknown function 'open'", "open('x')", "bucket", "doc"]),
    ("eval('1') == 1", MASK, ["unknown function 'eval'"]),
    ("docs(b, q) == docs(b, kv)", MASK, ["unknown port 'docs' (ports: doc, pos)"]),
    ("(q // 0) == 0", MASK, ["division by zero", "q // 0"]),
    ("q % (window - 256) == 0", MASK, ["division by zero"]),
    ("(lambda: q)() > 0", MASK, ["lambdas", "lambda: q"]),
    ("[q for q in h] == 1", MASK, ["comprehensions", "[q for q in h]"]),
    ("f'{q}' == kv", MASK, ["f-strings", "f'{q}'"]),
    ("'a' == kv", MASK, ["strings", "'a'"]),
    ("doc[b, q] == 1", MASK, ["subscripts", "doc[b, q]"]),
    ("q > 1099511627777", MASK, ["too large", "1099511627777"]),
    ("score > 1e400", SCORE, ["too large", "1e400"]),
    ("q ** 2 > kv", MASK, ["'**'", "q ** 2"]),
    ("q / 2 > kv", MASK, ["use '//'", "q / 2"]),
    ("q << 2 > kv", MASK, ["'<<'", "q << 2"]),
    ("min(q, kv=1) > 0", MASK, ["keyword", "min(q, kv=1)"]),
    ("min(*q) > 0", MASK, ["starred", "min(*q)"]),
    ("(x := q) > 0", MASK, ["assignment", "x := q"]),
    ("(q if h else kv) > 0", MASK, ["where(cond, a, b)", "q if h else kv"]),
    ("+q > kv", MASK, ["unary +", "+q"]),
    ("x > 0", MASK, ["unknown name 'x'", "b, h, q, kv, heads, window"]),
    ("score > 0", MASK, ["'score' may only be used in a score"]),
    ("doc > 0", MASK, ["port 'doc'", "doc(b, q)"]),
    ("doc(b, h) > 0", MASK, ["row and a position", "doc(b, h)"]),
    ("doc(q, b) > 0", MASK, ["row and a position", "doc(q, b)"]),
    ("doc(b, q + 1) > 0", MASK, ["row and a position", "doc(b, q + 1)"]),
    ("doc(b) > 0", MASK, ["row and a position", "doc(b)"]),
    ("bias(q, h) > 0", MASK, ["a mask may only read tensors the engine can make up "
                              "(documents, positions); 'bias' is a learned table"]),
    ("score + bias(q)", SCORE, ["2 dimension(s)", "bias(q)"]),
    ("score + alibi(h > 0)", SCORE, ["index into 'alibi'", "h > 0"]),
    ("window(q) > 0", MASK, ["'window' is not a function"]),
    ("abs(q)(1) > 0", MASK, ["only named functions", "abs(q)(1)"]),
    ("tanh(q) > 0", MASK, ["tanh is only allowed in a score", "tanh(q)"]),
    ("q > 1.5", MASK, ["float literal", "1.5"]),
    ("bucket(q, window) > 0", MASK, ["integer literals", "window"]),
    ("bucket(q, 32, 8) > 0", MASK, ["max_distance", "bucket(q, 32, 8)"]),
    ("bucket(q > 0) > 0", MASK, ["bucket needs an integer", "q > 0"]),
    ("where(q, kv, h) > 0", MASK, ["where's condition", "'q'"]),
    ("where(q > 0, kv, h > 0)", MASK, ["booleans or both numbers", "where(q > 0, kv, h > 0)"]),
    ("abs(q, kv) > 0", MASK, ["abs takes 1 argument", "abs(q, kv)"]),
    ("q >= kv & doc(b, q) == doc(b, kv)", MASK, ["& needs booleans", "'kv'", "(a >= b) & (c == d)"]),
    ("~q > 0", MASK, ["~ needs booleans", "'q'"]),
    ("(q > 0) + 1 > 0", MASK, ["+ needs numbers", "q > 0"]),
    ("(q > 0) < (kv > 0)", MASK, ["< needs numbers"]),
    ("(q > 0) == kv", MASK, ["compares a boolean with a number"]),
    ("q - kv", MASK, ["a mask must be boolean", "q - kv"]),
    ("q > kv", SCORE, ["a score must be a number", "q > kv"]),
    ("q > kv >", MASK, ["not a valid expression", "q > kv >"]),
    ("", MASK, ["empty"]),
    ("q" * 2001, MASK, ["2,001 characters", "2,000"]),
])
def test_refusals_name_the_path_and_the_offending_text(text, scope, fragments):
    message = refusal(text, scope)
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_a_refusal_quotes_at_most_120_characters_of_a_long_expression():
    # 1,990 characters that fail at their very end: the message quotes their first 117 and "...",
    # not all of them (and a long dunder name or param, 57 and "...").
    text = "q >= kv and " + " and ".join(["q > kv"] * 180) + " and"
    assert len(text) < 2_000
    message = refusal(text)
    assert "not a valid expression" in message and repr(text[:117] + "...") in message
    assert text[117:] not in message and len(message) < 200
    assert repr("__" + "x" * 55 + "...") in refusal("__" + "x" * 500 + " > 0")


@pytest.mark.parametrize("text", [
    "(" * 10_000 + "q" + ")" * 10_000,
    "-" * 10_000 + "q",
    "~" * 10_000 + "(q>kv)",
    "not " * 5_000 + "(q > kv)",
], ids=["brackets", "minus", "invert", "not"])
@pytest.mark.parametrize("max_length", [2_000, 10**6])
def test_deep_nesting_is_refused_before_the_c_parser(text, max_length, monkeypatch):
    # With the length limit lifted, the token scan alone must refuse these.
    monkeypatch.setattr(parse_module, "MAX_LENGTH", max_length)
    calls = []
    monkeypatch.setattr(parse_module.ast, "parse", lambda *a, **k: calls.append(a))
    message = refusal(text)
    assert "nested deeper than 100" in message or "characters long" in message
    assert calls == []


@pytest.mark.parametrize("text", [
    "(" * 101 + "q > kv" + ")" * 101,
    "-" * 101 + "q > kv",
    "-(" * 60 + "q" + ")" * 60 + " > kv",
    " + ".join(["q"] * 120) + " > kv",
], ids=["brackets", "minus", "minus-brackets", "sum"])
def test_nesting_over_100_within_the_length_limit_is_refused(text):
    assert "nested deeper than 100" in refusal(text)


def test_nesting_of_100_is_accepted():
    expr = parse("(" * 90 + "q > kv" + ")" * 90, MASK)
    assert expr == Compare(">", Var("q"), Var("kv"))


def test_parser_errors_become_tensorcad_errors(monkeypatch):
    for exc in (RecursionError("deep"), MemoryError(), ValueError("null bytes")):
        def boom(*args, exc=exc, **kwargs):
            raise exc
        monkeypatch.setattr(parse_module.ast, "parse", boom)
        assert "could not be parsed" in refusal("q > kv")


def test_non_text_is_refused():
    with pytest.raises(TensorcadError, match="must be text"):
        parse(3, MASK, PATH)  # type: ignore[arg-type]
