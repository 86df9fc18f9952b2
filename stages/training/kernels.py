"""Kernels the training loop uses on a GPU in place of the stock ones, chosen automatically (:func:`use_fused`);
an objective offers them as its ``fused_view`` (:mod:`stages.objectives`).

The causal LM's loss: the stock path projects every position onto the vocabulary and upcasts those logits to
fp32 before the cross-entropy (16 x 1,024 x 50k floats at GPT-2 size: gigabytes of memory traffic per step).
:func:`stages.training.lce.linear_cross_entropy` does the projection, the cross-entropy and both gradients a chunk
of rows at a time, so the full logits never exist; it is plain torch (any device), exact in fp32 and within bf16
rounding of the stock path under autocast (``tests/unit/training/test_kernels.py``). On a CPU the loop keeps the
stock path, so a CPU run's weights do not change."""

from __future__ import annotations

import os

FUSED_ENV = "LMPIPE_KERNELS"  # "stock": the stock path on a GPU too (to compare); unset or "auto": fused on GPUs
FUSED_LOSS = "chunked linear cross-entropy (stages.training.lce)"  # what training.json names


def use_fused(device: str) -> bool:
    """Whether the loop uses the fused kernels on ``device``: on CUDA devices, unless ``LMPIPE_KERNELS=stock``."""
    choice = os.environ.get(FUSED_ENV, "auto")
    if choice not in ("auto", "stock"):
        raise ValueError(f"{FUSED_ENV}={choice!r}: expected auto or stock")
    return choice == "auto" and device.startswith("cuda")
