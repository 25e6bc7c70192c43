"""mixer-crosses-documents: under packing, a stateful mixer must reset at each document's start.

A short convolution, a state-space scan or linear attention carries state from one
position to the next; packed documents are kept apart only when that state is zeroed
at each document's first token (`design.mixers`). No mask can do it, and a leak is
not a cost matter as it is for attention (which a design may let cross documents on
purpose): the next document starts from the last one's state. So a mixer whose `doc`
does not read the documents is an error whenever packing is on.
"""

from __future__ import annotations

from typing import Iterator

from ..design.mixers import RESET, mixers
from ..design.model import Design
from .registry import Diagnostic, rule


@rule("mixer-crosses-documents", "error", "packing is on and a stateful mixer's doc port does not read the "
      "documents: its state carries from one packed document into the next")
def mixer_crosses_documents(design: Design, op, context) -> Iterator[Diagnostic]:
    if op is None or op.packing is None:
        return
    for m in mixers(design):
        if m.resets:
            continue
        documents = design.input("documents")
        fix = (f"wire doc to the documents input {documents.name!r} (through every block it is handed into)"
               if documents is not None else "give the design an input of role documents and wire it to doc")
        yield Diagnostic(
            "mixer-crosses-documents", "error",
            f"{m.name} ({m.kind}, {m.layers} layer{'s' if m.layers != 1 else ''}) carries {m.state} from one "
            f"packed document into the next: {fix}, so that {RESET}",
            m.path,
        )
