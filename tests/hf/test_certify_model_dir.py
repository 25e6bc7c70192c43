"""`tensorcad certify MODEL_DIR`: the model certificates on transformers' model with the user's own weights.

Each directory is a tiny random model saved with ``save_pretrained``; each expected
verdict is established here first by running the same saved model's documents
alone with transformers (``alone_gaps``), never by the code under test.
"""

from __future__ import annotations

import json

import pytest
import torch
import transformers
from hf_setups import LENGTHS, WINDOW, alone_gaps, block_diagonal, collated, tiny_config

from tensorcad.cli import main

SMALL = ["--seq", "64", "--pack", "16"]  # 2 rows of 64 tokens: every certificate in a few seconds


def saved(tmp_path, family: str, use_cache: bool) -> str:
    config = tiny_config(family, "sdpa")
    config.use_cache = use_cache
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / family)
    return str(tmp_path / family)


def reloaded(directory: str):
    return transformers.AutoModelForCausalLM.from_pretrained(directory, local_files_only=True).eval()


def certified(capsys, *argv: str) -> tuple[int, list[dict], str]:
    code = main(["certify", *argv, "--json"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


def test_a_saved_llama_passes_every_model_certificate_on_its_own_weights(tmp_path, capsys):
    directory = saved(tmp_path, "llama", use_cache=False)
    model = reloaded(directory)
    ids, documents, positions, _ = collated()
    # Established first: packed by position_ids, each document equals itself alone.
    assert max(alone_gaps(model, lambda i, d, p: model(input_ids=i, position_ids=p), ids, documents, positions)) < 1e-5
    code, [report], _ = certified(capsys, directory, *SMALL)
    assert code == 0, report
    from tensorcad.runtime.certification import MODEL_CHECKS

    # Every model certificate: isolation, boundaries, faithful, gradients, and the training step's.
    assert MODEL_CHECKS[:4] == ("isolation", "isolation[boundaries]", "faithful", "isolation[gradients]")
    assert [(c["name"], c["status"]) for c in report["checks"]] == [(name, "passed") for name in MODEL_CHECKS]
    assert report["design"] == "llama"
    # It ran transformers' own weights: the gradients check names transformers' embedding module.
    assert report["checks"][3]["figures"]["embedding"] == "model.embed_tokens"


def test_the_cache_left_on_in_config_fails_and_says_use_cache_false(tmp_path, capsys, monkeypatch):
    import tensorcad.runtime.certification.registry as registry

    monkeypatch.setattr(registry, "MODEL_CHECKS", ("isolation",))  # the hint, not every certificate failing
    directory = saved(tmp_path, "llama", use_cache=True)
    model = reloaded(directory)
    ids, documents, positions, _ = collated()
    # Established first: the config's cache makes transformers attend across documents.
    assert max(alone_gaps(model, lambda i, d, p: model(input_ids=i, position_ids=p), ids, documents, positions)) > 1e-3
    code = main(["certify", directory, *SMALL, "--packing", "position_ids", "--call", "plain"])
    out = capsys.readouterr().out
    assert code == 1
    assert "isolation failed: documents are not isolated" in out
    assert "what to change: LlamaForCausalLM: pass use_cache=False" in out
    assert ("transformers' LlamaForCausalLM, its weights (90,432 parameters), packed by position_ids, called plain "
            "(model(**batch): use_cache=True as the config says)") in out


@pytest.mark.parametrize("family", ["llama", "mixtral"])
def test_a_freshly_saved_model_passes_under_the_trainers_call_and_fails_a_plain_call_naming_use_cache(
        tmp_path, capsys, family):
    from tensorcad.runtime.certification import MODEL_CHECKS

    config = tiny_config(family, "sdpa")
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / family)  # use_cache: true
    directory = str(tmp_path / family)
    assert json.loads((tmp_path / family / "config.json").read_text())["use_cache"] is True
    model = reloaded(directory)
    ids, documents, positions, _ = collated()
    # Established first, by transformers' forward: the Trainer's call keeps the documents apart, a plain one not.
    trainer = alone_gaps(model, lambda i, d, p: model(input_ids=i, position_ids=p, use_cache=False), ids, documents,
                         positions)
    plain = alone_gaps(model, lambda i, d, p: model(input_ids=i, position_ids=p), ids, documents, positions)
    assert max(trainer) < 1e-5 < 1e-3 < max(plain)
    code, [report], _ = certified(capsys, directory, *SMALL, "--call", "trainer")
    assert code == 0 and [c["status"] for c in report["checks"]] == ["passed"] * len(MODEL_CHECKS), report
    assert report["call"] == "trainer (as transformers' Trainer calls it: use_cache=False passed)"
    code, [report], _ = certified(capsys, directory, *SMALL, "--call", "plain")
    assert code == 1 and report["call"] == "plain (model(**batch): use_cache=True as the config says)"
    failed = {c["name"] for c in report["checks"] if c["status"] == "failed"}
    # Every certificate a packed forward decides fails; the labels, which no forward decides, hold.
    assert failed == set(MODEL_CHECKS) - {"step[labels]"}, report
    out = (main(["certify", directory, *SMALL, "--call", "plain"]), capsys.readouterr().out)[1]
    assert f"what to change: {type(model).__name__}: pass use_cache=False" in out


@pytest.mark.slow
def test_a_saved_mistral_passes_by_position_ids_and_fails_faithful_under_a_4d_mask(tmp_path, capsys):
    directory = saved(tmp_path, "mistral", use_cache=False)
    model = reloaded(directory)
    ids, documents, positions, _ = collated()
    assert max(LENGTHS) > WINDOW
    by_positions = alone_gaps(model, lambda i, d, p: model(input_ids=i, position_ids=p), ids, documents, positions)
    masked = alone_gaps(model, lambda i, d, p: model(input_ids=i, attention_mask=block_diagonal(d), position_ids=p),
                        ids, documents, positions)
    assert max(by_positions) < 1e-5 and max(masked) > 1e-3  # the 4D mask loses the window
    code, [report], _ = certified(capsys, directory, "--seq", "128", "--pack", "40")
    assert code == 0 and {c["status"] for c in report["checks"]} == {"passed"}, report
    code = main(["certify", directory, "--seq", "128", "--pack", "40", "--packing", "mask"])
    out = capsys.readouterr().out
    assert code == 1
    assert "faithful failed: documents are not computed as if alone" in out
    assert "isolation failed" not in out  # the mask keeps documents apart; it loses only the window
    assert f"the {WINDOW}-token sliding window is lost" in out


def test_flash_kwargs_under_sdpa_certifies_a_decoder(tmp_path, capsys, monkeypatch):
    # sdpa ignores cu_seq_lens, but with no mask and no cache transformers reads the flattened row's documents
    # from its restarting position_ids (issue 34): a decoder is certified, not refused
    import tensorcad.runtime.certification.registry as registry

    monkeypatch.setattr(registry, "MODEL_CHECKS", ("isolation",))  # the packing path, not every certificate
    directory = saved(tmp_path, "llama", use_cache=False)
    code, [report], _ = certified(capsys, directory, "--packing", "flash_kwargs", *SMALL)
    assert code == 0 and [(c["name"], c["status"]) for c in report["checks"]] == [("isolation", "passed")], report


def test_a_config_without_weights_is_certified_with_random_weights_and_says_so(tmp_path, capsys, monkeypatch):
    import tensorcad.runtime.certification.registry as registry

    monkeypatch.setattr(registry, "MODEL_CHECKS", ("isolation",))  # what is certified, not every certificate
    config = tiny_config("llama", "sdpa")
    config.use_cache = False
    config.save_pretrained(tmp_path / "bare")
    code = main(["certify", str(tmp_path / "bare"), *SMALL])
    out = capsys.readouterr().out
    assert code == 0 and "random weights, seeded (90,432 parameters; the directory holds no weights)" in out


def test_documents_certifies_the_imported_design_instead(tmp_path, capsys, monkeypatch):
    import tensorcad.views.answers as answers

    monkeypatch.setattr(answers, "certify_checks", lambda export=False: ("rules",))  # the design path, not its figures
    directory = saved(tmp_path, "llama", use_cache=False)
    code, [report], _ = certified(capsys, directory, "--documents", "--positions", "--seq", "64")
    assert code == 0 and [c["name"] for c in report["checks"]] == ["rules"]


MODULE = '''
import torch
import torch.nn as nn


class Mean(nn.Module):
    vocab = 32

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed, self.out = nn.Embedding(32, 8), nn.Linear(8, 32)

    def forward(self, ids, documents, positions=None):
        x = self.embed(ids)
        return self.out(x + x.mean(dim=1, keepdim=True))  # every position reads the whole row


def mean():
    return Mean()
'''


def test_model_certifies_what_a_factory_makes(tmp_path, capsys, monkeypatch):
    (tmp_path / "my_factories.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import my_factories

    model = my_factories.mean()
    ids = torch.randint(0, 32, (1, 8))
    documents = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1]])
    changed = ids.clone()
    changed[0, 0] = (ids[0, 0] + 1) % 32
    with torch.no_grad():  # established first: changing document 0 moves document 1
        assert (model(changed, documents)[0, 4:] - model(ids, documents)[0, 4:]).abs().max() > 0
    code, [report], _ = certified(capsys, "--model", "my_factories:mean", *SMALL)
    assert code == 1 and report["design"] == "my_factories:mean"
    assert report["checks"][0]["name"] == "isolation" and report["checks"][0]["status"] == "failed"
    assert main(["certify"]) == 2
    assert capsys.readouterr().err == ("tensorcad: certify: name a design, a model directory or "
                                       "--model pkg.module:factory\n")


def test_a_factory_that_raises_is_one_line(tmp_path, capsys, monkeypatch):
    (tmp_path / "my_broken.py").write_text("def model():\n    raise ValueError('no checkpoint')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["certify", "--model", "my_broken:model"]) == 2
    assert capsys.readouterr().err == "tensorcad: --model: my_broken:model() raised ValueError: no checkpoint\n"
    assert main(["certify", "--model", "my_broken:nothing"]) == 2
    assert capsys.readouterr().err == "tensorcad: --model: 'my_broken' has no 'nothing'\n"


def test_a_model_too_large_to_run_here_is_certified_as_a_replica_and_says_so(tmp_path, capsys, monkeypatch):
    import tensorcad.runtime.certification.subjects.pretrained as pretrained
    import tensorcad.runtime.certification.registry as registry

    monkeypatch.setattr(registry, "MODEL_CHECKS", ("isolation",))
    monkeypatch.setattr(pretrained, "MAX_PARAMS", 50_000)  # the tiny Llama's 90,432 are "too many" here
    directory = saved(tmp_path, "llama", use_cache=False)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *a, **k: pytest.fail("the weights were loaded to be refused"))
    assert main(["certify", directory, *SMALL]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("a replica with 2 layers of width 64, seeded (90,432 parameters; about 90,432 parameters are too many "
            "to run every certificate here)") in out


def test_a_replica_keeps_the_configs_kind_and_grouping_and_shrinks_its_sizes():
    from tensorcad.runtime.building import replica_config
    from tensorcad.runtime.certification.subjects.pretrained import REPLICA_VOCAB

    big = transformers.LlamaConfig(vocab_size=128_256, hidden_size=4096, intermediate_size=14_336,
                                   num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                                   max_position_embeddings=8192)
    small = replica_config(big, vocab=REPLICA_VOCAB)
    assert type(small) is transformers.LlamaConfig
    assert (small.num_hidden_layers, small.hidden_size, small.intermediate_size, small.vocab_size) == (2, 64, 128, 512)
    assert (small.num_attention_heads, small.num_key_value_heads, small.head_dim) == (4, 1, 16)  # 4:1 as 32:8
    assert small.max_position_embeddings == 8192
