"""rl[aggregation] on TRL's own GRPOTrainer (issue 43): every loss_type's loss, computed by the trainer's
``_compute_loss`` under 2 accumulation steps, is the mode TRL's documentation and tensorcad's table
(``RL_SETTINGS``) give it, on the one global batch: the clean counterparts of the planted loops.

The trainer is real (a tiny Llama, a tokenizer, a dataset, GRPOConfig with the loss_type). Only its forward is
replaced, by the log-probabilities the certificate draws: with advantages -1 and the old log-probabilities 0,
each token's loss term is exp(log p) = the drawn value, inside the clip range (0.9..1.1), so the loss TRL
aggregates is linear in it and the certificate reads each token's weight off the gradient. CISPO and VESPO
weigh the log-probability itself (the old ones the current, detached): there the drawn value is log p. SAPO's
term is a sigmoid of the ratio: its weights are the gradient of TRL's loss at ratio 1.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
trl = pytest.importorskip("trl", reason="TRL is an optional extra (pip install 'tensorcad[trl]')")
datasets = pytest.importorskip("datasets", reason="datasets is in the trl extra")

from rl_cases import padded_batch  # noqa: E402

from tensorcad.runtime.certification.rl.aggregation import check_aggregation  # noqa: E402
from tensorcad.runtime.certification.rl.modes import setting  # noqa: E402

WIDTH = 12  # max_completion_length: Dr. GRPO's constant
LENGTHS = [5, 12, 3, 9, 11, 2, 12, 8]  # 8 completions, 2 micro-batches of 4
EQUAL = [6, 6, 6, 6, 6, 6, 6, 6]


def tokenizer():
    from tokenizers import Tokenizer, models

    vocab = {f"t{i}": i for i in range(64)}
    return transformers.PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t0")),
                                                unk_token="t0", pad_token="t0", eos_token="t1")


def trainer(loss_type: str, tmp_path):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                                      bos_token_id=None, eos_token_id=1, pad_token_id=0)
    args = trl.GRPOConfig(output_dir=str(tmp_path), loss_type=loss_type, use_cpu=True, bf16=False,
                          per_device_train_batch_size=4, num_generations=4, gradient_accumulation_steps=2,
                          max_completion_length=WIDTH, report_to=[], beta=0.0,
                          **({"epsilon_high": 5.0} if loss_type == "cispo" else {}))  # CISPO's recommended bound
    data = datasets.Dataset.from_dict({"prompt": ["t2 t3"] * 8})
    return trl.GRPOTrainer(model=transformers.LlamaForCausalLM(config), reward_funcs=lambda completions, **k: [0.0]
                           * len(completions), args=args, train_dataset=data, processing_class=tokenizer())


def trl_loss(grpo):
    """The micro-batch's loss as GRPOTrainer._compute_loss computes it, the drawn terms in place of its forward."""
    logp_weighed = grpo.loss_type in ("cispo", "vespo")

    def loss(x, inputs, acc):
        mask = inputs["completion_mask"]
        rows = mask.shape[0]
        logps = x if logp_weighed else torch.log(x)
        grpo._get_per_token_logps_and_entropies = lambda *a, **k: (logps, torch.zeros_like(logps), None)
        grpo.current_gradient_accumulation_steps = acc.micro_batches
        batch = {"prompt_ids": torch.full((rows, 2), 2), "prompt_mask": torch.ones(rows, 2, dtype=torch.long),
                 "completion_ids": inputs["completion_ids"], "completion_mask": mask,
                 "advantages": -torch.ones(rows, dtype=x.dtype),
                 "old_per_token_logps": x.detach() if logp_weighed else torch.zeros_like(x),
                 "num_items_in_batch": torch.tensor(float(acc.global_tokens))}
        if grpo.loss_type != "sapo":
            return grpo._compute_loss(grpo.model, batch)
        # SAPO's term is a sigmoid of the ratio, linear in nothing TRL takes: at ratio 1 (the old log-probabilities
        # the current) what it weighs each token by is its gradient there, read off TRL's own loss
        grpo._get_per_token_logps_and_entropies = lambda *a, **k: (x - x.detach(), torch.zeros_like(x), None)
        (weights,) = torch.autograd.grad(grpo._compute_loss(grpo.model, batch), x)
        return (weights * x).sum()

    return loss


def batch_of(lengths):
    batch = padded_batch(lengths, width=WIDTH)
    g = torch.Generator().manual_seed(len(lengths) + sum(lengths))
    return batch, 0.9 + 0.2 * torch.rand((len(lengths), WIDTH), generator=g, dtype=torch.float64)


@pytest.mark.parametrize("loss_type", ["grpo", "sapo", "dr_grpo", "dapo", "cispo", "vespo", "luspo", "bnpo"])
def test_every_loss_type_is_its_documented_mode_under_two_accumulation_steps(loss_type, tmp_path):
    grpo = trainer(loss_type, tmp_path)
    grpo.model.train()
    mode = setting("trl", loss_type).mode
    # the micro-batch-scoped modes hold with equal completions a micro-batch (TRL's fixed batch size); bnpo's
    # own token count with equal tokens a micro-batch, as TRL warns
    batch, loss_mat = batch_of(EQUAL if loss_type == "bnpo" else LENGTHS)
    result = check_aggregation(trl_loss(grpo), batch, mode, micro_batches=2, loss_mat=loss_mat,
                               constant=WIDTH if mode == "seq-mean-token-sum-norm" else None)
    assert result.passed, result.message()


def test_bnpo_over_micro_batches_of_unequal_tokens_is_each_micro_batchs_own_token_mean(tmp_path):
    grpo = trainer("bnpo", tmp_path)
    grpo.model.train()
    batch, loss_mat = batch_of(LENGTHS)
    result = check_aggregation(trl_loss(grpo), batch, "token-mean", micro_batches=2, loss_mat=loss_mat)
    assert not result.passed
    assert "it is `token-mean` taken in each micro-batch alone" in result.message()


def test_a_loss_type_declared_as_another_mode_fails_naming_the_one_it_is(tmp_path):
    grpo = trainer("dapo", tmp_path)
    grpo.model.train()
    batch, loss_mat = batch_of(LENGTHS)
    result = check_aggregation(trl_loss(grpo), batch, "seq-mean-token-mean", micro_batches=2, loss_mat=loss_mat)
    assert not result.passed and result.matched is not None
    assert "it is `token-mean`" in result.message()
