"""The code paths that matter on a GPU, exercised on the CPU: bf16 autocast, SDPA attention, fused AdamW,
no per-step host synchronisation, and torch.compile (integration: it compiles C++)."""

from __future__ import annotations

import pytest
import torch

from stages.pretrain import main
from stages.tokenization.layout import BlockLayout
from stages.training.config import ModelConfig, TrainConfig
from stages.training.device import bf16_enabled
from stages.training.optim import make_optimizer
from stages.training.models import build_model
from tests.unit.training.conftest import read_json, write_params

GPT = BlockLayout(paradigm="gpt", seq_len=32, block_len=32, vocab_size=300, eos_id=0)
BERT = BlockLayout(paradigm="bert", seq_len=32, block_len=32, vocab_size=300, pad_id=0, unk_id=1, cls_id=2,
                   sep_id=3, mask_id=4)
TINY = ModelConfig(layers=1, d_model=32, heads=2, d_ff=64)


@pytest.mark.parametrize("layout", [GPT, BERT], ids=["gpt", "bert"])
def test_attention_is_sdpa(layout):
    assert build_model(layout, TINY, seed=0).config._attn_implementation == "sdpa"


def test_optimizer_is_fused_and_skips_decay_on_biases_and_norms():
    model = build_model(GPT, TINY, seed=0)
    opt = make_optimizer(model, TrainConfig(weight_decay=0.1).optim, "cpu")
    assert opt.defaults["fused"] is True
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() < 2 for p in no_decay["params"])


def test_precision_choice(monkeypatch):
    import stages.training.device as dev

    assert bf16_enabled(TrainConfig(precision="bf16").precision, "cpu") is True
    assert bf16_enabled(TrainConfig(precision="fp32").precision, "cuda:0") is False
    for native in (False, True):  # auto follows the device's native bf16 support
        monkeypatch.setattr(dev, "native_bf16", lambda device, native=native: native)
        assert bf16_enabled(TrainConfig(precision="auto").precision, "cpu") is native
        assert bf16_enabled(TrainConfig(precision="fp32").precision, "cpu") is False
    with pytest.raises(ValueError, match="precision"):
        dev.bf16_enabled("fp16", "cpu")


def test_native_bf16_probes_the_cpu(monkeypatch):
    """On a CPU, auto precision means bf16 only where torch reports AMX or AVX512-BF16."""
    import stages.training.device as dev

    for amx, avx in ((False, False), (True, False), (False, True)):
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda amx=amx: amx, raising=False)
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda avx=avx: avx, raising=False)
        assert dev.native_bf16("cpu") is (amx or avx)
    assert dev.native_bf16("mps") is False


def test_bf16_autocast_trains(tmp_path, datasets):
    params = write_params(tmp_path / "params.yaml", precision="bf16")
    assert main(datasets.args("gpt", tmp_path / "out", params, metrics=tmp_path / "m.json")) == 0
    m = read_json(tmp_path / "m.json")
    history = read_json(tmp_path / "out" / "training.json")["history"]
    assert history[-1]["loss"] < history[0]["loss"] and m["eval_loss"] < 20


def test_no_host_sync_between_log_steps(tmp_path, datasets, monkeypatch):
    """The loss is read (``.item()``) at log steps only, not every step."""
    calls = []
    real = torch.Tensor.item

    def counting(self):
        calls.append(1)
        return real(self)

    params = write_params(tmp_path / "params.yaml", log_every=12, eval_every=1000, checkpoint_every=1000)
    monkeypatch.setattr(torch.Tensor, "item", counting)
    assert main(datasets.args("gpt", tmp_path / "out", params)) == 0
    steps = read_json(tmp_path / "out" / "training.json")["metrics"]["steps"]
    logs = len(read_json(tmp_path / "out" / "training.json")["history"])
    assert steps >= 12 and logs == -(-steps // 12)
    assert len(calls) <= logs + 4  # one per log row, plus the final evaluation's few


@pytest.mark.integration
def test_torch_compile_trains(tmp_path, datasets):
    params = write_params(tmp_path / "params.yaml", compile=True)
    assert main(datasets.args("gpt", tmp_path / "out", params)) == 0
    history = read_json(tmp_path / "out" / "training.json")["history"]
    assert history[-1]["loss"] < history[0]["loss"]
