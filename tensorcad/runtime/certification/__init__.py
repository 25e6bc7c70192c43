"""Certification: the one registry of checks a design or a model is held to, and what runs it.

- ``registry``: ``REGISTRY`` (each check and what it holds the design to),
  ``CERTIFY`` (what ``tensorcad certify`` and ``pytest --tensorcad`` run),
  ``OPT_IN`` (``export``: run when asked for by name),
  ``VERIFY``, ``run_check``, ``certify``; ``outcome``: ``Check``, the one
  result type, and ``Skipped``;
- the certificates any model is held to (``certificates`` wraps them as
  checks): ``isolation`` (a document's tokens changed move nothing outside
  it), ``boundaries`` (a boundary moved moves nothing after it),
  ``faithful`` (each document as if run alone), ``gradients`` (no gradient
  crosses documents); each also in a few passes for every document
  (``group_testing``, ``grouped_boundaries``, ``batched_faithful``,
  ``weighted_gradients``; ``methods.certificate`` picks by ``Settings.method``);
  ``model_subject``: a user's own model as their subject;
  ``pretrained``: a Hugging Face model directory (or a factory) as that subject,
  called the way it is trained (``tensorcad certify MODEL_DIR``);
  ``model_calls``: what the model returns read as outputs, what it raises as one
  line; ``causes``: the one cause of a failure, with its hint;
- the training step's certificates (``step_certificates``: ``certify_step``
  on a model and a batch dict, and the registry's ``step[...]`` checks):
  ``step_labels`` (no label crosses a boundary), ``step_loss`` (the loss is
  the documents' own under the declared ``reductions``), ``step_gradients``,
  ``accumulation``, ``eval_parity``, over ``step_batch`` (a batch dict read:
  documents, labels, their shift) and ``training_step`` (how the loop makes
  its loss, how a document runs alone); ``next_token``: the generated
  models' training loss;
- the context-parallel plan: ``cp_plan`` (a plan read, in any of its forms),
  ``cp_certificate`` (held to the batch it splits: ``check_cp_plan``) and
  ``cp_faithful`` (each rank's attention against the unsharded);
- the design's checks: ``mask_checks`` (block counts and kept scores against
  PyTorch), ``closed_form_check``, ``goldens``, and ``verify_checks`` with
  ``verification`` (``tensorcad verify``); ``positions_probe``: the
  positions probe of docs/packing.md.

Imports ``building`` (the subject) and nothing of ``training``.
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
    "block_agreements": ".mask_checks:block_agreements",
    "block_counts_check": ".mask_checks:block_counts_check",
    "compared_masks": ".mask_checks:compared_masks",
    "kept_scores_check": ".mask_checks:kept_scores_check",
    "forward_check": ".verify_checks:forward_check",
    "flops_check": ".verify_checks:flops_check",
    "fused_check": ".verify_checks:fused_check",
    # the certificates, on any model_fn
    "check_isolation": ".isolation:check_isolation",
    "IsolationResult": ".isolation:IsolationResult",
    "Leak": ".isolation:Leak",
    "segments": ".isolation:segments",
    "check_boundaries": ".boundaries:check_boundaries",
    "BoundaryResult": ".boundaries:BoundaryResult",
    "check_faithful": ".faithful:check_faithful",
    "FaithfulResult": ".faithful:FaithfulResult",
    "default_tolerance": ".faithful:default_tolerance",
    "check_gradient_isolation": ".gradients:check_gradient_isolation",
    "GradientResult": ".gradients:GradientResult",
    "check_isolation_grouped": ".group_testing:check_isolation_grouped",
    "check_boundaries_grouped": ".grouped_boundaries:check_boundaries_grouped",
    "check_faithful_batched": ".batched_faithful:check_faithful_batched",
    "check_gradients_weighted": ".weighted_gradients:check_gradients_weighted",
    "certificate": ".methods:certificate",
    "CERTIFICATES": ".methods:CERTIFICATES",
    "METHODS": "tensorcad.runtime.building.settings:METHODS",
    "ModelSubject": ".model_subject:ModelSubject",
    "ModelRaised": ".model_calls:ModelRaised",
    "outputs_of": ".model_calls:outputs_of",
    "failure_hints": ".causes:failure_hints",
    # the context-parallel plan: read in any form, held to the batch, each rank's attention
    "check_cp_plan": ".cp_certificate:check_cp_plan",
    "CpPlanResult": ".cp_certificate:CpPlanResult",
    "cp_plan_check": ".cp_certificate:cp_plan_check",
    "plan_of": ".cp_plan:plan_of",
    "batch_of": ".cp_plan:batch_of",
    "check_cp_faithful": ".cp_faithful:check_cp_faithful",
    "import_factory": ".model_subject:import_factory",
    "collated_batch": ".model_subject:collated_batch",
    "vocab_of_model": ".model_subject:vocab_of_model",
    "Pretrained": ".pretrained:Pretrained",
    "pretrained_subject": ".pretrained:pretrained_subject",
    "factory_subject": ".pretrained:factory_subject",
    # the training step, on any model and a batch dict
    "STEP_CHECKS": ".certificates:STEP_CHECKS",
    "certify_step": ".step_certificates:certify_step",
    "StepReport": ".step_certificates:StepReport",
    "STEP_HEADLINES": ".step_certificates:HEADLINES",
    "step_check": ".step_certificates:step_check",
    "collator_labels": ".step_certificates:collator_labels",
    "read_batch": ".step_batch:read_batch",
    "split_batch": ".step_batch:split_batch",
    "StepBatch": ".step_batch:StepBatch",
    "IGNORE_INDEX": ".step_batch:IGNORE_INDEX",
    "SHIFTS": ".step_batch:SHIFTS",
    "step_of": ".training_step:step_of",
    "TrainingStep": ".training_step:TrainingStep",
    "token_cross_entropy": ".training_step:token_cross_entropy",
    "REDUCTIONS": ".reductions:REDUCTIONS",
    "reduce": ".reductions:reduce",
    "weights": ".reductions:weights",
    "check_labels": ".step_labels:check_labels",
    "LabelsResult": ".step_labels:LabelsResult",
    "check_loss": ".step_loss:check_loss",
    "LossResult": ".step_loss:LossResult",
    "check_step_gradients": ".step_gradients:check_step_gradients",
    "StepGradientResult": ".step_gradients:StepGradientResult",
    "check_accumulation": ".accumulation:check_accumulation",
    "AccumulationResult": ".accumulation:AccumulationResult",
    "ACCUMULATIONS": ".accumulation:ACCUMULATIONS",
    "check_eval_parity": ".eval_parity:check_eval_parity",
    "next_token_labels": ".next_token:next_token_labels",
    "next_token_loss": ".next_token:next_token_loss",
    "NEXT_TOKEN_REDUCTION": ".next_token:REDUCTION",
    # closed forms, goldens, verify, the positions probe
    "assert_closed_form": ".closed_form_check:assert_closed_form",
    "closed_form_keys": ".closed_form_check:closed_form_keys",
    "EXACT_REL": ".closed_form_check:EXACT_REL",
    "GAMMA_REL": ".closed_form_check:GAMMA_REL",
    "NotApplicable": ".closed_form_check:NotApplicable",
    "NoClosedForm": ".closed_form_check:NoClosedForm",
    "expected_keys_per_query": ".closed_form_check:expected_keys_per_query",
    "engine_keys_per_query": ".closed_form_check:engine_keys_per_query",
    "GOLDEN_KINDS": ".goldens:KINDS",
    "GOLDEN_VERSION": ".goldens:VERSION",
    "NoGolden": ".goldens:NoGolden",
    "file_golden": ".goldens:file_golden",
    "file_name": ".goldens:file_name",
    "golden_data": ".goldens:golden_data",
    "golden_dir": ".goldens:golden_dir",
    "golden_name": ".goldens:golden_name",
    "golden_path": ".goldens:golden_path",
    "golden_text": ".goldens:golden_text",
    "verify": ".verification:verify",
    "VerifyReport": ".verification:VerifyReport",
    "probe": ".positions_probe:probe",
    # what tensorcad.runtime.certification held in 0.12 beside the registry
    "Subject": "tensorcad.runtime.building:Subject",
}

__all__ = list(_LAZY)
__getattr__, __dir__ = lazy(__name__, _LAZY)
