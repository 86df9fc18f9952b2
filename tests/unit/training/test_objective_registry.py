"""The objective registry: every objective is found by paradigm and name, and a new one is one module and one
registration; the pre-training stage trains it without knowing its name."""

from __future__ import annotations

import json

import pytest

from stages import objectives
from stages.objectives import Objective
from stages.objectives.masked_lm import MaskedLM
from stages.training.config import TrainConfig
from tests.unit.training.test_electra import electra_params


def test_each_paradigm_has_its_own_objective_and_names_its_others():
    assert {p: objectives.get(p).name for p in objectives.OWN} == objectives.OWN
    assert objectives.names("gpt") == ("causal_lm", "permuted")
    assert objectives.names("bert") == ("masked_lm", "electra", "nsp", "sop")
    assert {objectives.named(n).paradigm for n in objectives.names("t5")} == {"t5"}
    with pytest.raises(ValueError, match=r"objective: 'permuted' is not one of t5's objectives \(span_corruption"):
        objectives.get("t5", "permuted")
    with pytest.raises(ValueError, match="paradigm: expected one of bert, gpt, t5"):
        objectives.get("xlnet")
    with pytest.raises(ValueError, match="already registered"):
        objectives.register(objectives.get("bert"))


class HalfMasked(MaskedLM):
    """A toy objective: masked LM that always selects half of the positions."""

    name = "half_masked"

    def __init__(self, layout) -> None:
        super().__init__(layout, select=0.5)


def test_a_registered_objective_trains_through_the_stage(datasets, tmp_path, monkeypatch):
    from stages.pretrain import main

    objectives.names()  # the registry loaded, then copied: the toy objective leaves with this test
    monkeypatch.setattr(objectives, "_REGISTRY", dict(objectives._REGISTRY))
    objectives.register(Objective(name="half_masked", paradigm="bert", builder=HalfMasked,
                                  card=lambda select, generator_size: "half of the positions masked"))
    assert "half_masked" in objectives.names("bert")
    TrainConfig(objective="half_masked")  # the train config accepts it by name
    path = electra_params(tmp_path, {"objective": "half_masked"})
    out = tmp_path / "general"
    assert main(datasets.args("bert", out, path, metrics=tmp_path / "m.json")) == 0
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert metrics["eval_loss"] > 0 and metrics["steps"] > 0
    assert json.loads((out / "training.json").read_text())["config"]["train"]["objective"] == "half_masked"
    assert "half of the positions masked" in (out / "README.md").read_text()  # the card's words are its own
