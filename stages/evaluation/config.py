"""The evaluate and compare stages' settings (``evaluate`` and ``compare`` in params.yaml) and how they are read."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stages.config import ConfigError, build, check, check_seed, load_params, section
from stages.evaluation.baselines import BaselineConfig
from stages.evaluation.gate import ModelGateConfig
from stages.evaluation.icl import IclConfig
from stages.finetuning.core import INITS
from stages.tokenization.trainers import PARADIGMS
from stages.training.config import compare_entries


@dataclass(frozen=True, kw_only=True)
class CurveConfig:
    """The data-efficiency curve: each series fine-tuned on smaller samples of the task's training split; the
    finetune stage's runs on all of it are the last point."""

    paradigms: tuple[str, ...] = PARADIGMS
    """Paradigms of the series (`bert`, `gpt`, `t5`)."""
    inits: tuple[str, ...] = INITS
    """Initialisations of the series (`pretrained`, `dapt`, `random`)."""
    sizes: tuple[int, ...] = (100, 300, 1000)
    """Training examples per smaller point; sizes not below the full training split are skipped."""
    seeds: tuple[int, ...] = (0, 1, 2)
    """Seeds each smaller point is repeated over (sample, head initialisation, order)."""
    min_steps: int = 60
    """Fewest optimizer updates of a small-sample run, however small the sample."""
    workers: int = 2
    """Runs at a time for the curve, in-context learning and the baselines, one pool for all three (processes of one
    torch thread; 1 = in this process)."""

    def __post_init__(self) -> None:
        check(all(p in PARADIGMS for p in self.paradigms), f"paradigms: each one of {', '.join(PARADIGMS)}")
        check(all(i in INITS for i in self.inits), f"inits: each one of {', '.join(INITS)}")
        check(all(n >= 1 for n in self.sizes), "sizes: each >= 1")
        check(len(self.seeds) >= 1, "seeds: need at least one")
        for s in self.seeds:
            check_seed("seeds", s)
        check(self.workers >= 1, "workers: must be >= 1")


@dataclass(frozen=True, kw_only=True)
class IntrinsicConfig:
    """Intrinsic scores: each pre-trained and DAPT model's loss on the held-out blocks of the general and domain
    corpora."""

    eval_blocks: int = 128
    """Held-out blocks scored per corpus and model, >= 1."""
    micro_batch: int = 16
    """Blocks per forward pass, >= 1."""

    def __post_init__(self) -> None:
        check(self.eval_blocks >= 1 and self.micro_batch >= 1, "eval_blocks: eval_blocks and micro_batch must be >= 1")


@dataclass(frozen=True, kw_only=True)
class EvaluateConfig:
    curve: CurveConfig = field(default_factory=CurveConfig)
    """The data-efficiency curve."""
    icl: IclConfig = field(default_factory=IclConfig)
    """In-context learning of the GPT models."""
    intrinsic: IntrinsicConfig = field(default_factory=IntrinsicConfig)
    """Held-out loss of the pre-trained and DAPT models."""
    gate: ModelGateConfig = field(default_factory=ModelGateConfig)
    """Which fine-tuned model is shipped, and the margins it must clear."""
    baseline: BaselineConfig = field(default_factory=BaselineConfig)
    """Models without pre-training, fitted on the same samples."""


def load_evaluate_config(params_path: Path) -> EvaluateConfig:
    return build(EvaluateConfig, section(load_params(params_path), "evaluate"), "evaluate")


@dataclass(frozen=True)
class CompareConfig:
    """The objective comparison: each entry pre-trains its paradigm's model with another objective on the FLOPs
    of the paradigm's own general and DAPT runs, then fine-tunes it with the default recipe."""

    objectives: dict[str, Any] = field(default_factory=dict)
    """Entries ``<name>: {paradigm, objective[, train: {...}]}``: an objective of that paradigm and train settings over its own; {} = none."""
    reports: tuple[str, ...] = ()
    """``[objectives]`` adds the report stage (reports/objectives.md); [] = no report."""
    sizes: tuple[int, ...] = (300,)
    """Label counts each model is fine-tuned on again, besides all labels (the finetune stage's runs)."""
    seeds: tuple[int, ...] = (0, 1, 2)
    """Seeds of each label-count run (mean and std reported)."""
    min_steps: int = 60
    """Fewest updates of a small label-count run, however small its sample."""
    workers: int = 2
    """Label-count runs at a time (spawned processes, one torch thread each)."""

    def entries(self) -> list[dict]:
        return compare_entries(self.objectives)

    def __post_init__(self):
        self.entries()
        unknown = sorted(set(self.reports) - {"objectives"})
        if unknown:
            raise ConfigError(f"compare.reports: {', '.join(map(str, unknown))}: the only report is 'objectives'")
        if self.reports and not self.objectives:
            raise ConfigError("compare.reports: [objectives] with no compare.objectives: nothing to compare")
        if any(n < 1 for n in self.sizes) or not self.seeds or self.min_steps < 1 or self.workers < 1:
            raise ConfigError("compare: sizes >= 1, at least one seed, min_steps >= 1 and workers >= 1")


def load_compare_config(params_path: Path) -> CompareConfig:
    return build(CompareConfig, section(load_params(params_path), "compare"), "compare")
