"""Training and tracing: the scaled model trained a few hundred steps, and a forward pass op by op.

- ``smoke``: ``smoke_train``, packed rows of a sorting task any language model
  can be scored on (``tensorcad smoke-train``);
- ``corpus``: ``train_on_corpus``, real documents whose boundaries are
  recorded as they are tokenized (``smoke-train --corpus``);
- ``tracing``: ``trace``, each op of a forward pass with PyTorch's FLOPs
  beside the analysis (``tensorcad trace``);
- ``cp_run``: ``run_context_parallel``, attention under context parallelism
  on N gloo processes (``cp_rank``: what each rank does), its outputs held to
  the unsharded and its measured imbalance beside the engine's prediction
  (``python -m tensorcad.runtime.training.cp_run``).

The top room: it may use ``building`` and ``certification``.
"""

from __future__ import annotations

from tensorcad.faces import lazy

_LAZY = {
    "smoke_train": ".smoke:smoke_train",
    "train_steps": ".smoke:train_steps",
    "sort_batch": ".smoke:sort_batch",
    "sort_labels": ".smoke:sort_labels",
    "LOSS_REDUCTION": ".smoke:LOSS_REDUCTION",
    "SortBatch": ".smoke:SortBatch",
    "TrainResult": ".smoke:TrainResult",
    "PROBLEM": ".smoke:PROBLEM",
    "ROWS": ".smoke:ROWS",
    "MAX_SEQ": ".smoke:MAX_SEQ",
    "LEARNING_RATE": ".smoke:LEARNING_RATE",
    "WARMUP": ".smoke:WARMUP",
    "train_on_corpus": ".corpus:train_on_corpus",
    "CorpusResult": ".corpus:CorpusResult",
    "trace": ".tracing:trace",
    "Trace": ".tracing:Trace",
    "render_trace": ".tracing:render",
    "run_context_parallel": ".cp_run:run",
    "CpRun": ".cp_run:CpRun",
    "ShardRun": ".cp_run:ShardRun",
    "RunSpec": ".cp_rank:RunSpec",
}

__all__ = list(_LAZY)
__getattr__, __dir__ = lazy(__name__, _LAZY)
