"""The training step certified: what a packed batch trains equals training on its documents alone.

- ``batch``: a batch dict read (documents, labels, their shift); ``labels``: no label
  predicted across a boundary;
- ``reductions``: the declared reductions (token, document, sequence) and their weights;
  ``loss_weights``: what a loss trains, read off its gradient; ``loss``: the loss is the
  documents' own under the declared reduction;
- ``gradients``, ``accumulation`` (micro-batches add up to the whole batch's gradient)
  and ``eval_parity``;
- ``loop``: how a loop makes its loss from a batch, and a document alone;
  ``next_token``: the generated models' training loss;
- ``certificates``: ``certify_step`` and the registry's ``step[...]`` checks.

May use ``forward`` (the model's calls, its gradients' modules); never ``parallel`` or ``design``.
"""
