"""Hugging Face both ways: configs become designs, weight names map between the two, and models are certified.

- ``config``, ``families`` and ``decoders`` (with ``rope``, the rotary settings):
  `import_hf("path/to/config.json" or a model directory)`, the design `tensorcad import-hf` writes;
- ``weights``: `weight_map(design)`, the table a generated model loads transformers'
  weights through;
- ``calls``: how the user's loop calls a model (``trainer``, ``plain``), the call every
  certificate runs and names;
- ``adapters``: a Hugging Face model (or any model) as the ``model_fn(ids, documents,
  positions)`` the certificates call, packed the way it is trained (`hf_causal_lm`);
- ``vision``: samples with images packed in one row for Qwen2-VL / Qwen2.5-VL, the 4-row
  ``position_ids`` (text row, then mRoPE's three axes per sample) (`vision_rows`);
- ``diagnosis``: when a certificate fails on a Hugging Face model, the setting to blame
  (for a hybrid family, its stateful layers and what they need: ``hybrid.packing``).

No torch and no transformers at import: a config is JSON, a weight map is data, and the
adapters import torch only when an adapted model runs. The harness re-exports the adapters.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import TensorcadError, shown
from .adapters import PACKINGS, adapt, call, document_mask, hf_causal_lm, is_encoder, is_hf_model, unwrapped
from .calls import CALLS, DEFAULT_CALL, call_kwargs, call_line, check_call
from .config import Disposition, Reader, looks_like_config, read_config
from .diagnosis import diagnose, diagnose_failure, reachable_hf_models
from .vision import VisionRows, vision_rows
from . import decoders  # noqa: F401  (registers its families' readers)
from . import experts  # noqa: F401  (and the mixtures of experts')
from .hybrid import families as _hybrid_families  # noqa: F401  (and the hybrids')
from .families import READERS, family
from .families import SUPPORTED as _FIRST

SUPPORTED = _FIRST + tuple(READERS)

__all__ = ["CALLS", "DEFAULT_CALL", "PACKINGS", "SUPPORTED", "Disposition", "adapt", "call", "call_kwargs",
           "call_line", "check_call", "design_from_config", "diagnose",
           "diagnose_failure", "dispositions", "document_mask", "hf_causal_lm", "import_hf", "is_encoder",
           "is_hf_model", "load_design", "looks_like_config", "reachable_hf_models", "unwrapped", "VisionRows",
           "vision_rows"]


def _read(config: dict[str, Any], where: str, documents: bool, positions: bool, name: str | None):
    if not isinstance(config, dict):
        raise TensorcadError(where, f"a config is an object, not {type(config).__name__}")
    r = Reader(config, where)
    model_type = config.get("model_type")
    build = family(model_type, r.path("model_type"))
    r.map("model_type", "hf.model_type (chooses the weight map)")
    r.common()
    if name is None:
        origin = config.get("_name_or_path")
        name = Path(origin).name if isinstance(origin, str) and origin.strip("/") else model_type
    design = build(r, model_type, name, documents, positions)
    r.finish()
    design["description"] = (
        f"Imported from a Hugging Face {model_type} config by tensorcad import-hf"
        + (", with the document mask" if documents else "")
        + (", reading positions that restart per document" if positions else "")
        + "."
    )
    design["hf"] = {"model_type": model_type, "carried": dict(sorted(r.carried.items()))}
    return design, r


def design_from_config(config: dict[str, Any], *, documents: bool = False, positions: bool = False,
                       name: str | None = None, where: str = "") -> dict[str, Any]:
    """The design (a dict, as a design file holds it) a config's model computes."""
    return _read(config, where, documents, positions, name)[0]


def dispositions(config: dict[str, Any]) -> dict[str, Disposition]:
    """Where each key of `config` goes: mapped (to a design path), carried or ignored (why)."""
    return _read(config, "", False, False, None)[1].dispositions


def import_hf(source: str | Path, *, documents: bool = False, positions: bool = False,
              name: str | None = None) -> dict[str, Any]:
    """The design of a `config.json`, or of a local model directory holding one."""
    config, where = read_config(source)
    if name is None:
        folder = Path(where).parent.name
        name = folder if folder and folder not in (".", "..") else None
        if name is None:
            origin = config.get("_name_or_path") if isinstance(config, dict) else None
            origin = Path(origin).name if isinstance(origin, str) and origin.strip("/") else None
            name = origin or (config.get("model_type") if isinstance(config, dict) else None)
        # Two imports of one config are two designs: their goldens and caches must not share a name.
        if isinstance(name, str):
            name += ("-documents" if documents else "") + ("-positions" if positions else "")
    return design_from_config(config, documents=documents, positions=positions, name=name, where=where)


def load_design(source, *, documents: bool = False, positions: bool = False):
    """`tensorcad.load`, but a Hugging Face config.json or model directory is imported first.

    What the CLI calls wherever it takes a DESIGN, so `analyze`, `rules`, `codegen` and
    `certify` read a model someone already has; ``documents`` and ``positions`` are
    `import_hf`'s (the CLI's ``--documents``, ``--positions``), for a config only."""
    from ..design import load

    if isinstance(source, (str, Path)) and looks_like_config(source):
        return load(import_hf(source, documents=documents, positions=positions))
    if documents or positions:
        flag = "--documents" if documents else "--positions"
        raise TensorcadError(flag, f"imports a Hugging Face config with that input; {shown(str(source))} is not "
                                   "a config.json or model directory (a design's inputs are its own)")
    return load(source)
