"""The guard's rl[logprobs] on a trainer's scored rows (guard/rl.py), fast: the rows as documents, the trainer's
signature as a log-prob function, and the report, each against what the test works out by hand."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tensorcad.errors import TensorcadError  # noqa: E402
from tensorcad.guard.rl import CHECK, check_scoring, scored_rows, whole_rows  # noqa: E402

MASK = torch.tensor([[0, 0, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1]])


def tiny_llama():
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      attn_implementation="sdpa", bos_token_id=None, eos_token_id=None,
                                      pad_token_id=None)
    return transformers.LlamaForCausalLM(config).eval()


def trl_score(shift=0):
    """TRL's signature: the log-probs of the last ``logits_to_keep`` tokens, each row run with its own mask and
    positions; ``shift`` scores each token with the log-prob of the one ``shift`` places later (prime-rl #1525)."""
    def score(model, ids, mask, keep):
        positions = (mask.long().cumsum(1) - 1).clamp(min=0)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False).logits
        logp = torch.log_softmax(logits[:, -keep - 1:-1].double(), -1)
        targets = torch.roll(ids[:, -keep:], -shift, 1)
        return logp.gather(-1, targets[..., None])[..., 0], None
    return score


def test_rows_are_left_padding_tokens_and_right_padding():
    ids = torch.arange(18).reshape(3, 6)
    rows = scored_rows(ids, MASK)
    assert rows["documents"].tolist() == [[0, 0, 1, 1, 1, 2], [1, 1, 1, 1, 2, 2], [0, 1, 1, 1, 1, 1]]
    assert rows["loss_mask"].tolist() == MASK.tolist() and rows["input_ids"] is ids
    assert rows["attention_mask"] is MASK


def test_whole_rows_asks_for_every_position_and_leaves_the_last_empty():
    asked = []

    def score(model, ids, mask, keep):
        asked.append(keep)
        return torch.ones(ids.shape[0], keep, dtype=torch.float64)

    out = whole_rows(score)(None, {"input_ids": torch.zeros(2, 5, dtype=torch.long), "attention_mask": None})
    assert asked == [4] and out.tolist() == [[1, 1, 1, 1, 0]] * 2 and out.dtype == torch.float64
    bare = whole_rows(lambda m, i, a, k: torch.ones(1, k))(None, {"input_ids": torch.zeros(1, 3), "attention_mask": 0})
    assert bare.tolist() == [[1, 1, 0]]


def test_a_clean_scorer_passes_and_an_off_by_one_fails_named():
    model = tiny_llama()
    ids = torch.randint(1, 64, (3, 6), generator=torch.Generator().manual_seed(1))
    report = check_scoring(trl_score(), model, ids, MASK)
    assert report.passed and report.paths == report.findings == [] and report.certificates[CHECK].passed and report.certificates[CHECK].sequences == 3
    bad = check_scoring(trl_score(shift=1), model, ids, MASK)
    assert len(bad.failures) == 1
    assert bad.failures[0] == f"rl[logprobs] failed on the model: {bad.certificates[CHECK].message()}"


def test_bad_rows_name_their_path():
    cases = [(lambda: scored_rows(torch.zeros(6), MASK), "input_ids", "expected (rows, tokens) ids, got "
              "torch.Size([6])"),
             (lambda: scored_rows([[1]], MASK), "input_ids", "expected (rows, tokens) ids, got None"),
             (lambda: scored_rows(torch.zeros(3, 6), MASK[:2]), "attention_mask", "expected the ids' shape (3, 6), "
              "got torch.Size([2, 6])"),
             (lambda: scored_rows(torch.zeros(3, 6), None), "attention_mask", "expected the ids' shape (3, 6), got "
              "None"),
             (lambda: scored_rows(torch.zeros(1, 4), torch.tensor([[1, 0, 1, 0]])), "attention_mask",
              "a row's tokens hold padding between them: a row is one sequence, padded before and after")]
    for n, (call, path, message) in enumerate(cases):
        with pytest.raises(TensorcadError) as error:
            call()
        assert (error.value.path, error.value.message) == (path, message), n
