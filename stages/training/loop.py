"""The training loop shared by the three paradigms; the objective is the only part that differs.

AdamW (fused on GPU; no weight decay on biases and norms), linear warmup then cosine decay, gradient-norm
clipping, gradient accumulation, bf16 autocast on GPU, optional ``torch.compile``, DDP across processes.
The loss stays on the device between log steps (no per-step host sync). Every ``log_every`` steps it is
read, checked (a NaN or inf stops the run, keeping the last good checkpoint) and recorded with the learning
rate; the live log (:mod:`stages.common.live`) gets tokens/s, model FLOP/s and MFU beside them (FLOP/s over
the device's peak; the FLOPs per token are :func:`stages.training.models.flops_per_token`'s); every ``eval_every`` steps the held-out blocks are scored; every
``checkpoint_every`` steps the run is saved, and a restarted run with the same fingerprint resumes there.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from stages.training import checkpoint as ckpt
from stages.training.config import TrainConfig
from stages.training.data import EVAL_KEY, TRAIN_KEY, BlockSampler, generators, make_batch
from stages.training.distributed import Dist, average

# Dense bf16 peak of known GPUs, TFLOP/s (vendor data sheets; H200 has H100's compute).
PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "GH200": 989.0, "A100": 312.0, "L40S": 362.0, "L4": 121.0,
               "A10G": 70.0, "RTX 4090": 165.0}


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite."""


@dataclass
class RunResult:
    steps: int
    tokens: int
    history: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    resumed_from: int = 0
    tokens_per_second: float = 0.0
    train_seconds: float = 0.0     # training steps only (evaluation and checkpoint pauses excluded)
    flops_per_second: float = 0.0  # model FLOPs (flops_per_token x tokens/s): on any device
    mfu: float | None = None       # flops_per_second / the device's dense bf16 peak, where the peak is known


def lr_at(step: int, total: int, cfg: TrainConfig) -> float:
    """Linear warmup over ``warmup_fraction`` of the steps, then cosine decay to ``lr * min_lr_ratio``."""
    warm = int(total * cfg.warmup_fraction)
    if step < warm:
        return cfg.lr * (step + 1) / warm
    progress = (step - warm) / max(1, total - warm)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


def peak_flops(device: str, cfg: TrainConfig) -> float | None:
    if cfg.peak_tflops:
        return cfg.peak_tflops * 1e12
    if device.startswith("cuda"):
        import torch

        name = torch.cuda.get_device_name(device)
        for key, tflops in PEAK_TFLOPS.items():
            if key in name:
                return tflops * 1e12
    return None


def make_optimizer(model, cfg: TrainConfig, device: str, lr_scales: dict | None = None):
    """AdamW, weight decay on matrices only. ``lr_scales`` (parameter -> factor): those tensors take ``lr``
    times their factor (``set_lr``), each in a group of its own."""
    import torch

    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    if lr_scales:
        if cfg.scale_lr_by_rms:
            raise ValueError("lr_scales: not with scale_lr_by_rms (each sets a tensor's rate)")
        groups = [{"params": [p], "weight_decay": cfg.weight_decay if p.dim() >= 2 else 0.0,
                   "lr_scale": float(lr_scales.get(p, 1.0))} for p in model.parameters() if p.requires_grad]
    elif cfg.scale_lr_by_rms:  # one group per tensor, so each can take its own step size (set_lr)
        groups = [{"params": [p], "weight_decay": cfg.weight_decay if p.dim() >= 2 else 0.0, "rms_scaled": True}
                  for p in model.parameters() if p.requires_grad]
    else:
        groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    # Fused AdamW: one kernel for all parameters, on GPUs and (torch >= 2.4) on CPUs, where it measured
    # about 3x faster per optimizer step than the default here.
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), fused=True)


def set_lr(optimizer, lr: float) -> None:
    """Set this step's learning rate. A group made with ``scale_lr_by_rms`` takes ``lr`` times its tensor's
    root mean square (at least 1e-3), as nanoT5's AdamWScale (Nawrot 2023) and Adafactor's relative step
    size do: T5's initialisation gives the shared embedding an RMS of 1 and the other weights about
    d_model ** -0.5, so under plain AdamW the embedding moves 10x slower relative to its size, and a small
    T5 stays on the unigram plateau (benchmarks/README.md, "T5: an objective that transfers"). The RMS is
    read at every step, as nanoT5 does, in one transfer (on a GPU the one host sync per step this option costs)."""
    import torch

    scaled = [g for g in optimizer.param_groups if g.get("rms_scaled")]
    for group in optimizer.param_groups:
        if not group.get("rms_scaled"):
            group["lr"] = lr * group.get("lr_scale", 1.0)
    if scaled:  # one host transfer for all tensors (on a GPU, one sync per step)
        with torch.no_grad():
            rms = torch.stack([g["params"][0].detach().float().pow(2).mean().sqrt() for g in scaled]).tolist()
        for group, r in zip(scaled, rms):
            group["lr"] = lr * max(1e-3, r)


def native_bf16(device: str) -> bool:
    """Whether ``device`` multiplies bf16 matrices natively: a CUDA GPU that supports bf16, or a CPU with
    AMX or AVX512-BF16 (Intel Cooper Lake / Sapphire Rapids and later, AMD Zen 4 and later). Elsewhere bf16
    is emulated and slower than fp32."""
    import torch

    if device.startswith("cuda"):
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    cpu = getattr(torch, "cpu", None)
    probes = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")  # private probes: absent = unknown = no
    return device == "cpu" and any(bool(getattr(cpu, name, lambda: False)()) for name in probes)


def bf16_enabled(precision: str, device: str) -> bool:
    """``bf16``: always; ``fp32``: never; ``auto``: where the device multiplies bf16 natively (the weights, the
    optimizer state and the losses stay fp32 either way: autocast runs only the matrix products in bf16).
    Measured on the 2-core reference CPU (AMX): 1.1-1.6x the fp32 speed of these small models' steps
    (benchmarks/cpu_bf16.py)."""
    from stages.training.config import PRECISIONS

    if precision not in PRECISIONS:
        raise ValueError(f"precision: {precision!r} is not one of auto, fp32, bf16")
    return precision == "bf16" or (precision == "auto" and native_bf16(device))


def use_bf16(cfg: TrainConfig, device: str) -> bool:
    return bf16_enabled(cfg.precision, device)


def to_device(batch: dict, device: str) -> dict:
    if device == "cpu":
        return batch
    return {k: v.pin_memory().to(device, non_blocking=True) for k, v in batch.items()}


def evaluate(model, objective, blocks: np.ndarray, cfg: TrainConfig, device: str, bf16: bool) -> dict:
    """Loss over the held-out blocks, weighted by label tokens; perplexity (GPT) or masked-token accuracy
    (BERT; with NSP / SOP also the pair head's accuracy) or target-token accuracy (T5). Masks are fixed per
    block, so every evaluation is comparable."""
    import torch

    from stages.training.models import training_view

    n = min(cfg.eval_blocks, len(blocks))
    view, prepare = training_view(model, objective.name)
    loss_sum = torch.zeros((), device=device, dtype=torch.float64)
    correct = torch.zeros((), device=device, dtype=torch.int64)
    count = torch.zeros((), device=device, dtype=torch.int64)
    pair_correct = torch.zeros((), device=device, dtype=torch.float64)  # NSP / SOP: the pair head's hits
    pairs = 0
    was_training = model.training
    model.eval()
    with torch.no_grad(), torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16, enabled=bf16):
        for lo in range(0, n, cfg.micro_batch):
            ids = np.arange(lo, min(lo + cfg.micro_batch, n))
            batch = to_device(prepare(make_batch(objective, blocks, ids,
                                                 generators(cfg.seed, EVAL_KEY, [0] * len(ids), ids))), device)
            out = view(**batch)
            labels = getattr(out, "labels", batch["labels"])
            logits = out.logits
            if objective.name == "causal_lm":  # the model predicts token t+1 from position t
                labels, logits = labels[:, 1:], logits[:, :-1]
            valid = labels != -100
            tokens = valid.sum()
            loss_sum += out.loss.double() * tokens
            correct += ((logits.argmax(-1) == labels) & valid).sum()
            count += tokens
            if getattr(out, "pair_accuracy", None) is not None:
                pair_correct += out.pair_accuracy.double() * len(ids)
                pairs += len(ids)
    model.train(was_training)
    loss = (loss_sum / count.clamp(min=1)).item()
    result = {"eval_loss": round(loss, 5), "eval_accuracy": round(correct.item() / max(count.item(), 1), 5)}
    if objective.name == "causal_lm":
        result["eval_perplexity"] = round(math.exp(min(loss, 50)), 3)
    if pairs:
        result["eval_pair_accuracy"] = round(pair_correct.item() / pairs, 5)
    return result


def train(model, objective, train_blocks: np.ndarray, eval_blocks: np.ndarray | None, cfg: TrainConfig, *,
          flops_per_token: float, seq_len: int, dist: Dist, checkpoint_dir: Path | None, fingerprint: str,
          log: Callable[[str], None] = print, progress: bool = True, live=None) -> RunResult:
    """Train ``model`` on ``train_blocks`` with ``objective`` until the budget is spent; returns the record.
    ``history`` rows hold what the inputs determine (step, tokens, loss, lr); the timings (tokens/s, model
    FLOP/s, MFU) go to ``live`` (a :class:`stages.common.live.LiveLog` or anything with its ``start`` and
    ``log``) with the same rows, as they happen, and into the result's totals."""
    import torch

    from stages.training.distributed import wrap
    from stages.training.models import training_view

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = dist.device
    model.to(device)
    model.train()
    bf16 = use_bf16(cfg, device)
    optimizer = make_optimizer(model, cfg, device)
    sampler = BlockSampler(rows=len(train_blocks), micro_batch=cfg.micro_batch, grad_accum=cfg.grad_accum,
                           world=dist.world, rank=dist.rank, seed=cfg.seed)
    tokens_per_step = sampler.global_batch * seq_len
    budget = cfg.budget_flops / flops_per_token if cfg.budget_flops else cfg.budget_tokens
    total = max(1, math.ceil(budget / tokens_per_step))
    result = RunResult(steps=total, tokens=0)

    start_step = 0
    if checkpoint_dir is not None:
        state = ckpt.read_state(checkpoint_dir)
        if state and state.get("fingerprint") == fingerprint:
            step = state.get("step")
            if not isinstance(step, int) or not 0 < step < total:  # a checkpoint is only saved before the end
                raise ckpt.CheckpointError(f"{checkpoint_dir / 'state.json'}: step {step!r} is not within this "
                                           f"run's 1..{total - 1}; delete {checkpoint_dir} to start over")
            ckpt.load(checkpoint_dir, model, optimizer)
            start_step = step
            result.history, result.evals = state["history"], state["evals"]
            result.resumed_from = start_step
            log(f"[train] resuming from the checkpoint at step {start_step} of {total} ({checkpoint_dir})")
        elif state:
            log(f"[train] {checkpoint_dir} holds another run (params or inputs changed): starting over")
    if live is not None:
        live.start(start_step)  # a resumed run keeps what it logged up to its checkpoint
    view, prepare = training_view(model, objective.name, rtd_weight=getattr(objective, "rtd_weight", 50.0),
                                  contrast=(getattr(objective, "weight", 1.0), getattr(objective, "temperature", 0.05)))
    net = wrap(view, dist)
    step_fn = torch.compile(net) if cfg.compile else net
    peak = peak_flops(device, cfg)
    log(f"[train] {total} steps x {sampler.global_batch} blocks x {seq_len} tokens = {total * tokens_per_step:,} "
        f"tokens on {dist.world} x {device}{' (bf16)' if bf16 else ''}; {flops_per_token / 1e6:.1f} MFLOP/token")

    bar = None
    if progress and dist.main:
        from tqdm import tqdm

        bar = tqdm(total=total, initial=start_step, unit="step", dynamic_ncols=True, mininterval=1.0)
    running = torch.zeros((), device=device)
    since, timed, t_last = 0, 0, time.perf_counter()  # steps in the log row; steps timed in this process
    if result.resumed_from:
        running += float(state.get("running_loss", 0.0))
        since = int(state.get("steps_since_log", 0))
    train_seconds, tokens_run = 0.0, 0
    for step in range(start_step, total):
        lr = lr_at(step, total, cfg)
        set_lr(optimizer, lr)
        micro = sampler.micro_batches(step)
        for a, (ids, epochs) in enumerate(micro):
            batch = to_device(prepare(make_batch(objective, train_blocks, ids,
                                                 generators(cfg.seed, TRAIN_KEY, epochs, ids))), device)
            last = a == len(micro) - 1
            with (net.no_sync() if dist.world > 1 and not last else contextlib.nullcontext()):
                with torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16, enabled=bf16):
                    loss = step_fn(**batch).loss / len(micro)
                loss.backward()  # DDP all-reduces the gradients on the last micro-batch only
            running += loss.detach()
        if cfg.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        since += 1
        timed += 1
        done = step + 1
        if bar is not None:
            bar.update(1)
        if done % cfg.log_every == 0 or done == total:
            mean_loss = average(running / since, dist).item()
            if not math.isfinite(mean_loss):
                raise TrainingDiverged(
                    f"step {done}: the training loss is {mean_loss}; stopped. The last good checkpoint "
                    f"({_last_saved(checkpoint_dir)}) is kept; lower the learning rate or check the data.")
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            now = time.perf_counter()
            tps = timed * tokens_per_step / (now - t_last)
            tokens_run += timed * tokens_per_step
            train_seconds += now - t_last
            row = {"step": done, "tokens": done * tokens_per_step, "loss": round(mean_loss, 5), "lr": lr}
            result.history.append(row)
            if live is not None:
                live.log(done, {"train/loss": row["loss"], "train/lr": lr, "train/tokens_per_second": round(tps, 1),
                                "train/flops_per_second": float(f"{tps * flops_per_token:.4g}"),
                                "train/mfu": round(tps * flops_per_token / peak, 4) if peak else None})
            if bar is not None:
                bar.set_postfix(loss=f"{mean_loss:.3f}", tok_s=f"{tps:,.0f}")
            running.zero_()
            since, timed, t_last = 0, 0, time.perf_counter()
        if eval_blocks is not None and len(eval_blocks) and (done % cfg.eval_every == 0 or done == total):
            paused = time.perf_counter()
            ev = {"step": done, "tokens": done * tokens_per_step,
                  **evaluate(model, objective, eval_blocks, cfg, device, bf16)}
            result.evals.append(ev)
            if live is not None:
                live.log(done, {f"eval/{k[5:]}": v for k, v in ev.items() if k.startswith("eval_")})
            if bar is not None:
                bar.write(f"[eval] step {done}: " + ", ".join(f"{k} {v}" for k, v in ev.items() if k.startswith("eval")))
            t_last += time.perf_counter() - paused  # evaluation time is not training throughput
        if checkpoint_dir is not None and dist.main and (done % cfg.checkpoint_every == 0) and done < total:
            paused = time.perf_counter()
            if since and not math.isfinite(running.item()):  # never save a diverged state
                raise TrainingDiverged(f"step {done}: the training loss is {running.item()}; stopped. The last good "
                                       f"checkpoint ({_last_saved(checkpoint_dir)}) is kept; lower the learning rate.")
            ckpt.save(checkpoint_dir, model, optimizer, {
                "fingerprint": fingerprint, "step": done, "history": result.history, "evals": result.evals,
                # the loss summed since the last log row, so the first row after a resume averages the same steps
                "running_loss": running.item(), "steps_since_log": since})
            t_last += time.perf_counter() - paused
    if bar is not None:
        bar.close()
    result.tokens = total * tokens_per_step
    result.tokens_per_second = tokens_run / train_seconds if train_seconds else 0.0
    result.train_seconds = train_seconds
    result.flops_per_second = result.tokens_per_second * flops_per_token
    result.mfu = result.flops_per_second / peak if peak else None
    return result


def _last_saved(folder: Path | None) -> str:
    if folder is None:
        return "none: checkpoints are off"
    state = ckpt.read_state(folder)
    return f"step {state['step']} in {folder}" if state else f"none yet in {folder}"
