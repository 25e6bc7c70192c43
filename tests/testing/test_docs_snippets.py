"""docs/harness.md's gradients snippet prints the figure its comment says, run after run (issue 33, item 11)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

DOCS = Path(__file__).parents[2] / "docs" / "harness.md"


def _snippet() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S)
    [block] = [b for b in blocks if "assert_gradients_isolated(model_fn, *batch, embedding=embed)" in b]
    return block


def test_the_gradients_snippet_is_seeded_and_prints_its_comments_figure():
    block = _snippet()
    promised = re.search(r"# the loss on document (\d+) of row (\d+) has gradient up to ([\d.]+)", block)
    printed = []
    for _ in range(2):  # before: unseeded, each run printed another figure
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, str(DOCS), "exec"), {})
        printed.append(out.getvalue())
    assert printed[0] == printed[1]
    assert printed[0].startswith(f"the loss on document {promised[1]} of row {promised[2]} has gradient up to "
                                 f"{promised[3]} on the embeddings of document 0")
