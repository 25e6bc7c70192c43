"""verl's and OpenRLHF's own loss aggregation under rl[aggregation], run in a process of its own.

``python framework_losses.py verl|openrlhf`` prints one JSON line a case: the certificate's verdict on the
framework's own function, called as its training loop calls it on each micro-batch of each rank. A process
of its own because importing verl sets environment variables (``TORCHINDUCTOR_CACHE_DIR`` among them) and
loads some 3,800 modules: nothing of it must reach the test session.

OpenRLHF's ``openrlhf.models`` package imports its actor (flash-attn, CUDA only) in its ``__init__``; its
loss module is loaded from its own file, under its own name, with the package's ``__init__`` not run.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from rl_cases import packed_batch, padded_batch  # noqa: E402

from tensorcad.runtime.certification.rl.aggregation import check_aggregation  # noqa: E402

LENGTHS = [5, 17, 3, 9, 11, 2, 20, 8]  # unequal in every micro-batch, so every mode and every scope differ
C = 20  # Dr. GRPO's constant: the longest completion


def _mask(inputs) -> torch.Tensor:
    return inputs["completion_mask"].double()


def verl_cases():
    from verl.trainer.ppo.core_algos import agg_loss

    def global_info(mode, scale=C):
        # verl's engine (workers/utils/losses.py): dp_size and the global batch's tokens and sequences
        def loss(x, inputs, acc):
            return agg_loss(x, _mask(inputs), mode, dp_size=acc.ranks, batch_num_tokens=acc.global_tokens,
                            global_batch_size=acc.global_sequences, loss_scale_factor=scale)
        return loss

    def local(mode):
        # the older loop: agg_loss of the micro-batch alone, / gradient accumulation
        def loss(x, inputs, acc):
            return agg_loss(x, _mask(inputs), mode) / acc.micro_batches
        return loss

    modes = ("token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
    for mode in modes:
        yield f"verl {mode}, global batch info", global_info(mode), mode
    # the padded width as Dr. GRPO's constant (verl #5625): loss_scale_factor left unset
    yield "verl seq-mean-token-sum-norm, no loss_scale_factor", global_info("seq-mean-token-sum-norm", None), \
        "seq-mean-token-sum-norm"
    yield "verl token-mean, each micro-batch alone", local("token-mean"), "token-mean"
    yield "verl seq-mean-token-mean, each micro-batch alone", local("seq-mean-token-mean"), "seq-mean-token-mean"


def _openrlhf_loss_module():
    spec = importlib.util.find_spec("openrlhf")
    models = Path(spec.submodule_search_locations[0]) / "models"
    package = types.ModuleType("openrlhf.models")
    package.__path__ = [str(models)]
    sys.modules["openrlhf.models"] = package
    for name in ("utils", "loss"):
        spec = importlib.util.spec_from_file_location(f"openrlhf.models.{name}", models / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return module


def openrlhf_cases():
    loss_module = _openrlhf_loss_module()

    def policy(token_level_loss, global_info=True):
        # PolicyLoss with the new log-probs equal to the old: the ratio is 1, each token's loss is -advantage
        ppo = loss_module.PolicyLoss(token_level_loss=token_level_loss)

        def loss(x, inputs, acc):
            zeros = torch.zeros_like(x)
            info = dict(dp_size=acc.ranks, batch_num_tokens=acc.global_tokens,
                        global_batch_size=acc.global_sequences) if global_info else {}
            value = ppo(zeros, zeros, -x, action_mask=_mask(inputs), **info)[0]
            return value if global_info else value / acc.micro_batches
        return loss

    def aggregate(token_level_loss):
        def loss(x, inputs, acc):
            return loss_module.aggregate_loss(x, _mask(inputs), token_level_loss, dp_size=acc.ranks,
                                              batch_num_tokens=acc.global_tokens,
                                              global_batch_size=acc.global_sequences)
        return loss

    yield "openrlhf aggregate_loss token_level_loss=True", aggregate(True), "token-mean"
    yield "openrlhf aggregate_loss token_level_loss=False", aggregate(False), "seq-mean-token-mean"
    yield "openrlhf PolicyLoss token_level_loss=True", policy(True), "token-mean"
    yield "openrlhf PolicyLoss token_level_loss=False", policy(False), "seq-mean-token-mean"
    yield "openrlhf PolicyLoss token_level_loss=True, each micro-batch alone", policy(True, False), "token-mean"


def main(framework: str) -> None:
    cases = {"verl": verl_cases, "openrlhf": openrlhf_cases}[framework]
    batch = padded_batch(LENGTHS, width=C)
    for name, loss_fn, mode in cases():
        result = check_aggregation(loss_fn, batch, mode, constant=C if mode.endswith("norm") else None,
                                   micro_batches=2, ranks=2)
        print(json.dumps({"case": name, **result.to_json()}), flush=True)
    # pack rows handed to the function as its sequences (tunix #1662): one row is one sequence to it
    rows = packed_batch([[3, 9], [5, 2, 6], [12, 1], [4, 4, 7]])
    rows["completion_mask"] = rows.pop("loss_mask")
    if framework == "verl":
        from verl.trainer.ppo.core_algos import agg_loss

        name, fn = "verl agg_loss seq-mean-token-mean", lambda x, inputs, acc: agg_loss(
            x, _mask(inputs), "seq-mean-token-mean")
    else:
        aggregate_loss = _openrlhf_loss_module().aggregate_loss
        name, fn = "openrlhf aggregate_loss token_level_loss=False", lambda x, inputs, acc: aggregate_loss(
            x, _mask(inputs), False)
    result = check_aggregation(fn, rows, "seq-mean-token-mean")
    print(json.dumps({"case": f"{name}, on pack rows", **result.to_json()}), flush=True)

if __name__ == "__main__":
    main(sys.argv[1])
