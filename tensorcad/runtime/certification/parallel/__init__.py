"""The context-parallel shard plan certified: every token on one rank, each rank's attention the unsharded's.

- ``plan``: a plan read, in any of the forms frameworks write it;
- ``certificate``: the plan held to the batch it splits (``check_cp_plan``, the check ``cp-plan``);
- ``faithful``: each rank's attention against the unsharded.

Imports neither ``forward`` nor ``step``.
"""
