"""The fused kernels the loop takes on GPUs (stages.training.kernels, .lce): the chunked linear cross-entropy against the
stock projection + cross-entropy (loss and gradients), a hundred training steps of GPT with either loss, and the
automatic choice (stock on a CPU)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from stages.objectives import for_paradigm, has_fused_view, training_view
from stages.tokenization.layout import BlockLayout
from stages.training.config import ModelConfig
from stages.training.kernels import FUSED_ENV, use_fused
from stages.training.lce import linear_cross_entropy
from stages.training.models import build_model

GPT = BlockLayout(paradigm="gpt", seq_len=24, block_len=24, vocab_size=120, eos_id=0)


def stock(hidden, weight, labels, bias=None):
    logits = torch.nn.functional.linear(hidden, weight, bias).float()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1),
                                             ignore_index=-100)


def leaves(seed: int, bias: bool):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(3, 11, 16, generator=gen, requires_grad=True)
    weight = torch.randn(50, 16, generator=gen, requires_grad=True)
    b = torch.randn(50, generator=gen, requires_grad=True) if bias else None
    labels = torch.randint(0, 50, (3, 11), generator=gen)
    labels[0, :4] = -100  # rows left out of the mean
    labels[2, -1] = -100
    return hidden, weight, b, labels


@pytest.mark.parametrize("chunk", [1, 7, 33, 4096])
@pytest.mark.parametrize("bias", [False, True])
def test_chunked_loss_and_gradients_equal_the_stock_ones_in_fp32(chunk, bias):
    h1, w1, b1, labels = leaves(0, bias)
    h2, w2, b2 = (t.detach().clone().requires_grad_(True) if t is not None else None for t in (h1, w1, b1))
    ref = stock(h1, w1, labels, b1)
    ref.backward()
    out = linear_cross_entropy(h2, w2, labels, bias=b2, chunk=chunk)
    (out * 1.0).backward()  # a scaled upstream gradient goes through backward
    assert out.item() == pytest.approx(ref.item(), rel=1e-6)
    assert torch.allclose(h2.grad, h1.grad, atol=1e-6) and torch.allclose(w2.grad, w1.grad, atol=1e-6)
    if bias:
        assert torch.allclose(b2.grad, b1.grad, atol=1e-6)


def test_an_upstream_gradient_scales_every_gradient():
    h, w, _, labels = leaves(1, False)
    (linear_cross_entropy(h, w, labels, chunk=5) * 3.0).backward()
    h2, w2 = h.detach().clone().requires_grad_(True), w.detach().clone().requires_grad_(True)
    (stock(h2, w2, labels) * 3.0).backward()
    assert torch.allclose(h.grad, h2.grad, atol=1e-6) and torch.allclose(w.grad, w2.grad, atol=1e-6)


def test_under_bf16_autocast_it_stays_within_bf16_rounding_of_the_stock_path():
    h, w, _, labels = leaves(2, False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = stock(h, w, labels)
        out = linear_cross_entropy(h, w, labels, chunk=6)
    assert out.dtype == torch.float32 and abs(out.item() - ref.item()) < 2e-2 * abs(ref.item())
    out.backward()
    assert w.grad.dtype == torch.float32 and h.grad.dtype == torch.float32  # the leaves' own dtypes


def losses(fused: bool, bf16: bool, steps: int = 100) -> list[float]:
    """``steps`` AdamW steps of a small GPT on counting blocks (each token the previous one plus one), with the
    stock or the fused loss."""
    torch.manual_seed(0)
    model = build_model(GPT, ModelConfig(layers=2, d_model=32, heads=2, d_ff=64), seed=0)
    builder = for_paradigm(GPT)
    view, prepare = training_view(model, builder, fused=fused)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    rng = np.random.default_rng(0)
    out = []
    for _ in range(steps):
        starts = rng.integers(0, GPT.vocab_size - 1, size=(4, 1))
        batch = prepare(builder((starts + np.arange(GPT.seq_len)) % (GPT.vocab_size - 1) + 1, rng))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = view(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        out.append(loss.item())
    return out


@pytest.mark.parametrize("bf16, tol", [(False, 1e-5), (True, 5e-3)])  # measured: 2e-7 and 2.5e-4
def test_a_hundred_gpt_steps_give_the_same_losses_with_either_loss(bf16, tol):
    assert has_fused_view(for_paradigm(GPT))
    stock_losses, fused_losses = losses(False, bf16), losses(True, bf16)
    assert stock_losses[-1] < stock_losses[0] / 2  # it learns to count
    assert np.max(np.abs(np.array(stock_losses) - np.array(fused_losses))) < tol * stock_losses[0]


def test_the_fused_kernels_are_chosen_on_gpus_only(monkeypatch):
    monkeypatch.delenv(FUSED_ENV, raising=False)
    assert not use_fused("cpu") and use_fused("cuda") and use_fused("cuda:1")
    monkeypatch.setenv(FUSED_ENV, "stock")
    assert not use_fused("cuda")
    monkeypatch.setenv(FUSED_ENV, "fast")
    with pytest.raises(ValueError, match=FUSED_ENV):
        use_fused("cuda")


def test_the_stage_names_the_fused_loss_in_training_json_and_a_cpu_run_does_not(tmp_path, datasets, monkeypatch):
    from transformers import AutoModelForCausalLM

    import stages.training.loop as loop
    from stages.pretrain import main
    from tests.unit.training.conftest import read_json, write_params

    params = write_params(tmp_path / "params.yaml")
    assert main(datasets.args("gpt", tmp_path / "stock", params, metrics=tmp_path / "m1.json")) == 0
    assert "kernels" not in read_json(tmp_path / "stock" / "training.json")  # the CPU's choice: stock
    monkeypatch.setattr(loop, "use_fused", lambda device: True)  # as on a GPU
    assert main(datasets.args("gpt", tmp_path / "fused", params, metrics=tmp_path / "m2.json")) == 0
    record = read_json(tmp_path / "fused" / "training.json")
    assert record["kernels"] == {"loss": "chunked linear cross-entropy (stages.training.lce)"}
    a, b = (read_json(tmp_path / f"m{i}.json") for i in (1, 2))
    assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-4)
    AutoModelForCausalLM.from_pretrained(str(tmp_path / "fused"))  # a stock transformers checkpoint
