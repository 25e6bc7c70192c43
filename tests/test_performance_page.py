"""`python benchmarks/performance.py --device cuda` on a machine without CUDA: it says so, exits 0, and leaves the
page as it was (the page's CUDA section keeps saying "not run")."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA machine runs the section instead")
def test_the_cuda_section_skips_cleanly_without_cuda(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import performance

    page = tmp_path / "performance.md"
    page.write_text((ROOT / "docs" / "performance.md").read_text())
    assert performance.main(["--device", "cuda", "-o", str(page)]) == 0
    assert capsys.readouterr().out.strip() == ("skipped: torch sees no CUDA device on this machine; the page keeps "
                                               "its CUDA section")
    assert page.read_text() == (ROOT / "docs" / "performance.md").read_text()
    assert "## CUDA\n\nNot run: torch sees no CUDA device on this machine." in page.read_text()
