"""The three certificates as plain functions, each on a model whose verdict is known by construction.

Hand-written modules whose flaw is written in (a backward that mixes positions, a
mask forgotten, positions counted through the row), and tiny random Hugging Face
models under the setups the issue names, with the expected verdict established by
running each document alone (the reference ``alone_fn`` below is transformers' own
unpacked forward, never the wrapper under test).
"""

from __future__ import annotations

import pytest
import torch

from tensorcad.testing import CertificateError, assert_faithful, assert_gradients_isolated, assert_isolated
from planted_models import VOCAB, TinyAttention
from tensorcad.packing import draw


@pytest.fixture(scope="module")
def batch():
    documents, positions = draw(2, 64, 12, 1.0, seed=0)
    ids = torch.randint(0, VOCAB, (2, 64), generator=torch.Generator().manual_seed(0))
    return ids, torch.from_numpy(documents), torch.from_numpy(positions)


def test_an_isolated_module_holds_all_three(batch):
    model = TinyAttention()
    report = assert_isolated(model, *batch, vocab=VOCAB)
    assert report.passed and report.boundaries[0].moves > 0 and report.boundaries[0].largest == 0
    faithful = assert_faithful(model, *batch)
    assert faithful.compared == faithful.documents and faithful.largest <= 1e-5
    gradients = assert_gradients_isolated(model, *batch)
    assert gradients.losses == gradients.documents and gradients.embedding == "embed"


def test_a_backward_that_leaks_passes_the_forward_and_fails_gradients(batch):
    model = TinyAttention(leaky_backward=True)
    assert assert_isolated(model, *batch, vocab=VOCAB).passed  # the forward is exact
    assert assert_faithful(model, *batch).passed
    assert model.training  # left as it was (nn.Module's default)
    model.eval()
    with pytest.raises(CertificateError, match=r"gradients cross documents\nthe loss on document \d+ of row \d+ "
                                               r"has gradient up to .* on the embeddings of document \d+") as caught:
        assert_gradients_isolated(model, *batch)
    report = caught.value.report
    assert not report.passed and report.leaks
    documents = batch[1]
    for leak in report.leaks:  # every leak lies in the row of its loss (MixBackward mixes a row)
        assert leak.leaked_row == leak.row and leak.leaked_document != leak.document
        assert int(documents[leak.leaked_row, leak.first_position]) == leak.leaked_document
    assert not model.training  # eval mode restored after the check's train mode


def test_a_forgotten_mask_fails_all_three(batch):
    model = TinyAttention(mask=False)
    with pytest.raises(CertificateError) as isolated:
        assert_isolated(model, *batch, vocab=VOCAB)
    assert isolated.value.report.leaks
    with pytest.raises(CertificateError, match=r"differs from the same document run alone by [\d.]+ at its "
                                               r"position \d+ \(tolerance 1e-05\)"):
        assert_faithful(model, *batch)
    with pytest.raises(CertificateError):
        assert_gradients_isolated(model, *batch)


def test_positions_counted_through_the_row_fail_boundaries_and_faithful(batch):
    model = TinyAttention(learned_positions=True)
    with pytest.raises(CertificateError, match=r"one token (shorter|longer) \(document \d+ then starts at") as caught:
        assert_isolated(model, *batch, vocab=VOCAB)
    report = caught.value.report
    assert not report.leaks and report.tokens[0].passed  # changing tokens alone sees nothing
    assert report.moved and all(m.largest > 1e-3 for m in report.moved)
    with pytest.raises(CertificateError) as faithful:
        assert_faithful(model, *batch)
    # the row's first document starts at 0 packed and alone: only the later ones differ
    assert {d.first for d in faithful.value.report.differences} and min(
        d.first for d in faithful.value.report.differences) > 0


def test_the_tolerance_is_the_callers(batch):
    model = TinyAttention(learned_positions=True)
    with pytest.raises(CertificateError) as caught:
        assert_faithful(model, *batch)
    worst = caught.value.report.worst()
    result = assert_faithful(model, *batch, atol=worst.largest * 1.01)
    assert result.tolerance == pytest.approx(worst.largest * 1.01) and result.largest == pytest.approx(worst.largest)


def test_a_sample_of_documents(batch):
    result = assert_gradients_isolated(TinyAttention(), *batch, sample=2, seed=1)
    assert result.losses == 2 < result.documents
    assert assert_faithful(TinyAttention(), *batch, sample=2).compared == 2


def test_a_failure_shows_the_message_not_the_harness_source(pytester):
    pytester.makepyfile(test_leaky="""
        import torch
        from tensorcad.testing import assert_gradients_isolated
        from tensorcad.packing import draw

        class Leaky(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = torch.nn.Embedding(8, 4)
            def forward(self, ids, documents, positions=None):
                x = self.embed(ids)
                return x + x.mean(dim=1, keepdim=True)  # every position sees the row

        def test_it():
            documents, positions = draw(1, 32, 8, 1.0, seed=0)
            ids = torch.randint(0, 8, (1, 32))
            assert_gradients_isolated(Leaky(), ids, torch.from_numpy(documents), torch.from_numpy(positions))
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "CertificateError: gradients cross documents" in out
    assert "check_gradient_isolation(" not in out and "def assert_gradients_isolated" not in out
    assert "__tracebackhide__" not in out


# --- Hugging Face: the setups the issue names ----------------------------------------------

transformers = pytest.importorskip("transformers")


def block_diagonal(documents: torch.Tensor) -> torch.Tensor:
    """The docs' 4D mask: (B, 1, T, T) additive, 0 where a query may see a key."""
    T = documents.shape[1]
    keep = (documents[:, :, None] == documents[:, None, :]) & torch.ones(T, T, dtype=torch.bool).tril()
    return torch.zeros(keep.shape).masked_fill(~keep, torch.finfo(torch.float32).min)[:, None]


@pytest.fixture(scope="module")
def hf_batch():
    documents, positions = draw(2, 128, 24, 1.0, seed=0)
    ids = torch.randint(0, 128, (2, 128), generator=torch.Generator().manual_seed(0))
    return ids, torch.from_numpy(documents), torch.from_numpy(positions)


def test_gpt2_with_a_block_diagonal_mask_and_positions_through_the_row(hf_batch):
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=256,
                                     bos_token_id=0, eos_token_id=0, attn_implementation="eager")
    gpt2 = transformers.GPT2LMHeadModel(config).eval()

    def model_fn(ids, documents, positions):  # no position_ids: GPT-2 counts 0..T-1 through the row
        return gpt2(input_ids=ids, attention_mask=block_diagonal(documents), use_cache=False)

    with pytest.raises(CertificateError) as isolated:
        assert_isolated(model_fn, *hf_batch, vocab=128)
    report = isolated.value.report
    assert report.tokens[0].passed and not report.leaks  # changing tokens alone: isolated
    assert report.moved and report.boundaries[0].worst().largest > 0.1
    with pytest.raises(CertificateError, match=r"document \d+ of row \d+ .* differs from the same document "
                                               r"run alone by") as faithful:
        assert_faithful(model_fn, *hf_batch)  # alone: the wrapper on one document, positions from 0
    assert faithful.value.report.worst().largest > 0.1
    assert assert_gradients_isolated(model_fn, *hf_batch).passed  # the mask holds in the backward too

    # The same verdicts from the registry's checks, what the collected items run.
    from tensorcad.testing.certificates import alone_function
    from tensorcad.runtime.certification.registry import MODEL_CHECKS, run_check
    from tensorcad.runtime.certification.subjects.model import ModelSubject
    from tensorcad.runtime.building.settings import Settings

    subject = ModelSubject(model_fn, Settings(sample=6), given_batch=hf_batch, alone=alone_function(model_fn, model_fn))
    status = {name: run_check(subject, name).status for name in MODEL_CHECKS}
    assert status == {"isolation": "passed", "isolation[boundaries]": "failed", "faithful": "failed",
                      "isolation[gradients]": "passed", "step[labels]": "passed",  # the batch's labels: no model run
                      # GPT-2 drops out 0.1 in train mode: the packed and lone runs would draw different masks
                      "step[loss]": "skipped", "step[gradients]": "skipped", "step[accumulation]": "skipped",
                      "eval[parity]": "failed"}  # eval mode drops nothing: the positions through the row show
    assert "drops out 0.1 of its inputs in train mode" in run_check(subject, "step[loss]").message


def test_mistral_adapted_with_its_window_is_faithful(hf_batch):
    from tensorcad.testing import hf_causal_lm

    torch.manual_seed(0)
    config = transformers.MistralConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                        sliding_window=16, attn_implementation="eager")
    mistral = transformers.MistralForCausalLM(config).eval()
    for model_fn in (hf_causal_lm(mistral, packing="mask"), mistral):  # the window kept; packed position_ids
        assert assert_isolated(model_fn, *hf_batch).passed
        result = assert_faithful(model_fn, *hf_batch)
        assert result.compared == result.documents and result.largest <= 1e-5
        assert assert_gradients_isolated(model_fn, *hf_batch).passed


def test_mistral_with_the_docs_4d_mask_loses_its_window(hf_batch):
    torch.manual_seed(0)
    config = transformers.MistralConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                        sliding_window=16, attn_implementation="eager")
    mistral = transformers.MistralForCausalLM(config).eval()

    def model_fn(ids, documents, positions):
        return mistral(input_ids=ids, attention_mask=block_diagonal(documents), position_ids=positions,
                       use_cache=False)

    assert assert_isolated(model_fn, *hf_batch, vocab=128).passed
    # The wrapper loses the window on one document too; the reference is the Mistral it holds, through its own
    # forward on each document alone (by default, as alone_fn="model" says it), and keeps it.
    with pytest.raises(CertificateError) as caught:
        assert_faithful(model_fn, *hf_batch)
    assert [d.largest for d in caught.value.report.differences] == [
        d.largest for d in pytest.raises(CertificateError, assert_faithful, model_fn, *hf_batch,
                                         alone_fn="model").value.report.differences]
    report = caught.value.report
    lengths = {(d.row, d.document): d.length for d in report.differences}
    assert lengths and all(length > 16 for length in lengths.values())  # only documents longer than the window
    worst = report.worst()
    assert f"document {worst.document} of row {worst.row}" in str(caught.value)
    assert f"by {worst.largest:.3g} at its position {worst.position}" in str(caught.value)
    assert worst.position >= 16 and worst.largest > 0.01

    # The reference itself: the same documents alone through Mistral's own forward, windowed.
    ids, documents, positions = hf_batch
    row, first, length = worst.row, worst.first, worst.length
    alone = mistral(input_ids=ids[row:row + 1, first:first + length]).logits[0]
    packed = model_fn(ids, documents, positions).logits[row, first:first + length]
    assert (alone - packed).abs().max().item() == pytest.approx(worst.largest, rel=1e-6)
    assert (alone[:16] - packed[:16]).abs().max().item() < 1e-5  # within the window nothing was lost
