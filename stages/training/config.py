"""Typed configs of the pre-training and DAPT stages (``pretrain.*`` and ``dapt.*`` in params.yaml)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from stages import objectives
from stages.common.inputs import check_folder, read_json
from stages.config import ConfigError, build, check, check_seed, deep_merge, load_params, section

# What ``precision`` may say (pre-training and fine-tuning): bf16 autocast where native, fp32, or bf16.
PRECISIONS = ("auto", "fp32", "bf16")
MAX_TOKENS = 10**13  # a budget above this can only be a typo: months on the largest clusters

@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """The transformer's size and initialisation (a fresh model; DAPT continues the general model)."""

    layers: int = 2
    """Transformer layers per stack (T5 has an encoder and a decoder of this depth)."""
    d_model: int = 128
    """Hidden size; a multiple of ``heads``."""
    heads: int = 2
    """Attention heads per layer."""
    d_ff: int = 512
    """Feed-forward width."""
    dropout: float = 0.0
    """Dropout rate in [0, 1); 0 as in modern pre-training."""
    arch: str = "bert"
    """BERT only: ``bert`` (BertForMaskedLM) or ``deberta_v2`` (relative positions and a convolution layer)."""
    conv_kernel: int = 3
    """``deberta_v2`` only: the convolution's kernel width (0 = no convolution)."""
    local_bias: float = 0.0
    """T5 only: relative position biases start as a distance penalty of this slope per token (0 = T5's own init)."""
    cross_match: float = 0.0
    """T5 only: one decoder cross-attention head starts as a token matcher of this strength (0 = T5's own init)."""

    def __post_init__(self) -> None:
        check(self.arch in ("bert", "deberta_v2"), "arch: one of bert, deberta_v2")
        check(self.local_bias >= 0, "local_bias: must be >= 0 (0 = T5's own initialisation)")
        check(self.cross_match >= 0, "cross_match: must be >= 0 (0 = T5's own initialisation)")
        check(self.conv_kernel >= 0, "conv_kernel: must be >= 0 (0 = no convolution; deberta_v2 only)")
        check(self.layers >= 1, "layers: must be >= 1")
        check(self.d_model >= 8 and self.heads >= 1 and self.d_model % self.heads == 0,
              "heads: d_model must be a multiple of heads")
        check(self.d_ff >= 1, "d_ff: must be >= 1")
        check(0 <= self.dropout < 1, "dropout: must be in [0, 1)")


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """One pre-training or DAPT run: budget, batch, optimizer and schedule, logging, and the objective."""

    budget_tokens: int = 1_000_000
    """Input tokens to train on (steps = budget / tokens per step, rounded up); at most 10^13."""
    budget_flops: float = 0.0
    """When > 0, the budget in model FLOPs instead, converted with the model's FLOPs per token."""
    micro_batch: int = 16
    """Blocks per forward pass per device."""
    grad_accum: int = 1
    """Micro-batches per optimizer step (global batch: micro_batch x grad_accum x devices)."""
    lr: float = 1e-3
    """Peak learning rate (AdamW), reached after the warmup."""
    warmup_fraction: float = 0.05
    """Share of the steps spent on linear warmup, in [0, 1)."""
    min_lr_ratio: float = 0.1
    """The cosine decay ends at lr x this, in [0, 1]."""
    weight_decay: float = 0.01
    """AdamW weight decay on matrices (not on biases and norms)."""
    betas: tuple[float, ...] = (0.9, 0.98)
    """AdamW's two betas, each in [0, 1)."""
    clip: float = 1.0
    """Gradient-norm clipping (0 = off)."""
    precision: Literal["auto", "fp32", "bf16"] = "auto"  # PRECISIONS
    """``auto``: bf16 autocast where the device multiplies bf16 natively (GPU; CPU with AMX or AVX512-BF16)."""
    compile: bool = False
    """Run the model through torch.compile."""
    eval_every: int = 100
    """Optimizer steps between held-out evaluations."""
    eval_blocks: int = 256
    """Held-out blocks scored per evaluation."""
    checkpoint_every: int = 100
    """Optimizer steps between checkpoints (a restarted run with the same inputs resumes there)."""
    log_every: int = 10
    """Optimizer steps between logged loss rows."""
    seed: int = 0
    """Initialisation, data order and masks."""
    peak_tflops: float = 0.0
    """The device's peak for MFU (0 = known GPUs only; no MFU on CPU)."""
    threads: int = 0
    """CPU threads for torch (0 = torch's default)."""
    mlm_select: float = 0.15
    """Masked LM: share of positions selected for prediction, in (0, 1) (BERT: 0.15; ELECTRA: the generator's)."""
    objective: str = ""
    """Another pre-training objective of the paradigm ("" = its own): docs/stages.md lists them."""
    rtd_weight: float = 50.0
    """``electra`` only: weight of the replaced-token-detection loss beside the generator's."""
    generator_size: float = 0.0
    """``electra`` only: a separate generator of this share of the model's width (0 = one model, tied)."""
    scale_lr_by_rms: bool = False
    """Each tensor's step is lr x its RMS (nanoT5's AdamWScale); for T5, whose initialisation expects it."""

    @property
    def optim(self):
        """The optimizer and schedule (``stages.training.optim``)."""
        from stages.training.optim import OptimConfig

        return OptimConfig(lr=self.lr, warmup_fraction=self.warmup_fraction, min_lr_ratio=self.min_lr_ratio,
                           weight_decay=self.weight_decay, betas=tuple(self.betas),
                           scale_lr_by_rms=self.scale_lr_by_rms)

    def __post_init__(self) -> None:
        check(0 < self.mlm_select < 1, "mlm_select: must be in (0, 1)")
        check(self.objective in ("", *objectives.names()), f"objective: one of '', {', '.join(objectives.names())}")
        check(self.rtd_weight > 0, "rtd_weight: must be > 0")
        check(0 <= self.generator_size <= 1, "generator_size: must be in [0, 1] (0 = generator tied to the model)")
        if self.generator_size:
            takes = [name for name in objectives.names() if "generator_size" in objectives.named(name).own_keys]
            check(self.objective in takes, f"generator_size: for objective {', '.join(takes)} only")
        check_seed("seed", self.seed)
        check(self.budget_tokens > 0 or self.budget_flops > 0, "budget_tokens: must be > 0 (or set budget_flops)")
        check(self.budget_tokens <= MAX_TOKENS, f"budget_tokens: at most {MAX_TOKENS:.0e} (no machine runs more)")
        check(self.budget_flops <= MAX_TOKENS * 6e12, f"budget_flops: at most {MAX_TOKENS * 6e12:.0e} (10^13 tokens "
                                                      "through a trillion weights; no machine runs more)")
        check(self.micro_batch >= 1, "micro_batch: must be >= 1")
        check(self.grad_accum >= 1, "grad_accum: must be >= 1")
        check(self.lr > 0, "lr: must be > 0")
        check(0 <= self.warmup_fraction < 1, "warmup_fraction: must be in [0, 1)")
        check(0 <= self.min_lr_ratio <= 1, "min_lr_ratio: must be in [0, 1]")
        check(len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas), "betas: two values in [0, 1)")
        check(self.clip >= 0, "clip: must be >= 0 (0 = off)")
        check(min(self.eval_every, self.checkpoint_every, self.log_every) >= 1, "eval_every: steps must be >= 1")
        check(self.eval_blocks >= 1, "eval_blocks: must be >= 1")


@dataclass(frozen=True, kw_only=True)
class PretrainConfig:
    """A ``pretrain.<paradigm>`` or ``dapt.<paradigm>`` section merged over its ``defaults``."""

    model: ModelConfig = field(default_factory=ModelConfig)
    """The model (pre-training only)."""
    train: TrainConfig = field(default_factory=TrainConfig)
    """The run."""


@dataclass(frozen=True, kw_only=True)
class DaptConfig:
    """A ``dapt.<paradigm>`` section: only the run; the model is the general checkpoint's."""

    train: TrainConfig = field(default_factory=TrainConfig)
    """The run."""


@dataclass(frozen=True, kw_only=True)
class BaseDaptConfig(DaptConfig):
    """A published base's DAPT (``published.bases.<name>.dapt`` over ``dapt.defaults``)."""

    head_warmup_tokens: int = 0
    """A base without its language-model head (a fresh one): input tokens spent first training the fresh weights
    alone, the body fixed, so the random head does not disturb the body (LP-FT, Kumar et al. 2022); 0 = off."""
    head_warmup_lr: float = 1e-3
    """The fresh head's constant learning rate during the warm-up."""
    replay_fraction: float = 0.0
    """Share of the training blocks drawn from ``replay_corpus`` (general text mixed into the domain corpus against
    forgetting, as in continual pre-training), in [0, 1); 0 = the domain corpus alone."""
    replay_corpus: str = "general"
    """The token dataset's corpus the replayed blocks come from."""

    def __post_init__(self) -> None:
        check(0 <= self.head_warmup_tokens <= MAX_TOKENS, "head_warmup_tokens: must be in [0, 10^13]")
        check(self.head_warmup_lr > 0, "head_warmup_lr: must be > 0")
        check(0 <= self.replay_fraction < 1, "replay_fraction: must be in [0, 1)")


def load_base_config(params_path: Path, name: str) -> BaseDaptConfig:
    """The DAPT config of published base ``name``: ``dapt.defaults`` with the base's ``dapt`` over it (the paradigm's
    ``dapt.<paradigm>`` is the from-scratch models' recipe)."""
    from stages.published.config import load_base

    merged = deep_merge(section(load_params(params_path), "dapt.defaults"),
                        load_base(params_path, name, "dapt").get("dapt") or {})
    return build(BaseDaptConfig, merged, f"published.bases.{name}.dapt")


def load_config(params_path: Path, section_name: str, paradigm: str, variant: str | None = None):
    """The section's config; with ``variant``, that ``compare.objectives`` entry's objective and ``train``
    settings over it (the objective comparison's runs: the same model and budget, another objective)."""
    params = load_params(params_path)
    merged = deep_merge(section(params, f"{section_name}.defaults"), section(params, f"{section_name}.{paradigm}") or {})
    where = f"{section_name}.{paradigm}"
    if variant is not None:
        entry = compare_entries({variant: section(params, f"compare.objectives.{variant}")})[0]
        if entry["paradigm"] != paradigm:
            raise ConfigError(f"compare.objectives.{variant}.paradigm: {entry['paradigm']!r}, "
                              f"not --paradigm {paradigm}")
        merged = deep_merge(merged, {"train": {**(entry.get("train") or {}), "objective": entry["objective"]}})
        where = f"{where} with compare.objectives.{variant}"
    cls = PretrainConfig if section_name == "pretrain" else DaptConfig
    return build(cls, merged, where)


COMPARE_KEYS = ("paradigm", "objective", "train")


def compare_entries(entries) -> list[dict]:
    """``compare.objectives`` (names to ``{paradigm, objective[, train]}``) checked, as dicts with their ``name``."""
    own = {paradigm: objectives.names(paradigm) for paradigm in objectives.OWN}
    if entries is None:
        return []
    if not isinstance(entries, dict):
        raise ConfigError(f"compare.objectives: expected a mapping of names to {{paradigm, objective}}, got {entries!r}")
    out = []
    for name, e in entries.items():
        where = f"compare.objectives.{name}"
        name = str(name)
        if not name[:1].isalpha() or not all(c.isalnum() or c in "-_" for c in name):
            raise ConfigError(f"{where}: a name starts with a letter and holds letters, digits, '-' and '_' only "
                              "(it names stages and folders)")
        if not isinstance(e, dict):
            raise ConfigError(f"{where}: expected a mapping with paradigm and objective, got {e!r}")
        unknown, missing = sorted(set(e) - set(COMPARE_KEYS)), [k for k in COMPARE_KEYS[:2] if not e.get(k)]
        problems = [f"{what} {', '.join(map(str, keys))}" for what, keys in (("unknown key(s)", unknown),
                                                                            ("missing", missing)) if keys]
        if problems:
            raise ConfigError(f"{where}: " + "; ".join(problems))
        if e["paradigm"] not in own:
            raise ConfigError(f"{where}.paradigm: {e['paradigm']!r} is not one of {', '.join(own)}")
        if e["objective"] not in own[e["paradigm"]]:
            raise ConfigError(f"{where}.objective: {e['objective']!r} is not one of {e['paradigm']}'s objectives "
                              f"({', '.join(own[e['paradigm']])})")
        if e.get("train") is not None and not isinstance(e["train"], dict):
            raise ConfigError(f"{where}.train: expected a mapping of train settings, got {e['train']!r}")
        out.append({"name": name, **e})
    return out


def match_flops(cfg, reference: Path):
    """``cfg`` with ``train.budget_flops`` set to the FLOPs of the run saved in ``reference`` (its tokens x its
    FLOPs per token, from its ``training.json``): equal compute with that run, whatever this run's objective."""
    record = read_json(check_folder(reference) / "training.json")
    m = record.get("metrics") or {}
    if not m.get("tokens") or not m.get("flops_per_token"):
        raise ValueError(f"{reference / 'training.json'}: no metrics.tokens / metrics.flops_per_token to match")
    return replace(cfg, train=replace(cfg.train, budget_flops=float(m["tokens"]) * float(m["flops_per_token"])))
