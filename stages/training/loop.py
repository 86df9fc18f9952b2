"""Pre-training and DAPT: a model and its objective over token blocks until the budget (tokens or FLOPs) is
spent, on one :class:`~stages.training.trainer.Trainer` (only the objective differs between paradigms)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from stages.objectives import has_fused_view, training_view
from stages.training.config import TrainConfig
from stages.training.data import TRAIN_KEY, BlockSampler, generators, make_batch
from stages.training.device import bf16_enabled, peak_flops
from stages.training.distributed import Dist
from stages.training.heldout import evaluate
from stages.training.kernels import FUSED_LOSS, use_fused
from stages.training.optim import lr_at, make_optimizer
from stages.training.trainer import Hooks, LoopConfig, RunResult, Steps, Trainer, progress_bar


@dataclass(frozen=True)
class Blocks:
    """The token blocks a run trains on and scores (``heldout``: None or empty = no evaluation), ``seq_len``
    tokens of the model's input each."""

    train: np.ndarray
    heldout: np.ndarray | None
    seq_len: int


@dataclass(frozen=True)
class RunIO:
    """Where a run saves and resumes (``checkpoint_dir`` with the inputs' ``fingerprint``) and reports."""

    checkpoint_dir: Path | None = None
    fingerprint: str = ""
    log: Callable[[str], None] = print
    progress: bool = True
    live: Any = None


def train(model, objective, blocks: Blocks, cfg: TrainConfig, *, flops_per_token: float, dist: Dist,
          io: RunIO = RunIO()) -> RunResult:
    """Pre-train (or adapt) ``model`` on ``blocks.train`` until the budget is spent (a :class:`Trainer`).
    ``history`` rows hold what the inputs determine; the timings go to ``io.live`` and into the result."""
    import torch

    from stages.training.distributed import wrap

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    model.to(dist.device)
    bf16 = bf16_enabled(cfg.precision, dist.device)
    optimizer = make_optimizer(model, cfg.optim, dist.device)
    train_blocks, eval_blocks, seq_len, log = blocks.train, blocks.heldout, blocks.seq_len, io.log
    sampler = BlockSampler(rows=len(train_blocks), micro_batch=cfg.micro_batch, grad_accum=cfg.grad_accum,
                           world=dist.world, rank=dist.rank, seed=cfg.seed)
    tokens_per_step = sampler.global_batch * seq_len
    budget = cfg.budget_flops / flops_per_token if cfg.budget_flops else cfg.budget_tokens
    total = max(1, math.ceil(budget / tokens_per_step))
    fused = use_fused(dist.device) and has_fused_view(objective)  # GPUs only: a CPU run keeps the stock kernels
    view, prepare = training_view(model, objective, fused=fused)
    net = wrap(view, dist)
    step_fn = torch.compile(net) if cfg.compile else net
    log(f"[train] {total} steps x {sampler.global_batch} blocks x {seq_len} tokens = {total * tokens_per_step:,} "
        f"tokens on {dist.world} x {dist.device}{' (bf16)' if bf16 else ''}; {flops_per_token / 1e6:.1f} MFLOP/token"
        + (f"; loss: {FUSED_LOSS}" if fused else ""))

    def batches(step: int) -> list[dict]:
        return [prepare(make_batch(objective, train_blocks, ids, generators(cfg.seed, TRAIN_KEY, epochs, ids)))
                for ids, epochs in sampler.micro_batches(step)]

    with progress_bar(total, io.progress and dist.main) as bar:
        loop_cfg = LoopConfig(total=total, log_every=cfg.log_every, clip=cfg.clip, bf16=bf16, eval_every=cfg.eval_every,
                              checkpoint_every=cfg.checkpoint_every, flops_per_token=flops_per_token,
                              peak=peak_flops(dist.device, cfg.peak_tflops), sum_dtype="float32")
        hooks = Hooks(row=lambda done: {"tokens": done * tokens_per_step},
                      evaluate=(lambda done: evaluate(model, objective, eval_blocks, cfg, dist.device, bf16))
                      if eval_blocks is not None and len(eval_blocks) else None,
                      checkpoint_dir=io.checkpoint_dir, fingerprint=io.fingerprint, live=io.live, bar=bar, log=log)
        steps = Steps(batches=batches, loss=lambda batch: step_fn(**batch).loss,
                      lr=lambda step: lr_at(step, total, cfg.optim), tokens=lambda batch: cfg.micro_batch * seq_len)
        result = Trainer(model, optimizer, loop_cfg, steps, hooks, dist, net).train()
    result.tokens = total * tokens_per_step
    result.kernels = {"loss": FUSED_LOSS} if fused else None
    return result
