"""`tensorcad walkthrough | mask-preview`: the editor's two views of a design, on the command line.

The same answers the editor and the MCP tools give (``tensorcad.views.answers``):
the walkthrough in words, and one sampled row's mask as kept fractions,
drawn in the terminal or printed as JSON. Kept apart from `cli` so that the
parser module stays one concept; `cli` registers them with `add_view_commands`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Callable

from tensorcad.errors import TensorcadError, as_text
from tensorcad.views.mask_image import drawing

from .operating_point import add_operating_point, operating_point
from .options import add_import_options, console, design_option, integer


def _write_json(data) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def cmd_walkthrough(args: argparse.Namespace) -> int:
    from tensorcad.views import answers

    design = design_option(args, args.design)
    steps = answers.walkthrough(design, operating_point(args, design))
    if args.json:
        _write_json(steps)
        return 0
    out = console()
    for step in steps["steps"]:
        out.print(f"[bold]{as_text(step['title'])}[/]")
        out.print(step["text"], markup=False)
        out.print()
    return 0


def cmd_mask_preview(args: argparse.Namespace) -> int:
    from tensorcad.views import answers

    design = design_option(args, args.design)
    try:
        preview = answers.mask_preview(design, operating_point(args, design), args.attention, args.cells, args.head)
    except TensorcadError as e:  # name the option the user typed
        raise TensorcadError(f"--{e.path}" if e.path in ("attention", "cells", "head") else e.path, e.message) from None
    if args.json:
        _write_json(preview)
    else:
        sys.stdout.write(drawing(preview))
    return 0


def add_view_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    p = command("walkthrough", "Say what each part of the design does, with its figures at the operating point.",
                cmd_walkthrough)
    p.add_argument("design")
    add_operating_point(p)
    add_import_options(p)
    p.add_argument("--json", action="store_true", help="print the steps as JSON")
    p = command("mask-preview", "Draw what one attention's mask keeps over one row (a sampled row under --pack).",
                cmd_mask_preview)
    p.add_argument("design")
    add_operating_point(p)
    p.add_argument("--attention", type=integer, default=0, help="which attention, in design order (default 0)")
    p.add_argument("--cells", type=integer, default=None, help="cells a side of the JSON grid (default 128, at most 256)")
    p.add_argument("--head", type=integer, default=0, help="which head (default 0)")
    add_import_options(p)
    p.add_argument("--json", action="store_true", help="print the kept fraction of every cell as JSON")
