"""A Hugging Face `config.json` read key by key: every key is mapped, carried, ignored
with a reason, or refused with one line naming it.

Nothing is dropped silently. `Reader` records where each key went (`dispositions`),
and a key no family claims is refused, so a config from a newer transformers (or a
field someone added by hand) stops the import instead of vanishing from the design.
No torch and no transformers here: a config is JSON.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..design.formats import parse_json
from ..errors import TensorcadError, shown

MAX_CONFIG_BYTES = 1024 * 1024  # a config.json is a few KB


@dataclass(frozen=True)
class Disposition:
    how: str  # mapped | carried | ignored
    note: str  # mapped: where in the design; carried / ignored: why


# Keys PretrainedConfig writes for every model, whatever it is.
_IGNORED_COMMON = {
    "output_hidden_states": "what a forward call returns, not what it computes",
    "output_attentions": "what a forward call returns, not what it computes",
    "return_dict": "what a forward call returns, not what it computes",
    "use_cache": "the KV cache at generation; the logits are the same",
    "chunk_size_feed_forward": "chunks the MLP over positions; the same numbers",
    "id2label": "labels of sequence-classification heads, which a causal LM has none of",
    "label2id": "labels of sequence-classification heads, which a causal LM has none of",
    "problem_type": "the loss of sequence-classification heads only",
    "initializer_range": "how transformers initialises untrained weights; loaded weights replace them",
    "_name_or_path": "where transformers last read the config from",
    "pretraining_tp": "tensor-parallel slicing at pretraining; transformers 5 computes the same without it",
    "task_specific_params": "generation settings for pipelines, not what the model computes",
}
_CARRIED_COMMON = {
    "transformers_version": "the version that wrote the config",
    "dtype": "the checkpoint's storage dtype; analysis takes dtypes from the operating point",
    "torch_dtype": "the checkpoint's storage dtype (older name); analysis takes dtypes from the operating point",
    "bos_token_id": "a tokenizer id; a design has no tokenizer",
    "eos_token_id": "a tokenizer id; a design has no tokenizer",
    "pad_token_id": "a tokenizer id; a design has no tokenizer",
    "architectures": "the transformers class the weights belong to",
    "auto_map": "remote-code classes a repository offers; tensorcad imports the model_type's own architecture",
}
_DROPOUT = "dropout: noise at training time only, nothing at inference; carried, not modelled"


class Reader:
    """One config's keys, each taken once, with where it went."""

    def __init__(self, config: dict[str, Any], where: str = ""):
        self.config = config
        self.where = where
        self.dispositions: dict[str, Disposition] = {}
        self.carried: dict[str, Any] = {}

    def path(self, key: str) -> str:
        return f"{self.where}: {key}" if self.where else key

    def refuse(self, key: str, message: str):
        raise TensorcadError(self.path(key), message)

    def has(self, key: str) -> bool:
        return key in self.config

    def get(self, key: str, default: Any = None) -> Any:
        return self.config.get(key, default)

    def map(self, key: str, where: str, default: Any = None) -> Any:
        self.dispositions[key] = Disposition("mapped", where)
        return self.config.get(key, default)

    def carry(self, key: str, why: str) -> None:
        self.dispositions[key] = Disposition("carried", why)
        if key in self.config:
            self.carried[key] = self.config[key]

    def ignore(self, key: str, why: str) -> None:
        self.dispositions[key] = Disposition("ignored", why)

    def int(self, key: str, where: str, default: Any = None, low: int = 1) -> int:
        value = self.map(key, where, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            self.refuse(key, f"expected an integer of at least {low}, got {shown(value)}")
        return value

    def float(self, key: str, where: str, default: Any = None) -> float:
        value = self.map(key, where, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            self.refuse(key, f"expected a finite number, got {shown(value)}")
        return float(value)

    def flag(self, key: str, where: str, default: bool = False) -> bool:
        value = self.map(key, where, default)
        if not isinstance(value, bool):
            self.refuse(key, f"expected true or false, got {shown(value)}")
        return value

    def must_be(self, key: str, allowed: tuple, why: str, default: Any = None) -> Any:
        """A key the design follows only at these values (it computes nothing else)."""
        value = self.config.get(key, default)
        if value not in allowed:
            self.refuse(key, f"{shown(value)} is not supported: {why}")
        self.dispositions[key] = Disposition("ignored", f"at {', '.join(map(repr, allowed))}: {why}")
        return value

    def common(self) -> None:
        for key, why in _IGNORED_COMMON.items():
            self.ignore(key, why)
        for key, why in _CARRIED_COMMON.items():
            self.carry(key, why)
        for key in ("attention_dropout", "attn_pdrop", "resid_pdrop", "embd_pdrop", "summary_first_dropout"):
            self.carry(key, _DROPOUT)
        self.must_be("is_encoder_decoder", (False,), "tensorcad imports decoder-only causal LMs", False)
        self.must_be("add_cross_attention", (False,), "a decoder-only model attends to nothing else", False)
        archs = self.config.get("architectures")
        if archs is not None and (
            not isinstance(archs, list) or not all(isinstance(a, str) and a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs)
        ):
            self.refuse("architectures", f"{shown(archs)}: tensorcad imports causal LMs (…ForCausalLM, …LMHeadModel)")

    def finish(self) -> None:
        """Refuse the first key nothing claimed, naming it."""
        for key in self.config:
            if key not in self.dispositions:
                self.refuse(key, f"unknown to tensorcad's {self.config.get('model_type')} import; "
                                 "refused rather than dropped (remove it if it computes nothing)")


# transformers writes an infinite or NaN float (Mamba-2's time_step_limit is (0.0, inf)) as an
# object, {"__float__": "Infinity"}, for JSON readers that take no Infinity; it reads it back.
_SPECIAL_FLOATS = {"Infinity": float("inf"), "-Infinity": float("-inf"), "NaN": float("nan")}


def _special_float(obj: dict[str, Any]) -> Any:
    if len(obj) == 1 and obj.get("__float__") in _SPECIAL_FLOATS:
        return _SPECIAL_FLOATS[obj["__float__"]]
    return obj


def _special_floats(root: Any) -> Any:
    """``_special_float`` applied to every object of ``root`` (parse_json has no object hook), iteratively."""
    stack = [root]
    while stack:
        value = stack.pop()
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for key, item in list(items):
            if isinstance(item, dict):
                value[key] = _special_float(item)
            if isinstance(value[key], (dict, list)):
                stack.append(value[key])
    return _special_float(root) if isinstance(root, dict) else root


def read_config(source: str | Path) -> tuple[dict[str, Any], str]:
    """(the config's content, the path it was read from): a config.json or a model directory."""
    from ..design.load import read_bounded

    path = Path(source)
    try:
        is_dir = path.is_dir()
    except OSError as e:
        raise TensorcadError(shown(str(source)), f"cannot be read ({e.strerror})") from None
    if is_dir:
        path = path / "config.json"
        if not path.is_file():
            raise TensorcadError(str(source), "is a directory without a config.json")
    try:
        # A regular file only, capped while reading (a FIFO or /dev/zero named config.json is refused).
        text = read_bounded(path, str(path), MAX_CONFIG_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise TensorcadError(str(path), "no such file") from None
    except UnicodeDecodeError:
        raise TensorcadError(str(path), "is not UTF-8 text") from None
    except OSError as e:
        raise TensorcadError(str(path), f"cannot be read ({e.strerror})") from None
    # The bounded reader (depth, digits, repeated keys), then transformers' {"__float__": "Infinity"}.
    content = _special_floats(parse_json(text, str(path)))
    if not isinstance(content, dict):
        raise TensorcadError(str(path), f"a config is an object, not {type(content).__name__}")
    return content, str(path)


def looks_like_config(source: str | Path) -> bool:
    """Whether a CLI argument names a Hugging Face config (or model directory) rather than a design."""
    path = Path(source)
    try:  # a name too long for the file system (ENAMETOOLONG) is no config; the design loader words it
        if path.is_dir():
            return (path / "config.json").is_file()
        if path.suffix.lower() != ".json" or not path.is_file():
            return False
    except OSError:
        return False
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            return False
        content = parse_json(path.read_text(encoding="utf-8"), str(path))
    except (OSError, ValueError):  # TensorcadError too: the design loader then words what is wrong
        return False
    return isinstance(content, dict) and "model_type" in content and "nodes" not in content
