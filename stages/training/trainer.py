"""The one training loop, of pre-training, DAPT and the fine-tuning stage's classifiers: a :class:`Trainer` holds
a run's state and :meth:`Trainer.train` reads top to bottom (a step, then logging, evaluation with early
stopping, a checkpoint, the stop test). What a step does (its batches, loss, rate and tokens) is a :class:`Steps`
record; accumulation, clipping, bf16 autocast, DDP's ``no_sync`` and resuming are the trainer's."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stages.training import checkpoint as ckpt
from stages.training.device import bf16_autocast, to_device
from stages.training.distributed import Dist, average
from stages.training.optim import set_lr


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


@dataclass(frozen=True)
class Steps:
    """What an optimizer step does: ``batches(step)`` its micro-batches on the host (asked for once per step, in
    order), ``loss(batch)`` of one on the device, ``lr(step)`` its rate, ``tokens(batch)`` the tokens a host
    batch trains on (tokens/s, model FLOP/s, MFU)."""

    batches: Callable[[int], Sequence[dict]]
    loss: Callable[[dict], Any]
    lr: Callable[[int], float]
    tokens: Callable[[dict], int]


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


class Trainer:
    """``cfg.total`` optimizer steps of ``model`` with ``optimizer``, each the mean of its micro-batches' losses,
    gradients clipped; logging, evaluation, early stopping and checkpoints as :class:`LoopConfig` and
    :class:`Hooks` say. ``net``: what ``steps.loss`` calls instead of ``model`` when it is wrapped (DDP,
    compiled), for ``no_sync``."""

    def __init__(self, model, optimizer, cfg: LoopConfig, steps: Steps, hooks: Hooks | None = None,
                 dist: Dist = Dist(), net=None) -> None:
        self.model, self.optimizer, self.cfg, self.steps = model, optimizer, cfg, steps
        self.hooks, self.dist, self.net = hooks or Hooks(), dist, net
        self.result = RunResult(steps=cfg.total, tokens=0)
        self.start = self.done = self.since = 0  # the first step, the steps done, the steps since the last row
        self.running: Any = None                 # the loss summed since the last row (a device scalar)
        self.rate = 0.0                          # the last step's learning rate
        self.best, self.bad, self.best_state, self.stopped = -math.inf, 0, None, False
        self.timed_tokens, self.t_last = 0, 0.0  # tokens trained since the last row, in this process
        self.train_seconds, self.tokens_run = 0.0, 0

    def train(self) -> RunResult:
        self.resume()
        for step in range(self.start, self.cfg.total):
            self.train_step(step)
            logged = self.maybe_log()
            logged.update(self.maybe_eval())
            if self.hooks.live is not None and logged:
                self.hooks.live.log(self.done, logged)
            self.maybe_checkpoint()
            if self.should_stop():
                break
        return self.finish()

    def resume(self) -> None:
        """The model on its device in training mode, and the run's state from its checkpoint when the checkpoint
        is this run's (the same ``fingerprint``)."""
        import torch

        device, folder = self.dist.device, self.hooks.checkpoint_dir
        self.model.to(device)
        self.model.train()
        self.running = torch.zeros((), device=device, dtype=getattr(torch, self.cfg.sum_dtype))
        state = ckpt.read_state(folder) if folder is not None else None
        if state and state.get("fingerprint") == self.hooks.fingerprint:
            step, total = state.get("step"), self.cfg.total
            if not isinstance(step, int) or not 0 < step < total:  # a checkpoint is only saved before the end
                raise ckpt.CheckpointError(f"{folder / 'state.json'}: step {step!r} is not within this run's "
                                           f"1..{total - 1}; delete {folder} to start over")
            ckpt.load(folder, self.model, self.optimizer)
            self.start = self.done = self.result.resumed_from = step
            self.result.history, self.result.evals = state["history"], state["evals"]
            self.running += float(state.get("running_loss", 0.0))  # the first row after it averages the same steps
            self.since = int(state.get("steps_since_log", 0))
            self.hooks.log(f"[train] resuming from the checkpoint at step {step} of {total} ({folder})")
        elif state:
            self.hooks.log(f"[train] {folder} holds another run (params or inputs changed): starting over")
        if self.hooks.live is not None:
            self.hooks.live.start(self.start)  # a resumed run keeps what it logged up to its checkpoint
        if self.hooks.bar is not None and self.start:
            self.hooks.bar.update(self.start)
        self.t_last = time.perf_counter()

    def train_step(self, step: int) -> None:
        """One optimizer step over ``steps.batches(step)``; DDP all-reduces the gradients on the last one only."""
        import torch

        device = self.dist.device
        self.rate = self.steps.lr(step)
        set_lr(self.optimizer, self.rate)
        micro = self.steps.batches(step)
        for a, batch in enumerate(micro):
            self.timed_tokens += self.steps.tokens(batch)
            batch = to_device(batch, device)
            sync = self.dist.world == 1 or a == len(micro) - 1
            with contextlib.nullcontext() if sync else (self.net or self.model).no_sync():
                with bf16_autocast(device, self.cfg.bf16):
                    value = self.steps.loss(batch) / len(micro)
                value.backward()
            self.running += value.detach()
        if self.cfg.clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.since, self.done = self.since + 1, step + 1
        if self.hooks.bar is not None:
            self.hooks.bar.update(1)

    def maybe_log(self) -> dict:
        """Every ``log_every`` steps and at the end: a history row and the live log's training values."""
        import torch

        cfg, done = self.cfg, self.done
        if done % cfg.log_every and done != cfg.total:
            return {}
        mean = average(self.running / self.since, self.dist).item()
        if not math.isfinite(mean):
            raise _diverged(done, mean, self.hooks.checkpoint_dir)
        if self.dist.device.startswith("cuda"):
            torch.cuda.synchronize()
        now = time.perf_counter()
        tps = self.timed_tokens * self.dist.world / max(now - self.t_last, 1e-9)
        self.tokens_run += self.timed_tokens * self.dist.world
        self.train_seconds += now - self.t_last
        self.result.history.append({"step": done, **self.hooks.row(done), "loss": round(mean, 5), "lr": self.rate})
        logged = {"train/loss": round(mean, 5), "train/lr": self.rate, "train/tokens_per_second": round(tps, 1),
                  "train/flops_per_second": float(f"{tps * cfg.flops_per_token:.4g}"),
                  "train/mfu": round(tps * cfg.flops_per_token / cfg.peak, 4) if cfg.peak else None}
        if self.hooks.bar is not None:
            self.hooks.bar.set_postfix(loss=f"{mean:.3f}", tok_s=f"{tps:,.0f}")
        self.running.zero_()
        self.since, self.timed_tokens, self.t_last = 0, 0, time.perf_counter()
        return logged

    def maybe_eval(self) -> dict:
        """Every ``eval_every`` steps and at the end: the scores, and early stopping's bookkeeping (the best
        weights kept). Its time is not training throughput."""
        hooks, done = self.hooks, self.done
        if hooks.evaluate is None or (done % self.cfg.eval_every and done != self.cfg.total):
            return {}
        paused = time.perf_counter()
        scores = hooks.evaluate(done)
        self.result.evals.append({"step": done, **hooks.row(done), **scores})
        if hooks.bar is not None:
            hooks.bar.write(f"[eval] step {done}: " + ", ".join(f"{k} {v}" for k, v in scores.items()))
        if hooks.early is not None:
            if scores[hooks.early.metric] > self.best:
                self.best, self.bad = scores[hooks.early.metric], 0
                self.best_state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            else:
                self.bad += 1
                # at the last step there is nothing to stop
                self.stopped = self.bad >= hooks.early.patience and done < self.cfg.total
        self.t_last += time.perf_counter() - paused
        return {k.replace("_", "/", 1): v for k, v in scores.items()}

    def maybe_checkpoint(self) -> None:
        """Every ``checkpoint_every`` steps before the end, on the main process: the state to resume from (never a
        diverged one)."""
        folder, done = self.hooks.checkpoint_dir, self.done
        if folder is None or not self.dist.main or done % self.cfg.checkpoint_every or done >= self.cfg.total \
                or self.stopped:
            return
        paused = time.perf_counter()
        if self.since and not math.isfinite(self.running.item()):
            raise _diverged(done, self.running.item(), folder)
        ckpt.save(folder, self.model, self.optimizer, {
            "fingerprint": self.hooks.fingerprint, "step": done, "history": self.result.history,
            "evals": self.result.evals, "running_loss": self.running.item(), "steps_since_log": self.since})
        self.t_last += time.perf_counter() - paused

    def should_stop(self) -> bool:
        return self.stopped

    def finish(self) -> RunResult:
        """The best evaluation's weights restored (with early stopping) and the run's totals."""
        if self.best_state is not None:
            self.model.load_state_dict(self.best_state)
        r = self.result
        r.steps, r.stopped_early = self.done, self.stopped
        r.best = self.best if self.hooks.early is not None else None
        r.tokens_per_second = self.tokens_run / self.train_seconds if self.train_seconds else 0.0
        r.train_seconds = self.train_seconds
        r.flops_per_second = r.tokens_per_second * self.cfg.flops_per_token
        r.mfu = r.flops_per_second / self.cfg.peak if self.cfg.peak else None
        return r


@contextlib.contextmanager
def progress_bar(total: int, enabled: bool, **kwargs):
    """A tqdm bar over ``total`` steps (None when not ``enabled``), closed on exit."""
    if not enabled:
        yield None
        return
    from tqdm import tqdm

    with tqdm(total=total, unit="step", dynamic_ncols=True, mininterval=1.0, **kwargs) as bar:
        yield bar


def _diverged(done: int, loss: float, folder: Path | None) -> TrainingDiverged:
    state = ckpt.read_state(folder) if folder is not None else None
    saved = "none: checkpoints are off" if folder is None else f"step {state['step']} in {folder}" if state else \
        f"none yet in {folder}"
    return TrainingDiverged(f"step {done}: the training loss is {loss}; stopped. The last good checkpoint ({saved}) "
                            "is kept; lower the learning rate or check the data.")
