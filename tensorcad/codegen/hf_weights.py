"""Weight loading for a model imported from Hugging Face: source text, like `prelude`.

A design that `tensorcad import-hf` wrote carries `hf.model_type`; its generated
module gets the weight table (`HF_WEIGHTS`, from `tensorcad.hf.weights`), the
runtime below, and three methods on `Model`: `load_hf_state_dict(state_dict)`,
`from_pretrained(directory)` and `hf_state_dict()`. Checkpoints are read with torch
alone (safetensors' layout is an 8-byte header length, a JSON header, raw bytes), so
the module still needs only torch, and nothing reaches the network.
"""

from __future__ import annotations

import json

from ..hf.weights import WeightMap
from . import layout

HF_RUNTIME = '''

# ---------------------------------------------------------------------------
# Hugging Face weights: transformers' state_dict names <-> this model's
#
# HF_WEIGHTS rows are (their key, our keys, transposed). Several keys of ours
# mean one fused tensor of theirs, laid end to end along dim 0 (Phi-3's
# qkv_proj, GPT-2's c_attn); "transposed" marks GPT-2's Conv1D, which stores
# (in, out). "{i}" stands for each layer; a hybrid's row names a fourth item,
# the layer type whose layers it is for. HF_TIED maps their keys for a table
# shared with the embedding to the embedding's key.
# ---------------------------------------------------------------------------


def _hf_rows(layer_types):
    """HF_WEIGHTS with {i} written out for every layer (of the row's layer type, if it names one)."""
    rows = []
    for theirs, ours, transposed, *only in HF_WEIGHTS:
        layers = [i for i, t in enumerate(layer_types) if not only or t == only[0]]
        for i in layers if "{i}" in theirs else [None]:
            fill = (
                (lambda s: s)
                if i is None
                else (lambda s, i=i: s.replace("{i}", str(i)))
            )
            rows.append((fill(theirs), tuple(fill(o) for o in ours), transposed))
    return rows


def copy_hf_weights(model, state_dict, layer_types):
    """Copy transformers' tensors into model; any key missing, unexpected or
    misshapen is one error naming every such key, and so is anything but a mapping of
    names to floating-point tensors."""
    # a 0-d tensor has no rows to compare: it met an IndexError below
    if not isinstance(state_dict, dict) or not all(
        isinstance(k, str)
        and isinstance(v, torch.Tensor)
        and v.is_floating_point()
        and v.dim() > 0
        for k, v in state_dict.items()
    ):
        raise ValueError(
            f"not {HF_CLASS}'s weights: expected a dict of names to floating-point "
            "tensors of at least one dimension"
        )
    params = dict(model.named_parameters())
    rows = _hf_rows(layer_types)
    expected = {theirs for theirs, _, _ in rows}
    missing = sorted(expected - set(state_dict))
    unexpected = sorted(set(state_dict) - expected - set(HF_TIED))
    if missing or unexpected:
        raise ValueError(
            f"not {HF_CLASS}'s weights for this model: "
            f"{len(missing)} missing ({', '.join(missing) or 'none'}); "
            f"{len(unexpected)} unexpected ({', '.join(unexpected) or 'none'})"
        )
    copies, misfits = [], []
    for theirs, ours, transposed in rows:
        tensor = state_dict[theirs]
        tensor = tensor.t() if transposed else tensor
        shapes = [params[o].shape for o in ours]
        if tensor.shape[1:] != shapes[0][1:] or tensor.shape[0] != sum(
            s[0] for s in shapes
        ):
            want = [tuple(s) for s in shapes]
            misfits.append(f"{theirs} {tuple(state_dict[theirs].shape)} (ours: {want})")
            continue
        copies.append((ours, tensor.split([s[0] for s in shapes], dim=0)))
    if misfits:
        raise ValueError(
            f"{len(misfits)} tensors do not fit this model: {'; '.join(misfits)}"
        )
    with torch.no_grad():
        for ours, parts in copies:
            for o, part in zip(ours, parts):
                params[o].copy_(part)


def as_hf_weights(model, layer_types):
    """model's weights under transformers' names, fused and transposed as theirs are."""
    params = dict(model.named_parameters())
    out = {}
    for theirs, ours, transposed in _hf_rows(layer_types):
        tensor = torch.cat([params[o].detach() for o in ours], dim=0)
        out[theirs] = (tensor.t() if transposed else tensor).contiguous()
    for theirs, embedding in HF_TIED.items():
        out[theirs] = out[embedding]  # one table, as transformers ties it
    return out


_SAFETENSORS_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}


def _regular_file(path):
    """path, if it is a regular file: a FIFO or a device named like a shard would hang
    or never end."""
    import os
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        raise ValueError(f"{path}: cannot be read ({e.strerror})") from None
    if not stat.S_ISREG(mode):
        raise ValueError(f"{path}: not a regular file")
    return path


def _header_entry(path, key, entry, data_size):
    """(dtype, shape, start, end) of one tensor, each checked against the file."""
    if not isinstance(entry, dict) or entry.get("dtype") not in _SAFETENSORS_DTYPES:
        raise ValueError(f"{path}: {key}: no dtype this reader knows")
    dtype = _SAFETENSORS_DTYPES[entry["dtype"]]
    shape, offsets = entry.get("shape"), entry.get("data_offsets")
    if not isinstance(shape, list) or not all(
        type(n) is int and 0 <= n < 2**48 for n in shape
    ):
        raise ValueError(f"{path}: {key}: shape is not a list of sizes")
    if not isinstance(offsets, list) or len(offsets) != 2:
        raise ValueError(f"{path}: {key}: data_offsets is not [start, end]")
    start, end = offsets
    if not (type(start) is int and type(end) is int and 0 <= start <= end <= data_size):
        raise ValueError(f"{path}: {key}: data_offsets lie outside the file")
    count = 1
    for n in shape:
        count *= n
    if (end - start) != count * torch.empty((), dtype=dtype).element_size():
        raise ValueError(f"{path}: {key}: {end - start} bytes for shape {shape}")
    return dtype, shape, start, end


def read_safetensors(path):
    """Every tensor of one .safetensors file, read with torch alone; a file that is
    not one (a header past the file, offsets outside it, sizes that disagree) is a
    ValueError naming it, before anything is allocated."""
    import json
    import os

    size = os.path.getsize(_regular_file(path))
    with open(path, "rb") as f:
        length = int.from_bytes(f.read(8), "little")
        if size < 8 or length > min(size - 8, 100 * 2**20):
            raise ValueError(
                f"{path}: not a safetensors file (header of {length} bytes)"
            )
        try:
            header = json.loads(f.read(length))
        except (ValueError, RecursionError):
            raise ValueError(
                f"{path}: not a safetensors file (its header is not JSON)"
            ) from None
        if not isinstance(header, dict):
            raise ValueError(
                f"{path}: not a safetensors file (its header is no object)"
            )
        entries = {
            key: _header_entry(path, key, entry, size - 8 - length)
            for key, entry in header.items()
            if key != "__metadata__"
        }
        data = bytearray(f.read())  # writable, so torch.frombuffer shares it quietly
    tensors = {}
    for key, (dtype, shape, start, end) in entries.items():
        count = (end - start) // torch.empty((), dtype=dtype).element_size()
        flat = (
            torch.frombuffer(data, dtype=dtype, count=count, offset=start)
            if count
            else torch.empty(0, dtype=dtype)
        )
        tensors[key] = flat.reshape(shape)
    return tensors


def _shards(directory, index):
    """The shard files an index names, each a file of the directory itself (never
    ``../x.safetensors``, never a path)."""
    import json
    import os

    try:
        with open(_regular_file(index)) as f:
            weight_map = json.load(f)["weight_map"]
    except (ValueError, RecursionError, KeyError, TypeError, UnicodeDecodeError):
        raise ValueError(f"{index}: not an index of shards (a weight_map)") from None
    if not isinstance(weight_map, dict) or not weight_map:
        raise ValueError(f"{index}: weight_map is not an object of shards")
    shards = set(weight_map.values())
    for shard in shards:
        if (
            not isinstance(shard, str)
            or os.path.basename(shard) != shard
            or shard in ("", ".", "..")
        ):
            raise ValueError(f"{index}: {shard!r:.80} is not a file of {directory}")
    return [_regular_file(os.path.join(directory, shard)) for shard in sorted(shards)]


def read_checkpoint(directory):
    """A local transformers checkpoint's state_dict: model.safetensors, its shards, or
    pytorch_model.bin; whatever is wrong with the files is one ValueError."""
    import os

    # None or 5 met os.path.join's TypeError
    if not isinstance(directory, (str, os.PathLike)):
        raise ValueError(
            f"directory: expected a local model directory, got {type(directory).__name__}"
        )
    single = os.path.join(directory, "model.safetensors")
    index = os.path.join(directory, "model.safetensors.index.json")
    legacy = os.path.join(directory, "pytorch_model.bin")
    if os.path.lexists(single):
        return read_safetensors(single)
    if os.path.lexists(index):
        state_dict = {}
        for shard in _shards(directory, index):
            state_dict.update(read_safetensors(shard))
        return state_dict
    if os.path.lexists(legacy):
        try:
            return torch.load(
                _regular_file(legacy), map_location="cpu", weights_only=True
            )
        except ValueError:
            raise
        # pickle's and torch's own types, for a file that is not a checkpoint
        except Exception as e:
            raise ValueError(
                f"{legacy}: not a checkpoint torch reads ({e})"[:300]
            ) from None
    raise FileNotFoundError(
        f"{directory}: no model.safetensors, model.safetensors.index.json or pytorch_model.bin"
    )
'''


def table_source(weights: WeightMap) -> str:
    """`HF_CLASS`, `HF_WEIGHTS` and `HF_TIED` as Python literals (all names are ours or fixed)."""
    q = json.dumps  # the names are dotted identifiers and "{i}": nothing to escape
    lines = [
        f"# transformers' {weights.hf_class}: whose state_dict names these are",
        f"HF_CLASS = {q(weights.hf_class)}",
        "HF_WEIGHTS = (",
    ]
    for e in weights.entries:
        ours = "(" + ", ".join(q(o) for o in e.ours) + ("," if len(e.ours) == 1 else "") + ")"
        block = [q(e.block)] if e.block is not None else []  # a checked name (design.schema.NAME)
        lines += _row([q(e.hf), ours, str(e.transpose), *block], [q(o) for o in e.ours])
    lines.append(")")
    tied = ", ".join(f"{q(k)}: {q(v)}" for k, v in weights.tied)
    lines.append(f"HF_TIED = {{{tied}}}")
    return "\n".join(lines) + "\n"


def _row(items: list[str], ours: list[str]) -> list[str]:
    """One HF_WEIGHTS row as black lays it out: one line, else its items on one
    indented line, else one item a line (the tuple of ours split likewise)."""
    rows = layout.call("    ", "(", items, "),")
    if len(rows) <= 3:
        return rows
    lines = ["    ("]
    for item in items:
        if len(f"        {item},") <= layout.WIDTH or len(ours) == 1:
            lines.append(f"        {item},")
        else:
            lines += layout.call("        ", "(", ours, "),")
    return lines + ["    ),"]


def model_methods(stack: str, layer_types: str | None = None) -> list[str]:
    """The methods `Model` gets, reading the layers from its stack `self.<stack>` (a hybrid's
    types from the Config field `layer_types` names)."""
    types = layer_types if layer_types is not None else f"[None] * len(self.{stack})"
    return [
        "",
        "    def load_hf_state_dict(self, state_dict):",
        '        """Load transformers\' weights (HF_CLASS\'s state_dict, under its names)."""',
        f"        copy_hf_weights(self, state_dict, {types})",
        "        return self",
        "",
        "    def hf_state_dict(self):",
        '        """This model\'s weights under transformers\' names; HF_CLASS.load_state_dict takes them."""',
        f"        return as_hf_weights(self, {types})",
        "",
        "    @classmethod",
        '    def from_pretrained(cls, directory, config=CONFIG, form="flex"):',
        '        """A model holding a local transformers checkpoint\'s weights (no hub access)."""',
        "        model = cls(config, form=form)",
        "        model.load_hf_state_dict(read_checkpoint(directory))",
        "        return model.eval()",
    ]
