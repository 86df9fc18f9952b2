"""The one training loop (:func:`run_loop`) of pre-training and DAPT (:func:`train`: only the objective differs
between paradigms) and of the fine-tuning stage's classifiers (early stopping on validation, best weights restored):
fused AdamW, warmup then cosine decay, clipping, accumulation, bf16 autocast where native, DDP, checkpoints."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from stages.objectives import has_fused_view, training_view
from stages.training import checkpoint as ckpt
from stages.training.config import PRECISIONS, TrainConfig
from stages.training.data import EVAL_KEY, TRAIN_KEY, BlockSampler, generators, make_batch
from stages.training.distributed import Dist, average
from stages.training.kernels import FUSED_LOSS, use_fused

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
    stopped_early: bool = False    # early stopping ended the run before ``steps``
    best: float | None = None      # the early-stopping metric's best evaluation (its weights restored)
    kernels: dict | None = None    # the fused kernels the run used ({"loss": ...}); None: the stock ones


def lr_at(step: int, total: int, cfg) -> float:
    """Linear warmup over ``warmup_fraction`` of the steps, then cosine decay to ``lr * min_lr_ratio`` (``cfg``: a
    TrainConfig or FinetuneConfig, the recipe pre-training and fine-tuning share)."""
    warm = int(total * cfg.warmup_fraction)
    if step < warm:
        return cfg.lr * (step + 1) / warm
    progress = (step - warm) / max(1, total - warm)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


def peak_flops(device: str, peak_tflops: float = 0.0) -> float | None:
    """The device's dense bf16 peak in FLOP/s: ``peak_tflops`` when set, else a known GPU's, else None."""
    if peak_tflops:
        return peak_tflops * 1e12
    if device.startswith("cuda"):
        import torch

        name = torch.cuda.get_device_name(device)
        return next((tflops * 1e12 for key, tflops in PEAK_TFLOPS.items() if key in name), None)
    return None


def make_optimizer(model, cfg, device: str):
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


def native_bf16(device: str) -> bool:
    """Whether ``device`` multiplies bf16 matrices natively: a CUDA GPU that supports bf16, or a CPU with
    AMX or AVX512-BF16 (elsewhere bf16 is emulated and slower than fp32)."""
    import torch

    if device.startswith("cuda"):
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    cpu = getattr(torch, "cpu", None)
    probes = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")  # private probes: absent = unknown = no
    return device == "cpu" and any(bool(getattr(cpu, name, lambda: False)()) for name in probes)


def bf16_enabled(precision: str, device: str) -> bool:
    """``bf16``: always; ``fp32``: never; ``auto``: where the device multiplies bf16 natively (autocast: only the
    matrix products run in bf16; benchmarks/cpu_bf16.py)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision: {precision!r} is not one of auto, fp32, bf16")
    return precision == "bf16" or (precision == "auto" and native_bf16(device))


def bf16_autocast(device: str, enabled: bool):
    """The context the forward passes run in: bf16 autocast on ``device`` when ``enabled``."""
    import torch

    return torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16, enabled=enabled)


@contextlib.contextmanager
def progress_bar(total: int, enabled: bool, **kwargs):
    """A tqdm bar over ``total`` steps (None when not ``enabled``), closed on exit."""
    if not enabled:
        yield None
        return
    from tqdm import tqdm

    with tqdm(total=total, unit="step", dynamic_ncols=True, mininterval=1.0, **kwargs) as bar:
        yield bar


def to_device(batch: dict, device: str) -> dict:
    if device == "cpu":
        return batch
    return {k: v.pin_memory().to(device, non_blocking=True) for k, v in batch.items()}


def evaluate(model, objective, blocks: np.ndarray, cfg: TrainConfig, device: str, bf16: bool) -> dict:
    """Loss over the held-out blocks, weighted by label tokens, and accuracy (GPT: perplexity; NSP / SOP: the
    pair head's accuracy). Masks are fixed per block, so every evaluation is comparable."""
    import torch

    n = min(cfg.eval_blocks, len(blocks))
    view, prepare = training_view(model, objective)
    shifted = getattr(objective, "shifts_labels", False)
    loss_sum = torch.zeros((), device=device, dtype=torch.float64)
    correct = torch.zeros((), device=device, dtype=torch.int64)
    count = torch.zeros((), device=device, dtype=torch.int64)
    pair_correct = torch.zeros((), device=device, dtype=torch.float64)  # NSP / SOP: the pair head's hits
    pairs = 0
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
            if getattr(out, "pair_accuracy", None) is not None:
                pair_correct += out.pair_accuracy.double() * len(ids)
                pairs += len(ids)
    model.train(was_training)
    loss = (loss_sum / count.clamp(min=1)).item()
    result = {"eval_loss": round(loss, 5), "eval_accuracy": round(correct.item() / max(count.item(), 1), 5)}
    if shifted:
        result["eval_perplexity"] = round(math.exp(min(loss, 50)), 3)
    if pairs:
        result["eval_pair_accuracy"] = round(pair_correct.item() / pairs, 5)
    return result


@dataclass(frozen=True)
class EarlyStopping:
    """Stop after ``patience`` evaluations in a row without a gain in ``metric`` (higher is better; an
    evaluation at the last step stops nothing), and end the run with the best evaluation's weights."""

    metric: str
    patience: int


@dataclass(frozen=True)
class LoopConfig:
    """How long the loop runs and how often it logs, evaluates and checkpoints (in optimizer steps)."""

    total: int
    log_every: int
    clip: float | None = 1.0       # gradient-norm clipping (None or 0 = off)
    bf16: bool = False             # bf16 autocast of the forward passes
    eval_every: int = 0
    checkpoint_every: int = 0
    flops_per_token: float = 0.0   # model FLOPs per trained token: throughput and MFU
    peak: float | None = None      # the device's peak FLOP/s for MFU (None = unknown)
    sum_dtype: str = "float64"     # the dtype the logged loss is summed in between rows (pre-training: float32)


@dataclass
class Hooks:
    """What the loop calls around the steps: ``row(step)`` adds to each history row and evaluation; ``evaluate``
    scores; ``early`` stops; ``checkpoint_dir`` (with ``fingerprint``) saves and resumes; the rest report."""

    row: Callable[[int], dict] = lambda done: {}
    evaluate: Callable[[int], dict] | None = None
    early: EarlyStopping | None = None
    checkpoint_dir: Path | None = None
    fingerprint: str = ""
    live: Any = None
    bar: Any = None
    log: Callable[[str], None] = print


def run_loop(model, optimizer, cfg: LoopConfig, *, batches: Callable[[int], Sequence[dict]],
             loss: Callable[[dict], Any], lr: Callable[[int], float], tokens: Callable[[dict], int],
             hooks: Hooks | None = None, dist: Dist = Dist(), net=None) -> RunResult:
    """``cfg.total`` optimizer steps over ``batches(step)`` (a step's micro-batches, on the host, asked for once
    per step in order), each ``loss(batch)`` (on ``dist.device``) averaged over them, gradients clipped and the
    rate set to ``lr(step)``; logging, evaluation, early stopping and checkpoints as :class:`LoopConfig` and
    :class:`Hooks` say. ``tokens(batch)``: the tokens a host batch trains on (tokens/s, model FLOP/s, MFU);
    ``net``: what ``loss`` calls instead of ``model`` when it is wrapped (DDP, compiled), for ``no_sync``."""
    import torch

    hooks = hooks or Hooks()
    total, log_every, eval_every, checkpoint_every = cfg.total, cfg.log_every, cfg.eval_every, cfg.checkpoint_every
    row, evaluate, early, checkpoint_dir = hooks.row, hooks.evaluate, hooks.early, hooks.checkpoint_dir
    live, bar, log, flops_per_token, peak = hooks.live, hooks.bar, hooks.log, cfg.flops_per_token, cfg.peak
    device = dist.device
    model.to(device)
    model.train()
    result = RunResult(steps=total, tokens=0)
    running = torch.zeros((), device=device, dtype=getattr(torch, cfg.sum_dtype))  # the loss summed since the last row
    start, since = 0, 0
    state = ckpt.read_state(checkpoint_dir) if checkpoint_dir is not None else None
    if state and state.get("fingerprint") == hooks.fingerprint:
        step = state.get("step")
        if not isinstance(step, int) or not 0 < step < total:  # a checkpoint is only saved before the end
            raise ckpt.CheckpointError(f"{checkpoint_dir / 'state.json'}: step {step!r} is not within this "
                                       f"run's 1..{total - 1}; delete {checkpoint_dir} to start over")
        ckpt.load(checkpoint_dir, model, optimizer)
        start = result.resumed_from = step
        result.history, result.evals = state["history"], state["evals"]
        running += float(state.get("running_loss", 0.0))  # the first row after a resume averages the same steps
        since = int(state.get("steps_since_log", 0))
        log(f"[train] resuming from the checkpoint at step {start} of {total} ({checkpoint_dir})")
    elif state:
        log(f"[train] {checkpoint_dir} holds another run (params or inputs changed): starting over")
    if live is not None:
        live.start(start)  # a resumed run keeps what it logged up to its checkpoint
    if bar is not None and start:
        bar.update(start)
    best, bad, best_state, stopped = -math.inf, 0, None, False
    timed_tokens, t_last = 0, time.perf_counter()  # tokens trained since the last row, in this process
    train_seconds, tokens_run, done = 0.0, 0, start
    for step in range(start, total):
        rate = lr(step)
        set_lr(optimizer, rate)
        micro = batches(step)
        for a, batch in enumerate(micro):
            timed_tokens += tokens(batch)
            batch = to_device(batch, device)
            sync = dist.world == 1 or a == len(micro) - 1  # DDP all-reduces the gradients on the last one only
            with contextlib.nullcontext() if sync else (net or model).no_sync():
                with bf16_autocast(device, cfg.bf16):
                    value = loss(batch) / len(micro)
                value.backward()
            running += value.detach()
        if cfg.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        since, done = since + 1, step + 1
        if bar is not None:
            bar.update(1)
        logged: dict = {}
        if done % log_every == 0 or done == total:
            mean = average(running / since, dist).item()
            if not math.isfinite(mean):
                raise _diverged(done, mean, checkpoint_dir)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            now = time.perf_counter()
            tps = timed_tokens * dist.world / max(now - t_last, 1e-9)
            tokens_run += timed_tokens * dist.world
            train_seconds += now - t_last
            result.history.append({"step": done, **row(done), "loss": round(mean, 5), "lr": rate})
            logged = {"train/loss": round(mean, 5), "train/lr": rate, "train/tokens_per_second": round(tps, 1),
                      "train/flops_per_second": float(f"{tps * flops_per_token:.4g}"),
                      "train/mfu": round(tps * flops_per_token / peak, 4) if peak else None}
            if bar is not None:
                bar.set_postfix(loss=f"{mean:.3f}", tok_s=f"{tps:,.0f}")
            running.zero_()
            since, timed_tokens, t_last = 0, 0, time.perf_counter()
        if evaluate is not None and (done % eval_every == 0 or done == total):
            paused = time.perf_counter()
            scores = evaluate(done)
            result.evals.append({"step": done, **row(done), **scores})
            logged.update({k.replace("_", "/", 1): v for k, v in scores.items()})
            if bar is not None:
                bar.write(f"[eval] step {done}: " + ", ".join(f"{k} {v}" for k, v in scores.items()))
            if early is not None:
                if scores[early.metric] > best:
                    best, bad = scores[early.metric], 0
                    best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
                else:
                    bad += 1
                    stopped = bad >= early.patience and done < total  # at the last step there is nothing to stop
            t_last += time.perf_counter() - paused  # evaluation time is not training throughput
        if live is not None and logged:
            live.log(done, logged)
        if checkpoint_dir is not None and dist.main and done % checkpoint_every == 0 and done < total and not stopped:
            paused = time.perf_counter()
            if since and not math.isfinite(running.item()):  # never save a diverged state
                raise _diverged(done, running.item(), checkpoint_dir)
            ckpt.save(checkpoint_dir, model, optimizer, {
                "fingerprint": hooks.fingerprint, "step": done, "history": result.history, "evals": result.evals,
                "running_loss": running.item(), "steps_since_log": since})
            t_last += time.perf_counter() - paused
        if stopped:
            break
    if best_state is not None:
        model.load_state_dict(best_state)
    result.steps, result.stopped_early, result.best = done, stopped, (best if early is not None else None)
    result.tokens_per_second = tokens_run / train_seconds if train_seconds else 0.0
    result.train_seconds = train_seconds
    result.flops_per_second = result.tokens_per_second * flops_per_token
    result.mfu = result.flops_per_second / peak if peak else None
    return result


def train(model, objective, train_blocks: np.ndarray, eval_blocks: np.ndarray | None, cfg: TrainConfig, *,
          flops_per_token: float, seq_len: int, dist: Dist, checkpoint_dir: Path | None, fingerprint: str,
          log: Callable[[str], None] = print, progress: bool = True, live=None) -> RunResult:
    """Pre-train (or adapt) ``model`` on ``train_blocks`` until the budget is spent (:func:`run_loop`). ``history``
    rows hold what the inputs determine; the timings go to ``live`` and into the result."""
    import torch

    from stages.training.distributed import wrap

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    model.to(dist.device)
    bf16 = bf16_enabled(cfg.precision, dist.device)
    optimizer = make_optimizer(model, cfg, dist.device)
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

    with progress_bar(total, progress and dist.main) as bar:
        loop_cfg = LoopConfig(total=total, log_every=cfg.log_every, clip=cfg.clip, bf16=bf16, eval_every=cfg.eval_every,
                              checkpoint_every=cfg.checkpoint_every, flops_per_token=flops_per_token,
                              peak=peak_flops(dist.device, cfg.peak_tflops), sum_dtype="float32")
        hooks = Hooks(row=lambda done: {"tokens": done * tokens_per_step},
                      evaluate=(lambda done: evaluate(model, objective, eval_blocks, cfg, dist.device, bf16))
                      if eval_blocks is not None and len(eval_blocks) else None,
                      checkpoint_dir=checkpoint_dir, fingerprint=fingerprint, live=live, bar=bar, log=log)
        result = run_loop(model, optimizer, loop_cfg, batches=batches, loss=lambda batch: step_fn(**batch).loss,
                          lr=lambda step: lr_at(step, total, cfg), tokens=lambda batch: cfg.micro_batch * seq_len,
                          hooks=hooks, dist=dist, net=net)
    result.tokens = total * tokens_per_step
    result.kernels = {"loss": FUSED_LOSS} if fused else None
    return result


def _diverged(done: int, loss: float, folder: Path | None) -> TrainingDiverged:
    state = ckpt.read_state(folder) if folder is not None else None
    saved = "none: checkpoints are off" if folder is None else f"step {state['step']} in {folder}" if state else \
        f"none yet in {folder}"
    return TrainingDiverged(f"step {done}: the training loss is {loss}; stopped. The last good checkpoint ({saved}) "
                            "is kept; lower the learning rate or check the data.")
