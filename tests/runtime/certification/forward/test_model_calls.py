"""What a certificate does with what the model returns and raises: outputs read, errors one line naming torch's part."""

from __future__ import annotations

import re

import pytest
import torch

from tensorcad.testing import CertificateError, assert_faithful, assert_gradients_isolated, assert_isolated
from tensorcad.errors import TensorcadError
from tensorcad.packing import draw
from tensorcad.runtime.certification import ModelRaised, outputs_of


@pytest.fixture(scope="module")
def batch():
    documents, positions = draw(1, 32, 8, 1.0, seed=0)
    ids = torch.randint(0, 16, (1, 32), generator=torch.Generator().manual_seed(0))
    return ids, torch.from_numpy(documents), torch.from_numpy(positions)


class Flex(torch.nn.Module):
    """One document-masked attention through a compiled flex_attention."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(16, 8)
        from torch.nn.attention.flex_attention import flex_attention

        self.flex = torch.compile(flex_attention)

    def forward(self, ids, documents, positions=None):
        from torch.nn.attention.flex_attention import create_block_mask

        x = self.embed(ids)[:, None]  # (B, 1, T, 8)
        T = ids.shape[1]
        mask = create_block_mask(lambda b, h, q, kv: (documents[b, q] == documents[b, kv]) & (q >= kv),
                                 ids.shape[0], None, T, T, device="cpu")
        return self.flex(x, x, x, block_mask=mask)[:, 0]


def test_an_inductor_build_that_fails_on_this_cpu_is_one_line_naming_torchs_part(batch, monkeypatch):
    import torch._inductor.config as inductor

    monkeypatch.setattr(inductor.cpp, "cxx", ("/nonexistent/g++",))  # this CPU has no working C++ compiler
    try:
        with pytest.raises(ModelRaised) as caught:
            assert_isolated(Flex(), *batch)
        message = str(caught.value)
        assert "\n" not in message and isinstance(caught.value, TensorcadError)
        assert re.match(r"model_fn: the compiled flex path failed to build on this CPU \(inductor C\+\+\): run it "
                        r"uncompiled or on CUDA \(InductorError: .*InvalidCxxCompiler: No working C\+\+ compiler "
                        r"found", message), message
        assert type(caught.value.__cause__).__name__ == "InductorError"  # the traceback is kept, chained
    finally:
        torch._dynamo.reset()


def test_an_error_of_the_model_names_the_run_that_raised_it(batch):
    def crashes_alone(ids, documents, positions):
        if ids.shape[1] < 32:
            raise IndexError("index 31 is out of bounds for dimension 1 with size 9")
        return torch.nn.functional.one_hot(ids, 16).float()

    with pytest.raises(ModelRaised) as caught:
        assert_faithful(crashes_alone, *batch)
    assert str(caught.value) == ("model_fn (document 0 of row 0 run alone): raised IndexError: index 31 is out of "
                                 "bounds for dimension 1 with size 9")


def test_what_a_model_returns_is_read_by_name_and_a_loss_is_refused(batch):
    from transformers.modeling_outputs import BaseModelOutput, CausalLMOutput

    t = torch.zeros(1, 4, 3)
    assert outputs_of(CausalLMOutput(loss=torch.tensor(1.0), logits=t)) is t
    assert outputs_of(BaseModelOutput(last_hidden_state=t)) is t
    assert outputs_of((t, None)) is t and outputs_of({"logprobs": t}) is t
    with pytest.raises(TensorcadError, match=r"model_fn: returned a dict holding no tensor"):
        outputs_of({"loss": 1.0})
    scalar = lambda ids, documents, positions: ids.float().mean()  # noqa: E731 - a loss, not per-position outputs
    with pytest.raises(TensorcadError, match=r"model_fn: outputs shaped \(\) do not start with \(B, T\) = \(1, 32\)"):
        assert_faithful(scalar, *batch)


def test_per_position_outputs_of_any_trailing_shape_are_compared(batch):
    # (B, T) log-probabilities of the next token, (B, T, 2, 3) per-position tensors: position by position.
    embed = torch.nn.Embedding(16, 6)

    def per_token(ids, documents, positions):
        return embed(ids).log_softmax(-1)[..., 0]

    def grid(ids, documents, positions):
        return embed(ids).reshape(*ids.shape, 2, 3)

    for fn in (per_token, grid):
        assert assert_faithful(fn, *batch).largest == 0
        assert assert_isolated(fn, *batch, vocab=16).passed
    assert assert_gradients_isolated(grid, *batch, embedding=embed).passed
    with pytest.raises(CertificateError):
        assert_faithful(lambda i, d, p: embed(i).cumsum(1), *batch)  # reads the row before it


def test_a_check_whose_model_raises_fails_with_that_line_and_the_others_still_run(batch):
    # `tensorcad certify`, the collected items: a model that raises is that check's verdict, not bad input
    from tensorcad.runtime.building import Settings
    from tensorcad.runtime.certification import ModelSubject, run_check

    def crashes_alone(ids, documents, positions):
        if ids.shape[1] < 32:
            raise RuntimeError("a kernel this model needs is missing for this shape")
        return torch.nn.functional.one_hot(ids, 16).float()

    subject = ModelSubject(crashes_alone, Settings(), given_batch=batch)
    faithful = run_check(subject, "faithful")
    assert faithful.status == "failed" and faithful.message == (
        "model_fn (document 0 of row 0 run alone): raised RuntimeError: a kernel this model needs is missing for "
        "this shape")
    assert run_check(subject, "isolation").status == "passed"
