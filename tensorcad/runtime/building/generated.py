"""Instantiate a design's generated module and its `Model`.

The source is compiled under a filename naming the design (`<tensorcad:NAME>`, so
tracebacks say where they are) and executed in a fresh module registered in
`sys.modules` under a unique name: dataclasses, pickling and torch.export look a
class's module up there.
"""

from __future__ import annotations

import itertools
import sys
import types
from typing import Any

import torch

from tensorcad.codegen import generate
from tensorcad.codegen.names import identifier
from tensorcad.design import Design, load
from tensorcad.errors import TensorcadError, check_integer

FORMS = ("flex", "eager")
_COUNTER = itertools.count()


def load_module(source: str, name: str = "model") -> types.ModuleType:
    """Execute generated `source` as a new module and return it."""
    module_name = f"tensorcad_generated_{identifier(name)}_{next(_COUNTER)}"
    module = types.ModuleType(module_name)
    module.__file__ = f"<tensorcad:{identifier(name)}>"
    code = compile(source, module.__file__, "exec")
    sys.modules[module_name] = module
    try:
        exec(code, module.__dict__)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def build(design: Design | str | Any, form: str = "flex", seed: int = 0, device: str = "cpu"):
    """The design's generated `Model`, initialised under `torch.manual_seed(seed)`, in eval mode."""
    if form not in FORMS:
        raise TensorcadError("form", f"{form!r} is not a form ({', '.join(FORMS)})")
    check_integer(seed, "seed", 0, 2**63 - 1)  # torch.manual_seed's range
    if not isinstance(design, Design):
        design = load(design)
    module = load_module(generate(design), design.name)
    torch.manual_seed(seed)
    with torch.device(device):
        model = module.Model(module.CONFIG, form=form)
    return model.eval()
