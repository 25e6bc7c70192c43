"""The RL guard in a real TRL GRPOTrainer run (issue 43): the trainer's log-prob function on the rows its loss
scores, held to the model on each row alone; a planted off-by-one (prime-rl #1525: the log-prob of token t
scored at t + 1) stops the run at its first audited step."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
trl = pytest.importorskip("trl", reason="TRL is an optional extra (pip install 'tensorcad[trl]')")
datasets = pytest.importorskip("datasets", reason="datasets is in the trl extra")

from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.guard import GuardError, check_scoring  # noqa: E402
from tensorcad.testing.integrations import TensorcadRLCallback  # noqa: E402


def tokenizer():
    from tokenizers import Tokenizer, models

    vocab = {f"t{i}": i for i in range(64)}
    return transformers.PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t0")),
                                                unk_token="t0", pad_token="t0", eos_token="t1")


class OffByOne(trl.GRPOTrainer):
    """Each completion token scored with the log-prob of the token after it (the last with the first's)."""

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        logps, entropies, aux = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        return torch.roll(logps, -1, dims=1), entropies, aux


def grpo(tmp_path, cls=trl.GRPOTrainer, steps=3):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                                      bos_token_id=None, eos_token_id=1, pad_token_id=0)
    args = trl.GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, per_device_train_batch_size=4,
                          num_generations=4, max_completion_length=6, max_steps=steps, report_to=[], logging_steps=1,
                          save_strategy="no")
    prompts = ["t2 t3", "t4 t5 t6 t7", "t8", "t9 t10 t11"] * 4  # prompts of unequal lengths: left padding
    return cls(model=transformers.LlamaForCausalLM(config), args=args, processing_class=tokenizer(),
               reward_funcs=lambda completions, **k: [float(len(c)) for c in completions],
               train_dataset=datasets.Dataset.from_dict({"prompt": prompts}))


def test_a_clean_grpo_run_is_checked_at_its_first_step_and_goes_on(tmp_path):
    trainer = grpo(tmp_path)
    callback = TensorcadRLCallback(trainer, verbose=False)
    trainer.add_callback(callback)
    trainer.train()
    assert trainer.state.global_step == 3
    [(step, report)] = callback.guard.reports
    assert step == 0 and report.passed
    result = report.certificates["rl[logprobs]"]
    assert result.sequences >= 4 and result.forwards <= 3 and result.largest < 1e-4


def test_an_off_by_one_stops_the_run_at_its_first_audited_step(tmp_path):
    trainer = grpo(tmp_path, OffByOne, steps=5)
    callback = TensorcadRLCallback(trainer, on_failure="stop", verbose=False)
    trainer.add_callback(callback)
    trainer.train()
    assert trainer.state.global_step == 1  # stopped after the step it audited, not at 5
    [(step, report)] = callback.guard.reports
    assert not report.passed and report.cause.startswith("rl[logprobs] failed on the model: the log-probs of the "
                                                         "packed batch are not the model's own on each sequence")
    with pytest.raises(GuardError, match=r"^tensorcad guard, step 0: rl\[logprobs\] failed"):
        raising = grpo(tmp_path, OffByOne, steps=5)
        raising.add_callback(TensorcadRLCallback(raising, verbose=False))
        raising.train()


def test_the_scoring_check_refuses_rows_it_cannot_read():
    score = trl.GRPOTrainer._get_per_token_logps_and_entropies
    ids = torch.ones(2, 5, dtype=torch.long)
    with pytest.raises(TensorcadError, match="^attention_mask: a row's tokens hold padding between them"):
        check_scoring(score, None, ids, torch.tensor([[1, 0, 1, 1, 1], [1, 1, 1, 1, 1]]))
    with pytest.raises(TensorcadError, match="^attention_mask: expected the ids' shape"):
        check_scoring(score, None, ids, torch.ones(2, 4))
    with pytest.raises(TensorcadError) as error:
        TensorcadRLCallback(object())
    assert str(error.value) == ("trainer: object has no _get_per_token_logps_and_entropies: the RL guard watches "
                                "TRL's log-prob function")


def test_a_run_ended_inside_an_audited_step_gets_its_own_function_back_and_quiet_means_quiet(tmp_path, capsys):
    from types import SimpleNamespace

    trainer = grpo(tmp_path)
    own = trainer._get_per_token_logps_and_entropies
    callback = TensorcadRLCallback(trainer, verbose=False)
    callback.on_step_begin(None, SimpleNamespace(global_step=0), None)
    assert trainer._get_per_token_logps_and_entropies != own  # watched during the audited step
    callback.on_train_end(None, SimpleNamespace(global_step=0), None)  # the run stopped before the step's end
    assert trainer._get_per_token_logps_and_entropies == own and callback._kept is None
    callback.on_step_end(None, SimpleNamespace(global_step=1), SimpleNamespace())  # nothing kept: nothing checked
    assert callback.guard.reports == []
    callback.guard.reports.append((0, None))
    callback.on_train_end(None, SimpleNamespace(global_step=1), None)
    assert capsys.readouterr().out == ""  # verbose=False prints no summary, reports or not


def test_warn_every_and_the_summary_and_the_trainer_s_own_function_back(tmp_path, capsys):
    trainer = grpo(tmp_path, OffByOne, steps=4)
    own = trainer._get_per_token_logps_and_entropies
    callback = TensorcadRLCallback(trainer, first=1, every=2, on_failure="warn")
    trainer.add_callback(callback)
    with pytest.warns(UserWarning) as caught:
        trainer.train()
    assert trainer.state.global_step == 4  # warned, never stopped
    assert [step for step, _ in callback.guard.reports] == [0, 2]  # the first step, then every second
    lines = [str(w.message) for w in caught if str(w.message).startswith("tensorcad guard")]
    assert [line.split(":")[0] for line in lines] == ["tensorcad guard, step 0", "tensorcad guard, step 2"]
    assert all(line == report.line(f"tensorcad guard, step {step}")
               for line, (step, report) in zip(lines, callback.guard.reports))
    # stacklevel 2: the warning points at the caller of the callback (the trainer's handler), not at the guard
    assert not any(w.filename.endswith(os.path.join("integrations", "rl.py")) for w in caught)
    # the trainer's own function is back after every audited step, and the guard's clock added them up
    assert trainer._get_per_token_logps_and_entropies == own and callback._kept is None
    assert 0 < callback.guard.seconds < 60
    assert callback.guard.summary() in capsys.readouterr().out
