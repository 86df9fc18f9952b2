"""The causal LM's loss without its full logits: the output projection, the cross-entropy and both gradients a
chunk of rows at a time (the loop takes it on GPUs: :mod:`stages.training.kernels`)."""

from __future__ import annotations

import torch

CHUNK_ROWS = 4096  # rows projected at a time: 4,096 x 50k fp32 logits = 0.8 GB at most, whatever the batch


class LinearCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of ``hidden @ weight.T (+ bias)`` against ``labels`` (``ignore_index`` rows left out),
    a chunk of rows at a time, the matmuls in ``hidden``'s dtype; the gradients are made in the forward pass, so
    no chunk's logits outlive it."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, labels, ignore_index: int, chunk: int):
        w = weight.to(hidden.dtype)
        b = None if bias is None else bias.to(hidden.dtype)
        valid = labels != ignore_index
        count = valid.sum().clamp(min=1)
        loss = torch.zeros((), device=hidden.device, dtype=torch.float32)
        grad_hidden = torch.empty_like(hidden)
        grad_weight = torch.zeros(weight.shape, device=weight.device, dtype=torch.float32)
        grad_bias = None if bias is None else torch.zeros(bias.shape, device=bias.device, dtype=torch.float32)
        rows = torch.arange(min(chunk, hidden.size(0)), device=hidden.device)
        for lo in range(0, hidden.size(0), chunk):
            h, y, keep = hidden[lo: lo + chunk], labels[lo: lo + chunk], valid[lo: lo + chunk]
            logits = torch.nn.functional.linear(h, w, b).float()
            safe = torch.where(keep, y, torch.zeros_like(y))
            picked = logits.gather(1, safe[:, None]).squeeze(1)
            loss += ((torch.logsumexp(logits, dim=-1) - picked) * keep).sum()
            # d(loss)/d(logits) = (softmax - one_hot(label)) / count on the rows kept, 0 elsewhere
            grad = torch.softmax(logits, dim=-1)
            grad[rows[: len(y)], safe] -= 1.0
            grad *= (keep.float() / count)[:, None]
            grad_hidden[lo: lo + chunk] = grad.to(h.dtype) @ w
            grad_weight += grad.t() @ h.float()
            if grad_bias is not None:
                grad_bias += grad.sum(0)
        ctx.save_for_backward(grad_hidden, grad_weight, grad_bias)
        ctx.dtypes = (weight.dtype, None if bias is None else bias.dtype)
        return loss / count

    @staticmethod
    def backward(ctx, grad_out):
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
        scale = grad_out.float()
        return (grad_hidden * scale.to(grad_hidden.dtype), (grad_weight * scale).to(ctx.dtypes[0]),
                None if grad_bias is None else (grad_bias * scale).to(ctx.dtypes[1]), None, None, None)


def linear_cross_entropy(hidden, weight, labels, *, bias=None, ignore_index: int = -100, chunk: int = CHUNK_ROWS):
    """Mean cross-entropy of the rows of ``hidden`` (``[..., d]``) projected by ``weight`` (``[vocab, d]``, plus
    ``bias``) against ``labels`` (``[...]``; ``ignore_index`` rows left out), ``chunk`` rows at a time. Under
    autocast the projection runs in the autocast dtype (as ``nn.Linear`` would) and the softmax in fp32."""
    device = hidden.device.type
    if torch.is_autocast_enabled(device):
        hidden = hidden.to(torch.get_autocast_dtype(device))
    with torch.autocast(device, enabled=False):
        return LinearCrossEntropy.apply(hidden.reshape(-1, hidden.size(-1)), weight, bias, labels.reshape(-1),
                                        ignore_index, chunk)
