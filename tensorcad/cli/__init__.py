"""`tensorcad …`: the command line.

- ``dispatch``: the parser and ``main``, the entry point (``tensorcad =
  tensorcad.cli:main``, ``python -m tensorcad.cli``);
- ``commands``: the engine's commands (presets, catalog, show, validate, new,
  analyze, rules, codegen, import-hf, lengths, editor, mcp);
- ``views``: walkthrough and mask-preview; ``operating_point``: the options
  of an operating point; ``options``: what every command shares (the
  console, number options, the certify options, exit codes);
- ``torch_commands``: verify, certify, smoke-train and trace, loaded only when
  one runs (torch); they share ``options`` and nothing else of the command line.

What a command answers as JSON is ``tensorcad.views.answers``, which the MCP
tools print too.
"""

from __future__ import annotations

from .dispatch import main, parser

__all__ = ["main", "parser"]
