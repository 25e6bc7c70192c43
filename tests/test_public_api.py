"""DESIGN.md's "Public API" snippets, run as written: tests outside this repo use these names."""

import pytest

import tensorcad
from tensorcad import closed_form


def test_the_engine_snippet():
    design = tensorcad.load("llama-3-8b-documents")
    op = tensorcad.OperatingPoint(seq=8192, packing=tensorcad.Packing(mean=1024, spread=0))
    report = tensorcad.analyze(design, op)
    assert report.to_json()["flops"]["packed"]["keysPerQuery"] == pytest.approx(
        closed_form.fixed_phase_average(8192, 1024), rel=1e-6)
    diagnostics = tensorcad.check(design, op)
    assert [(d.rule, d.severity) for d in diagnostics] == [("document-blocks", "note")]
    assert {"rule", "severity", "message", "path"} <= set(vars(diagnostics[0]))
    source = tensorcad.generate(design)
    assert "class Model(nn.Module)" in source and "import torch" in source
    docs, pos = tensorcad.packing.draw(rows=4, seq=512, mean=96, spread=1.0, seed=0)
    assert docs.shape == pos.shape == (4, 512)
    assert (tensorcad.packing.positions_of(docs) == pos).all()


def test_the_runtime_snippet():
    torch = pytest.importorskip("torch")
    design = tensorcad.load("llama-3-8b-documents")
    small = tensorcad.runtime.scale(design, params=2_000_000)
    model = tensorcad.runtime.build(small, form="flex")
    assert model.form == "flex"
    model.form = "eager"
    docs, _ = tensorcad.packing.draw(rows=2, seq=64, mean=16, spread=1.0, seed=0)
    ids = torch.zeros(2, 64, dtype=torch.long)
    with torch.no_grad():
        logits = model(ids, torch.from_numpy(docs))
    assert logits.shape == (2, 64, small.node(small.output).dim)


def test_the_harness_snippet():
    pytest.importorskip("torch")
    from harness import assert_closed_form, assert_isolated

    design = tensorcad.load("llama-3-8b-documents")
    op = tensorcad.OperatingPoint(seq=8192, packing=tensorcad.Packing(mean=1024, spread=0))
    engine, exact = assert_closed_form(design, op, rel=0.02)
    assert engine == pytest.approx(exact, rel=1e-6)
    assert callable(assert_isolated)


@pytest.mark.slow
def test_block_counts_at_the_operating_points_own_length():
    # The scaled model holds 1,024 positions; the mask is still counted over 8,192-token rows.
    from harness import assert_block_counts_agree

    design = tensorcad.load("llama-3-8b-documents")
    op = tensorcad.OperatingPoint(seq=8192, packing=tensorcad.Packing(mean=1024, spread=0))
    [result] = assert_block_counts_agree(design, op, rows=64)
    assert result.rows == 64 and result.seq == 8192 and result.mismatched_rows == ()
