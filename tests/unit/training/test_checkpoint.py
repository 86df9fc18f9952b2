"""Checkpoints without pickles: weights and AdamW state round-trip exactly; corrupt files are a clear error."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from stages.tokenization.layout import BlockLayout
from stages.training import checkpoint as ckpt
from stages.training.checkpoint import CheckpointError
from stages.training.config import ModelConfig, TrainConfig
from stages.training.optim import make_optimizer
from stages.training.models import build_model

LAYOUTS = {
    "gpt": BlockLayout(paradigm="gpt", seq_len=16, block_len=16, vocab_size=64, eos_id=0),
    "bert": BlockLayout(paradigm="bert", seq_len=16, block_len=16, vocab_size=64, pad_id=0, unk_id=1, cls_id=2,
                        sep_id=3, mask_id=4),
    "t5": BlockLayout(paradigm="t5", seq_len=16, block_len=18, vocab_size=64, pad_id=0, eos_id=1, unk_id=2,
                      sentinel_top=63, sentinels=4, targets_len=5, noise_density=0.15, mean_span=3.0),
}
SIZE = ModelConfig(layers=1, d_model=32, heads=2, d_ff=64)
TRAIN = TrainConfig(lr=1e-2, weight_decay=0.1)


def batch(paradigm: str, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 60, (2, 16), generator=g)
    if paradigm == "t5":
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                "labels": torch.randint(5, 60, (2, 5), generator=g)}
    return {"input_ids": ids, "labels": ids.clone()}


def step(model, optimizer, paradigm: str, seed: int) -> None:
    model(**batch(paradigm, seed)).loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def trained(paradigm: str, steps: int = 3):
    model = build_model(LAYOUTS[paradigm], SIZE, seed=0)
    model.train()
    optimizer = make_optimizer(model, TRAIN.optim, "cpu")
    for s in range(steps):
        step(model, optimizer, paradigm, s)
    return model, optimizer


def assert_same_state(a, b) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


@pytest.mark.parametrize("paradigm", ["gpt", "bert", "t5"])
def test_round_trip_restores_weights_and_adamw_state_exactly(tmp_path, paradigm):
    model, optimizer = trained(paradigm)
    folder = tmp_path / "ck"
    state = {"fingerprint": "abc", "step": 3, "history": [{"step": 3, "loss": 1.5}], "evals": []}
    ckpt.save(folder, model, optimizer, state)
    saved_state = ckpt.read_state(folder)
    assert {k: v for k, v in saved_state.items() if k not in ("files", "state_sha256")} == state
    assert saved_state["state_sha256"] == ckpt.state_digest(saved_state)
    assert {"model/model.safetensors", "optimizer.safetensors", "optimizer.json"} <= set(saved_state["files"])
    assert (folder / "model" / "model.safetensors").is_file() and (folder / "optimizer.safetensors").is_file()
    assert not list(folder.rglob("*.bin")) and not list(folder.rglob("*.pt"))      # no pickles

    fresh = build_model(LAYOUTS[paradigm], SIZE, seed=1)                            # other initial weights
    fresh.train()
    fresh_opt = make_optimizer(fresh, TRAIN.optim, "cpu")
    ckpt.load(folder, fresh, fresh_opt)
    assert_same_state(model, fresh)
    # tied weights are still tied after the load
    assert fresh.get_output_embeddings().weight.data_ptr() == fresh.get_input_embeddings().weight.data_ptr()
    sd, fsd = optimizer.state_dict(), fresh_opt.state_dict()
    assert sd["state"].keys() == fsd["state"].keys() and len(sd["state"]) == len(list(model.parameters()))
    for idx, st in sd["state"].items():
        assert st.keys() == fsd["state"][idx].keys()
        for k, v in st.items():
            assert torch.equal(v, fsd["state"][idx][k]), (idx, k)
    for g, fg in zip(sd["param_groups"], fsd["param_groups"]):
        assert {k: v for k, v in g.items() if k != "betas"} == {k: v for k, v in fg.items() if k != "betas"}
        assert tuple(g["betas"]) == tuple(fg["betas"])
    # the same next step from both: the moments and the step count were restored, not just the weights
    step(model, optimizer, paradigm, 99)
    step(fresh, fresh_opt, paradigm, 99)
    assert_same_state(model, fresh)


def test_read_state_without_a_checkpoint_is_none(tmp_path):
    assert ckpt.read_state(tmp_path / "nothing") is None
    assert ckpt.read_state(tmp_path) is None


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    model, optimizer = trained("gpt")
    folder = tmp_path_factory.mktemp("ck") / "checkpoint"
    ckpt.save(folder, model, optimizer, {"fingerprint": "f", "step": 3, "history": [], "evals": []})
    return folder


@pytest.mark.parametrize("name", ["optimizer.safetensors", "model/model.safetensors"])
@pytest.mark.parametrize("keep", [0.5, 0.0])
def test_truncated_tensor_file_is_a_checkpoint_error_naming_it(tmp_path, saved, name, keep):
    folder = tmp_path / "ck"
    shutil.copytree(saved, folder)
    path = folder / name
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    model = build_model(LAYOUTS["gpt"], SIZE, seed=0)
    optimizer = make_optimizer(model, TRAIN.optim, "cpu")
    with pytest.raises(CheckpointError) as err:
        ckpt.load(folder, model, optimizer)
    assert str(path) in str(err.value)                       # which file is broken, not just the folder


def test_corrupt_state_json_is_a_checkpoint_error_naming_it(tmp_path, saved):
    folder = tmp_path / "ck"
    shutil.copytree(saved, folder)
    path = folder / "state.json"
    path.write_text(path.read_text()[:10])
    with pytest.raises(CheckpointError, match="unreadable checkpoint state") as err:
        ckpt.read_state(folder)
    assert str(path) in str(err.value)


def test_checkpoint_of_another_model_is_a_checkpoint_error(tmp_path, saved):
    big = build_model(LAYOUTS["gpt"], ModelConfig(layers=2, d_model=32, heads=2, d_ff=64), seed=0)
    with pytest.raises(CheckpointError, match="does not match the model"):
        ckpt.load(saved, big, make_optimizer(big, TRAIN.optim, "cpu"))


def test_failed_save_keeps_the_previous_checkpoint(tmp_path, saved, monkeypatch):
    import safetensors.torch

    folder = tmp_path / "ck"
    shutil.copytree(saved, folder)
    before = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    model, optimizer = trained("gpt", steps=4)

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(safetensors.torch, "save_file", boom)
    with pytest.raises(OSError, match="disk full"):
        ckpt.save(folder, model, optimizer, {"fingerprint": "f", "step": 4, "history": [], "evals": []})
    after = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert after == before
    assert json.loads((folder / "state.json").read_text())["step"] == 3
    assert [p.name for p in folder.parent.iterdir() if p.name.startswith(".")] == []   # no temporary left


@pytest.mark.parametrize("name", ["optimizer.safetensors", "model/model.safetensors", "optimizer.json"])
def test_a_flipped_byte_is_a_checkpoint_error_naming_the_file(tmp_path, saved, name):
    folder = tmp_path / "ck"
    shutil.copytree(saved, folder)
    path = folder / name
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # still a well-formed file: only the digest can tell
    path.write_bytes(bytes(data))
    model = build_model(LAYOUTS["gpt"], SIZE, seed=0)
    with pytest.raises(CheckpointError, match="changed after it was written") as err:
        ckpt.load(folder, model, make_optimizer(model, TRAIN.optim, "cpu"))
    assert str(path) in str(err.value)


def test_a_checkpoint_without_digests_is_refused(tmp_path, saved):
    folder = tmp_path / "ck"
    shutil.copytree(saved, folder)
    state = json.loads((folder / "state.json").read_text())
    assert "model/model.safetensors" in state["files"] and "optimizer.safetensors" in state["files"]
    del state["files"]
    (folder / "state.json").write_text(json.dumps(state))
    model = build_model(LAYOUTS["gpt"], SIZE, seed=0)
    with pytest.raises(CheckpointError, match="records no file digests"):
        ckpt.load(folder, model, make_optimizer(model, TRAIN.optim, "cpu"))


def test_a_step_edited_in_state_json_is_refused_even_within_the_run(tmp_path, saved):
    # state.json is not among the digested files, so it carries a digest of its own content: a resume from an
    # edited step would otherwise continue from weights of another step.
    folder = tmp_path / "ck"
    shutil.copytree(saved, folder)
    state = json.loads((folder / "state.json").read_text())
    assert state["step"] == 3 and len(state["state_sha256"]) == 64
    ckpt.verify(folder, state)  # as written: fine
    state["step"] = 2
    (folder / "state.json").write_text(json.dumps(state))
    model = build_model(LAYOUTS["gpt"], SIZE, seed=0)
    with pytest.raises(CheckpointError, match="changed after it was written") as err:
        ckpt.load(folder, model, make_optimizer(model, TRAIN.optim, "cpu"))
    assert str(folder / "state.json") in str(err.value)
