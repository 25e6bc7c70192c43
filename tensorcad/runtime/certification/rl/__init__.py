"""Reinforcement-learning post-training certified: each held to the unpacked global batch under its declared mode.

- ``modes``: the loss-aggregation modes (verl's ``loss_agg_mode`` names), what each
  weighs a token, and the mapping from TRL's ``loss_type``, verl's ``loss_agg_mode``
  and OpenRLHF's ``token_level_loss``;
- ``batch``: an RL batch read (sequences, loss mask) and dealt into ranks x micro-batches;
- ``aggregation``: ``rl[aggregation]``, the loss over packing, micro-batches and ranks;
- ``logprobs``: ``rl[logprobs]``, a per-token log-prob (and entropy) function on a packed
  batch against the model's own forward on each sequence alone;
- ``alignment``: ``rl[alignment]``, per-sample tensors carried through pack -> reorder -> unpack;
- ``metrics``: ``rl[metrics]``, logged metrics under their declared reduction.

May use ``step`` (the batch's documents) and ``forward`` (segments, the grouped batches);
nothing uses it but the registry and the face.
"""
