"""What the surfaces show: one answer a command, shared by the CLI, the MCP tools and the editor.

- ``answers``: what each command answers as JSON, which ``tensorcad ... --json``
  and the MCP tool of the same name both print;
- ``preview``: one sampled row's mask for one attention, cell by cell;
  ``mask_image``: that preview drawn, as text and as a PNG;
- ``walkthrough``: what each stage a token meets does, in words, with its figures.

The command line and the MCP server both read these, and neither reads the
other: the CLI serves the MCP server, so the answers cannot live in ``cli``.
No torch.
"""
