"""The API behind the editor's drawings: the kernel's blocks, the chart, lengths uploads, cp.

The block overlay is held to a brute-force verdict: every score of the
sampled row decided by plain numpy comparisons, each 128 x 128 block then
called skipped (none kept), whole (all kept) or masked (some). The chart is
held to the engine's report at each mean.
"""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import pytest

from tensorcad.analysis.operating_point import OperatingPoint
from tensorcad.analysis.report import analyze as engine_analyze
from tensorcad.design import load
from tensorcad.editor import api
from tensorcad.views.preview import sample_row
from tensorcad.errors import TensorcadError
from tensorcad.packing import Packing

DOCS = "llama-3-8b-documents"


def _brute_force_blocks(kept: np.ndarray, block: int) -> list[str]:
    n = -(-len(kept) // block)
    lines = []
    for i in range(n):
        line = ""
        for j in range(n):
            tile = kept[i * block:(i + 1) * block, j * block:(j + 1) * block]
            line += "s" if not tile.any() else ("f" if tile.all() else "p")
        lines.append(line)
    return lines


@pytest.mark.parametrize("seq, packing", [
    (2048, {"mean": 300, "spread": 1}),
    (2048, {"mean": 128, "spread": 0}),  # one block a document: aligned or not, by the stream's phase
    (1920, {"mean": 500, "spread": 2}),  # a row that is not whole blocks: the last block is short
    (2048, None),
])
def test_the_overlay_is_the_brute_force_verdict_of_every_block(seq, packing):
    op = {"seq": seq, "packing": packing}
    answer = api.preview({"design": DOCS, "op": op})["kernelBlocks"]
    pack = None if packing is None else Packing(packing["mean"], packing["spread"])
    row = sample_row(seq, pack, 0)
    t = np.arange(seq)
    kept = (t[:, None] >= t[None, :]) & (row.documents[:, None] == row.documents[None, :])
    expected = _brute_force_blocks(kept, 128)
    assert answer["states"] == expected
    letters = "".join(expected)
    assert answer["counts"] == {"skipped": letters.count("s"), "whole": letters.count("f"),
                                "masked": letters.count("p")}
    assert answer["drawn"] and answer["blocks"] == len(expected) and answer["total"] == len(expected) ** 2


def test_a_sliding_window_s_blocks_are_the_brute_force_verdicts():
    answer = api.preview({"design": "mistral-7b", "op": {"seq": 8192}})["kernelBlocks"]
    window = load("mistral-7b").attentions()[0][0].window
    t = np.arange(8192)
    kept = (t[:, None] >= t[None, :]) & (t[:, None] - t[None, :] < window)
    assert answer["states"] == _brute_force_blocks(kept, 128)


def test_a_row_too_long_to_draw_is_counted_not_drawn():
    answer = api.preview({"design": DOCS, "op": {"seq": 65536, "packing": {"mean": 4096, "spread": 0}},
                          "cells": 16})["kernelBlocks"]
    assert not answer["drawn"] and answer["states"] is None and answer["blocks"] == 512
    counts = answer["counts"]
    assert sum(counts.values()) == 512 * 512 and counts["masked"] >= 512  # at least the diagonal straddles


def test_the_chart_is_the_report_at_each_mean_and_marks_the_operating_point():
    op = {"seq": 8192, "packing": {"mean": 1000, "spread": 0.5, "strategy": "bfd"}}
    chart = api.chart({"design": DOCS, "op": op})
    assert [p["mean"] for p in chart["points"]] == [64, 128, 256, 512, 1024, 2048, 4096, 8192]
    assert chart["spread"] == 0.5 and chart["strategy"] == "bfd"
    for point in chart["points"][::3]:
        report = engine_analyze(load(DOCS), OperatingPoint(seq=8192, packing=Packing(point["mean"], 0.5,
                                                                                        strategy="bfd")))
        assert point["keysPerQuery"] == report.to_json()["flops"]["packed"]["keysPerQuery"]
        assert point["blockRatio"] == report.to_json()["flops"]["packed"]["blockRatio"]
    current = engine_analyze(load(DOCS), OperatingPoint(seq=8192, packing=Packing(1000, 0.5, strategy="bfd")))
    assert chart["current"] == {"mean": 1000, "keysPerQuery": current.packed.keys_per_query,
                                "blockRatio": current.packed.block_ratio}
    # Fewer keys and more wasted block work as documents shrink: the seed's table, in order.
    keys = [p["keysPerQuery"] for p in chart["points"]]
    ratios = [p["blockRatio"] for p in chart["points"]]
    assert keys == sorted(keys) and ratios == sorted(ratios, reverse=True)


def test_the_chart_of_a_design_whose_masks_read_no_documents_is_empty_with_the_reason():
    chart = api.chart({"design": "llama-3-8b", "op": {"packing": {"mean": 512}}})
    assert chart["points"] == [] and "packing changes nothing" in chart["reason"]


def test_past_the_chart_s_row_length_the_chart_says_why_and_the_readout_stands():
    from tensorcad.editor.curve import MAX_SEQ

    op = {"seq": 2 * MAX_SEQ, "packing": {"mean": 4096}}
    chart = api.chart({"design": DOCS, "op": op})
    assert chart["points"] == [] and f"{MAX_SEQ:,} tokens" in chart["reason"]
    assert "packed" in api.analyze({"design": DOCS, "op": op})["report"]["flops"]


def _upload(name: str, data: bytes) -> dict:
    return api.lengths({"name": name, "base64": base64.b64encode(data).decode()})


def test_an_uploaded_lengths_file_is_read_as_pack_lengths_reads_it(tmp_path):
    from tensorcad.packing.corpus.histogram import load_lengths

    lists = np.array([100, 100, 900, 5000, 7], dtype=np.int64)
    npy = io.BytesIO()
    np.save(npy, lists)
    files = {"h.csv": b"length,count\n100,2\n900,1\n5000,1\n7,1\n", "h.json": b'{"7": 1, "100": 2, "900": 1, "5000": 1}',
             "h.txt": b"100\n100\n900\n5000\n7\n", "h.npy": npy.getvalue()}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        answer = _upload(f"/somewhere/else/{name}", data)
        expected = load_lengths(tmp_path / name)
        assert answer["name"] == name  # the base name only: nothing of the sender's folders is kept
        assert answer["histogram"] == expected.to_json() and answer["summary"] == expected.summary()
    # What the page then sends packs like the file on the command line.
    report = api.analyze({"design": DOCS, "op": {"seq": 8192, "packing": {"lengths": answer["histogram"]}}})
    engine = engine_analyze(load(DOCS), OperatingPoint(seq=8192, packing=Packing(None, lengths=expected)))
    assert report["report"]["flops"] == engine.to_json()["flops"]


def test_an_uploaded_parquet_column_is_read_as_pack_lengths_reads_it(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    from tensorcad.packing.corpus.histogram import load_lengths

    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"length": [5, 5, 300, 9000]}), path)
    answer = _upload("docs.parquet", path.read_bytes())
    assert answer["histogram"] == load_lengths(path).to_json() == {"5": 2, "300": 1, "9000": 1}


@pytest.mark.parametrize("body, path", [
    ({"name": "x.txt", "base64": base64.b64encode(b"100\n-2\n").decode()}, "x.txt:2"),
    ({"name": "x.csv", "base64": base64.b64encode(b"1,2,3\n").decode()}, "x.csv:1"),
    ({"name": "x.json", "base64": base64.b64encode(b"{").decode()}, "x.json:1"),
    ({"name": "x.npy", "base64": base64.b64encode(b"not numpy").decode()}, "x.npy"),
    ({"name": "x.txt", "base64": ""}, "x.txt"),
    ({"name": "x.txt", "base64": "%%%"}, "base64"),
    ({"name": "", "base64": "MTAw"}, "name"),
    ({"name": 5, "base64": "MTAw"}, "name"),
    ({"name": "x.txt", "base64": ["MTAw"]}, "base64"),
    ({"name": "x.txt", "base64": "MTAw", "path": "/etc/passwd"}, "path"),
    ({"name": "x.txt", "base64": base64.b64encode(b"\xff\xfe").decode()}, "x.txt"),
])
def test_a_bad_upload_names_its_path(body, path):
    with pytest.raises(TensorcadError) as caught:
        api.lengths(body)
    assert caught.value.path == path


def test_an_upload_past_the_limit_is_refused_before_it_is_read():
    with pytest.raises(TensorcadError) as caught:
        _upload("big.txt", b"1\n" * (api.MAX_UPLOAD // 2 + 1))
    assert caught.value.path == "base64" and "tensorcad lengths" in caught.value.message


def test_context_parallelism_is_the_report_s_section():
    op = {"seq": 8192, "packing": {"mean": 1024, "spread": 1}, "cp": {"size": 4, "shard": "per-document"}}
    answer = api.analyze({"design": DOCS, "op": op})["report"]
    from tensorcad.analysis.context_parallel.ranks import ContextParallel

    engine = engine_analyze(load(DOCS), OperatingPoint(seq=8192, packing=Packing(1024, 1),
                                                       cp=ContextParallel(4, "per-document"))).to_json()
    assert answer["contextParallel"] == engine["contextParallel"]
    assert api.analyze({"design": DOCS, "op": {"cp": {"size": 2}}})["report"]["operatingPoint"]["cp"] == \
        {"size": 2, "shard": "headtail"}


@pytest.mark.parametrize("cp, path", [
    ({"size": 64}, "op.cp.size"),  # head-tail chunks of 64 tokens: part blocks
    ({"size": 0}, "op.cp.size"),
    ({"size": True}, "op.cp.size"),
    ({"shard": "ptrr"}, "op.cp.size"),
    ({"size": 2, "shard": "zigzag"}, "op.cp.shard"),
    ({"size": 2, "ranks": 2}, "op.cp.ranks"),
    ([2], "op.cp"),
])
def test_a_bad_cp_names_its_path(cp, path):
    with pytest.raises(TensorcadError) as caught:
        api.analyze({"design": DOCS, "op": {"cp": cp}})
    assert caught.value.path == path


@pytest.mark.parametrize("endpoint", [api.chart, api.lengths])
@pytest.mark.parametrize("body", [None, [], "x", 3, {"nope": 1}])
def test_the_new_endpoints_refuse_bodies_that_are_not_their_objects(endpoint, body):
    with pytest.raises(TensorcadError):
        endpoint(body)


def test_the_presets_answer_lists_the_shardings():
    assert api.presets()["shardings"] == ["contiguous", "headtail", "per-document", "ptrr"]
    assert json.dumps(api.presets())  # every answer is plain JSON


def test_the_largest_upload_fits_in_a_request_the_server_reads():
    from tensorcad.editor.server import MAX_BODY

    body = json.dumps({"name": "lengths.txt", "base64": base64.b64encode(b"7" * api.MAX_UPLOAD).decode()})
    assert len(body) <= MAX_BODY and api.presets()["maxUpload"] == api.MAX_UPLOAD


def test_a_npy_header_promising_more_than_it_holds_is_refused_before_numpy_allocates_it(tmp_path):
    from numpy.lib import format as npy

    from tensorcad.packing.corpus.histogram import load_lengths

    header = io.BytesIO()
    npy.write_array_header_1_0(header, {"descr": "<i8", "fortran_order": False, "shape": (10**13,)})
    crafted = header.getvalue() + np.arange(1, 4, dtype="<i8").tobytes()
    with pytest.raises(TensorcadError) as caught:
        _upload("huge.npy", crafted)
    assert caught.value.path == "huge.npy" and "promises 80,000,000,000,000 bytes" in caught.value.message
    (tmp_path / "huge.npy").write_bytes(crafted)
    with pytest.raises(TensorcadError, match="promises"):  # the command line's --pack-lengths too
        load_lengths(tmp_path / "huge.npy")


def test_an_upload_s_name_must_be_printable():
    with pytest.raises(TensorcadError) as caught:
        _upload("a\nb.txt", b"100\n")
    assert caught.value.path == "name"


@pytest.mark.parametrize("shard", ["contiguous", "headtail", "ptrr"])
def test_the_rank_strip_splits_exactly_the_blocks_the_row_computes(shard):
    op = {"seq": 8192, "packing": {"mean": 700, "spread": 1}, "cp": {"size": 4, "shard": shard}}
    answer = api.preview({"design": DOCS, "op": op})
    strip, blocks = answer["cpRanks"], answer["kernelBlocks"]
    assert len(strip["ranks"]) == blocks["blocks"] and set(strip["ranks"]) == {0, 1, 2, 3}
    assert sum(strip["blocks"]) == blocks["counts"]["whole"] + blocks["counts"]["masked"]
    # Each rank's blocks are the computed blocks of the query blocks it holds, read off the overlay.
    computed = [sum(letter != "s" for letter in line) for line in blocks["states"]]
    for rank in range(4):
        assert strip["blocks"][rank] == sum(c for c, r in zip(computed, strip["ranks"]) if r == rank)
    if shard != "ptrr":  # whole chunks of the row: 16 query blocks a rank
        assert [strip["ranks"].count(r) for r in range(4)] == [16] * 4


def test_per_document_sharding_has_no_strip_and_says_why():
    op = {"seq": 8192, "packing": {"mean": 700}, "cp": {"size": 4, "shard": "per-document"}}
    strip = api.preview({"design": DOCS, "op": op})["cpRanks"]
    assert strip["ranks"] is None and "per-document" in strip["reason"]
    assert api.preview({"design": DOCS, "op": {"seq": 8192}})["cpRanks"] is None
