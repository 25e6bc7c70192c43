"""The forward pass certified: packed documents kept apart and computed as if each ran alone.

Each certificate beside its twin that needs a few passes for every document:

- ``isolation`` (a document's tokens changed move nothing outside it) and
  ``group_testing`` (the same verdict from groups of documents changed at once);
- ``boundaries`` (a boundary moved moves nothing after it) and ``grouped_boundaries``;
- ``faithful`` (each document equals itself run alone) and ``batched_faithful``
  (the documents alone, batched as rows);
- ``gradients`` (no gradient crosses documents) and ``weighted_gradients``
  (one backward pass with a weight per document);
- ``calls``: what a model returns, read as outputs; what it raises, as one line.

Imports nothing of the other rooms.
"""
