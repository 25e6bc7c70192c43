"""The hybrid families (Mamba-2, Bamba, LFM2): their configs read, their weights named, their packing.

- ``families``: the readers of their configs, registered with ``hf.families.reader``;
- ``weights``: the names of their stateful layers' weights, both ways;
- ``packing``: how each family keeps packed documents apart, and what that needs
  (``seq_idx``, the kernels that read it), said where a certificate fails.
"""
