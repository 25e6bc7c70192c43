"""Sanitised identifiers: the only way text from a design reaches generated code.

A design's ids, ports and name are free text (quotes, newlines, unicode, keywords).
Generated code never copies them: every identifier is mapped onto
`[a-z_][a-z0-9_]*` (or CamelCase for classes), steered clear of keywords, builtins
and the names the generated module defines itself, and made unique in a fixed
order, so the same design always gets the same names.
"""

from __future__ import annotations

import builtins
import keyword
import re
import unicodedata

# Names a generated module defines or imports at module level, or uses as locals
# and arguments; a design id must never shadow them.
RESERVED = frozenset(
    {
        "math", "warnings", "dataclass", "torch", "nn", "F", "BlockMask",
        "create_block_mask", "flex_attention", "attend", "rotary_tables", "rotate",
        "rotate_half", "rotary_at", "config", "self", "x", "ids", "documents",
        "positions", "logits", "form", "b", "h", "q_idx", "kv_idx", "score", "B", "T",
        "C", "q", "k", "v", "y", "cos", "sin", "mask_mod", "score_mod", "block",
        "module", "name", "super", "model", "layer", "Config", "CONFIG", "Model",
        "FORMS", "COMPILE", "RUNTIME_PATHS", "MASKS", "BLOCK", "contextlib", "sys",
        # The contract Model states (model_class.py) and the recorder it names: a submodule called
        # `masks` or `recording_attend` replaced what the runtime reads, and the model failed at run time
        "masks", "recording_attend", "compile_pieces", "runtime_paths",
        # the mixers' runtime (codegen/runtime/mixers.py) and their forward's locals
        "causal_conv", "chunked_scan", "blocks", "z", "u", "c", "g", "dt", "xbc", "qkv", "beta",
        "A", "D", "G", "H", "H_k", "K", "N", "P", "V",
        # rotary positions beyond plain rope (codegen/rotary.py), where a design has one
        "rope_frequencies", "linear_frequencies", "llama3_frequencies", "yarn_frequencies",
        "longrope_frequencies", "dynamic_frequencies", "rotary_angles", "rotate_pairs", "rotate_part",
        # Hugging Face weight loading (codegen/hf_weights.py), in imported designs only
        "HF_CLASS", "HF_WEIGHTS", "HF_TIED", "read_checkpoint", "read_safetensors",
        "copy_hf_weights", "as_hf_weights", "load_hf_state_dict", "hf_state_dict", "from_pretrained",
    }
)
# nn.Module's own attributes (torch 2.x): a submodule or parameter named like one
# would shadow a method every model needs.
MODULE_ATTRIBUTES = frozenset(
    {
        "add_module", "apply", "bfloat16", "buffers", "call_super_init", "children",
        "compile", "cpu", "cuda", "double", "dump_patches", "eval", "extra_repr",
        "float", "forward", "get_buffer", "get_extra_state", "get_parameter",
        "get_submodule", "half", "ipu", "load_state_dict", "modules", "mtia",
        "named_buffers", "named_children", "named_modules", "named_parameters",
        "parameters", "register_backward_hook", "register_buffer",
        "register_forward_hook", "register_forward_pre_hook", "register_module",
        "register_parameter", "requires_grad_", "set_extra_state", "set_submodule",
        "share_memory", "state_dict", "to", "to_empty", "train", "training", "type",
        "xpu", "zero_grad",
    }
)
_FORBIDDEN = MODULE_ATTRIBUTES | frozenset(keyword.kwlist) | frozenset(keyword.softkwlist) | frozenset(dir(builtins))

_MAX_LEN = 40


def identifier(text: str, fallback: str = "node") -> str:
    """`text` as a lower_snake identifier: letters, digits and underscores only."""
    # NFKD then ASCII keeps the letters of accented names (é -> e) and drops the rest.
    ascii_text = unicodedata.normalize("NFKD", str(text)).encode("ascii", "ignore").decode()
    ascii_text = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", ascii_text).lower()
    word = re.sub(r"[^a-z0-9]+", "_", ascii_text).strip("_")[:_MAX_LEN].strip("_")
    if not word:
        word = fallback
    if word[0].isdigit():
        word = f"{fallback}_{word}"
    if word.startswith("_"):  # never a dunder or a private-looking name
        word = word.lstrip("_") or fallback
    if word in _FORBIDDEN or word in RESERVED:
        word = f"{word}_"
    return word


def class_name(text: str, fallback: str = "Node") -> str:
    """`text` as a CamelCase class name."""
    word = identifier(text, fallback.lower()).strip("_")
    camel = "".join(part[:1].upper() + part[1:] for part in word.split("_") if part)
    camel = camel or fallback
    if camel in _FORBIDDEN or camel in RESERVED:
        camel = f"{camel}_"
    return camel


class Namer:
    """Unique identifiers in one namespace, handed out in the order asked for.

    The same key always gets the same name; two keys whose text sanitises alike get
    `name`, `name_2`, `name_3`..., numbered by the order they were first asked for.
    """

    def __init__(self, taken: frozenset[str] | set[str] = frozenset()):
        self._taken = set(taken)
        self._names: dict[object, str] = {}

    def __call__(self, key: object, text: str | None = None, *, camel: bool = False) -> str:
        if key in self._names:
            return self._names[key]
        raw = str(key) if text is None else text
        base = class_name(raw) if camel else identifier(raw)
        name, n = base, 1
        while name in self._taken:
            n += 1
            name = f"{base}{n}" if camel else f"{base}_{n}"
        self._taken.add(name)
        self._names[key] = name
        return name

    def take(self, name: str) -> None:
        """Reserve a name the generator writes itself."""
        self._taken.add(name)


def title_text(text: str, limit: int = 80) -> str:
    """A design's name for a docstring: letters, digits, spaces and `._-` only."""
    ascii_text = unicodedata.normalize("NFKD", str(text)).encode("ascii", "ignore").decode()
    kept = re.sub(r"\s+", " ", re.sub(r"[^A-Za-z0-9 ._-]+", " ", ascii_text)).strip()
    if len(kept) > limit:
        kept = kept[: limit - 3].rstrip() + "..."
    return kept or "unnamed"


def comment_text(text: str, limit: int = 80) -> str:
    """Design text made safe for a comment or a docstring: one line of printable ASCII
    without quotes or backslashes, so it can close neither a string nor a line."""
    ascii_text = unicodedata.normalize("NFKD", str(text)).encode("ascii", "ignore").decode()
    kept = re.sub(r"[^A-Za-z0-9 ._()=<>!&|~+*/%,:\[\]-]+", " ", ascii_text)
    kept = re.sub(r"\s+", " ", kept).strip()
    if len(kept) > limit:
        kept = kept[: limit - 3].rstrip() + "..."
    return kept or "unnamed"
