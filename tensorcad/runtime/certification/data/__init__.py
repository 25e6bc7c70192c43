"""The data path: what the loader gives the model, held to the corpus and to the packer's own lengths.

- ``pieces``: which (document, token span) pieces a batch holds, read from the
  ids a loader carries (``Examples``, ``Tokens``, ``provenance``);
- ``coverage``: ``data[coverage]``, every unit of an epoch once (or as the
  declared policy says), across workers, shuffling and a resume;
- ``at_scale``: coverage of a sharded corpus on the Dask engine, per-shard and
  per-rank digests merged on the cluster;
- ``checks``: the registry's ``data[coverage]`` and ``data[boundaries]`` on a
  ``DataSubject``;
- ``boundaries``: ``data[boundaries]``, the boundaries the model receives equal
  the packer's document lengths.

Reads loaders and batches, never a model's verdicts: nothing here imports
another room of certification.
"""
