"""The operating point on the command line: `analyze` and `rules` options, and the OperatingPoint they say.

Bad values name the option the user typed (`--seq`, `--pack`, `--cp`), not the
engine's field.
"""

from __future__ import annotations

import argparse
from typing import Any

from tensorcad.errors import TensorcadError

from .options import integer, packing_option, real

# Where the operating point names a field, the command line names its option.
OPTION_OF = {"seq": "--seq", "packing.mean": "--pack", "packing.lengths": "--pack-lengths",
             "packing.spread": "--pack-spread", "hardware": "--hardware", "gpus": "--gpus", "mfu": "--mfu",
             "pricePerGpuHour": "--price", "tokens": "--tokens", "trainDtype": "--train-dtype",
             "serveDtype": "--serve-dtype"}



def add_operating_point(p: argparse.ArgumentParser) -> None:
    from tensorcad.analysis.operating_point import COUNTS, DEFAULTS, HARDWARE
    from tensorcad.packing import STRATEGIES

    g = p.add_argument_group("operating point")
    g.add_argument("--seq", type=integer, help="tokens a sequence (default: the design's context)")
    g.add_argument("--pack", type=real, metavar="MEAN",
                   help="train on packed rows of documents of this mean length (default: off, one document a row)")
    g.add_argument("--pack-spread", type=real, metavar="C",
                   help="coefficient of variation of document lengths: 0 fixed, 1 exponential (default 1 with --pack)")
    g.add_argument("--pack-lengths", metavar="FILE",
                   help="train on packed rows of documents whose lengths a file holds: a histogram "
                        "(.json length -> count, .csv length,count) or a list (text, .npy, .parquet)")
    g.add_argument("--pack-lengths-column", metavar="NAME", help="the Parquet column of lengths (default length)")
    g.add_argument("--pack-strategy", choices=STRATEGIES + ("all",), metavar="S",
                   help="how rows are filled: stream (cut wherever they fall, the default), bfd, ffd "
                        "(best/first-fit decreasing), split (Ding et al.: split only what exceeds a row), "
                        "pad (one document a row); or as the libraries pack: trl-bfd, trl-bfd-split, "
                        "trl-wrapped (TRL's pack_dataset), torchtune, torchtune-split (PackedDataset); all (analyze): one "
                        "row a strategy")
    g.add_argument("--count", choices=COUNTS, default="kept",
                   help="count training attention from the scores the mask keeps (kept, the default) or "
                        "from the whole blocks a kernel computes (blocks); see docs/packing.md")
    by_case = {name.lower(): name for name in HARDWARE}  # h100 is H100: the names are not case-sensitive
    g.add_argument("--hardware", default=DEFAULTS["hardware"], choices=sorted(HARDWARE),
                   type=lambda text: by_case.get(text.lower(), text),
                   help=f"accelerator (default {DEFAULTS['hardware']})")
    g.add_argument("--gpus", type=integer, default=DEFAULTS["gpus"], help=f"accelerators (default {DEFAULTS['gpus']:,})")
    g.add_argument("--mfu", type=real, default=DEFAULTS["mfu"], help=f"model FLOP utilisation (default {DEFAULTS['mfu']})")
    g.add_argument("--price", type=real, default=DEFAULTS["price"], metavar="USD",
                   help=f"price per accelerator-hour (default {DEFAULTS['price']})")
    g.add_argument("--tokens", type=real, help="training tokens (default: Chinchilla's 20 per parameter)")
    g.add_argument("--train-dtype", default=DEFAULTS["train_dtype"], help=f"training dtype (default {DEFAULTS['train_dtype']})")
    g.add_argument("--serve-dtype", default=DEFAULTS["serve_dtype"], help=f"serving dtype (default {DEFAULTS['serve_dtype']})")
    from tensorcad.analysis.context_parallel.ranks import DEFAULT_SHARD, SHARDINGS

    g.add_argument("--cp", type=integer, metavar="N",
                   help="context parallelism: N ranks split each training row (default: off)")
    g.add_argument("--cp-shard", metavar="SHARD",
                   help=f"which rank holds which token: {', '.join(SHARDINGS)} (default {DEFAULT_SHARD} with --cp)")


def cp_option(args: argparse.Namespace):
    from tensorcad.analysis.context_parallel.ranks import DEFAULT_SHARD, ContextParallel

    if getattr(args, "cp", None) is None:
        if getattr(args, "cp_shard", None) is not None:
            raise TensorcadError("--cp-shard", "needs --cp (the number of ranks)")
        return None
    try:
        return ContextParallel(args.cp, args.cp_shard or DEFAULT_SHARD)
    except TensorcadError as e:
        raise TensorcadError(_CP_OPTIONS.get(e.path, e.path), e.message) from None


_CP_OPTIONS = {"cp.size": "--cp", "cp.shard": "--cp-shard"}


def operating_point(args: argparse.Namespace, design) -> Any:
    from tensorcad.analysis.operating_point import OperatingPoint, check_budget

    cp = cp_option(args)
    try:
        op = OperatingPoint(
            seq=args.seq if args.seq is not None else design.context,
            packing=packing_option(args), hardware=args.hardware, gpus=args.gpus, mfu=args.mfu,
            price_per_gpu_hour=args.price, tokens=args.tokens,
            train_dtype=args.train_dtype, serve_dtype=args.serve_dtype, count=args.count, cp=cp,
        )
        check_budget(design, op)
        return op
    except TensorcadError as e:
        if e.path in _CP_OPTIONS:  # the row does not split as --cp asks
            raise TensorcadError(_CP_OPTIONS[e.path], e.message) from None
        if e.path == "seq" and args.seq is None:
            raise TensorcadError("--seq", f"the design's context {design.context:,}: {e.message}") from None
        raise TensorcadError(OPTION_OF.get(e.path, e.path), e.message) from None
