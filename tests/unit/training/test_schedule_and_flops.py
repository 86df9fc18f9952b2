"""The learning-rate schedule (linear warmup, cosine decay to lr x min_lr_ratio) and the FLOPs-per-token
estimate (6N + 12 * layers * d_model * seq_len)."""

from __future__ import annotations

import math

import pytest

from stages.objectives.span_corruption import input_and_target_lengths
from stages.tokenization.layout import BlockLayout
from stages.training.config import ModelConfig, TrainConfig
from stages.training.optim import lr_at
from stages.training.models import build_model, flops_per_token


def schedule(total: int, **kw) -> tuple[TrainConfig, list[float]]:
    cfg = TrainConfig(**kw)
    return cfg, [lr_at(s, total, cfg.optim) for s in range(total)]


def test_warmup_is_linear_up_to_the_peak():
    cfg, lrs = schedule(100, lr=2e-3, warmup_fraction=0.1, min_lr_ratio=0.1)
    warm = 10
    for s in range(warm):
        assert lrs[s] == pytest.approx(cfg.lr * (s + 1) / warm, rel=1e-12)
    assert lrs[0] > 0                                   # the first step does not waste itself at lr 0
    assert lrs[warm - 1] == pytest.approx(cfg.lr) and lrs[warm] == pytest.approx(cfg.lr)
    assert max(lrs) == pytest.approx(cfg.lr)


@pytest.mark.parametrize("total,warmup", [(100, 0.1), (24, 0.1), (7, 0.0), (1000, 0.05)])
def test_cosine_decay_is_monotone_and_ends_at_min_lr(total, warmup):
    cfg, lrs = schedule(total, lr=1e-3, warmup_fraction=warmup, min_lr_ratio=0.1)
    warm = int(total * warmup)
    floor = cfg.lr * cfg.min_lr_ratio
    after = lrs[warm:]
    assert after[0] == pytest.approx(cfg.lr)
    assert all(b < a for a, b in zip(after, after[1:]))   # strictly decreasing after warmup
    assert all(lr >= floor - 1e-15 for lr in after)
    # The decay ends at lr * min_lr_ratio: the last step is at most one cosine step above the floor ...
    one_step = (cfg.lr - floor) * 0.5 * (1 - math.cos(math.pi / max(1, total - warm)))
    assert lrs[-1] - floor <= one_step * (1 + 1e-9) + 1e-15
    # ... and the end of the schedule (and anything past it) is the floor exactly.
    assert lr_at(total, total, cfg.optim) == pytest.approx(floor, rel=1e-12)
    assert lr_at(total + 5, total, cfg.optim) == pytest.approx(floor, rel=1e-12)


def test_cosine_midpoint_and_no_warmup():
    cfg, lrs = schedule(110, lr=1.0, warmup_fraction=0.0, min_lr_ratio=0.2)
    assert lrs[0] == pytest.approx(1.0)                      # no warmup: starts at the peak, no division by 0
    assert lrs[55] == pytest.approx(0.2 + 0.8 * 0.5)         # half way down the cosine
    cfg, lrs = schedule(50, lr=1.0, warmup_fraction=0.2, min_lr_ratio=1.0)
    assert lrs[10:] == pytest.approx([1.0] * 40)             # min_lr_ratio 1: constant after warmup


GPT = BlockLayout(paradigm="gpt", seq_len=32, block_len=32, vocab_size=300, eos_id=0)
BERT = BlockLayout(paradigm="bert", seq_len=32, block_len=32, vocab_size=300, pad_id=0, unk_id=1, cls_id=2,
                   sep_id=3, mask_id=4)
T5 = BlockLayout(paradigm="t5", seq_len=32, block_len=34, vocab_size=300, pad_id=0, eos_id=1, unk_id=2,
                 sentinel_top=299, sentinels=10, targets_len=8, noise_density=0.15, mean_span=3.0)
SMALL = ModelConfig(layers=1, d_model=32, heads=2, d_ff=64)
LARGE = ModelConfig(layers=2, d_model=64, heads=2, d_ff=128)


def with_seq_len(layout: BlockLayout, seq_len: int) -> BlockLayout:
    fields = {**layout.to_json(), "seq_len": seq_len, "block_len": seq_len}
    if layout.paradigm == "t5":  # the raw block and the targets grow with the encoder input
        fields["block_len"], fields["targets_len"] = input_and_target_lengths(seq_len, layout.noise_density,
                                                                              layout.mean_span)
    return BlockLayout(**fields)


@pytest.mark.parametrize("layout", [GPT, BERT, T5], ids=["gpt", "bert", "t5"])
def test_flops_per_token_grows_with_seq_len_and_model_size(layout):
    small = build_model(layout, SMALL, seed=0)
    large = build_model(layout, LARGE, seed=0)
    f = flops_per_token(small, layout)
    assert f > 0
    longer = with_seq_len(layout, 128)
    assert flops_per_token(small, longer) > f
    assert flops_per_token(large, layout) > f
    assert flops_per_token(large, longer) > flops_per_token(large, layout)
    assert flops_per_token(large, longer) > flops_per_token(small, longer)
    if layout.paradigm != "t5":  # 6N + 12 * layers * d_model * seq_len (T5 scales its decoder side)
        n = sum(p.numel() for p in small.parameters())
        assert f == 6 * n + 12 * SMALL.layers * SMALL.d_model * layout.seq_len
        assert flops_per_token(small, longer) - f == 12 * SMALL.layers * SMALL.d_model * (128 - 32)


def test_rms_scaled_steps_follow_each_tensors_size():
    """scale_lr_by_rms (nanoT5's AdamWScale): each tensor's rate is lr x its RMS (at least 1e-3), read anew at
    every step; without it every group takes lr itself. Decay stays off for biases and norms."""
    import torch

    from stages.training.optim import make_optimizer, set_lr

    model = torch.nn.Sequential(torch.nn.Embedding(50, 8), torch.nn.Linear(8, 8))
    with torch.no_grad():
        model[0].weight.fill_(2.0)
        model[1].weight.fill_(0.5)
        model[1].bias.zero_()
    opt = make_optimizer(model, TrainConfig(lr=0.01, scale_lr_by_rms=True).optim, "cpu")
    set_lr(opt, 0.01)
    lrs = [g["lr"] for g in opt.param_groups]
    assert lrs == pytest.approx([0.02, 0.005, 1e-5])  # RMS 2, 0.5 and 0 (floored at 1e-3)
    assert [g["weight_decay"] for g in opt.param_groups] == [0.01, 0.01, 0.0]
    with torch.no_grad():
        model[0].weight.fill_(1.0)
    set_lr(opt, 0.01)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.01)
    plain = make_optimizer(model, TrainConfig(lr=0.01).optim, "cpu")
    set_lr(plain, 0.003)
    assert [g["lr"] for g in plain.param_groups] == [0.003, 0.003]
