"""Names of the plugin's command-line options, ini keys, markers and their defaults.

Held here, not spelled out in the hooks, so the plugin, the collector, the
docs and the tests all read one table (syrupy and hypothesis do the same).
The defaults are the runtime's (`tensorcad.runtime.building.settings.DEFAULTS`), and the
checks a design file becomes are the runtime's registry (`certification.CERTIFY`).
Importing this module imports nothing heavy.
"""

from __future__ import annotations

GROUP = "tensorcad"
GROUP_DESCRIPTION = "tensorcad: certify designs and the models generated from them"

# `pytest --tensorcad designs/` collects the design files under a directory.
COLLECT = "--tensorcad"
COLLECT_DEST = "tensorcad_collect"
INI_DESIGNS = "tensorcad_designs"

# A user's own models, collected: factories "pkg.module:factory", each run in a child process by default.
INI_MODELS = "tensorcad_models"
INI_COLLATOR = "tensorcad_collator"
# How the project's loop calls a Hugging Face model (tensorcad.hf.calls): what every model certificate runs.
INI_CALL = "tensorcad_call"
SUBPROCESS = "--tensorcad-subprocess"
NO_SUBPROCESS = "--no-tensorcad-subprocess"
SUBPROCESS_DEST = "tensorcad_subprocess"

# `pytest --tensorcad-guard`: every transformers / lightning Trainer a test builds gets the guard's callback.
GUARD = "--tensorcad-guard"
GUARD_DEST = "tensorcad_guard"

# The operating point and model every fixture and collected item uses unless a
# `tensorcad` marker says otherwise.
SEQ = "--tensorcad-seq"
PACK = "--tensorcad-pack"
SPREAD = "--tensorcad-spread"
PARAMS = "--tensorcad-params"
SEED = "--tensorcad-seed"
FORMS = "--tensorcad-forms"
ROWS = "--tensorcad-rows"
BLOCK_ROWS = "--tensorcad-block-rows"
SAMPLE = "--tensorcad-sample"


def __getattr__(name: str):
    # The defaults are the runtime's (tensorcad.runtime.building.settings: one set for verify,
    # certify and the plugin), read on first use so importing this module stays light.
    if name in ("DEFAULTS", "MARKER_KEYS", "FORM_NAMES"):
        from tensorcad.runtime import building

        return getattr(building, name)
    raise AttributeError(f"module 'tensorcad.testing.plugin.options' has no attribute {name!r}")


MARKERS = {
    "tensorcad": (
        "tensorcad(design=..., seq=512, pack=96, spread=1.0, params=1_000_000, seed=0, "
        "forms=('eager', 'flex')): configure the tensorcad_* fixtures of a test "
        "(design: a preset name or a .json/.yaml path relative to the test file or rootdir; "
        "pack=None turns packing off; model='pkg.module:factory': a user's model instead of a design; "
        "collator='pkg.module:factory': the batch that collator packs; call='trainer'|'plain': how your loop calls "
        "a Hugging Face model, as ini tensorcad_call)"
    ),
    "isolation": "tensorcad category: packed documents never see each other (what gates CI)",
    "faithful": "tensorcad category: each packed document computed as if it ran alone",
    "step": "tensorcad category: the training step (labels, loss, gradients, accumulation, eval) as on the "
            "documents alone",
    "closed_form": "tensorcad category: the engine's keys per query against a closed form",
    "block_counts": "tensorcad category: the engine's block counts against create_block_mask",
    "golden": "tensorcad category: analysis, rules and generated code against goldens under snapshots/",
    "export": "tensorcad category: torch.export of both forms runs to the model's logits (deselected unless "
              "-m is given: -m export)",
}

DESIGN_SUFFIXES = (".json", ".yaml", ".yml")


def _forms(text: str) -> tuple[str, ...]:
    from tensorcad.runtime.building import FORM_NAMES

    forms = tuple(f.strip() for f in text.split(",") if f.strip())
    bad = [f for f in forms if f not in FORM_NAMES]
    if bad or not forms:
        import argparse

        raise argparse.ArgumentTypeError(f"forms are a comma-separated list of {', '.join(FORM_NAMES)}")
    return forms


def _number(text: str, kind: type, words: str):
    import argparse

    try:
        return kind(text)
    except ValueError:  # argparse would say "invalid _pack value", naming this function
        raise argparse.ArgumentTypeError(f"expected a number or {words}, got {text!r}") from None


def _pack(text: str) -> float | None:
    return None if text.lower() in ("none", "off", "0") else _number(text, float, "'off'")


def _sample(text: str) -> int | None:
    return None if text.lower() in ("none", "all") else _number(text, int, "'all'")


def add_options(parser) -> None:
    """Register the `tensorcad` option group and the ini key (pytest's `parser`)."""
    from tensorcad.runtime.building import DEFAULTS  # no torch: the defaults every certifier uses

    group = parser.getgroup(GROUP, GROUP_DESCRIPTION)
    group.addoption(COLLECT, action="append", dest=COLLECT_DEST, default=[], metavar="DIR",
                    help="collect every design file (.json/.yaml) under DIR as checks "
                         "(rules, isolation, closed-form, block-counts, goldens, the training step; "
                         "export under -m export)")
    group.addoption(SEQ, type=int, default=None, metavar="N",
                    help=f"tokens a row (default {DEFAULTS['seq']}, or a design's context when shorter)")
    group.addoption(PACK, type=_pack, default=DEFAULTS["pack"], metavar="MEAN",
                    help=f"mean packed document length; 'off' for one document a row (default {DEFAULTS['pack']:g})")
    group.addoption(SPREAD, type=float, default=DEFAULTS["spread"], metavar="C",
                    help="coefficient of variation of document length: 0 fixed, 1 exponential (default 1)")
    group.addoption(PARAMS, type=int, default=DEFAULTS["params"], metavar="N",
                    help=f"scale designs to about N parameters before building them (default {DEFAULTS['params']:,})")
    group.addoption(SEED, type=int, default=DEFAULTS["seed"], metavar="N",
                    help="seed of weights, packings and perturbations (default 0)")
    group.addoption(FORMS, type=_forms, default=DEFAULTS["forms"], metavar="LIST",
                    help="forms tensorcad_model is parametrized over (default eager,flex)")
    group.addoption(ROWS, type=int, default=DEFAULTS["rows"], metavar="N",
                    help=f"rows in a tensorcad_batch (default {DEFAULTS['rows']})")
    group.addoption(BLOCK_ROWS, type=int, default=DEFAULTS["block_rows"], metavar="N",
                    help=f"rows whose block masks block-counts compares (default {DEFAULTS['block_rows']})")
    group.addoption(SAMPLE, type=_sample, default=DEFAULTS["sample"], metavar="N",
                    help=f"perturb at most N documents of the batch, seeded; 'all' for every one (default {DEFAULTS['sample']})")
    group.addoption(GUARD, action="store_true", dest=GUARD_DEST, default=False,
                    help="guard every transformers or lightning Trainer a test builds: its first batch audited, "
                         "the packing path recorded, the step certified on a replica; a failure fails the test")
    parser.addini(INI_DESIGNS, type="paths", default=[],
                  help="directories (or files) of design files to collect as tensorcad checks")
    group.addoption(SUBPROCESS, action="store_true", dest=SUBPROCESS_DEST, default=True,
                    help="check each collected model in a child process, so a crash fails its item (default)")
    group.addoption(NO_SUBPROCESS, action="store_false", dest=SUBPROCESS_DEST,
                    help="check collected models in this process (faster; a crash ends the session)")
    parser.addini(INI_MODELS, type="linelist", default=[],
                  help="model factories 'pkg.module:factory' to collect as isolation, isolation[boundaries], "
                       "faithful, isolation[gradients] and step[...] items")
    parser.addini(INI_COLLATOR, type="string", default="",
                  help="a collator factory 'pkg.module:factory': collected models are checked on the batch it packs")
    parser.addini(INI_CALL, type="string", default="",
                  help="how your loop calls a Hugging Face model, what its certificates run and name: 'trainer' "
                       "(as transformers' Trainer: use_cache=False; the default) or 'plain' (model(**batch): "
                       "the config's own use_cache)")


def settings_from_options(getoption) -> dict:
    """The Settings fields the command line sets, from pytest's ``config.getoption``."""
    return {
        "seq": getoption(SEQ), "pack": getoption(PACK), "spread": getoption(SPREAD),
        "params": getoption(PARAMS), "seed": getoption(SEED), "forms": getoption(FORMS),
        "rows": getoption(ROWS), "block_rows": getoption(BLOCK_ROWS), "sample": getoption(SAMPLE),
    }


def default_settings() -> dict:
    """What ``settings_from_options`` gives when no --tensorcad-* option is set."""
    from tensorcad.runtime.building import DEFAULTS

    return {"seq": None, **{k: DEFAULTS[k] for k in ("pack", "spread", "params", "seed", "forms", "rows",
                                                      "block_rows", "sample")}}
