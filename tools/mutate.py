"""Mutation testing of one core module against its own tests: `python tools/mutate.py MODULE`.

    python tools/mutate.py closed_form          # one module (names below), niced
    python tools/mutate.py closed_form --max-children 1
    python tools/mutate.py --list               # the modules and the tests each is held to

mutmut (pinned in constraints.txt, the `mutation` extra) rewrites every function of the module
into a trampoline and, for each mutant, reruns only the selected tests that reached that
function. Each module runs in its own scratch copy of the repository (.mutmut/MODULE/, git
ignored) with a [tool.mutmut] section written for it, so the modules never share mutmut's
cache and the checkout is never touched. The test selections are the module's own fast
tests (no `slow`, no compiled flex): the run is CPU-heavy on a shared machine.

Prints killed / survived / timeout / other and the surviving mutants' names; `--json` for
machines. docs/testing.md records the scores and explains every survivor that is kept.
Not part of the default suite.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_STEP, _STEP_TESTS = "tensorcad/runtime/certification/step/", "tests/runtime/certification/step/"
_SMALL_LLAMA = "tests/hf/test_step_hf.py::test_a_small_llama_its_own_loss_alone_and_padded"

# module -> (its source files, its own test files). Fast tests only: mutmut reruns them per mutant.
MODULES: dict[str, tuple[str, list[str]]] = {
    "closed_form": (["tensorcad/packing/closed_form.py"],
                    ["tests/packing/test_closed_form.py", "tests/packing/test_closed_form_exact.py"]),
    # test_expr_properties' hypothesis suites (soundness on random expressions) take ~10 s a
    # run; its exact unit checks are kept, the exhaustive small boxes carry the rest.
    "intervals": (["tensorcad/design/expr/intervals.py"],
                  ["tests/design/test_intervals.py",
                   "tests/design/test_expr_properties.py::test_interval_ranges_are_tight_for_common_cases",
                   "tests/design/test_expr_properties.py::test_equality_verdicts",
                   "tests/design/test_expr_properties.py::test_read_range_matches_brute_force"]),
    # test_blocks.py's hypothesis suite and its sampled stream tables take most of a minute a
    # run; the oracle (create_block_mask, every tile) and the exact tables carry the module.
    "tiles": (["tensorcad/analysis/tiles.py"],
              ["tests/analysis/test_blocks_oracle.py", "tests/analysis/test_tiles_cost.py"]
              + [f"tests/analysis/test_blocks.py::{name}" for name in (
                  "test_aligned_documents_table", "test_causal_and_window_blocks",
                  "test_counts_and_tiles_equal_create_block_mask_on_drawn_rows",
                  "test_kept_is_counted_exactly", "test_rows_must_hold_documents_in_order",
                  "test_one_document_a_row_is_decided_once_a_head")]),
    "isolation": (["tensorcad/runtime/certification/forward/isolation.py"], ["tests/runtime/certification/forward/test_isolation.py"]),
    "attention": (["tensorcad/analysis/attention.py"],
                  ["tests/analysis/test_attention.py", "tests/analysis/test_attention_bands.py"]),
    # the goldens hold the generated text (names, comments, the ranges line) of every preset
    "masks": (["tensorcad/codegen/masks.py"],
              ["tests/codegen/test_mask_table.py", "tests/codegen/test_mask_content.py",
               "tests/codegen/test_mask_functions.py",
               "tests/codegen/test_sanitise.py", "tests/codegen/test_generate.py",
               "tests/test_goldens.py::test_codegen_golden"]),
    # the drawing of rows: what tensorcad/packing/ held before it became a package
    "packing": (["tensorcad/packing/settings.py", "tensorcad/packing/stream.py", "tensorcad/packing/boundaries.py",
                 "tensorcad/packing/drawing.py"],
                ["tests/packing/test_packing.py", "tests/packing/test_packing_settings.py"]),
    # the training step's certificates: each against its own tests on the hand-written TinyLM; the Hugging
    # Face paths by one small Llama (a 1-layer, 16-wide model: a second, not the 10 of test_step_hf's others)
    **{name: ([f"{_STEP}{source}" for source in sources], [f"{_STEP_TESTS}{t}" for t in tests] + extra)
       for name, sources, tests, extra in (
           ("step_batch", ["batch.py"], ["test_step_batch.py", "test_step_labels.py"], []),
           ("step_labels", ["labels.py"], ["test_step_labels.py"], []),
           ("reductions", ["reductions.py"], ["test_reductions.py", "test_step_loss.py"], []),
           ("training_step", ["loop.py"], ["test_training_step.py", "test_step_loss.py",
                                                    "test_step_gradients.py", "test_eval_parity.py",
                                                    "test_accumulation.py"], [_SMALL_LLAMA]),
           ("step_loss", ["loss.py", "loss_weights.py"], ["test_step_loss.py", "test_loss_weights.py",
                                                             "test_eval_parity.py"], []),
           ("step_gradients", ["gradients.py"], ["test_step_gradients.py", "test_accumulation.py"], []),
           ("accumulation", ["accumulation.py"], ["test_accumulation.py"], []),
           ("eval_parity", ["eval_parity.py"], ["test_eval_parity.py"], []),
           ("step_certificates", ["certificates.py", "next_token.py"], ["test_step_certificates.py"],
            ["tests/hf/test_step_hf.py::test_a_hugging_face_model_behind_the_adapter_keeps_its_own_loss"]),
       )},
    # the default certificates' grouped methods (issue 42): each against the one-pass-a-document verdicts on
    # every planted model (test_grouped_verdicts) and its own exact tests (tests/testing/test_certificates.py,
    # whose tiny Hugging Face models took most of a mutant's time, is left to the default run)
    **{name: ([f"tensorcad/runtime/certification/forward/{name}.py"],
              ["tests/testing/test_grouped_verdicts.py", f"tests/runtime/certification/forward/test_{name}.py"])
       for name in ("group_testing", "grouped_boundaries", "batched_faithful", "weighted_gradients")},
    # the guard's audit of each batch a run feeds its model
    "guard_audit": (["tensorcad/guard/audit.py"], ["tests/guard/test_audit.py", "tests/guard/test_audit_exact.py",
                                                   "tests/guard/test_check_batch.py"]),
    # the data path (issue 45): coverage and its pieces, the counts merged at scale, the boundaries the batch
    # and the kernel carry; the Dask cluster's test is under -m slow, the merge it runs is tested here
    **{name: ([f"tensorcad/{source}" for source in sources], tests)
       for name, sources, tests in (
           ("data_coverage", ["runtime/certification/data/coverage.py", "runtime/certification/data/pieces.py"],
            ["tests/runtime/certification/data/test_coverage.py", "tests/runtime/certification/data/test_coverage_exact.py",
             "tests/runtime/certification/data/test_data_checks.py"]),
           # the counting digest every coverage count is made of (ids hashed, pieces as events, merged exactly)
           ("data_digest", ["packing/corpus/digest.py"],
            ["tests/packing/corpus/test_digest.py", "tests/packing/corpus/test_digest_exact.py",
             "tests/runtime/certification/data/test_coverage_exact.py",
             "tests/runtime/certification/data/test_data_checks.py"]),
           # its cluster test is the slow one, run here (-m selects it): a local cluster a mutant, seconds each
           ("data_at_scale", ["runtime/certification/data/at_scale.py"],
            ["tests/runtime/certification/data/test_coverage_at_scale.py"]),
           ("data_boundaries", ["runtime/certification/data/boundaries.py", "runtime/certification/data/checks.py"],
            ["tests/runtime/certification/data/test_data_boundaries.py",
             "tests/runtime/certification/data/test_boundaries_exact.py",
             "tests/runtime/certification/data/test_data_checks.py"]),
           ("guard_kernel", ["guard/kernel.py"], ["tests/guard/test_guard_data_boundaries.py",
                                                   "tests/guard/test_kernel_exact.py"]),
           # mixture of experts (issue 44): the drops a capacity makes, the router's aux loss in the step, the
           # capacity leak's cause, the generated experts and latent attention, the rules under packing
           ("capacity_drops", ["analysis/capacity.py"], ["tests/analysis/test_capacity_drops.py"]),
           ("router_aux", ["runtime/certification/step/router.py"], ["tests/hf/test_step_router_aux.py",
                                                                       "tests/hf/test_step_router_exact.py"]),
           ("capacity_cause", ["runtime/certification/design/capacity.py"],
            ["tests/runtime/certification/design/test_capacity.py",
             "tests/runtime/certification/design/test_capacity_exact.py"]),
           # the codegen goldens hold the generated text (docstrings, comments, Config keys) of the MoE presets
           ("experts_code", ["codegen/experts.py"], ["tests/codegen/test_experts_code.py",
                                                     "tests/test_goldens.py::test_codegen_golden"]),
           ("latent_code", ["codegen/latent.py"], ["tests/codegen/test_latent_attention.py",
                                                   "tests/test_goldens.py::test_codegen_golden"]),
           ("moe_rules", ["rules/experts.py"], ["tests/rules/test_experts.py", "tests/rules/test_experts_exact.py"]),
           ("hf_experts", ["hf/experts.py"], ["tests/hf/test_import_experts.py", "tests/codegen/test_experts_code.py"]),
           ("guard_experts", ["guard/experts.py"], ["tests/guard/test_guard_experts.py",
                                                      "tests/guard/test_guard_experts_exact.py"]),
           # the other readers of a boundary (issue 46): multi-token prediction, vision-language rows
           # the MTP modules themselves are text pasted into generated modules (codegen/runtime/mtp.py), which
           # mutmut cannot mutate: their tests hold them to the certificates' own loop over the targets
           ("mtp", ["runtime/certification/step/mtp.py", "analysis/mtp.py"],
            ["tests/runtime/certification/step/test_mtp_labels.py", "tests/analysis/test_mtp_cost.py",
             "tests/codegen/test_mtp_code.py", "tests/runtime/certification/step/test_mtp_exact.py"]),
           ("vision", ["runtime/certification/forward/vision.py", "hf/vision.py"],
            ["tests/hf/test_vision_rows.py", "tests/hf/test_vision_step.py",
             "tests/runtime/certification/forward/test_vision_certificates.py",
             "tests/runtime/certification/forward/test_vision_exact.py",
             "tests/testing/test_assert_vision_packed.py"]),
           # padded packing as a form (issue 46): cu_seqlens beside cu_seqlens_padded, and the CP plan certificate's
           # readers held to the padded layout
           ("padded_forms", ["packing/forms.py"], ["tests/packing/test_packing_forms.py",
                                                   "tests/packing/test_padded_forms.py",
                                                   "tests/packing/test_padded_forms_exact.py"]),
           ("cp_certificate", ["runtime/certification/parallel/certificate.py",
                               "runtime/certification/parallel/plan.py"],
            ["tests/runtime/certification/parallel/test_cp_plan.py",
             "tests/runtime/certification/parallel/test_cp_padded.py",
             "tests/runtime/certification/parallel/test_cp_certificate_exact.py",
             "tests/runtime/certification/parallel/test_cp_plan_forms.py",
             "tests/runtime/certification/parallel/test_cp_plan_check.py",
             "tests/testing/test_assert_cp_plan.py"]),
           # RL post-training (issue 43): each certificate with its modes or batch reading
           ("rl_aggregation", ["runtime/certification/rl/aggregation.py", "runtime/certification/rl/modes.py"],
            ["tests/runtime/certification/rl/test_aggregation.py", "tests/runtime/certification/rl/test_modes.py",
             "tests/runtime/certification/rl/test_aggregation_exact.py",
             "tests/runtime/certification/rl/test_rl_checks.py"]),
           ("rl_logprobs", ["runtime/certification/rl/logprobs.py", "runtime/certification/rl/batch.py"],
            ["tests/runtime/certification/rl/test_logprobs.py", "tests/runtime/certification/rl/test_logprobs_exact.py",
             "tests/runtime/certification/rl/test_batch_exact.py", "tests/runtime/certification/rl/test_aggregation.py",
             "tests/runtime/certification/rl/test_rl_checks.py"]),
           ("rl_alignment", ["runtime/certification/rl/alignment.py"],
            ["tests/runtime/certification/rl/test_alignment.py", "tests/runtime/certification/rl/test_alignment_exact.py",
             "tests/runtime/certification/rl/test_rl_checks.py"]),
           ("guard_rl", ["guard/rl.py"], ["tests/guard/test_rl_scoring.py"]),
           # a real GRPOTrainer run a mutant (two tests, about 7 s)
           ("rl_callback", ["testing/integrations/rl.py"], ["tests/testing/integrations/test_rl_callback.py"]),
           ("rl_metrics", ["runtime/certification/rl/metrics.py", "runtime/certification/rl/checks.py"],
            ["tests/runtime/certification/rl/test_metrics.py", "tests/runtime/certification/rl/test_metrics_exact.py",
             "tests/runtime/certification/rl/test_rl_checks.py"]),
       )},
}

# Modules whose tests are under -m slow: their runs select them (pytest's own -m, after the project's addopts).
SLOW_TOO = {"data_at_scale"}

# What the tests import or read besides the package under mutation.
ALSO_COPY = ["conftest.py", "snapshots", "docs", "README.md", "benchmarks"]


def _config(sources: list[str], tests: list[str], patience: float = 5.0, slow: bool = False) -> str:
    def toml_list(items):
        return "[" + ", ".join(json.dumps(i) for i in items) + "]"
    marks = ["-m", "slow or not slow"] if slow else []
    return (
        "\n[tool.mutmut]\n"
        'source_paths = ["tensorcad"]\n'
        f"only_mutate = {toml_list(sources)}\n"
        f"also_copy = {toml_list(ALSO_COPY)}\n"
        f"pytest_add_cli_args_test_selection = {toml_list(tests)}\n"
        # xdist off: mutmut runs pytest in-process; one example set per run (the ci profile).
        f"pytest_add_cli_args = {toml_list(['-p', 'no:xdist', '-p', 'no:cacheprovider', *marks])}\n"
        # torch is not fork-safe once its thread pool has run: workers fork from a server
        # that has only collected the tests (mutmut's own remedy for torch).
        'process_isolation = "forkserver"\n'
        # a mutant running 5x its tests' usual time is stuck (mutmut's default waits 15x, a
        # minute a mutant here for those that loop)
        f"timeout_multiplier = {patience}\n"
    )


def _write_config(work: Path, module: str, patience: float = 5.0) -> None:
    sources, tests = MODULES[module]
    pyproject = (ROOT / "pyproject.toml").read_text()
    (work / "pyproject.toml").write_text(pyproject + _config(sources, tests, patience, module in SLOW_TOO))


def prepare(module: str) -> Path:
    work = ROOT / ".mutmut" / module
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis")
    for name in ["tensorcad", "tests", *ALSO_COPY]:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, work / name, ignore=ignore)
        elif path.exists():
            shutil.copy2(path, work / name)
    _write_config(work, module)
    # mutmut fills mutants/ itself; it must exist before Python starts, or the PYTHONPATH entry
    # below is cached as a missing directory and never searched.
    (work / "mutants").mkdir()
    return work


STATUS = re.compile(r"^\s*(\S+):\s*(killed|survived|timeout|suspicious|no tests|skipped|"
                    r"segfault|not checked|check was interrupted by user|caught by type check)\s*$")


def results(work: Path, env: dict) -> dict[str, list[str]]:
    shown = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"],
                           cwd=work, env=env, capture_output=True, text=True)
    by_status: dict[str, list[str]] = {}
    for line in shown.stdout.splitlines():
        match = STATUS.match(line)
        if match:
            by_status.setdefault(match.group(2), []).append(match.group(1))
    return by_status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("module", nargs="?", choices=sorted(MODULES))
    parser.add_argument("--list", action="store_true", help="the modules and their test selections")
    parser.add_argument("--max-children", type=int, default=2, help="parallel mutant runs (default 2)")
    parser.add_argument("--json", action="store_true", help="the counts and survivors as JSON")
    parser.add_argument("--again", action="store_true",
                        help="keep the last run's copy, refresh its tests, rerun only its survivors")
    parser.add_argument("--timeouts", action="store_true",
                        help="with --again: rerun the timed-out mutants too, waiting 10 times longer (on a loaded "
                             "machine a mutant whose tests fail can still run past 5 times their usual time)")
    args = parser.parse_args(argv)
    if args.list or not args.module:
        for name, (sources, tests) in MODULES.items():
            print(f"{name:12} {' '.join(sources)}  <-  {' '.join(tests)}")
        return 0
    env = dict(os.environ)
    again: list[str] = []
    if args.again and (ROOT / ".mutmut" / args.module / "mutants").is_dir():
        work = ROOT / ".mutmut" / args.module
        previous = results(work, {**env, "PYTHONPATH": str(work / "mutants")})
        again = previous.get("survived", []) + previous.get("no tests", [])
        again += previous.get("timeout", []) if args.timeouts else []
        # the package as it is now: mutmut re-mutates a file whose source changed and reruns
        # the mutants of every function whose text changed
        shutil.copytree(ROOT / "tensorcad", work / "tensorcad", dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        # the module's test selection as it is now, and which test reaches which function
        # collected afresh: mutmut would collect it for new test names only, so a test whose
        # body changed would keep the functions it used to reach
        _write_config(work, args.module, 50.0 if args.timeouts else 5.0)
        (work / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)
        # and what the tests read beside them (a golden written since: snapshots/)
        for where in (work, work / "mutants"):
            for name in ("tests", *ALSO_COPY):
                if (ROOT / name).is_dir():
                    shutil.rmtree(where / name, ignore_errors=True)
                    shutil.copytree(ROOT / name, where / name,
                                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis"))
                elif (ROOT / name).exists():
                    shutil.copy2(ROOT / name, where / name)
        if not again:
            print("no survivors to rerun", file=sys.stderr)
        # mutmut keeps a mutant's last result and skips it: forget the survivors' results, so
        # the run below checks them again along with every mutant not yet checked
        for meta in (work / "mutants").rglob("*.py.meta"):
            data = json.loads(meta.read_text())
            codes = data.get("exit_code_by_key", {})
            for name in again:
                if name in codes:
                    codes[name] = None
            meta.write_text(json.dumps(data))
    else:
        work = prepare(args.module)
    # Subprocesses the tests start import the mutated copy too (mutmut selects the mutant by
    # the MUTANT_UNDER_TEST variable they inherit); the ci profile keeps examples fixed.
    env["PYTHONPATH"] = str(work / "mutants")
    env.setdefault("HYPOTHESIS_PROFILE", "ci")
    # one thread a worker: mutmut runs --max-children workers on a shared machine
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    print(f"mutating {MODULES[args.module][0]} in {work}", file=sys.stderr)
    run = subprocess.run(["nice", "-n", "19", sys.executable, "-m", "mutmut", "run",
                          "--max-children", str(args.max_children)], cwd=work, env=env)
    by_status = results(work, env)
    counts = {status: len(names) for status, names in sorted(by_status.items())}
    killed = counts.get("killed", 0) + counts.get("timeout", 0)
    total = sum(counts.values()) - counts.get("skipped", 0)
    summary = {"module": args.module, "sources": MODULES[args.module][0], "counts": counts,
               "score": round(100 * killed / total, 1) if total else None,
               "survived": by_status.get("survived", []), "mutmutExit": run.returncode}
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"{args.module}: " + ", ".join(f"{n} {s}" for s, n in counts.items())
              + (f"; {summary['score']}% killed or timed out" if total else ""))
        for name in summary["survived"]:
            print(f"  survived: {name}  (python -m mutmut show {name}, in {work})")
    (work / "summary.json").write_text(json.dumps(summary, indent=2))
    return 0 if run.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
