"""What `cli` and `runtime_cli` share: the console, and the options the certifiers take.

Its own module so that `cli` (the parser) and `runtime_cli` (the runtime's
commands) each import it, and never each other.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

from tensorcad.errors import shown

EXIT_FAILED = 1  # a check failed
EXIT_BAD_INPUT = 2  # bad input: one line on stderr, never a traceback
PIPED_WIDTH = 200  # piped output is read by people too: wide enough that no number or op name is cut


def console():
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else PIPED_WIDTH)


_NUMBER = re.compile(r"[+-]?(\d[\d_]*)?(\.\d*)?([eE][+-]?\d+)?", re.ASCII)
MAX_NUMBER_TEXT = 64  # characters: past this it is not a number anyone typed (and int() of 5,000 digits raises)


def integer(text: str) -> int:
    """An integer option: 2000000, 2_000_000 and 2e6 alike; ASCII digits only (not '٣')."""
    if len(text) > MAX_NUMBER_TEXT or not _NUMBER.fullmatch(text) or not any(c.isdigit() for c in text):
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a number")
    value = float(text) if any(c in text for c in ".eE") else int(text)
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a whole number")
    return int(value)


def real(text: str) -> float:
    """A number option: 0.5, 1e-3, 15e12; ASCII digits only, finite."""
    if len(text) > MAX_NUMBER_TEXT or not _NUMBER.fullmatch(text) or not any(c.isdigit() for c in text):
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a number")
    value = float(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a finite number")
    return value


_ESCAPE = re.compile(r"\\(?:x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[\\nrt0abfv'\"]|(.?))", re.DOTALL)


def escaped(text: str) -> str:
    """Text with Python's backslash escapes read (``\\n``, ``\\x1e``, ``\\u2029``); other text kept as typed.

    ``unicode_escape`` on the whole text mangled ``é`` (it reads UTF-8 bytes as
    Latin-1) and raised on ``\\x`` or ``\\N``; here each escape is read alone
    and one that is not an escape is refused.
    """
    def read(match: re.Match) -> str:
        if match.group(1) is not None:
            raise argparse.ArgumentTypeError(f"{shown(match.group())} is not an escape (\\n, \\t, \\xHH, "
                                             "\\uHHHH, \\\\ ...)")
        try:
            return match.group().encode("ascii").decode("unicode_escape")
        except UnicodeDecodeError:  # \U past U+10FFFF
            raise argparse.ArgumentTypeError(f"{shown(match.group())} is no character") from None

    return _ESCAPE.sub(read, text)


def filename(text: str) -> str:
    """A file the user names to write: not empty (an empty --out was silently ignored)."""
    if not text or "\0" in text or len(text) > 4096:
        raise argparse.ArgumentTypeError(f"expected a file name, got {shown(text)}")
    return text


def packing_option(args: argparse.Namespace):
    """The Packing --pack, --pack-spread (and, where a command has them, --pack-lengths and
    --pack-strategy) say; None when packing is off."""
    from tensorcad.packing import packing_of

    return packing_of(args.pack, args.pack_spread, mean_path="--pack", spread_path="--pack-spread",
                      lengths=getattr(args, "pack_lengths", None), strategy=getattr(args, "pack_strategy", None),
                      lengths_path="--pack-lengths", strategy_path="--pack-strategy",
                      column=getattr(args, "pack_lengths_column", None))


def add_import_options(p: argparse.ArgumentParser) -> None:
    """--documents/--positions: how a Hugging Face config is imported where a command takes a DESIGN."""
    g = p.add_argument_group("a Hugging Face config or model directory")
    g.add_argument("--documents", action="store_true",
                   help="import it with the document mask: packed documents never see each other (as "
                        "DataCollatorWithFlattening's position_ids with use_cache=False give)")
    g.add_argument("--positions", action="store_true",
                   help="import it reading positions that restart per document")


def _is_file(source: str) -> bool:
    try:
        return Path(source).is_file()
    except (OSError, ValueError):  # a name too long for a path, or holding a NUL: no file, a preset name refused
        return False


def design_option(args: argparse.Namespace, source: str):
    """The design a DESIGN argument names, a Hugging Face config imported as --documents/--positions say.

    Packing asked of a config imported without --documents is said in one line on stderr:
    which packing the figures assume, and how to ask for the other."""
    from tensorcad.hf import load_design, looks_like_config

    from tensorcad.errors import TensorcadError, one_line

    documents, positions = getattr(args, "documents", False), getattr(args, "positions", False)
    try:
        design = load_design(source, documents=documents, positions=positions)
    except TensorcadError as error:
        # A design file's error names the file, as validate's does (a preset's or a config's already does).
        if not _is_file(source) or str(error).startswith(source) or error.path.startswith("--"):
            raise
        raise TensorcadError(f"{one_line(source)}: {error.path}" if error.path else one_line(source),
                             error.message) from None
    packed = getattr(args, "pack", None) is not None or getattr(args, "pack_lengths", None) is not None
    if packed and not documents and looks_like_config(source):
        sys.stderr.write(f"tensorcad: note: {source} imported without --documents: packed documents see each "
                         "other (transformers with a cache or a 2D attention_mask); for "
                         "DataCollatorWithFlattening's position_ids with use_cache=False, pass --documents "
                         "--positions\n")
    return design


def add_model_options(p: argparse.ArgumentParser) -> None:
    """certify's options for a user's own model: which, packed how, on what (and the import flags)."""
    g = p.add_argument_group("your own model (a Hugging Face model directory, or --model)")
    g.add_argument("--model", metavar="PKG.MODULE:FACTORY",
                   help="certify what this factory returns (a transformers model, or model_fn(ids, documents, "
                        "positions)), as ini tensorcad_models does")
    g.add_argument("--packing", choices=("position_ids", "mask", "flash_kwargs"), default="position_ids",
                   help="how you pass packed documents: the collator's position_ids (the cache as the config "
                        "says), a 4D document mask, or flash attention's cu_seq_lens (default position_ids)")
    g.add_argument("--call", choices=("trainer", "plain"), default="trainer",
                   help="how your loop calls the model, what every certificate runs and names: 'trainer' as "
                        "transformers' Trainer (and TRL) calls it, use_cache=False; 'plain' model(**batch), the "
                        "config's own use_cache, as a hand-written loop (default trainer)")
    g.add_argument("--collator", metavar="PKG.MODULE:FACTORY",
                   help="pack the batch with this collator (transformers:DataCollatorWithFlattening)")
    g.add_argument("--replica", action="store_true",
                   help="certify a small random model of the same config (2 layers of width 64) instead of "
                        "the weights; automatic past 200M parameters")
    g.add_argument("--documents", action="store_true",
                   help="certify the design tensorcad imports from the config, with the document mask, "
                        "instead of the model (the design checks)")
    g.add_argument("--positions", action="store_true", help="the imported design reads restarting positions")


def add_certify_options(p: argparse.ArgumentParser) -> None:
    """--seq/--pack/--pack-spread/--params/--seed: what `verify` and `certify` run at.

    The defaults are the runtime's one set (`tensorcad.runtime.building.settings.DEFAULTS`),
    the ones the pytest plugin uses too.
    """
    from tensorcad.runtime.building.settings import DEFAULTS  # no torch

    p.add_argument("--seq", type=integer, help=f"tokens a row (default {DEFAULTS['seq']}, or the scaled "
                                           "design's context if shorter)")
    p.add_argument("--pack", type=real, metavar="MEAN",
                   help=f"mean packed document length (default {DEFAULTS['pack']:g})")
    p.add_argument("--pack-spread", type=real, metavar="C",
                   help=f"document length spread: 0 fixed, 1 exponential (default {DEFAULTS['spread']:g})")
    p.add_argument("--params", type=integer, default=DEFAULTS["params"],
                   help=f"scale to about this many parameters (default {DEFAULTS['params']:,})")
    p.add_argument("--seed", type=integer, default=DEFAULTS["seed"],
                   help=f"seed of weights, ids, packing and perturbations (default {DEFAULTS['seed']})")
    p.add_argument("--export", action="store_true",
                   help="also torch.export both forms and run the exported programs (about 3 s a design)")
    p.add_argument("--each-document", action="store_true",
                   help="run the certificates one pass a document (the slower way, before group testing, "
                        "padded batches and weighted backward passes), to compare")


def settings_option(args: argparse.Namespace):
    """The runtime Settings the certify options give (unset ones: the runtime's defaults)."""
    from tensorcad.errors import TensorcadError
    from tensorcad.runtime.building.settings import DEFAULTS, Settings

    for name in ("params", "seed"):
        value = getattr(args, name)
        if value is None or value < (1 if name == "params" else 0):
            raise TensorcadError(f"--{name}", f"expected an integer >= {1 if name == 'params' else 0}, got {value!r}")
    if args.pack is None and args.pack_spread is None:
        pack, spread = DEFAULTS["pack"], DEFAULTS["spread"]
    else:
        packing = packing_option(args)  # a spread alone is refused, naming --pack-spread
        pack, spread = packing.mean, packing.spread
    try:
        return Settings(seq=args.seq, pack=pack, spread=spread, params=args.params, seed=args.seed,
                        method="each" if getattr(args, "each_document", False) else "grouped",
                        call=getattr(args, "call", None) or "trainer")
    except TensorcadError as error:
        raise TensorcadError("--" + error.path.removeprefix("tensorcad."), error.message) from None
