"""The operating point's schema (#19): generated from the engine's types, strict, and the JSON the engine reports.

The oracle is ``OperatingPoint.to_json`` itself (hand-written, so independent of
the generator) and jsonschema, a validator that is not ours.
"""

import json
import subprocess
import sys

import pytest

jsonschema = pytest.importorskip("jsonschema")

from tensorcad import load  # noqa: E402
from tensorcad.analysis.context_parallel.ranks import ContextParallel  # noqa: E402
from tensorcad.analysis.operating_point import OperatingPoint  # noqa: E402
from tensorcad.analysis.operating_point.schema import (  # noqa: E402
    operating_point_of, operating_point_schema)
from tensorcad.packing.corpus.histogram import Lengths  # noqa: E402
from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.json_schema import check  # noqa: E402
from tensorcad.packing import Packing  # noqa: E402

LENGTHS = Lengths((3, 17, 64, 200), (40, 25, 10, 4))
POINTS = [
    OperatingPoint(),
    OperatingPoint(seq=4096, packing=Packing(512.0), hardware="B200", gpus=64, mfu=0.5, tokens=1e12),
    OperatingPoint(seq=8192, packing=Packing(1024.0, 0.0), cp=ContextParallel(4), count="blocks"),
    OperatingPoint(seq=2048, packing=Packing(None, None, lengths=LENGTHS, strategy="bfd"),
                   train_dtype="fp8", serve_dtype="fp16", price_per_gpu_hour=0),
    OperatingPoint(seq=8192, cp=ContextParallel(8, "ptrr")),
]


def validator(direction):
    return jsonschema.Draft202012Validator(operating_point_schema(direction))


@pytest.mark.parametrize("op", POINTS, ids=range(len(POINTS)))
def test_every_reported_operating_point_fits_the_report_schema(op):
    validator("report").validate(op.to_json())


def test_the_schema_names_exactly_what_the_engine_reports():
    reported = set().union(*(op.to_json() for op in POINTS))
    assert set(operating_point_schema("report")["properties"]) == reported
    assert set(operating_point_schema("input")["properties"]) == reported
    packings = set().union(*(op.to_json()["packing"] or {} for op in POINTS))
    assert set(operating_point_schema("input")["properties"]["packing"]["anyOf"][0]["properties"]) == packings
    assert set(operating_point_schema("report")["properties"]["cp"]["anyOf"][0]["properties"]) == {"size", "shard"}


@pytest.mark.parametrize("op", [p for p in POINTS if p.packing is None or p.packing.lengths is None])
def test_what_the_engine_reports_reads_back_as_the_same_operating_point(op):
    assert operating_point_of(op.to_json()).to_json() == op.to_json()
    validator("input").validate(op.to_json())


def test_a_histogram_given_inline_is_the_packing_s_lengths():
    histogram = {str(v): c for v, c in zip(LENGTHS.values, LENGTHS.counts)}
    op = operating_point_of({"seq": 2048, "packing": {"lengths": histogram, "strategy": "bfd"}})
    assert op.packing.lengths == LENGTHS and op.to_json()["packing"] == POINTS[3].to_json()["packing"]


@pytest.mark.parametrize("path", ["", ".packing", ".cp"])
def test_no_unknown_field_at_any_level(path):
    raw = {"seq": 4096, "packing": {"mean": 64}, "cp": {"size": 2}}
    where = raw
    for key in filter(None, path.split(".")):
        where = where[key]
    where["bogus"] = 1
    assert not validator("input").is_valid(raw)
    with pytest.raises(TensorcadError, match=rf"^op{path}\.bogus: unknown field"):
        operating_point_of(raw)


@pytest.mark.parametrize("value", [
    {"seq": 64}, {"seq": True}, {"seq": "64"}, {"seq": 64.5}, {"packing": None}, {"packing": {"mean": 1}},
    {"packing": {"mean": "1"}}, {"packing": {"lengths": {"5": 2}}}, {"packing": {"lengths": {"05": 2}}},
    {"packing": {"lengths": {"5": 2.5}}}, {"packing": {"lengths": {"5": -1}}}, {"hardware": "H100"},
    {"hardware": "TPU"}, {"cp": {"size": 2, "shard": "ptrr"}}, {"cp": {"shard": "zigzag"}}, {"count": "all"},
    {"trainDtype": "int4"}, {"tokens": None}, [], "op", {"cp": []},
])
def test_our_check_agrees_with_jsonschema(value):
    schema = operating_point_schema("input")
    try:
        check(value, schema, "op")
        ours = True
    except TensorcadError:
        ours = False
    assert ours == validator("input").is_valid(value)


def test_errors_name_the_field_under_op():
    design = load("nano-sort")
    for raw, needle in [({"seq": 0}, "op.seq: 0 is outside"), ({"cp": {"size": 2}}, "op.cp.size: head-tail"),
                        ({"packing": {"spread": 1}}, "op.packing.spread: needs op.packing.mean"),
                        ({"packing": {"mean": 64, "lengths": {"64": 1}}}, "op.packing.mean: cannot be given"),
                        ({"packing": {}}, "op.packing: a packing needs"), ({"cp": {}}, "op.cp.size: context")]:
        with pytest.raises(TensorcadError) as error:
            operating_point_of(raw, design)
        assert str(error.value).startswith(needle), str(error.value)


def test_the_schema_is_the_engine_s_and_loads_no_torch():
    code = ("import sys, json; from tensorcad.analysis.operating_point.schema import operating_point_schema; "
            "json.dumps(operating_point_schema()); assert 'torch' not in sys.modules and 'mcp' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
    assert json.loads(json.dumps(operating_point_schema("report")))["additionalProperties"] is False


def _json_values():
    from hypothesis import strategies as st

    names = st.sampled_from(["seq", "packing", "cp", "mean", "spread", "lengths", "strategy", "size", "shard",
                             "hardware", "count", "tokens", "bogus", "5", "05"])
    scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 5000), st.floats(allow_nan=False),
                        st.sampled_from(["H100", "bfd", "ptrr", "blocks", "fp8", "x", ""]))
    return st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                         st.dictionaries(names, inner, max_size=4)), max_leaves=12)


def test_our_check_agrees_with_jsonschema_on_any_json():
    from hypothesis import given, settings

    schema = operating_point_schema("input")
    valid = validator("input").is_valid

    @settings(max_examples=300, deadline=None)
    @given(_json_values())
    def agree(value):
        try:
            check(value, schema, "op")
            ours = True
        except TensorcadError:
            ours = False
        # jsonschema counts 2.0 as an integer; JSON's types with no coercion do not (tests/mcp/test_mcp_strict.py)
        assert ours == valid(value) or (not ours and "got number" in _why(value, schema))

    agree()


def _why(value, schema) -> str:
    try:
        check(value, schema, "op")
    except TensorcadError as e:
        return str(e)
    return ""
