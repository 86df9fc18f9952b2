"""The optimizer and its schedule, one recipe for pre-training, DAPT and fine-tuning: fused AdamW with weight
decay on matrices only, linear warmup then cosine decay, and nanoT5's per-tensor RMS-scaled rates as an option."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class OptimConfig:
    """AdamW and its schedule (``TrainConfig.optim`` and ``FinetuneConfig.optim`` give a run's)."""

    lr: float
    """Peak learning rate."""
    warmup_fraction: float
    """Share of the steps spent on linear warmup."""
    min_lr_ratio: float
    """The cosine decay ends at lr x this."""
    weight_decay: float
    """AdamW's decoupled weight decay, on matrices only."""
    betas: tuple[float, float] = (0.9, 0.98)
    """AdamW's two betas."""
    scale_lr_by_rms: bool = False
    """Each tensor's step is lr x its RMS (nanoT5's AdamWScale)."""


def lr_at(step: int, total: int, cfg: OptimConfig) -> float:
    """Linear warmup over ``warmup_fraction`` of the steps, then cosine decay to ``lr * min_lr_ratio``."""
    warm = int(total * cfg.warmup_fraction)
    if step < warm:
        return cfg.lr * (step + 1) / warm
    progress = (step - warm) / max(1, total - warm)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


def make_optimizer(model, cfg: OptimConfig, device: str):
    """Fused AdamW (one kernel for all parameters, on GPUs and CPUs), weight decay on matrices only."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    if cfg.scale_lr_by_rms:  # one group per tensor, so each can take its own step size (set_lr)
        groups = [{"params": [p], "weight_decay": cfg.weight_decay if p.dim() >= 2 else 0.0, "rms_scaled": True}
                  for p in params]
    else:
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), fused=True)


def set_lr(optimizer, lr: float) -> None:
    """Set this step's learning rate; a ``scale_lr_by_rms`` group takes ``lr`` x its tensor's RMS (at least 1e-3),
    as nanoT5's AdamWScale (Nawrot 2023; benchmarks/transfer.md)."""
    import torch

    scaled = [g for g in optimizer.param_groups if g.get("rms_scaled")]
    for group in optimizer.param_groups:
        if not group.get("rms_scaled"):
            group["lr"] = lr
    if scaled:  # one host transfer for all tensors (on a GPU, one sync per step)
        with torch.no_grad():
            rms = torch.stack([g["params"][0].detach().float().pow(2).mean().sqrt() for g in scaled]).tolist()
        for group, r in zip(scaled, rms):
            group["lr"] = lr * max(1e-3, r)
