"""The editor's operating point takes an inline histogram, a strategy and a count."""

import pytest

from tensorcad.editor import api
from tensorcad.errors import TensorcadError

DOCS = "llama-3-8b-documents"


def test_an_inline_histogram_packs_like_the_same_file():
    import tensorcad
    from tensorcad.packing.corpus.histogram import Lengths
    from tensorcad.packing import Packing

    table = {"100": 30, "900": 10, "5000": 2}
    answer = api.analyze({"design": DOCS, "op": {"seq": 8192, "count": "blocks",
                                                 "packing": {"lengths": table, "strategy": "ffd"}}})
    lengths = Lengths((100, 900, 5000), (30, 10, 2))
    expected = tensorcad.analyze(DOCS, tensorcad.OperatingPoint(
        seq=8192, count="blocks", packing=Packing(None, None, lengths=lengths, strategy="ffd"))).to_json()
    assert answer["report"]["flops"] == expected["flops"] and answer["report"]["training"] == expected["training"]
    preview = api.preview({"design": DOCS, "op": {"seq": 1024, "packing": {"lengths": table, "strategy": "pad"}}})
    assert preview["packing"]["strategy"] == "pad" and preview["documents"] == 2  # the document and its padding


@pytest.mark.parametrize("packing, path", [
    ({"lengths": {"-3": 1}}, "op.packing.lengths.-3"),
    ({"lengths": {"3": 0}}, "op.packing.lengths"),
    ({"lengths": {"3": 1}, "mean": 5}, "op.packing.mean"),
    ({"mean": 100, "strategy": "zigzag"}, "op.packing.strategy"),
])
def test_bad_packings_name_their_path(packing, path):
    with pytest.raises(TensorcadError) as caught:
        api.analyze({"design": DOCS, "op": {"packing": packing}})
    assert caught.value.path.startswith(path)
