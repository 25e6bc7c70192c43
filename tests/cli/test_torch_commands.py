"""`tensorcad verify | certify | smoke-train | trace`: exit codes and output."""

from __future__ import annotations

import functools
import json
import warnings

import pytest

pytest.importorskip("torch")

from tensorcad.cli import main  # noqa: E402

LEAKY_MASK = "doc(b, q) >= doc(b, kv)"


@pytest.fixture(autouse=True)
def quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@pytest.fixture
def only(monkeypatch):
    """Limit verify to some checks (export alone takes ~20 s; it has its own test)."""
    import tensorcad.runtime.certification.verification as module

    def limit(*checks):
        monkeypatch.setattr(module, "verify", functools.partial(module.verify, checks=checks))

    return limit


def test_verify_passes_and_prints_json(only, capsys):
    only("forward", "flops", "isolation[flex]", "block-counts")
    code = main(["verify", "nano-sort", "--seq", "128", "--params", "150000", "--pack", "32", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["passed"]
    assert [c["name"] for c in out["checks"]] == ["forward", "flops", "isolation[flex]", "block-counts"]
    assert out["checks"][1]["figures"]["matmul"] == out["checks"][1]["figures"]["expectedMatmul"]


def test_verify_prints_a_table_without_json(only, capsys):
    only("forward", "isolation[eager]")
    assert main(["verify", "gpt2-small", "--seq", "64", "--params", "300000"]) == 0
    out = capsys.readouterr().out
    assert "forward" in out and "skipped" in out and "no documents input" in out


def test_verify_exits_1_naming_the_leak(only, tmp_path, capsys):
    import tensorcad

    source = tensorcad.load("nano-sort").to_dict()
    source["nodes"][1]["params"]["block"]["params"]["attention"]["mask"] = LEAKY_MASK
    path = tmp_path / "leaky.json"
    path.write_text(json.dumps(source))
    only("isolation[eager]")
    assert main(["verify", str(path), "--seq", "128", "--params", "150000", "--pack", "32"]) == 1
    out = " ".join(capsys.readouterr().out.split())  # however rich wrapped it
    assert "isolation[eager] failed" in out and "of row" in out and "moved document" in out


@pytest.mark.parametrize("argv", [
    ["verify", "no-such-design"],
    ["verify", "nano-sort", "--seq", "100000"],
    ["verify", "nano-sort", "--pack-spread", "1"],
    ["smoke-train", "nano-sort", "--steps", "0"],
    ["trace", "nano-sort", "--seq", "0"],
    ["certify", "no-such-design"],
    ["certify", "nano-sort", "--seq", "100000"],
    ["certify", "nano-sort", "--pack", "-3"],
    ["certify", "nano-sort", "--params", "0"],
])
def test_bad_input_is_one_line_and_exit_2(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("tensorcad: ") and err.count("\n") == 1


@pytest.fixture
def certify_only(monkeypatch):
    """certify with only some of the registry's checks run (the rest skip: export alone takes ~10 s)."""
    from tensorcad.runtime import certification

    def limit(*names):
        for name, spec in list(certification.REGISTRY.items()):
            if name not in names:
                monkeypatch.setitem(certification.REGISTRY, name, certification.Spec(
                    name, spec.holds, lambda subject, name=name: certification.skipped(name, "left out here")))

    return limit


def test_certify_prints_its_settings_and_names_each_warning(certify_only, capsys):
    certify_only("rules", "closed-form")
    assert main(["certify", "nano-sort", "--seq", "128", "--params", "150000", "--pack", "32",
                 "--pack-spread", "0.5", "--seed", "3"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("nano-sort at seq 128, documents averaging 32 tokens (spread 0.5), scaled to about 150,000 "
            "parameters, seed 3") in out
    assert "no errors (1 warn, 0 note): warn document-blocks packing: in 32-token documents" in out


def test_certify_json_carries_the_settings(certify_only, capsys):
    certify_only("rules")
    assert main(["certify", "nano-sort", "--seq", "128", "--json"]) == 0
    (out,) = json.loads(capsys.readouterr().out)
    assert out["settings"]["seq"] == 128 and out["settings"]["pack"] == 96.0 and out["settings"]["params"] == 1_000_000
    assert out["checks"][0]["status"] == out["checks"][0]["outcome"] == "passed"


def test_verify_and_certify_help_say_what_each_check_holds(capsys):
    for command in ("verify", "certify"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        out = capsys.readouterr().out
        assert "--pack-spread" in out and "--params" in out and "--seed" in out
        assert "block-counts" in out and "for every distinct mask the model runs" in " ".join(out.split())


def test_trace_json(capsys):
    assert main(["trace", "nano-sort", "--seq", "32", "--params", "100000", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["passed"] and out["linear"] == out["analysisMatmul"]


def test_smoke_train_json(capsys):
    assert main(["smoke-train", "nano-sort", "--steps", "15", "--params", "100000", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["lossFell"] and out["finalLoss"] < out["initialLoss"]


@pytest.mark.slow
def test_verify_llama_3_8b_documents_json(capsys):
    code = main(["verify", "llama-3-8b-documents", "--pack", "96", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and all(c["status"] == "passed" for c in out["checks"])


@pytest.mark.slow
def test_certify_a_preset(capsys):
    code = main(["certify", "nano-sort", "--seq", "256", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out
    names = [c["name"] for c in out[0]["checks"]]
    assert "isolation[flex]" in names and not any(n.startswith("golden[") for n in names)


def test_smoke_train_off_a_terminal_prints_plain_progress_with_steps_and_loss(capsys):
    # capsys's stderr is not a terminal, as in CI or a log: plain lines, never silence.
    assert main(["smoke-train", "nano-sort", "--steps", "10", "--params", "100000"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("tensorcad: training")]
    assert lines[0].startswith("tensorcad: training 1/10, loss ") and "s left" in lines[0]
    assert lines[-1].startswith("tensorcad: training 10/10, loss ") and "left" not in lines[-1]
    assert len(lines) == 10  # a line a tenth, however long the run


def test_plain_progress_shows_a_tenth_at_a_time():
    import io

    from tensorcad.cli.torch_commands import _PlainProgress

    out = io.StringIO()
    progress = _PlainProgress(out, every_seconds=1e9)
    for step in range(1, 1001):
        progress("training", step, 1000, f"loss {1 / step:.3f}")
    progress("isolation[eager]", 0, 3)
    lines = out.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == [
        "tensorcad: training 1/1000", *(f"tensorcad: training {k}/1000" for k in range(100, 1001, 100)),
        "tensorcad: isolation[eager] 0/3"]


def test_plain_progress_keeps_one_clock_when_the_stage_name_changes(monkeypatch):
    # certify's stage is "design: check", a new name at every check: the clock restarted at each, "0 s".
    import io
    import time

    from tensorcad.cli.torch_commands import _PlainProgress

    now = iter([100.0, 110.0, 130.0, 160.0])
    monkeypatch.setattr(time, "monotonic", lambda: next(now))
    out = io.StringIO()
    progress = _PlainProgress(out)
    for done, name in enumerate(("rules", "isolation[eager]", "isolation[flex]", "done")):
        progress(f"nano-sort: {name}", done, 3)
    assert out.getvalue().splitlines() == [
        "tensorcad: nano-sort: rules 0/3, 0 s",
        "tensorcad: nano-sort: isolation[eager] 1/3, 10 s, about 20 s left",
        "tensorcad: nano-sort: isolation[flex] 2/3, 30 s, about 15 s left",
        "tensorcad: nano-sort: done 3/3, 60 s"]


def test_verify_title_says_the_scale_once(only, capsys):
    only("forward")
    assert main(["verify", "nano-sort", "--seq", "64", "--params", "150000"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    from tensorcad.runtime.building.scaling import scale  # no torch: what the built model is scaled to

    import tensorcad

    params = tensorcad.analyze(scale(tensorcad.load("nano-sort"), 150_000)).params.total
    assert f"nano-sort at seq 64, documents averaging 96 tokens (spread 1), scaled to {params:,} parameters " \
           f"(asked for about 150,000), seed 0" in out
    assert out.count("parameters") == 1


@pytest.mark.parametrize("flag, last", [([], "eval[parity]"), (["--export"], "export")])
def test_certify_runs_export_only_when_asked(certify_only, capsys, flag, last):
    certify_only("rules")
    assert main(["certify", "nano-sort", "--seq", "128", "--json", *flag]) == 0
    (out,) = json.loads(capsys.readouterr().out)
    names = [c["name"] for c in out["checks"]]
    assert names[-1] == last and names.count("export") == (1 if flag else 0)
