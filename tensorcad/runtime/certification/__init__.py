"""Certification: the one registry of checks a design or a model is held to, and what runs it.

At this face: ``registry`` (``REGISTRY``, each check and what it holds the
design to; ``CERTIFY``, what ``tensorcad certify`` and ``pytest --tensorcad``
run; ``OPT_IN``; ``VERIFY``; ``run_check``, ``certify``), ``outcome`` (``Check``,
the one result type, and ``Skipped``), ``certificates`` (the forward certificates
as registry checks), ``methods`` (which way a certificate runs: one pass a
document, or grouped), ``causes`` (the one cause of a failure, with its hint)
and ``verification`` (``tensorcad verify``). Behind it, a room for each thing
certified:

- ``forward/``: the forward pass, on any ``model_fn(ids, documents, positions)``:
  isolation, boundary moves, faithful, gradients, each beside its grouped twin;
- ``step/``: the training step, on any model and a batch dict: labels, the loss
  under its declared reduction, gradients, accumulation, eval parity;
- ``parallel/``: the context-parallel shard plan and each rank's attention;
- ``design/``: a design's own checks: closed forms, block counts and kept
  scores, goldens, verify's own;
- ``data/``: the data path, on a corpus and the user's loader: coverage of an
  epoch across workers, shuffling and a resume; the boundaries the model receives;
- ``rl/``: reinforcement-learning post-training: the loss's aggregation mode over
  packing, micro-batches and ranks, the log-prob path, per-sample tensors through
  pack -> reorder -> unpack, logged metrics;
- ``subjects/``: a user's own model, and a Hugging Face model directory, as the
  subject the checks read.

Each room's layering is a contract in pyproject.toml (``certification-rooms``):
``step`` may use ``forward``, ``forward`` never uses ``step``, ``parallel``,
``design`` and ``data`` use neither. Imports ``building`` (the subject) and nothing of
``training``.
"""

from __future__ import annotations

from tensorcad.faces import lazy

_LAZY = {
    # the registry, and what it returns
    "REGISTRY": ".registry:REGISTRY",
    "CERTIFY": ".registry:CERTIFY",
    "OPT_IN": ".registry:OPT_IN",
    "VERIFY": ".registry:VERIFY",
    "GOLDENS": ".registry:GOLDENS",
    "MODEL_CHECKS": ".registry:MODEL_CHECKS",
    "FUSED_TOLERANCE": ".registry:FUSED_TOLERANCE",
    "Progress": ".registry:Progress",
    "certify": ".registry:certify",
    "check_names": ".registry:check_names",
    "run_check": ".registry:run_check",
    "run_checks": ".registry:run_checks",
    "Check": ".outcome:Check",
    "CheckResult": ".outcome:CheckResult",
    "Skipped": ".outcome:Skipped",
    "Spec": ".outcome:Spec",
    "PASSED": ".outcome:PASSED",
    "FAILED": ".outcome:FAILED",
    "SKIPPED": ".outcome:SKIPPED",
    "passed": ".outcome:passed",
    "failed": ".outcome:failed",
    "skipped": ".outcome:skipped",
    # each check, as the registry runs it
    "tokens_check": ".certificates:tokens_check",
    "boundaries_check": ".certificates:boundaries_check",
    "faithful_check": ".certificates:faithful_check",
    "gradients_check": ".certificates:gradients_check",
    "block_agreements": ".design.masks:block_agreements",
    "block_counts_check": ".design.masks:block_counts_check",
    "compared_masks": ".design.masks:compared_masks",
    "kept_scores_check": ".design.masks:kept_scores_check",
    "forward_check": ".design.checks:forward_check",
    "flops_check": ".design.checks:flops_check",
    "fused_check": ".design.checks:fused_check",
    # the certificates, on any model_fn
    "check_isolation": ".forward.isolation:check_isolation",
    "IsolationResult": ".forward.isolation:IsolationResult",
    "Leak": ".forward.isolation:Leak",
    "segments": ".forward.isolation:segments",
    "check_boundaries": ".forward.boundaries:check_boundaries",
    "BoundaryResult": ".forward.boundaries:BoundaryResult",
    "check_faithful": ".forward.faithful:check_faithful",
    "FaithfulResult": ".forward.faithful:FaithfulResult",
    "default_tolerance": ".forward.faithful:default_tolerance",
    "check_gradient_isolation": ".forward.gradients:check_gradient_isolation",
    "GradientResult": ".forward.gradients:GradientResult",
    "check_isolation_grouped": ".forward.group_testing:check_isolation_grouped",
    "check_boundaries_grouped": ".forward.grouped_boundaries:check_boundaries_grouped",
    "check_faithful_batched": ".forward.batched_faithful:check_faithful_batched",
    "check_gradients_weighted": ".forward.weighted_gradients:check_gradients_weighted",
    # vision-language rows: each sample (text and images) as if alone
    "check_vision_faithful": ".forward.vision:check_vision_faithful",
    "check_vision_isolation": ".forward.vision:check_vision_isolation",
    "VisionFaithfulResult": ".forward.vision:VisionFaithfulResult",
    "VisionIsolationResult": ".forward.vision:VisionIsolationResult",
    "certificate": ".methods:certificate",
    "CERTIFICATES": ".methods:CERTIFICATES",
    "METHODS": "tensorcad.runtime.building.settings:METHODS",
    "ModelSubject": ".subjects.model:ModelSubject",
    "ModelRaised": ".forward.calls:ModelRaised",
    "outputs_of": ".forward.calls:outputs_of",
    "failure_hints": ".causes:failure_hints",
    # the context-parallel plan: read in any form, held to the batch, each rank's attention
    "check_cp_plan": ".parallel.certificate:check_cp_plan",
    "CpPlanResult": ".parallel.certificate:CpPlanResult",
    "cp_plan_check": ".parallel.certificate:cp_plan_check",
    "plan_of": ".parallel.plan:plan_of",
    "batch_of": ".parallel.plan:batch_of",
    "check_cp_faithful": ".parallel.faithful:check_cp_faithful",
    # the data path: a corpus and the user's loader (data/)
    "DATA_CHECKS": ".data.checks:DATA_CHECKS",
    "DataSubject": ".data.checks:DataSubject",
    "RL_CHECKS": ".rl.checks:RL_CHECKS",
    "RLSubject": ".rl.checks:RLSubject",
    "check_coverage": ".data.coverage:check_coverage",
    "CoverageResult": ".data.coverage:CoverageResult",
    "check_data_boundaries": ".data.boundaries:check_data_boundaries",
    "DataBoundariesResult": ".data.boundaries:DataBoundariesResult",
    "provenance_lengths": ".data.boundaries:provenance_lengths",
    "provenance": ".data.pieces:provenance",
    "Examples": ".data.pieces:Examples",
    "Tokens": ".data.pieces:Tokens",
    "import_factory": ".subjects.model:import_factory",
    "collated_batch": ".subjects.model:collated_batch",
    "vocab_of_model": ".subjects.model:vocab_of_model",
    "Pretrained": ".subjects.pretrained:Pretrained",
    "pretrained_subject": ".subjects.pretrained:pretrained_subject",
    "factory_subject": ".subjects.pretrained:factory_subject",
    # the training step, on any model and a batch dict
    "STEP_CHECKS": ".certificates:STEP_CHECKS",
    "certify_step": ".step.certificates:certify_step",
    "StepReport": ".step.certificates:StepReport",
    "STEP_HEADLINES": ".step.certificates:HEADLINES",
    "step_check": ".step.certificates:step_check",
    "collator_labels": ".step.certificates:collator_labels",
    "read_batch": ".step.batch:read_batch",
    "split_batch": ".step.batch:split_batch",
    "StepBatch": ".step.batch:StepBatch",
    "IGNORE_INDEX": ".step.batch:IGNORE_INDEX",
    "SHIFTS": ".step.batch:SHIFTS",
    "step_of": ".step.loop:step_of",
    "TrainingStep": ".step.loop:TrainingStep",
    "token_cross_entropy": ".step.loop:token_cross_entropy",
    "REDUCTIONS": ".step.reductions:REDUCTIONS",
    "reduce": ".step.reductions:reduce",
    "weights": ".step.reductions:weights",
    "check_labels": ".step.labels:check_labels",
    "LabelsResult": ".step.labels:LabelsResult",
    "check_loss": ".step.loss:check_loss",
    "LossResult": ".step.loss:LossResult",
    "check_step_gradients": ".step.gradients:check_step_gradients",
    "StepGradientResult": ".step.gradients:StepGradientResult",
    "check_accumulation": ".step.accumulation:check_accumulation",
    "AccumulationResult": ".step.accumulation:AccumulationResult",
    "ACCUMULATIONS": ".step.accumulation:ACCUMULATIONS",
    "check_eval_parity": ".step.eval_parity:check_eval_parity",
    "next_token_labels": ".step.next_token:next_token_labels",
    "next_token_loss": ".step.next_token:next_token_loss",
    "NEXT_TOKEN_REDUCTION": ".step.next_token:REDUCTION",
    # reinforcement-learning post-training (issue 43)
    "check_aggregation": ".rl.aggregation:check_aggregation",
    "AggregationResult": ".rl.aggregation:AggregationResult",
    "Accumulation": ".rl.aggregation:Accumulation",
    "RL_MODES": ".rl.modes:MODES",
    "RL_SETTINGS": ".rl.modes:SETTINGS",
    "rl_setting": ".rl.modes:setting",
    "check_logprobs": ".rl.logprobs:check_logprobs",
    "LogprobResult": ".rl.logprobs:LogprobResult",
    "check_alignment": ".rl.alignment:check_alignment",
    "AlignmentResult": ".rl.alignment:AlignmentResult",
    "check_metrics": ".rl.metrics:check_metrics",
    "MetricsResult": ".rl.metrics:MetricsResult",
    "METRIC_REDUCTIONS": ".rl.metrics:REDUCTIONS",
    # closed forms, goldens, verify, the positions probe
    "assert_closed_form": ".design.closed_form:assert_closed_form",
    "closed_form_keys": ".design.closed_form:closed_form_keys",
    "EXACT_REL": ".design.closed_form:EXACT_REL",
    "GAMMA_REL": ".design.closed_form:GAMMA_REL",
    "NotApplicable": ".design.closed_form:NotApplicable",
    "NoClosedForm": ".design.closed_form:NoClosedForm",
    "expected_keys_per_query": ".design.closed_form:expected_keys_per_query",
    "engine_keys_per_query": ".design.closed_form:engine_keys_per_query",
    "GOLDEN_KINDS": ".design.goldens:KINDS",
    "GOLDEN_VERSION": ".design.goldens:VERSION",
    "NoGolden": ".design.goldens:NoGolden",
    "file_golden": ".design.goldens:file_golden",
    "file_name": ".design.goldens:file_name",
    "golden_data": ".design.goldens:golden_data",
    "golden_dir": ".design.goldens:golden_dir",
    "golden_name": ".design.goldens:golden_name",
    "golden_path": ".design.goldens:golden_path",
    "golden_text": ".design.goldens:golden_text",
    "verify": ".verification:verify",
    "VerifyReport": ".verification:VerifyReport",
    "probe": ".design.positions_probe:probe",
    # what tensorcad.runtime.certification held in 0.12 beside the registry
    "Subject": "tensorcad.runtime.building:Subject",
}

__all__ = list(_LAZY)
__getattr__, __dir__ = lazy(__name__, _LAZY)
