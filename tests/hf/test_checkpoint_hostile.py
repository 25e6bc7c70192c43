"""A generated model's `from_pretrained` and `load_hf_state_dict` under hostile checkpoints (#32).

A FIFO shard hung; an index naming ``../x.safetensors`` was loaded; a header's sizes were allocated before they were
checked (MemoryError), and two dozen exception types reached the caller. Each is now the documented ValueError,
naming the file. The files are written here byte by byte (safetensors' layout: an 8-byte header length, a JSON
header, raw bytes), not by the reader under test.
"""

from __future__ import annotations

import json
import os
import struct
import threading

import pytest

torch = pytest.importorskip("torch")

import tensorcad  # noqa: E402
from tensorcad.hf import import_hf  # noqa: E402
from tensorcad.runtime import build  # noqa: E402

GPT2 = {"model_type": "gpt2", "n_embd": 16, "n_head": 2, "n_layer": 1, "vocab_size": 32, "n_positions": 16,
        "activation_function": "gelu"}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    directory = tmp_path_factory.mktemp("config")
    (directory / "config.json").write_text(json.dumps(GPT2))
    return build(tensorcad.load(import_hf(directory)), form="eager")


def safetensors(tensors: dict, header_extra: dict | None = None) -> bytes:
    header, data = {}, b""
    for name, tensor in tensors.items():
        raw = tensor.contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensor.shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    header.update(header_extra or {})
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def test_a_checkpoint_written_here_loads_exactly(model, tmp_path):
    state = {k: v.float() for k, v in model.hf_state_dict().items()}
    (tmp_path / "model.safetensors").write_bytes(safetensors({k: v + 1 for k, v in state.items()}))
    loaded = type(model).from_pretrained(str(tmp_path), form="eager").hf_state_dict()
    assert all(torch.equal(loaded[k], state[k] + 1) for k in state)


def test_a_fifo_shard_is_refused_without_blocking(model, tmp_path):
    os.mkfifo(tmp_path / "model.safetensors")
    outcome = {}

    def load():
        try:
            type(model).from_pretrained(str(tmp_path))
        except ValueError as e:
            outcome["error"] = str(e)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    thread.join(30)
    if thread.is_alive():  # unblock the reader so the process can end, then fail
        with open(tmp_path / "model.safetensors", "wb"):
            pass
        pytest.fail("from_pretrained blocked on a FIFO")
    assert "not a regular file" in outcome["error"]


@pytest.mark.parametrize("shard", ["../outside.safetensors", "/etc/passwd", "sub/x.safetensors", ".."])
def test_an_index_naming_a_file_outside_the_directory_is_refused(model, tmp_path, shard):
    directory = tmp_path / "model"
    directory.mkdir()
    (tmp_path / "outside.safetensors").write_bytes(safetensors({k: v.float() for k, v in
                                                                model.hf_state_dict().items()}))
    (directory / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"lm_head.weight": shard}}))
    with pytest.raises(ValueError, match="is not a file of"):
        type(model).from_pretrained(str(directory))


def header(entry: dict, data: bytes = b"\0" * 16) -> bytes:
    text = json.dumps({"t": entry}).encode()
    return struct.pack("<Q", len(text)) + text + data


@pytest.mark.parametrize("body, message", [
    (struct.pack("<Q", 2**62) + b"{}", "header of"),  # a header length past the file: allocated before
    (struct.pack("<Q", 4) + b"[11]", "its header is no object"),
    (struct.pack("<Q", 3) + b"{x}", "its header is not JSON"),
    (header({"dtype": "F32", "shape": [2**20, 2**20], "data_offsets": [0, 16]}), "16 bytes for shape"),
    (header({"dtype": "F32", "shape": [4], "data_offsets": [0, 2**40]}), "data_offsets lie outside the file"),
    (header({"dtype": "F32", "shape": [4], "data_offsets": [8, 4]}), "data_offsets lie outside the file"),
    (header({"dtype": "F33", "shape": [4], "data_offsets": [0, 16]}), "no dtype this reader knows"),
    (header({"dtype": "F32", "shape": "4", "data_offsets": [0, 16]}), "shape is not a list of sizes"),
    (header({"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}), "shape is not a list of sizes"),
    (header({"dtype": "F32", "shape": [4], "data_offsets": [0]}), "data_offsets is not"),
    (b"\1\0", "header of"),
], ids=["huge-header", "list-header", "bad-json", "huge-shape", "offsets-past", "offsets-reversed", "dtype",
        "shape-text", "shape-negative", "offsets-one", "short"])
def test_a_header_that_disagrees_with_its_file_is_one_value_error(model, tmp_path, body, message):
    (tmp_path / "model.safetensors").write_bytes(body)
    with pytest.raises(ValueError, match=message) as caught:
        type(model).from_pretrained(str(tmp_path))
    assert str(tmp_path / "model.safetensors") in str(caught.value)


def test_a_pytorch_model_bin_that_is_not_one_is_a_value_error(model, tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"not a pickle at all")
    with pytest.raises(ValueError, match="not a checkpoint torch reads"):
        type(model).from_pretrained(str(tmp_path))


@pytest.mark.parametrize("state", [None, [1, 2], {1: torch.zeros(1)}, {"lm_head.weight": "x"},
                                   {"lm_head.weight": torch.zeros(2, dtype=torch.int64)},
                                   {"lm_head.weight": torch.tensor(1.0)}],
                         ids=["none", "list", "int-key", "text-value", "int-tensor", "0-d"])
def test_load_hf_state_dict_refuses_what_is_not_a_state_dict_as_value_error(model, state):
    with pytest.raises(ValueError, match="expected a dict of names to floating-point tensors"):
        model.load_hf_state_dict(state)


@pytest.mark.parametrize("directory", [None, 5, 1.5])
def test_from_pretrained_of_no_path_is_a_value_error(model, directory):
    """Before: from_pretrained(None) and (5) raised os.path.join's TypeError (issue 47, round three)."""
    with pytest.raises(ValueError, match=f"directory: expected a local model directory, got {type(directory).__name__}"):
        type(model).from_pretrained(directory)


def test_a_0d_tensor_among_full_weights_is_a_value_error(model):
    """Before: a 0-d tensor under a weight's name reached tensor.shape[0]: IndexError (issue 47, round three)."""
    state = {name: tensor.clone() for name, tensor in model.hf_state_dict().items()}
    state[next(iter(state))] = torch.tensor(0.5)
    with pytest.raises(ValueError, match="floating-point tensors of at least one dimension"):
        model.load_hf_state_dict(state)
