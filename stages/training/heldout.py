"""The held-out score of a language model during pre-training and DAPT: the loss over fixed held-out blocks,
weighted by label tokens, and token accuracy (GPT: perplexity; NSP / SOP: the pair head's accuracy)."""

from __future__ import annotations

import math

import numpy as np

from stages.objectives import named, training_view
from stages.training.config import TrainConfig
from stages.training.data import EVAL_KEY, generators, make_batch
from stages.training.device import bf16_autocast, to_device


def evaluate(model, objective, blocks: np.ndarray, cfg: TrainConfig, device: str, bf16: bool) -> dict:
    """Loss over the held-out blocks, weighted by label tokens, and accuracy (GPT: perplexity; what the objective
    declares in ``metrics``, e.g. NSP / SOP's pair accuracy). Masks are fixed per block, so every evaluation is
    comparable."""
    import torch

    n = min(cfg.eval_blocks, len(blocks))
    view, prepare = training_view(model, objective)
    declared = named(objective.name)
    shifted = declared.shifts_labels
    loss_sum = torch.zeros((), device=device, dtype=torch.float64)
    correct = torch.zeros((), device=device, dtype=torch.int64)
    count = torch.zeros((), device=device, dtype=torch.int64)
    extra = {m: torch.zeros((), device=device, dtype=torch.float64) for m in declared.metrics}  # per-batch, weighted
    rows = 0
    was_training = model.training
    model.eval()
    with torch.no_grad(), bf16_autocast(device, bf16):
        for lo in range(0, n, cfg.micro_batch):
            ids = np.arange(lo, min(lo + cfg.micro_batch, n))
            batch = to_device(prepare(make_batch(objective, blocks, ids,
                                                 generators(cfg.seed, EVAL_KEY, [0] * len(ids), ids))), device)
            out = view(**batch)
            labels = getattr(out, "labels", batch["labels"])
            logits = out.logits
            if shifted:  # the model predicts token t+1 from position t
                labels, logits = labels[:, 1:], logits[:, :-1]
            valid = labels != -100
            tokens = valid.sum()
            loss_sum += out.loss.double() * tokens
            correct += ((logits.argmax(-1) == labels) & valid).sum()
            count += tokens
            for m in extra:
                extra[m] += getattr(out, m).double() * len(ids)
            rows += len(ids)
    model.train(was_training)
    loss = (loss_sum / count.clamp(min=1)).item()
    result = {"eval_loss": round(loss, 5), "eval_accuracy": round(correct.item() / max(count.item(), 1), 5)}
    if shifted:
        result["eval_perplexity"] = round(math.exp(min(loss, 50)), 3)
    for m, total in extra.items():
        result[f"eval_{m}"] = round(total.item() / max(rows, 1), 5)
    return result
