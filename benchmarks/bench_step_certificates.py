"""What each training-step certificate costs, in forward and backward passes of the model, counted and timed.

The generated two-layer model of ``bench_certificates`` (dim 64, 4 heads, about 80k
parameters) in its eager form, under its own training loss (next-token
cross-entropy inside documents, ``token``), on 2 rows x 512 tokens of 96-token
documents (spread 1). The model is wrapped so that every forward pass, and every
backward pass through one, is counted, with the tokens it ran; each benchmark
times one certificate and, in the same test, one plain training step (a forward
and a backward of the packed batch). ``extra_info`` holds the ratio to that step
(the figure to read: it travels between machines, an absolute time does not),
the passes counted (forward calls; backward passes that reach the weights), and
the tokens run forward and taken back, over the batch's tokens (a plain step is
1 and 1). Nothing is asserted about time; each certificate must pass.

    python -m pytest benchmarks/bench_step_certificates.py -o python_files='bench_*.py' -p no:cacheprovider

Under ``--benchmark-disable`` (CI) the rows are 128 tokens: each certificate runs
once, as a test that it still runs.
"""

from __future__ import annotations

import time

import pytest

pytest.importorskip("torch")

from bench_certificates import CI_SEQ, MEAN, ROWS, SEQ, _design  # noqa: E402

CERTIFICATES = ("step[labels]", "step[loss]", "step[gradients]", "step[accumulation]", "eval[parity]")


class Counted:
    """A model_fn that counts its forward passes and their tokens, the backward passes that reach its weights,
    and the tokens whose outputs a backward took a gradient from."""

    def __init__(self, model):
        self.model, self.module = model, model.module  # .module: where the certificates find the parameters
        self.reset()
        next(self.module.parameters()).register_hook(self._backward)  # once a backward reaching the weights

    @property
    def form(self):
        return self.model.form

    @form.setter
    def form(self, value):
        self.model.form = value

    def __call__(self, ids, documents, positions=None):
        self.forwards += 1
        self.tokens += ids.numel()
        out = self.model(ids, documents, positions)
        if out.requires_grad:
            out.register_hook(lambda grad, n=ids.numel(): self._taken_back(n))
        return out

    def _backward(self, grad):
        self.backwards += 1

    def _taken_back(self, tokens: int) -> None:
        self.backward_tokens += tokens

    def reset(self):
        self.forwards = self.backwards = self.tokens = self.backward_tokens = 0


def _step(seq: int):
    from tensorcad.runtime.building.settings import Settings
    from tensorcad.runtime.building.subject import build_model, draw_batch
    from tensorcad.runtime.certification import next_token_labels

    settings = Settings(seq=seq, pack=MEAN, rows=ROWS, sample=None)
    model = build_model(_design(), settings, "eager")
    ids, documents, positions = draw_batch(model.design, settings)
    batch = {"input_ids": ids, "documents": documents, "position_ids": positions,
             "labels": next_token_labels(ids, documents)}
    return Counted(model), batch


def _certify(name, model, batch):
    from tensorcad.runtime.certification import certify_step, next_token_loss

    return certify_step(model, batch, loss=next_token_loss, shift="shifted", accumulation="num_items_in_batch",
                        only=[name]).results[name]


@pytest.mark.parametrize("name", CERTIFICATES)
def test_step_certificate_against_one_training_step(benchmark, name):
    import torch

    from tensorcad.runtime.certification import next_token_loss

    seq = CI_SEQ if benchmark.disabled else SEQ
    model, batch = _step(seq)

    def one_step():
        logits = model(batch["input_ids"], batch["documents"], batch["position_ids"])
        next_token_loss(logits, batch["labels"]).backward()

    model.module.train()
    one_step()  # warm
    step = min(_timed(one_step) for _ in range(5))
    model.module.zero_grad(set_to_none=True)
    model.module.eval()
    model.reset()
    result = _certify(name, model, batch)  # once, counted
    assert result.passed, result.message()
    tokens = batch["input_ids"].numel()
    passes = {"forwards": model.forwards, "backwards": model.backwards,
              "forward_tokens": round(model.tokens / tokens, 2),
              "backward_tokens": round(model.backward_tokens / tokens, 2)}
    benchmark.pedantic(_certify, args=(name, model, batch), rounds=1 if benchmark.disabled else 3, iterations=1)
    info = {"rows": ROWS, "seq": seq, "documents": sum(len(torch.unique(row)) for row in batch["documents"]),
            **passes, "train_step_s": step}
    if benchmark.stats is not None:
        info["train_steps"] = round(benchmark.stats.stats.mean / step, 1)  # its time in plain training steps
    benchmark.extra_info.update(info)


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start
