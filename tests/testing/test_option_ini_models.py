"""ini tensorcad_models: a user's own factories collected as certificate items, each checked in a child.

One project with three factories: a tiny random Hugging Face LlamaForCausalLM
(returned bare: the harness adapts it), a hand-written document-masked module, and
a module whose forward kills its own process with SIGSEGV. The first two pass all
nine items (the forward's four, the training step's five), the third fails each
item that runs its model naming the signal and the check, and the session goes on
to report every item.
"""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

MODELS = """
    import os
    import signal

    import torch
    import torch.nn as nn


    class Masked(nn.Module):
        vocab = 32

        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.embed = nn.Embedding(32, 16)
            self.qkv = nn.Linear(16, 48)
            self.out = nn.Linear(16, 32)

        def forward(self, ids, documents, positions=None):
            x = self.embed(ids)
            q, k, v = self.qkv(x).split(16, dim=-1)
            T = ids.shape[1]
            keep = torch.ones(T, T, dtype=torch.bool).tril()[None] & (documents[:, :, None] == documents[:, None, :])
            return self.out((q @ k.transpose(-1, -2)).masked_fill(~keep, float("-inf")).softmax(-1) @ v)


    class Segfaults(Masked):
        def forward(self, ids, documents, positions=None):
            os.kill(os.getpid(), signal.SIGSEGV)


    def llama():
        import transformers  # here, not above: only this factory's child pays for importing it

        torch.manual_seed(0)
        config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                          num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128)
        return transformers.LlamaForCausalLM(config).eval()


    def masked():
        return Masked()


    def segfaults():
        return Segfaults()


    def collator():
        import transformers

        return transformers.DataCollatorWithFlattening(return_position_ids=True)


    def no_positions():
        return lambda examples: {"input_ids": [sum((e["input_ids"] for e in examples), [])]}


    def careless():  # a hand-written packer that copies the ids as labels: no -100 where a document begins
        def collate(examples):
            ids = sum((e["input_ids"] for e in examples), [])
            positions = sum((list(range(len(e["input_ids"]))) for e in examples), [])
            return {"input_ids": [ids], "position_ids": [positions], "labels": [ids]}

        return collate
"""

INI = """
    [pytest]
    tensorcad_models =
        my_models:llama
        my_models:masked
        my_models:segfaults
"""

FACTORIES = ("my_models:llama", "my_models:masked", "my_models:segfaults")
FORWARD = ("isolation", "isolation[boundaries]", "faithful", "isolation[gradients]")
STEP = ("step[labels]", "step[loss]", "step[gradients]", "step[accumulation]", "eval[parity]")
CHECKS = FORWARD + STEP


@pytest.fixture
def project(pytester):
    pytester.makepyfile(my_models=MODELS)
    pytester.makefile(".ini", pytest=INI)
    pytester.syspathinsert()
    return pytester


OPTIONS = ("-p", "no:cacheprovider", "--tensorcad-seq", "64", "--tensorcad-pack", "12", "--tensorcad-sample", "4")


def test_two_factories_pass_and_a_segfault_fails_only_its_items(project):
    # The segfaulting model's step items left out: each would cost a child of its own to die in.
    result = project.runpytest(*OPTIONS, "-v", "-k", "not (segfaults and step)")
    result.assert_outcomes(passed=18, failed=4)  # the session reported every item: it was not killed
    out = result.stdout.str()
    for factory in FACTORIES[:2]:
        for check in CHECKS:
            assert f"pytest.ini::{factory}::{check} PASSED" in out
    for check in FORWARD:
        assert f"pytest.ini::my_models:segfaults::{check} FAILED" in out
        assert f"died of SIGSEGV (signal 11) while running '{check}'" in out


def test_minus_m_isolation_selects_every_isolation_item(project):
    result = project.runpytest(*OPTIONS, "-m", "isolation", "--collect-only", "-q")
    selected = {line.strip() for line in result.stdout.lines if line.startswith("pytest.ini::")}
    assert selected == {f"pytest.ini::{f}::{c}" for f in FACTORIES for c in FORWARD if c != "faithful"}
    result = project.runpytest(*OPTIONS, "-m", "faithful", "--collect-only", "-q")
    assert {line.strip() for line in result.stdout.lines if line.startswith("pytest.ini::")} == {
        f"pytest.ini::{f}::faithful" for f in FACTORIES}
    result = project.runpytest(*OPTIONS, "-m", "step", "--collect-only", "-q")
    assert {line.strip() for line in result.stdout.lines if line.startswith("pytest.ini::")} == {
        f"pytest.ini::{f}::{c}" for f in FACTORIES for c in STEP}


def test_in_process_when_asked(project):
    project.makefile(".ini", pytest=INI.replace("        my_models:segfaults\n", ""))
    result = project.runpytest(*OPTIONS, "--no-tensorcad-subprocess", "-k", "masked")
    result.assert_outcomes(passed=9)


def test_the_projects_own_batch(project):
    # A project's tensorcad_batch fixture overrides the drawn one: here a batch with a
    # single document a row, so there is no boundary to move and the item skips, saying why.
    project.makeconftest("""
        import pytest
        import torch

        @pytest.fixture
        def tensorcad_batch():
            ids = torch.randint(0, 32, (2, 16), generator=torch.Generator().manual_seed(0))
            documents = torch.zeros(2, 16, dtype=torch.long)
            return ids, documents, torch.arange(16).repeat(2, 1)
    """)
    project.makefile(".ini", pytest=INI.replace("        my_models:llama\n", "").replace("        my_models:segfaults\n", ""))
    result = project.runpytest(*OPTIONS, "-rs")
    result.assert_outcomes(passed=8, skipped=1)
    result.stdout.fnmatch_lines(["*no boundary could be moved (every row holds one document)*"])


def test_a_factory_that_cannot_be_imported_fails_its_items_saying_so(project):
    project.makefile(".ini", pytest="[pytest]\ntensorcad_models = my_models:nothing\n")
    result = project.runpytest(*OPTIONS)
    result.assert_outcomes(failed=9)
    result.stdout.fnmatch_lines(["*could not make the model: tensorcad_models: 'my_models' has no 'nothing'*"])


def test_the_marker_names_a_model(project):
    project.makefile(".ini", pytest="[pytest]\n")
    project.makepyfile(test_mine="""
        import pytest
        from tensorcad.testing import assert_faithful

        pytestmark = pytest.mark.tensorcad(model="my_models:masked", seq=64, pack=12, sample=4)

        def test_certified(tensorcad_certificate):
            tensorcad_certificate()

        def test_by_hand(tensorcad_model, tensorcad_batch):
            ids, documents, positions = tensorcad_batch
            assert ids.shape == (2, 64) and int(ids.max()) < 32  # drawn over the model's own vocabulary
            assert_faithful(tensorcad_model, tensorcad_batch)
    """)
    result = project.runpytest("-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=10)
    for check in CHECKS:
        result.stdout.fnmatch_lines([f"*test_certified[[]{check.replace('[', '[[]')}[]] PASSED*"])
    result = project.runpytest("-p", "no:cacheprovider", "-m", "isolation", "--collect-only", "-q")
    assert sum("test_certified[" in line for line in result.stdout.lines) == 3
    # an id printed with a bracket inside the parameter's brackets is passed back as it was printed
    node = "test_mine.py::test_certified[isolation[boundaries]]"
    assert node in {line.strip() for line in result.stdout.lines}
    result = project.runpytest("-p", "no:cacheprovider", "-v", node)
    result.assert_outcomes(passed=1)


def test_the_users_collator_packs_the_batch(project):
    for collator, outcome in (("collator", {"passed": 9}), ("no_positions", {"failed": 9})):
        project.makefile(".ini", pytest=f"[pytest]\ntensorcad_models = my_models:masked\n"
                                        f"tensorcad_collator = my_models:{collator}\n")
        result = project.runpytest(*OPTIONS, "--no-tensorcad-subprocess")
        result.assert_outcomes(**outcome)
    result.stdout.fnmatch_lines(["*tensorcad.collator: the collator's batch holds no input_ids and position_ids*"])


def test_a_packer_that_writes_no_minus_100_fails_the_steps_items_naming_the_first_crossing(project):
    from tensorcad.packing import draw

    project.makefile(".ini", pytest="[pytest]\ntensorcad_models = my_models:masked\ntensorcad_collator = my_models:careless\n")
    result = project.runpytest(*OPTIONS, "--no-tensorcad-subprocess", "-m", "step")
    result.assert_outcomes(failed=5)  # labels across every boundary: each loss, gradient and eval trains on them
    documents, _ = draw(2, 64, 12, 1.0, 0)  # the rows the items are checked on, at the options' settings
    first = int((documents[0] == 0).sum())  # where row 0's second document begins
    result.stdout.fnmatch_lines([f"*step[[]labels[]]: labels cross documents*",
                                 f"*row 0: the label at position {first} (*, the first of document 1) is predicted "
                                 f"from position {first - 1}, the last of document 0: the collator must write -100*"])


def test_each_id_pytest_prints_runs_that_item_alone(project):
    # issue 42's friction: the id `pytest -v` printed for a collected model could not be passed back
    project.makefile(".ini", pytest=INI.replace("        my_models:segfaults\n", "").replace("my_models:llama\n", ""))
    collected = project.runpytest(*OPTIONS, "--collect-only", "-q")
    ids = [line.strip() for line in collected.stdout.lines if line.startswith("pytest.ini::")]
    assert ids == [f"pytest.ini::my_models:masked::{check}" for check in CHECKS]
    for node in (ids[1], ids[5], ids[-1]):  # isolation[boundaries], step[loss], eval[parity]: brackets in each
        result = project.runpytest(*OPTIONS, "--no-tensorcad-subprocess", "-v", node)
        result.assert_outcomes(passed=1)
        result.stdout.fnmatch_lines([f"{node.replace('[', '[[]')} PASSED*"])
