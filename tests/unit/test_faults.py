"""Fault injection: params that can only be mistakes, hostile YAML, special files and links where a user names a
path, concurrent runs of one stage. Each case must end in one line naming the key or file, never a hang, a
traceback or lost outputs."""

from __future__ import annotations

import re

import pytest

from stages.config import ConfigError, build
from stages.training.config import TrainConfig


@pytest.mark.parametrize("train, message", [
    ({"budget_tokens": 10**14}, "pretrain.bert.train.budget_tokens: at most 1e+13"),
    ({"budget_flops": 1e40}, "pretrain.bert.train.budget_flops: at most 6e+25"),
])
def test_budgets_no_machine_can_run_are_refused_naming_the_key(train, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        build(TrainConfig, train, "pretrain.bert.train")
    assert build(TrainConfig, {"budget_tokens": 10**13}, "pretrain.bert.train").budget_tokens == 10**13
