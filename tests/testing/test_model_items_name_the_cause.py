"""A failing model item says what moved and then the one cause: its hint, and no other.

Four wrappers of tiny random Hugging Face models, each with the fault people hit
(the cache at its default, an all-ones 2D mask, GPT-2 with a block-diagonal mask and
positions counted straight through the row, BERT handed packed position_ids), collected
from ``tensorcad_models`` and run as items. The report (junit XML) holds each item's
message: every failing item carries its setup's hint and none of the others'. Each
setup's leak is established by running its documents alone in tests/hf/test_hf_setups.py.
A failing ``tensorcad_certificate`` in a test of one's own shows the message, not the
harness's frames.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

pytest.importorskip("transformers")

MODELS = """
    import torch
    import transformers


    class Wrapper:
        # what a training loop calls: the model held, so the harness reads its vocabulary and diagnoses it
        def __init__(self, model, call):
            self.model, self.call = model, call

        def __call__(self, ids, documents, positions=None):
            return self.call(self.model, ids, documents, positions)


    def _tiny(cls, config_cls, **extra):
        torch.manual_seed(0)
        return cls(config_cls(vocab_size=64, num_hidden_layers=1, attn_implementation="sdpa", **extra)).eval()


    def _llama():
        return _tiny(transformers.LlamaForCausalLM, transformers.LlamaConfig, hidden_size=32, intermediate_size=64,
                     num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128)


    def block_diagonal(documents):
        T = documents.shape[1]
        keep = (documents[:, :, None] == documents[:, None, :]) & torch.ones(T, T, dtype=torch.bool).tril()
        return torch.zeros(keep.shape).masked_fill(~keep, torch.finfo(torch.float32).min)[:, None]


    def cache():
        return Wrapper(_llama(), lambda m, ids, d, p: m(input_ids=ids, position_ids=p).logits)


    def ones():
        return Wrapper(_llama(), lambda m, ids, d, p: m(input_ids=ids, attention_mask=torch.ones_like(ids),
                                                        position_ids=p, use_cache=False).logits)


    def straight():
        gpt2 = _tiny(transformers.GPT2LMHeadModel, transformers.GPT2Config, n_embd=32, n_head=2, n_positions=128,
                     bos_token_id=0, eos_token_id=0)
        return Wrapper(gpt2, lambda m, ids, d, p: m(input_ids=ids, attention_mask=block_diagonal(d), use_cache=False,
                                                    position_ids=torch.arange(ids.shape[1])[None]).logits)


    def encoder():
        bert = _tiny(transformers.BertForMaskedLM, transformers.BertConfig, hidden_size=32, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=128)
        return Wrapper(bert, lambda m, ids, d, p: m(input_ids=ids, position_ids=p).logits)
"""

HINTS = {"cache": "pass use_cache=False", "ones": "drop the all-ones attention_mask",
         "straight": "as when positions are counted through the row", "encoder": "is an encoder"}
# What fails: GPT-2's mask keeps documents apart, forward and backward; only where a document starts moves it.
FAILING = {"cache": {"isolation", "isolation[boundaries]", "faithful", "isolation[gradients]"},
           "ones": {"isolation", "isolation[boundaries]", "faithful", "isolation[gradients]"},
           "straight": {"isolation[boundaries]", "faithful"},
           "encoder": {"isolation", "isolation[boundaries]", "faithful", "isolation[gradients]"}}
OPTIONS = ("-p", "no:cacheprovider", "--no-tensorcad-subprocess", "--tensorcad-seq", "64", "--tensorcad-pack", "12",
           "--tensorcad-sample", "4")


@pytest.fixture
def project(pytester):
    pytester.makepyfile(faulty_models=MODELS)  # a name of its own: in-process runs keep imported modules
    pytester.makefile(".ini", pytest="[pytest]\ntensorcad_models =\n" + "".join(f"    faulty_models:{n}\n" for n in HINTS))
    pytester.syspathinsert()
    return pytester


def test_each_failing_item_carries_its_one_hint_and_no_other(project):
    # the four certificates' items (the step's, issue 26's, read a batch dict and have hints of their own)
    result = project.runpytest(*OPTIONS, "-k", "not step and not eval", "--junitxml=report.xml")
    cases = ET.parse(project.path / "report.xml").getroot().iter("testcase")
    seen = {}
    for case in cases:
        setup, check = case.get("classname").rsplit(":", 1)[1], case.get("name")
        failure = case.find("failure")
        seen[setup, check] = None if failure is None else failure.get("message")
    assert len(seen) == 16, sorted(seen)
    for (setup, check), message in seen.items():
        assert (message is not None) == (check in FAILING[setup]), (setup, check, message)
        if message is None:
            continue
        assert HINTS[setup] in message, (setup, check, message)
        for other, hint in HINTS.items():
            assert other == setup or hint not in message, (setup, check, other, message)
        assert "never restart" not in message
    result.assert_outcomes(passed=2, failed=14)


def test_a_failing_certificate_in_a_marked_test_shows_the_message_not_the_harness(project):
    project.makepyfile(test_mine="""
        import pytest

        @pytest.mark.tensorcad(model="faulty_models:cache", seq=64, pack=12, sample=2)
        def test_certified(tensorcad_certificate):
            tensorcad_certificate()
    """)
    result = project.runpytest("-p", "no:cacheprovider", "--no-tensorcad-subprocess", "-k",
                               "test_certified and not gradients and not step and not eval")
    result.assert_outcomes(failed=3)
    out = result.stdout.str()
    assert "pass use_cache=False" in out and "tensorcad_certificate()" in out  # the test's own line, the message
    for harness_source in ("def conclude", "def check(self", "raise AssertionError(message)", "tensorcad/testing/plugin/models.py"):
        assert harness_source not in out, harness_source
