"""Typed configs of the pre-training and DAPT stages (``pretrain.*`` and ``dapt.*`` in params.yaml)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from stages.config import check, check_seed
from stages.objectives import BERT_OBJECTIVES, GPT_OBJECTIVES, T5_OBJECTIVES


# What ``precision`` may say (pre-training and fine-tuning): bf16 autocast where native, fp32, or bf16.
PRECISIONS = ("auto", "fp32", "bf16")

@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """Transformer size. layers: per stack (T5 has an encoder and a decoder of this depth). d_model: hidden
    size. heads: attention heads (d_model must divide by it). d_ff: feed-forward width. dropout: 0 follows
    modern pre-training practice (and keeps runs comparable step for step)."""

    layers: int = 2
    d_model: int = 128
    heads: int = 2
    d_ff: int = 512
    dropout: float = 0.0
    arch: str = "bert"
    conv_kernel: int = 3
    local_bias: float = 0.0
    cross_match: float = 0.0

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
    """The run. budget_tokens: input tokens to train on (the same budget for each paradigm is equal data;
    budget_flops > 0 instead sets the budget in FLOPs, converted with the model's FLOPs per token).
    micro_batch: blocks per forward pass per device; grad_accum: micro-batches per optimizer step (the
    global batch is micro_batch x grad_accum x devices). lr: peak learning rate, reached after
    warmup_fraction of the steps, then cosine decay to lr x min_lr_ratio. weight_decay, betas, clip: AdamW
    and gradient-norm clipping. precision: auto = bf16 autocast where the device multiplies bf16 natively
    (a GPU that supports it, a CPU with AMX or AVX512-BF16), fp32 elsewhere.
    compile: torch.compile the model. eval_every / checkpoint_every / log_every: in optimizer steps.
    eval_blocks: held-out blocks per evaluation. seed: initialisation, data order and masks.
    peak_tflops: the device's peak for MFU (0 = look up known GPUs; unknown devices report no MFU).
    threads: CPU threads for torch (0 = torch's default).
    mlm_select: masked LM only: the share of positions selected for prediction (BERT: 0.15; Wettig et al.
    2023, "Should You Mask 15% in Masked Language Modeling?", found higher rates better for small budgets).
    objective: T5: ``span_corruption`` (T5's own), ``ul2`` (span corruption and a prefix LM, half and
    half, per block), ``prefix_lm``, ``reconstruct`` (the T5 paper's BERT-style denoising) or ``bart``
    (BART's text infilling with sentence permutation); ``stages.objectives.denoisers`` says what each does. BERT: ``masked_lm`` (its own) or ``electra``
    (replaced-token detection, ``stages.objectives.electra``; ``mlm_select`` is then the generator's masking
    rate and ``rtd_weight`` the discriminator loss's weight, ELECTRA's 50), ``nsp`` or ``sop`` (masked LM plus
    BERT's next-sentence or ALBERT's sentence-order prediction, ``stages.objectives.sentence_pairs``). GPT:
    ``causal_lm`` (its own) or ``permuted`` (XLNet's permuted LM with two-stream attention and partial
    prediction, ``stages.objectives.permuted_lm``). "" = the paradigm's own objective.
    generator_size: ``electra`` only: a separate generator of this share of the model's width, sharing its word
    embeddings (``stages.training.electra``; the paper's best: 1/4 to 1/2); 0 = generator and discriminator
    are one model, all weights tied.
    scale_lr_by_rms: each tensor's step is ``lr`` times its root mean square (nanoT5's AdamWScale, Adafactor's
    relative steps), for T5, whose initialisation assumes such an optimizer: ``lr`` is then about 10x what
    plain AdamW takes (nanoT5: 2e-2)."""

    budget_tokens: int = 1_000_000
    budget_flops: float = 0.0
    micro_batch: int = 16
    grad_accum: int = 1
    lr: float = 1e-3
    warmup_fraction: float = 0.05
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.01
    betas: tuple[float, ...] = (0.9, 0.98)
    clip: float = 1.0
    precision: Literal["auto", "fp32", "bf16"] = "auto"  # PRECISIONS
    compile: bool = False
    eval_every: int = 100
    eval_blocks: int = 256
    checkpoint_every: int = 100
    log_every: int = 10
    seed: int = 0
    peak_tflops: float = 0.0
    threads: int = 0
    mlm_select: float = 0.15
    objective: str = ""
    rtd_weight: float = 50.0
    generator_size: float = 0.0
    scale_lr_by_rms: bool = False

    def __post_init__(self) -> None:
        check(0 < self.mlm_select < 1, "mlm_select: must be in (0, 1)")
        check(self.objective in ("", *T5_OBJECTIVES, *BERT_OBJECTIVES, *GPT_OBJECTIVES),
              f"objective: one of '', {', '.join(T5_OBJECTIVES + BERT_OBJECTIVES + GPT_OBJECTIVES)}")
        check(self.rtd_weight > 0, "rtd_weight: must be > 0")
        check(0 <= self.generator_size <= 1, "generator_size: must be in [0, 1] (0 = generator tied to the model)")
        check(not self.generator_size or self.objective == "electra", "generator_size: for objective electra only")
        check_seed("seed", self.seed)
        check(self.budget_tokens > 0 or self.budget_flops > 0, "budget_tokens: must be > 0 (or set budget_flops)")
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
    train: TrainConfig = field(default_factory=TrainConfig)
