"""Round four's surfaces (#47) in the bounded worker: each case run in process, judged by one rule.

A case either returns (a result) or raises a ``TensorcadError`` whose text is one line of at most 300 characters
(refused); anything else escaping is a crash, and a case the strategy marked ``expect: "refused"`` that returns is
a wrong success. ``worker.py`` adds these to its surfaces, under its memory cap and alarm.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

MAX_REFUSAL = 300


def _judged(case: dict, run) -> dict:
    from tensorcad.errors import TensorcadError

    try:
        run()
    except TensorcadError as error:
        text = str(error)
        if "\n" in text or len(text) > MAX_REFUSAL or not text.strip():
            return {"ok": False, "why": f"a refusal of {len(text)} characters, {text.count(chr(10)) + 1} lines: "
                                        f"{text[:200]!r}", "outcome": "refused"}
        return {"ok": True, "why": None, "outcome": "refused"}
    if case.get("expect") == "refused":
        return {"ok": False, "why": "a wrong success: the case is known bad", "outcome": "result"}
    return {"ok": True, "why": None, "outcome": "result"}


def scheduler(case: dict) -> dict:
    from tensorcad.packing.corpus.scheduler import checked_address

    return _judged(case, lambda: checked_address(case["address"]))


def launcher(case: dict) -> dict:
    """The launcher's own main() up to the spawn: ``run`` is the spec's check alone (no rank starts here)."""
    from tensorcad.runtime.training import cp_run

    real = cp_run.run
    cp_run.run = _checked_only(cp_run.check_spec)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                code = cp_run.main(case["argv"])
            except SystemExit as exit_:  # --help exits 0 through argparse
                code = exit_.code
            except _Accepted:  # the spec passed every check: here the ranks would spawn
                code = 0
    finally:
        cp_run.run = real
    lines = [line for line in err.getvalue().splitlines() if line.strip()]
    if code == 2:
        ok = len(lines) == 1 and len(lines[0]) <= MAX_REFUSAL + 20 and "Traceback" not in lines[0]
        return {"ok": ok, "why": None if ok else f"exit 2 with {lines[:3]!r}", "outcome": "refused"}
    if code in (0, None) and case.get("expect") != "refused":
        return {"ok": True, "why": None, "outcome": "result"}
    return {"ok": False, "why": f"exit {code} (expect {case.get('expect')}): {lines[:2]!r}", "outcome": "result"}


class _Accepted(Exception):
    """The launcher's spec passed its checks (not a TensorcadError, so main() lets it through)."""


def _checked_only(check_spec):
    def run(spec):
        check_spec(spec)
        raise _Accepted()

    return run


def guard(case: dict) -> dict:
    from tensorcad.guard import Guard

    return _judged(case, lambda: _guard(Guard, case["kwargs"]))


def _guard(Guard, kwargs: dict) -> None:
    from tensorcad.errors import TensorcadError

    try:
        Guard(**kwargs)
    except TypeError as error:  # an unknown keyword is Python's own refusal of the call: a refusal all the same
        if "unexpected keyword argument" not in str(error):
            raise
        raise TensorcadError("kwargs", "an unknown keyword") from None


def hybrid(case: dict) -> dict:
    from tensorcad.hf import import_hf

    folder = Path("hybrid-case")
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(case["config"]))
    return _judged(case, lambda: import_hf(folder))


def mixer(case: dict) -> dict:
    from tensorcad.analysis.params import count_params
    from tensorcad.design import load
    from tensorcad.runtime.building.scaling import scale

    def run():
        design = load(case["design"])
        count_params(design)
        if case["scale"]:
            scale(design, 2_000_000)  # what codegen --scale, certify and MCP certify do first

    return _judged(case, run)


def step(case: dict) -> dict:
    import torch

    from tensorcad.runtime.certification import certify_step

    batch = {}
    for key, value in case["batch"].items():
        try:
            batch[key] = torch.tensor(value, dtype=getattr(torch, case["dtype"]) if key == "labels" else None)
        except Exception:  # noqa: BLE001 - what torch cannot make a tensor of reaches the certificate as given
            batch[key] = value
    settings = dict(case["settings"])
    only = settings.pop("only", ["step[labels]", "step[loss]"])
    return _judged(case, lambda: certify_step(_model(), batch, only=only, **settings))


_MODEL = []


def _model():
    """A tiny model of the plain contract, model(ids, documents, positions) -> logits, built once."""
    if not _MODEL:
        import torch
        from torch import nn

        class Tiny(nn.Module):
            vocab = 32

            def __init__(self):
                super().__init__()
                torch.manual_seed(0)
                self.embed, self.head = nn.Embedding(32, 8), nn.Linear(8, 32)

            def forward(self, ids, documents, positions=None):
                x = self.embed(ids)
                same = documents[:, :, None] == documents[:, None, :]
                keep = same & torch.ones(ids.shape[1], ids.shape[1], dtype=torch.bool).tril()
                weights = keep.float() / keep.float().sum(-1, keepdim=True)
                return self.head(weights @ x)

        _MODEL.append(Tiny())
    return _MODEL[0]


SURFACES = {"scheduler": scheduler, "launcher": launcher, "guard": guard, "hybrid": hybrid, "mixer": mixer,
            "step": step}
