"""Write docs/performance.md: run the benchmarks, then render what they measured.

    python benchmarks/performance.py                 # run everything (~15 min on 2 cores), write the page
    python benchmarks/performance.py --from .benchmarks/performance-run.json  # render that run again
    python benchmarks/performance.py --device cuda   # the page's CUDA section only, on a CUDA machine

Every figure comes from one pytest-benchmark run of benchmarks/bench_{analysis,
block_mask,forward,hf}.py (their extra_info), and every comparison is a ratio of two
timings taken in that run, beside the target it answers to. The CUDA section runs
where torch sees a CUDA device and says "not run" otherwise; ``--device cuda`` runs
it alone and puts it in the page in place of the one there (without a CUDA device
it says so and leaves the page as it is).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = ["bench_analysis.py", "bench_block_mask.py", "bench_forward.py", "bench_hf.py"]
COMMAND = "python benchmarks/performance.py"


def run_benchmarks(json_path: Path) -> None:
    command = [sys.executable, "-m", "pytest", *(f"benchmarks/{f}" for f in FILES),
               "-o", "python_files=bench_*.py", "-p", "no:xdist", "-p", "no:cacheprovider",
               "-q", f"--benchmark-json={json_path}"]
    print(" ".join(command), flush=True)
    subprocess.run(command, cwd=ROOT, check=True)


def machine() -> dict:
    import numpy
    import torch

    return {"python": platform.python_version(), "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
            "torch": torch.__version__, "numpy": numpy.__version__,
            "load": " ".join(f"{x:.1f}" for x in os.getloadavg()),
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def by_test(run: dict) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for bench in run["benchmarks"]:
        found.setdefault(bench["name"].split("[")[0], []).append(bench)
    return found


def ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1e3:,.2f} ms"


def verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def section_analysis(tests: dict) -> list[str]:
    out = ["## The analysis", "",
           "`analyze` cold (every cache cleared; best of five) and warm (the cached report; median of 200),",
           "packing off and on (1,024-token documents, spread 1).", "",
           "| preset | seq | packing | cold | cold, CPU time | warm |", "|---|---:|---|---:|---:|---:|"]
    targets = []
    if not tests.get("test_analysis_cold_and_warm"):
        out.append(f"| {MISSING} | | | | | |")
    for b in sorted(tests.get("test_analysis_cold_and_warm", []),
                    key=lambda b: (b["extra_info"]["preset"], b["extra_info"]["seq"], b["extra_info"]["packed"])):
        e = b["extra_info"]
        out.append(f"| {e['preset']} | {e['seq']:,} | {'on' if e['packed'] else 'off'} | {ms(e['cold_s'])} "
                   f"| {ms(e.get('cold_cpu_s'))} | {e['warm_s'] * 1e6:,.1f} µs |")
        for kind in ("cold", "warm"):
            if f"{kind}_target_s" in e:
                figure, target = e[f"{kind}_s"], e[f"{kind}_target_s"]
                cpu = e.get("cold_cpu_s") if kind == "cold" else None
                targets.append(f"| {kind} packed llama-3-8b-documents at {e['seq']:,} | {ms(figure)} | "
                               f"{ms(cpu)} | ≤ {ms(target)} | {e[f'{kind}_headroom']:.2f}× | "
                               f"{verdict(figure <= target)} |")
    out += ["", "Targets (issue #17), judged on wall time; headroom = target ÷ wall time. The CPU time",
            "(this process's own) is what the run would take on an idle core:", "",
            "| figure | wall time | CPU time | target | headroom | |", "|---|---:|---:|---:|---:|---|",
            *targets]
    blocks = tests.get("test_engine_blocks_vs_create_block_mask", [])
    for b in blocks:
        e = b["extra_info"]
        out += ["", f"The engine's block count at {e['seq']:,} tokens: {e['engine_s_per_row'] * 1e6:,.1f} µs a row, "
                    f"create_block_mask {ms(e['torch_s_per_row'])} a row: **{e['per_row_ratio']:,.0f}×**."]
    return out


def section_sampler(tests: dict) -> list[str]:
    out = ["## The sampler's error against its evaluations", "",
           "Keys per query at 8,192 tokens, 1,024-token documents, the sampler given 64 to 1,024 rows",
           "(16 queries a row), each over several seeds, against the closed forms. Two masks:",
           "llama-3-8b-documents' own (`doc(b, q) == doc(b, kv)` with causality), whose every band the",
           "document ranges decide, so the figure is an exact count over every window of the stream the",
           "rows are cut from and the same at every seed (it reports no error; what separates it from the",
           "closed form is the finite stream's stratified lengths, which shrinks as the rows, and so the",
           "stream, grow); and every second key of the document (`... & ((q - kv) % 2 == 0)`), which no",
           "interval decides, so the sampler draws keys and reports a standard error",
           "(`closed_form.fixed_phase_average`, `closed_form.edge_corrected`, `closed_form.strided`).", ""]
    found = tests.get("test_sampler_error_against_evaluations", [])
    if not found:
        out.append(MISSING)
    for b in sorted(found, key=lambda b: (b["extra_info"].get("mask", "document"), b["extra_info"]["spread"])):
        e = b["extra_info"]
        lengths = "fixed lengths" if e["spread"] == 0 else f"gamma lengths, spread {e['spread']}"
        mask = e.get("mask", "document")
        out += [f"**{mask} mask, {lengths}** (closed form {e['closed_form']:.4f}, {e['seeds']} seeds):", "",
                "| rows | evaluations | rms error | max error | reported error (mean) | within 3 reported |",
                "|---:|---:|---:|---:|---:|---:|"]
        for point in e["curve"]:
            reported = point.get("mean_reported_stderr")
            out.append(f"| {point['rows']:,} | {point['evaluations']:,.0f} | {point['rms_error'] * 100:.3f}% "
                       f"| {point['max_error'] * 100:.3f}% | "
                       + ("none: an exact count | — |" if reported == 0 else
                          f"{reported * 100:.3f}% | {point['within_3_stderr']} of {e['seeds']} |"
                          if reported is not None else "— | — |"))
        out.append("")
    return out


def section_block_masks(tests: dict, gb: float) -> list[str]:
    out = ["## Block masks from the documents", "",
           "A generated model whose mask its blocks' ranges decide exactly (document masks with causality,",
           "windows and per-head windows: `tensorcad/design/block_ranges.py` says which and why) builds its",
           "BlockMask from each 128 × 128 block's first and last position and document: skip, compute whole",
           "or compute and mask, a few binary searches a query block in torch, no score evaluated, nothing",
           "compiled. Any other mask goes to create_block_mask. `RUNTIME_PATHS[\"block_mask\"]` says which ran",
           "(`from_ranges` | `create_block_mask`); either way it is built once a forward pass and shared by",
           "every layer.", "",
           "llama-3-8b-documents' own mask (`causal_same_document`), one row of documents of about",
           "1,024 tokens (exponential lengths). From documents: the generated module's",
           "`_block_mask_from_ranges`; create_block_mask eager, and compiled (warm: after its compile).", "",
           "| seq | from documents | eager create_block_mask | ratio | compiled (warm) | ratio |",
           "|---:|---:|---:|---:|---:|---:|"]
    rows = sorted(tests.get("test_from_documents_vs_create_block_mask", []), key=lambda b: b["extra_info"]["seq"])
    musts = [] if rows else [MISSING]
    for b in rows:
        e = b["extra_info"]
        eager = (ms(e["eager_s"]) if e.get("eager_s") is not None
                 else f"not run: ≥ {e['eager_needs_gb_at_least']:,.1f} GB")
        out.append(f"| {e['seq']:,} | {ms(e['from_documents_s'])} | {eager} | "
                   f"{e['ratio_eager']:,.0f}× |" if "ratio_eager" in e else
                   f"| {e['seq']:,} | {ms(e['from_documents_s'])} | {eager} | — |")
        out[-1] += (f" {ms(e['compiled_s'])} | {e['ratio_compiled']:,.1f}× |" if "compiled_s" in e else " — | — |")
        if e["seq"] == 8192 and "ratio_eager" in e:
            musts.append(f"- at 8,192: {e['ratio_eager']:,.0f}× eager create_block_mask (target ≥ 200×: "
                         f"{verdict(e['ratio_eager'] >= 200)})" + (
                             f", {e['ratio_compiled']:,.1f}× compiled (target ≥ 5×: "
                             f"{verdict(e['ratio_compiled'] >= 5)})" if "ratio_compiled" in e else ""))
        if e["seq"] == 131072:
            musts.append(f"- at 131,072: built from the documents in {ms(e['from_documents_s'])}; eager "
                         f"create_block_mask would hold at least {e['eager_needs_gb_at_least']:,.1f} GB of "
                         f"booleans at once, on a machine of {gb:,.0f} GB shared with others, so it was not run"
                         + (f"; compiled it took {ms(e['compiled_s'])} warm"
                            f" after a {e['compile_s']:.1f} s compile" if "compiled_s" in e else ""))
    out += ["", *musts, "",
            "Equal to create_block_mask's BlockMask (counts and index sets, both sides) on every size",
            "where both ran, and on random packings in `tests/codegen/test_block_mask_from_ranges.py`."]
    once = tests.get("test_block_mask_once_a_batch_vs_every_layer", [])
    if once:
        out += ["", "### Once a batch vs once a layer", "",
                "A stack of `attend` layers (B 2, H 8 over 2, T 1,024, D 64, uncompiled flex) over fresh",
                "documents each round; \"every layer\" empties the cache before each layer.", "",
                "Expected: once a batch plus (layers − 1) more builds, each timed alone in the same run;",
                "where one build is small beside a layer's attention, sharing it saves nothing measurable,",
                "and the measured ratios scatter about the expected by the machine's noise (its load is",
                "at the top of this page).", "",
                "| layers | builder | one build | once a batch | every layer | ratio | expected |",
                "|---:|---|---:|---:|---:|---:|---:|"]
        for b in sorted(once, key=lambda b: (b["extra_info"]["builder"], b["extra_info"]["layers"])):
            e = b["extra_info"]
            build = e.get("build_s")
            expected = ("—" if build is None else
                        f"{(e['once_a_batch_s'] + (e['layers'] - 1) * build) / e['once_a_batch_s']:.2f}×")
            out.append(f"| {e['layers']} | {e['builder']} | {ms(build)} | {ms(e['once_a_batch_s'])} "
                       f"| {ms(e['every_layer_s'])} | {e['ratio_every_layer_to_once']:.2f}× | {expected} |")
    forward = tests.get("test_forward_block_mask_once_a_batch_vs_every_layer", [])
    if not forward:
        out += ["", "The generated 8-layer model, once a batch vs every layer: " + MISSING]
    else:
        out += ["", "The generated 8-layer model (about 2M parameters, B 2, T 1,024), the same comparison:", "",
                "| flex | block mask | once a batch | every layer | ratio |", "|---|---|---:|---:|---:|"]
        for b in forward:
            e = b["extra_info"]
            out.append(f"| {b['param']} | {e['paths'].get('block_mask')} | {ms(e['median_s_once_a_batch'])} "
                       f"| {ms(e['median_s_every_layer'])} | {e['ratio_every_layer_to_once']:.2f}× |")
    return out


LABELS = {
    "ours_flex_compiled": "generated, compiled flex forward",
    "ours_eager_forward": "generated, eager forward",
    "ours_eager_train": "generated, eager forward + backward",
    "hf_sdpa_position_ids": "transformers sdpa, packed position_ids, forward",
    "hf_sdpa_position_ids_train": "transformers sdpa, packed position_ids, forward + backward",
    "hf_sdpa_4d_mask": "transformers sdpa, 4D mask, forward",
}


MISSING = "Not measured in this run (the run was stopped before this benchmark finished)."


def section_transformers(tests: dict) -> list[str]:
    out = ["## The generated model against transformers", ""]
    if not tests.get("test_generated_model_vs_transformers"):
        return out + [MISSING]
    for b in tests.get("test_generated_model_vs_transformers", []):
        e = b["extra_info"]
        s = e["shape"]
        out += [f"LlamaForCausalLM and the generated llama-3-8b-documents at one shape ({s['n_layer']} layers of "
                f"{s['dim']}, {s['n_head']} heads of {s['head_dim']} over {s['n_kv_head']}, SwiGLU {s['hidden']}, "
                f"vocabulary {s['vocab_size']:,}), random weights, one packed row of {e['T']:,} tokens "
                f"(documents of about {e['mean_document']}). Medians of alternating rounds; ratio to "
                "transformers' sdpa forward with packed position_ids. Peak memory: growth of the peak "
                "resident set over one warm run (compile and first run paid before; the peak reset through "
                "/proc/self/clear_refs), in a fresh process holding only that model.", "",
                "| variant | median | ratio | peak memory |", "|---|---:|---:|---:|"]
        peaks = e.get("peak_growth_bytes", {})
        for name, median in e["median_s"].items():
            peak = peaks.get(name)
            peak_text = f"{peak / 2**20:,.0f} MiB" if peak is not None else "not measured in this run"
            out.append(f"| {LABELS.get(name, name)} | {ms(median)} | {e['ratio_to_hf_sdpa_position_ids'][name]:.2f}× "
                       f"| {peak_text} |")
        if "eager_scores_bytes_a_layer" in e:
            out += ["", f"The eager form materialises every score: {s['n_head']} heads × {e['T']:,} × {e['T']:,} "
                        f"float32 = {e['eager_scores_bytes_a_layer'] / 2**20:,.0f} MiB a layer for the scores alone "
                        "(and as much again for their softmax); the flex and sdpa kernels work through them in tiles."]
        r = e["ratio_to_hf_sdpa_position_ids"]["ours_flex_compiled"]
        out += ["", f"Compiled flex forward ÷ transformers' sdpa forward: **{r:.2f}×** "
                    f"({'no slower' if r <= 1 else f'{(r - 1) * 100:.0f}% slower'})."]
        if r > 1:
            out += ["", "Why (a reading, not measured apart here): on CPU, compiled FlexAttention runs Inductor's",
                    "generic C++ template of the tiled kernel, while sdpa with a boolean mask calls PyTorch's",
                    "fused CPU kernel; with documents of about 256 tokens in a 2,048-token row most 128 × 128",
                    "blocks near the diagonal are partial, so the block sparsity saves little at this length."]
    return out


def cuda_section() -> list[str]:
    import torch

    out = ["## CUDA", ""]
    if not torch.cuda.is_available():
        return out + ["Not run: torch sees no CUDA device on this machine."]
    from torch.nn.attention.flex_attention import create_block_mask

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_block_mask import documents, generated, without_ranges

    ns = generated()
    out += [f"On {torch.cuda.get_device_name(0)}; times after torch.cuda.synchronize, best of 10.", "",
            "| seq | from documents | compiled create_block_mask (warm) | ratio |", "|---:|---:|---:|---:|"]
    compiled = torch.compile(create_block_mask)
    for seq in (8192, 32768, 131072):
        mask_mod = ns["causal_same_document_mask"](documents(1, seq).cuda())
        plain = without_ranges(mask_mod)

        def timed(fn):
            fn()
            torch.cuda.synchronize()
            best = float("inf")
            for _ in range(10):
                start = time.perf_counter()
                fn()
                torch.cuda.synchronize()
                best = min(best, time.perf_counter() - start)
            return best

        ours = timed(lambda: ns["_block_mask_from_ranges"](mask_mod, mask_mod.ranges, 1, None, seq, seq, "cuda"))
        theirs = timed(lambda: compiled(plain, 1, None, seq, seq, device="cuda"))
        out.append(f"| {seq:,} | {ms(ours)} | {ms(theirs)} | {theirs / ours:,.1f}× |")
    return out


def cuda_only(output: Path) -> int:
    """The CUDA section, run now, in place of the page's (skipped, the page untouched, without CUDA)."""
    import torch

    if not torch.cuda.is_available():
        print("skipped: torch sees no CUDA device on this machine; the page keeps its CUDA section")
        return 0
    page = output.read_text()
    head, _, rest = page.partition("## CUDA\n")
    _, _, tail = rest.partition("\n## ")
    output.write_text(head + "\n".join(cuda_section()) + "\n" + (f"\n## {tail}" if tail else ""))
    print(f"wrote the CUDA section of {output}")
    return 0


def merged(runs: list[dict]) -> dict:
    """One run of every benchmark: a test measured again (a later run) replaces the earlier."""
    benchmarks = {}
    for run in runs:
        for bench in run["benchmarks"]:
            benchmarks[bench["fullname"]] = bench
    return {**runs[-1], "benchmarks": list(benchmarks.values())}


def render(run: dict, about: dict, seconds: float | None) -> str:
    tests = by_test(run)
    gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    took = f", {seconds / 60:.0f} min" if seconds else ""
    lines = ["# Performance", "",
             f"Generated by `{COMMAND}` (in the repository root){took}. Do not edit by hand: run it again.", "",
             f"Machine: {about['processor']}, {about['cpus']} CPUs, {gb:,.0f} GB, {about['platform']}; "
             f"Python {about['python']}, torch {about['torch']}, numpy {about['numpy']}; "
             f"load average {about['load']} at the start (the machine is shared: absolute times move with it, "
             f"ratios of timings taken in the same run much less). "
             f"Run {run.get('datetime', datetime.datetime.now(datetime.timezone.utc).isoformat())}.", ""]
    lines += section_block_masks(tests, gb) + [""]
    lines += section_transformers(tests) + [""]
    lines += section_analysis(tests) + [""]
    lines += section_sampler(tests) + [""]
    lines += cuda_section() + [""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="saved", type=Path, nargs="+",
                        help="saved pytest-benchmark JSON runs (a later run's test replaces an earlier's)")
    parser.add_argument("-o", "--output", type=Path, default=ROOT / "docs" / "performance.md")
    parser.add_argument("--note", default="", help="a line under the header (how this page's runs were made)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cuda: run the CUDA section alone and replace it in the page")
    args = parser.parse_args(argv)
    if args.device == "cuda":
        return cuda_only(args.output)
    start = time.perf_counter()
    if args.saved:
        run, seconds = merged([json.loads(p.read_text()) for p in args.saved]), None
        # The machine as it was when the (last) run began, not as it is now
        sidecar = args.saved[-1].with_suffix(".machine.json")
        about = json.loads(sidecar.read_text()) if sidecar.exists() else machine()
        seconds = about.pop("seconds", None)
    else:
        about = machine()
        # Kept (git ignores .benchmarks/) so the page can be rendered again with --from.
        path = ROOT / ".benchmarks" / "performance-run.json"
        path.parent.mkdir(exist_ok=True)
        run_benchmarks(path)
        run = json.loads(path.read_text())
        seconds = time.perf_counter() - start
        path.with_suffix(".machine.json").write_text(json.dumps({**about, "seconds": seconds}))
    page = render(run, about, seconds)
    if args.note:
        page = page.replace(" Do not edit by hand: run it again.\n",
                            f" Do not edit by hand: run it again.\n{args.note}\n", 1)
    args.output.write_text(page)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
