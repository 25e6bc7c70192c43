"""The modes table: each mode's weights by hand, and TRL's rows held to TRL's own source."""

from __future__ import annotations

import inspect
import re
from fractions import Fraction

import pytest

from tensorcad.errors import TensorcadError
from tensorcad.runtime.certification.rl.modes import SETTINGS, mode_of, setting, weights


def test_each_modes_weights_by_hand():
    counts = [3, 0, 5]  # the middle sequence holds no loss token
    assert weights("token-mean", counts) == (Fraction(1, 8), 0, Fraction(1, 8))
    assert weights("seq-mean-token-mean", counts) == (Fraction(1, 6), 0, Fraction(1, 10))
    assert weights("seq-mean-token-sum", counts) == (Fraction(1, 2), 0, Fraction(1, 2))
    assert weights("seq-mean-token-sum-norm", counts, 64) == (Fraction(1, 128), 0, Fraction(1, 128))
    assert weights("token-sum", counts) == (1, 0, 1)
    assert mode_of("sequence-level") == "seq-mean-token-mean"
    with pytest.raises(TensorcadError, match="constant"):
        weights("seq-mean-token-sum-norm", counts)
    with pytest.raises(TensorcadError, match="mask"):
        weights("token-mean", [0, 0])


def test_settings_by_framework():
    assert setting("trl", "dr_grpo").mode == "seq-mean-token-sum-norm"
    assert setting("verl", "seq-mean-token-sum").mode == "seq-mean-token-sum"
    assert setting("verl", "token-sum").mode == "token-sum" and setting("verl", "token-sum").scope == "global"
    assert setting("openrlhf", "True").mode == "token-mean"
    with pytest.raises(TensorcadError, match="framework"):
        setting("rllib", "x")


def test_trls_rows_are_every_loss_type_its_source_aggregates():
    grpo = pytest.importorskip("trl.trainer.grpo_trainer")
    source = inspect.getsource(grpo.GRPOTrainer._compute_loss)
    tail = source[source.index('mode = "train"'):]  # the aggregation branches, after the per-token loss
    branches = re.findall(r'self\.loss_type (?:in \[([^\]]*)\]|== "(\w+)")', tail)
    theirs = {name.strip().strip('"') for group, one in branches for name in (group.split(",") if group else [one])}
    ours = {s.setting.split("'")[1] for s in SETTINGS if s.framework == "trl" and s.setting.startswith("loss_type")}
    assert theirs == ours
    # the normaliser each branch divides by, as TRL writes it
    assert "mask.sum(-1).clamp(min=1.0)).mean()" in tail  # grpo, sapo: each sequence's mean, then the mean
    assert "(per_token_loss.size(0) * self.max_completion_length)" in tail  # dr_grpo
    assert 'inputs["num_items_in_batch"]' in tail  # dapo, cispo, vespo
