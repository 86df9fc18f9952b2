"""The one training loop (``stages.training.trainer.Trainer``) on a tiny regression model: the schedule, gradient
accumulation, the evaluation hook, early stopping with the best weights restored, checkpoint and resume,
divergence and precision. Pre-training, DAPT and fine-tuning all run through it (their own tests cover
the stages)."""

from __future__ import annotations

import math
from dataclasses import fields
from pathlib import Path

import pytest
import torch

from stages.training import checkpoint as ckpt
from stages.training.trainer import EarlyStopping, Hooks, LoopConfig, Steps, Trainer, TrainingDiverged

X = torch.linspace(-1, 1, 32).reshape(16, 2)
Y = X @ torch.tensor([[2.0], [-1.0]]) + 0.5


class Tiny(torch.nn.Linear):
    """A linear model that saves and loads as a pre-trained model does (what checkpoints use)."""

    def __init__(self) -> None:
        super().__init__(2, 1)

    def save_pretrained(self, folder: str) -> None:
        from safetensors.torch import save_file

        Path(folder).mkdir(parents=True, exist_ok=True)
        save_file(self.state_dict(), f"{folder}/model.safetensors")

    @classmethod
    def from_pretrained(cls, folder: str) -> Tiny:
        from safetensors.torch import load_file

        model = cls()
        model.load_state_dict(load_file(f"{folder}/model.safetensors"))
        return model


def model_and_optimizer(seed: int = 0):
    torch.manual_seed(seed)
    model = Tiny()
    return model, torch.optim.AdamW(model.parameters(), lr=0.1)


def mse(model):
    return lambda batch: torch.nn.functional.mse_loss(model(batch["x"]), batch["y"])


def whole_batch(step: int) -> list[dict]:
    return [{"x": X, "y": Y}]


def loop(model, optimizer, total: int = 12, **kw):
    """A ``Trainer`` with these options, each sent where it belongs: the loop's config, its steps, its hooks or a
    keyword."""
    options = {**dict(total=total, batches=whole_batch, loss=mse(model), lr=lambda step: 0.1 / (1 + step), clip=1.0,
                      bf16=False, log_every=4, tokens=lambda batch: len(batch["x"]), log=lambda m: None), **kw}
    cfg = {f.name: options.pop(f.name) for f in fields(LoopConfig) if f.name in options}
    hooks = {f.name: options.pop(f.name) for f in fields(Hooks) if f.name in options}
    steps = Steps(**{f.name: options.pop(f.name) for f in fields(Steps)})
    return Trainer(model, optimizer, LoopConfig(**cfg), steps, hooks=Hooks(**hooks), **options).train()


def snapshot(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_rows_follow_the_schedule_and_the_loss_falls():
    model, opt = model_and_optimizer()
    result = loop(model, opt, total=10, row=lambda step: {"tokens": step * 16})
    assert [r["step"] for r in result.history] == [4, 8, 10]  # every log_every steps and at the last
    assert [r["lr"] for r in result.history] == [0.1 / 4, 0.1 / 8, 0.1 / 10]  # the rate of the row's step
    assert [r["tokens"] for r in result.history] == [64, 128, 160]
    assert result.history[-1]["loss"] < result.history[0]["loss"]
    assert result.steps == 10 and not result.stopped_early and result.best is None
    assert result.tokens_per_second > 0 and result.train_seconds > 0


def test_micro_batches_accumulate_to_the_whole_batch_gradient():
    def sgd(model):  # plain SGD: a gradient twice too large would show in the weights (AdamW would hide it)
        return torch.optim.SGD(model.parameters(), lr=0.1)

    whole, _ = model_and_optimizer()
    loop(whole, sgd(whole), total=3, clip=None)
    halves, _ = model_and_optimizer()
    loop(halves, sgd(halves), total=3, clip=None,
         batches=lambda step: [{"x": X[:8], "y": Y[:8]}, {"x": X[8:], "y": Y[8:]}])
    for k, v in snapshot(whole).items():
        torch.testing.assert_close(snapshot(halves)[k], v, rtol=1e-5, atol=1e-6)


def test_the_evaluation_hook_runs_every_eval_every_steps_and_at_the_last():
    model, opt = model_and_optimizer()
    seen = []

    def evaluate(step):
        seen.append(step)
        with torch.no_grad():
            return {"eval_loss": float(mse(model)({"x": X, "y": Y}))}

    result = loop(model, opt, total=11, evaluate=evaluate, eval_every=5, row=lambda step: {"epoch": 1})
    assert seen == [5, 10, 11]
    assert [(e["step"], e["epoch"]) for e in result.evals] == [(5, 1), (10, 1), (11, 1)]
    assert result.evals[-1]["eval_loss"] < result.evals[0]["eval_loss"]


def test_early_stopping_stops_after_patience_and_restores_the_best_weights():
    model, opt = model_and_optimizer()
    scores = iter([0.2, 0.6, 0.5, 0.4, 0.9])
    at_best = {}

    def evaluate(step):
        score = next(scores)
        if score == 0.6:
            at_best.update(snapshot(model))
        return {"val_f1": score}

    result = loop(model, opt, total=20, evaluate=evaluate, eval_every=2, early=EarlyStopping("val_f1", patience=2))
    assert result.stopped_early and result.steps == 8 and result.best == 0.6  # 0.5 and 0.4 gained nothing
    assert [e["val_f1"] for e in result.evals] == [0.2, 0.6, 0.5, 0.4]
    for k, v in snapshot(model).items():
        assert torch.equal(v, at_best[k]), k  # the weights of the best evaluation, not the last


def test_no_gain_at_the_last_step_is_not_an_early_stop():
    model, opt = model_and_optimizer()
    scores = iter([0.5, 0.4, 0.3])
    result = loop(model, opt, total=6, evaluate=lambda step: {"f1": next(scores)}, eval_every=2,
                  early=EarlyStopping("f1", patience=2))
    assert result.steps == 6 and not result.stopped_early and result.best == 0.5


@pytest.mark.parametrize("checkpoint_every", [4, 3])  # on a log step, and between two
def test_a_killed_run_resumes_from_its_checkpoint_and_ends_where_a_whole_run_ends(tmp_path, monkeypatch,
                                                                                   checkpoint_every):
    full_model, full_opt = model_and_optimizer()
    full = loop(full_model, full_opt, checkpoint_dir=tmp_path / "full", checkpoint_every=checkpoint_every,
                fingerprint="run")
    real_save = ckpt.save

    def save_then_die(folder, model, optimizer, state):
        real_save(folder, model, optimizer, state)
        raise KeyboardInterrupt

    monkeypatch.setattr(ckpt, "save", save_then_die)
    model, opt = model_and_optimizer()
    with pytest.raises(KeyboardInterrupt):
        loop(model, opt, checkpoint_dir=tmp_path / "ck", checkpoint_every=checkpoint_every, fingerprint="run")
    monkeypatch.setattr(ckpt, "save", real_save)
    messages = []
    model, opt = model_and_optimizer(seed=1)  # other initial weights: the checkpoint's must replace them
    resumed = loop(model, opt, checkpoint_dir=tmp_path / "ck", checkpoint_every=checkpoint_every,
                   fingerprint="run", log=messages.append)
    assert resumed.resumed_from == checkpoint_every and any("resuming" in m for m in messages)
    assert [r["step"] for r in resumed.history] == [r["step"] for r in full.history]
    for a, b in zip(resumed.history, full.history):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-6)
    for k, v in snapshot(full_model).items():
        torch.testing.assert_close(snapshot(model)[k], v, rtol=1e-6, atol=1e-7)


def test_a_checkpoint_of_another_run_is_not_resumed(tmp_path):
    model, opt = model_and_optimizer()
    loop(model, opt, total=6, checkpoint_dir=tmp_path / "ck", checkpoint_every=4, fingerprint="old")
    messages = []
    model, opt = model_and_optimizer()
    result = loop(model, opt, total=6, checkpoint_dir=tmp_path / "ck", checkpoint_every=4, fingerprint="new",
                  log=messages.append)
    assert result.resumed_from == 0 and any("holds another run" in m for m in messages)
    assert ckpt.read_state(tmp_path / "ck")["fingerprint"] == "new"


def test_a_nan_loss_stops_the_run_naming_the_step():
    model, opt = model_and_optimizer()

    def loss(batch):
        return mse(model)(batch) * (math.nan if batch["step"] >= 5 else 1.0)

    with pytest.raises(TrainingDiverged, match="step 8: the training loss is nan"):
        loop(model, opt, batches=lambda step: [{"x": X, "y": Y, "step": step}], loss=loss,
             tokens=lambda batch: 1)


@pytest.mark.parametrize("bf16", [False, True])
def test_the_forward_pass_runs_under_bf16_autocast_only_when_asked(bf16):
    model, opt = model_and_optimizer()
    seen = []

    def loss(batch):
        seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
        return mse(model)(batch).float()

    loop(model, opt, total=2, loss=loss, bf16=bf16)
    assert {enabled for enabled, _ in seen} == {bf16}
    if bf16:
        assert {dtype for _, dtype in seen} == {torch.bfloat16}
    assert all(p.dtype == torch.float32 for p in model.parameters())  # the weights stay fp32


def test_the_model_moves_to_the_device_and_batches_follow(monkeypatch):
    from stages.training import trainer as trainer_module
    from stages.training.distributed import Dist

    moved = []
    monkeypatch.setattr(trainer_module, "to_device", lambda batch, device: moved.append(device) or batch)
    model, opt = model_and_optimizer()
    loop(model, opt, total=2, dist=Dist(device="cpu"))
    assert moved == ["cpu", "cpu"] and next(model.parameters()).device.type == "cpu"
