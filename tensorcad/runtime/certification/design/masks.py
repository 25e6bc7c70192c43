"""The checks of the model's own masks against the engine: block-counts and kept-scores.

Every distinct mask the model runs (its `MASKS` table, its recorded `attend`
calls) is compared with the attention it belongs to, on the engine's rows: no
pairing by order, no fallback to the first mask.
"""

from __future__ import annotations

from typing import Any

from tensorcad.errors import TensorcadError
from tensorcad.runtime.building.subject import Subject

from ..outcome import Check, Skipped, failed, passed


def compared_masks(s: Subject) -> list[tuple[Any, Any]]:
    """(attention, ModelMask) for every distinct mask of the model, each with the attention it belongs to.

    Every attention of the design that keeps less than every score must be run
    with a mask the module's table ascribes to it; every mask the model runs must
    belong to an attention of the design. No pairing by order, no fallback.
    """
    from tensorcad.runtime.building.blockmask import model_masks

    attentions = [a for a, _ in s.small.attentions()]
    if not attentions:
        raise Skipped("the design has no attention")
    if all(a.keep is None for a in attentions):
        raise Skipped("every attention keeps every score: there is no mask to count")
    # The eager form: attend records the same mask_mod in either form, and flex at this one-row
    # batch would retrace FlexAttention for a second batch size (block-counts 0.24 s -> 0.09 s on nano-sort).
    model = s.model("eager")
    try:
        masks = model_masks(model.module, s.mask_inputs)
    except TensorcadError as error:
        if error.path != "model":
            raise
        raise AssertionError(error.message) from None  # the model breaks its own contract: it fails
    finally:
        model.form = "flex"  # the form every other check finds it in, as registry._isolation leaves it
    by_path = {a.path: a for a in attentions}
    pairs, covered = [], set()
    for mask in masks:
        owners = [by_path[p] for p in mask.attentions if p in by_path]
        if not owners:
            raise AssertionError(f"the model runs mask {mask.name!r}, which belongs to no attention "
                                 f"of {s.design.name} (its table says {list(mask.attentions)})")
        pairs.append((owners[0], mask))
        covered.update(a.path for a in owners)
    missing = [a.path for a in attentions if a.keep is not None and a.path not in covered]
    if missing:
        raise AssertionError(f"the design masks {missing[0]}, but the model ran no mask for it")
    return pairs


def block_agreements(s: Subject) -> list[tuple[Any, Any, Any]]:
    """(attention, ModelMask, BlockAgreement) for every distinct mask of the model, on the engine's rows."""
    from tensorcad.design.masks import BLOCK, reads_documents
    from tensorcad.runtime.building.blockmask import compare_blocks

    if s.settings.seq % BLOCK:
        raise Skipped(f"seq {s.settings.seq} is not a whole number of {BLOCK}-token blocks")
    out = []
    for attention, mask in compared_masks(s):
        packing = s.packing if reads_documents(attention) else None
        out.append((attention, mask, compare_blocks(attention, mask.make, s.settings.seq, packing,
                                                    seed=s.settings.seed, rows=s.settings.block_rows)))
    return out


def block_counts_check(s: Subject) -> Check:
    figures, lines, failures = {}, [], []
    for attention, mask, a in block_agreements(s):
        figures[mask.name] = {"attention": attention.path, **a.to_json()}
        line = (f"{mask.name} ({attention.path}): {a.rows} rows, {a.torch_full:,} full and "
                f"{a.torch_partial:,} partial blocks")
        if a.mismatched_rows:
            failures.append(f"{line} by create_block_mask, the engine {a.engine_full:,} and "
                            f"{a.engine_partial:,}: {len(a.mismatched_rows)} of {a.rows} rows differ, "
                            f"first row {a.mismatched_rows[0]}")
        elif not a.passed:
            failures.append(f"{line}; the engine's figure is {a.total_difference:.3%} apart "
                            f"(tolerance {a.tolerance:.3%})")
        else:
            lines.append(f"{line}, row by row as the engine counts; its figure {a.total_difference:.3%} "
                         f"apart (tolerance {a.tolerance:.2%})")
    if failures:
        return failed("block-counts", "create_block_mask and the engine disagree on " + "; ".join(failures),
                      figures)
    return passed("block-counts", "; ".join(lines), figures)


def kept_scores_check(s: Subject) -> Check:
    from tensorcad.design.masks import reads_documents
    from tensorcad.runtime.building.blockmask import compare_kept

    figures, lines, failures = {}, [], []
    for attention, mask in compared_masks(s):
        packing = s.packing if reads_documents(attention) else None
        k = compare_kept(attention, mask.make, s.settings.seq, packing, seed=s.settings.seed,
                         rows=s.settings.block_rows)
        figures[mask.name] = {"attention": attention.path, **k.to_json()}
        if k.mismatched_rows:
            failures.append(f"{mask.name}: counted one by one, {len(k.mismatched_rows)} rows differ from "
                            f"the engine's exact count, first row {k.mismatched_rows[0]}")
        elif not k.passed:
            failures.append(f"{mask.name}: the analysis's {k.analysis:.2f} keys a query is {k.difference:.2%} "
                            f"from the {k.counted:.2f} counted (tolerance {k.tolerance:.1%})")
        else:
            lines.append(f"{mask.name}: {k.counted:.2f} keys a query counted over {k.rows} rows; the "
                         f"analysis says {k.analysis:.2f} ({k.difference:.2%}, within {k.tolerance:.1%})")
    if failures:
        return failed("kept-scores", "; ".join(failures), figures)
    return passed("kept-scores", "; ".join(lines), figures)
