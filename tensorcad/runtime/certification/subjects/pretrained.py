"""A Hugging Face model directory as the subject of the model certificates: the user's weights, transformers' code.

`tensorcad certify MODEL_DIR` asks whether *that* model keeps packed documents
apart, so transformers loads it (local files only, float32, eval mode) and the
certificates call it the way the user trains it: packed as ``packing`` says,
called as ``call`` says (`tensorcad.hf.calls`: ``"trainer"`` passes
``use_cache=False`` as transformers' Trainer does; ``"plain"`` passes nothing
more, so the cache follows the model's config as in a hand-written loop, and
transformers reads packing from the positions only without a cache: a config
that leaves it on fails, and the failure names ``use_cache``):

- ``"position_ids"``: ``model(input_ids=..., position_ids=...)``, the collator's
  restarting positions and nothing else.
- ``"mask"``: the block-diagonal causal 4D mask a user builds (same document,
  not later), with the positions. A 4D mask replaces the mask transformers
  would build, sliding window included, so a windowed model loses its window:
  ``faithful`` sees it (each document run alone is ``model(input_ids=...)``).
- ``"flash_kwargs"``: the collator's ``cu_seq_lens_*`` (``hf_causal_lm``'s).

A directory without weights is built from its config with random weights, and
``replica`` (or a model over ``MAX_PARAMS``) builds a small random model of the
same config with fewer, narrower layers; the subject says which it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tensorcad.errors import TensorcadError
from tensorcad.hf import DEFAULT_CALL, PACKINGS, call_kwargs, check_call, hf_causal_lm, read_config

from tensorcad.runtime.building import replica_config
from .model import ModelSubject

MAX_PARAMS = 200_000_000  # past this a CPU run of every certificate takes too long: a replica is certified
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
REPLICA_VOCAB = 512  # the certificates draw their own ids: a replica's embedding need not be the model's


def has_weights(directory: str | Path) -> bool:
    path = Path(directory)
    return path.is_dir() and any((path / name).is_file() for name in WEIGHT_FILES)


@dataclass(frozen=True)
class Pretrained:
    """What was loaded, and what it is: the model, its subject, and the line saying which weights run."""

    model: Any
    subject: ModelSubject
    weights: str  # "its weights", "random weights (...)", "a replica (...)"
    packing: str


def load_model(source: str | Path, *, replica: bool = False) -> tuple[Any, str]:
    """(the model, which weights it holds): transformers' causal LM of a directory or config.json, float32, eval."""
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()  # a certificate's output, not a loader's bars
    _, where = read_config(source)  # one line for a missing or unreadable config
    directory = Path(where).parent
    try:  # the file itself: a config.json named otherwise is read too
        config = transformers.AutoConfig.from_pretrained(where, local_files_only=True)
    except (ValueError, OSError, KeyError) as error:
        raise TensorcadError(where, f"transformers cannot read this config ({str(error).splitlines()[0]})") from None
    weights = Path(source).is_dir() and has_weights(directory)  # a config file alone holds no weights
    estimate = _params_of(where)
    if not replica and weights and estimate is not None and estimate > MAX_PARAMS:
        # Counted from the config before any weight is read: an 8B checkpoint is never loaded to be refused.
        replica, weights = True, False
        why = f"about {estimate:,} parameters are too many to run every certificate here"
    elif not weights:
        why = "--replica" if replica else ("the directory holds no weights" if Path(source).is_dir()
                                           else "a config file holds no weights")
    else:
        why = "--replica"
    if not replica and weights:
        try:
            model = transformers.AutoModelForCausalLM.from_pretrained(directory, local_files_only=True,
                                                                      dtype=torch.float32)
        except (ValueError, OSError) as error:
            raise TensorcadError(str(directory), f"transformers cannot load this model "
                                                 f"({str(error).splitlines()[0]})") from None
        return model.eval(), f"its weights ({model.num_parameters():,} parameters)"
    if replica:
        config = replica_config(config, vocab=REPLICA_VOCAB)
    torch.manual_seed(0)
    try:
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    except ValueError as error:
        raise TensorcadError(where, f"transformers has no causal LM for this config "
                                    f"({str(error).splitlines()[0]})") from None
    kind = (f"a replica with {config.num_hidden_layers} layers of width {config.hidden_size}" if replica
            else "random weights")
    return model.eval(), f"{kind}, seeded ({model.num_parameters():,} parameters; {why})"


def _params_of(config_file: str) -> int | None:
    """The parameters tensorcad counts for the config (no torch); None when it cannot import it."""
    from tensorcad.analysis.params import count_params
    from tensorcad.hf import load_design

    try:
        return count_params(load_design(config_file)).total
    except TensorcadError:
        return None


def trained_model_fn(model: Any, packing: str, call: str = DEFAULT_CALL):
    """``model_fn(ids, documents, positions)`` calling ``model`` the way ``packing`` and ``call`` say (module doc)."""
    if packing not in PACKINGS:
        raise TensorcadError("--packing", f"unknown packing {packing!r} (packings: {', '.join(PACKINGS)})")
    extra = call_kwargs(model, check_call(call, "--call"))
    if packing == "flash_kwargs":
        try:
            return hf_causal_lm(model, packing, call=call)
        except TensorcadError as error:
            raise TensorcadError("--packing", error.message) from None
    import torch

    def model_fn(ids, documents, positions):
        if packing == "position_ids":
            return model(input_ids=ids, position_ids=positions, **extra).logits
        q = torch.arange(ids.shape[1])
        keep = (documents[:, :, None] == documents[:, None, :]) & (q[:, None] >= q[None, :])
        mask = torch.zeros(keep.shape).masked_fill(~keep, torch.finfo(torch.float32).min)[:, None]
        return model(input_ids=ids, attention_mask=mask, position_ids=positions, **extra).logits

    model_fn.model = model  # what the certificates read the vocabulary and the embedding from
    return model_fn


def pretrained_subject(source: str | Path, settings: Any, *, packing: str = "position_ids", replica: bool = False,
                       collator: Any = None) -> Pretrained:
    """The model of ``source`` as the certificates' subject, packed as ``packing`` says, called as ``settings.call``."""
    model, weights = load_model(source, replica=replica)
    model_fn = trained_model_fn(model, packing, settings.call)
    context = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", None)
    seq = settings.for_design(None).seq if settings.seq is not None or not context else min(512, context)
    if context and seq > context:
        raise TensorcadError("--seq", f"{seq} is more than the {context:,} positions the model holds")
    from dataclasses import replace

    subject = ModelSubject(model_fn, replace(settings, seq=seq), collator=collator, alone=_plain_call(model),
                           name=Path(source).name, call=settings.call)
    return Pretrained(model, subject, weights, packing)


def factory_subject(name: str, settings: Any, *, packing: str = "position_ids", collator: Any = None) -> Pretrained:
    """What ``"pkg.module:factory"`` makes as the subject: a transformers model packed as ``packing`` says and
    called as ``settings.call`` says, anything else as the ``model_fn(ids, documents, positions)`` it is
    (``tensorcad.hf.adapt``)."""
    from tensorcad.hf import adapt, is_hf_model

    made = made_by(name, "--model")
    settings = settings.for_design(None)
    if not is_hf_model(made):
        return Pretrained(made, ModelSubject(adapt(made), settings, collator=collator, name=name,
                                             call=settings.call), "what the factory made", "its own")
    subject = ModelSubject(trained_model_fn(made.eval(), packing, settings.call), settings, collator=collator,
                           alone=_plain_call(made), name=name, call=settings.call)
    return Pretrained(made, subject, "what the factory made", packing)


def made_by(name: str, option: str) -> Any:
    """What the factory ``"pkg.module:factory"`` returns; its failure is one line naming the option."""
    from .model import import_factory

    factory = import_factory(name, option)
    try:
        return factory()
    except Exception as error:  # noqa: BLE001 - the user's code: one line, not a traceback
        raise TensorcadError(option, f"{name}() raised {type(error).__name__}: {error}") from None


def _plain_call(model: Any):
    def alone(ids, documents, positions):  # a document by itself is the model's own plain call
        return model(input_ids=ids, use_cache=False).logits

    return alone


def hints(pretrained: Pretrained) -> list[str]:
    """What to change, when a certificate failed: the setting transformers needs, named."""
    from tensorcad.hf import diagnose_failure

    lines = diagnose_failure(pretrained.subject.model_fn, *pretrained.subject.batch)
    window = getattr(getattr(pretrained.model, "config", None), "sliding_window", None)
    if pretrained.packing == "mask" and isinstance(window, int):
        lines.append(f"a 4D attention_mask replaces the mask transformers builds, so the {window}-token sliding "
                     "window is lost: add it to your mask (tensorcad.testing.hf_causal_lm(model, packing='mask') does), or "
                     "pack by position_ids")
    return lines
