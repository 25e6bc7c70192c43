"""A design's own checks: what the engine says of it, held to PyTorch and closed forms.

- ``closed_form``: keys per query against the exact closed forms;
- ``masks``: block counts and kept scores against FlexAttention's ``create_block_mask``;
- ``goldens``: the analysis, rules and generated code each design is held to;
- ``checks``: ``verify``'s own (the forward pass runs, its FLOPs against PyTorch's counter,
  fused equals eager);
- ``positions_probe``: the positions probe of docs/packing.md.

Imports neither ``forward`` nor ``step``: these checks read the design, not a model's verdicts.
"""
