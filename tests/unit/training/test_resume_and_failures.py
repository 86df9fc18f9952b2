"""The pre-training stage on tiny token datasets: a killed run resumes from its checkpoint and ends where an
uninterrupted run ends; a NaN loss stops the run keeping the last good checkpoint; bad inputs are exit 1."""

from __future__ import annotations

import json

import math

import pytest
import torch
import yaml

from stages.pretrain import main
from stages.training import checkpoint as ckpt
from tests.unit.training.conftest import params_dict, read_json, weights, write_params

COMPARED = ("step", "tokens", "lr")


def assert_same_history(resumed: list[dict], full: list[dict], rel: float = 1e-5) -> None:
    assert [r["step"] for r in resumed] == [r["step"] for r in full]
    for a, b in zip(resumed, full):
        assert {k: a[k] for k in COMPARED} == {k: b[k] for k in COMPARED}
        assert a["loss"] == pytest.approx(b["loss"], rel=rel, abs=1e-5), f"loss at step {a['step']}"


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6, msg=k)


def kill_after_first_checkpoint(monkeypatch):
    """Make the next run die (as if killed) right after its first checkpoint is on disk."""
    real_save = ckpt.save

    def save_then_die(folder, model, optimizer, state):
        real_save(folder, model, optimizer, state)
        raise KeyboardInterrupt

    monkeypatch.setattr(ckpt, "save", save_then_die)


@pytest.mark.parametrize("paradigm,checkpoint_every,log_every", [
    ("gpt", 8, 4),    # checkpoints on log steps
    ("gpt", 6, 4),    # a checkpoint between two log steps
    ("t5", 8, 4),
    ("bert", 8, 4),
])
def test_killed_run_resumes_and_matches_the_uninterrupted_run(datasets, tmp_path, monkeypatch, capsys, paradigm,
                                                              checkpoint_every, log_every):
    params = write_params(tmp_path / "params.yaml", checkpoint_every=checkpoint_every, log_every=log_every)
    full_out = tmp_path / "full"
    assert main(datasets.args(paradigm, full_out, params, checkpoints=tmp_path / "ck-full")) == 0
    full = read_json(full_out / "training.json")
    assert full["metrics"]["steps"] == 24 and "resumed_from" not in full["metrics"]

    out, ck, metrics, live = tmp_path / "out", tmp_path / "ck", tmp_path / "metrics.json", tmp_path / "live"
    args = datasets.args(paradigm, out, params, checkpoints=ck, metrics=metrics, live=live)
    with monkeypatch.context() as m:
        kill_after_first_checkpoint(m)
        with pytest.raises(KeyboardInterrupt):
            main(args)
    assert ckpt.read_state(ck)["step"] == checkpoint_every
    assert not out.exists() and not metrics.exists()
    capsys.readouterr()

    assert main(args) == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    assert f"resuming from the checkpoint at step {checkpoint_every} of 24" in err
    # the resume is the run's log (live summary), not its result: the outputs hold what an uninterrupted run holds
    assert read_json(live / "metrics.json")["resumed_from"] == checkpoint_every
    resumed = read_json(out / "training.json")
    assert set(resumed["metrics"]) == set(full["metrics"]) == set(read_json(metrics))
    # the live log kept the rows logged before the kill: one row per log step, as in an uninterrupted run
    steps = [int(line.split("\t")[0]) for line in (live / "plots" / "metrics" / "train" / "loss.tsv")
             .read_text().splitlines()[1:]]
    assert steps == [r["step"] for r in full["history"]]
    assert resumed["fingerprint"] == full["fingerprint"]
    assert_same_history(resumed["history"], full["history"])
    assert [e["step"] for e in resumed["evals"]] == [e["step"] for e in full["evals"]]
    for a, b in zip(resumed["evals"], full["evals"]):
        assert a["eval_loss"] == pytest.approx(b["eval_loss"], rel=1e-5)
    assert_same_weights(weights(out), weights(full_out))


def killed_after_first_checkpoint(datasets, tmp_path, monkeypatch):
    """A GPT run into ``tmp_path / "ck"`` killed right after its first checkpoint: (params, checkpoint folder)."""
    params = write_params(tmp_path / "params.yaml")
    ck = tmp_path / "ck"
    with monkeypatch.context() as m:
        kill_after_first_checkpoint(m)
        with pytest.raises(KeyboardInterrupt):
            main(datasets.args("gpt", tmp_path / "out", params, checkpoints=ck))
    return params, ck


def test_changed_params_do_not_resume_another_runs_checkpoint(datasets, tmp_path, monkeypatch, capsys):
    params, ck = killed_after_first_checkpoint(datasets, tmp_path, monkeypatch)
    write_params(tmp_path / "params.yaml", lr=0.002)
    capsys.readouterr()
    assert main(datasets.args("gpt", tmp_path / "out", params, checkpoints=ck, live=tmp_path / "live")) == 0
    assert "holds another run" in capsys.readouterr().err
    assert read_json(tmp_path / "live" / "metrics.json")["resumed_from"] == 0


def test_a_checkpoint_claiming_a_step_beyond_the_run_is_refused(datasets, tmp_path, monkeypatch, capsys):
    params, ck = killed_after_first_checkpoint(datasets, tmp_path, monkeypatch)
    state = read_json(ck / "state.json")
    state["step"] = 100000
    (ck / "state.json").write_text(json.dumps(state))
    capsys.readouterr()
    assert main(datasets.args("gpt", tmp_path / "out", params, checkpoints=ck)) == 1
    err = capsys.readouterr().err
    assert "step 100000 is not within this run's" in err and str(ck / "state.json") in err
    assert not (tmp_path / "out").exists()  # nothing published as finished


def poison_after(monkeypatch, good_forwards: int):
    """Fresh models whose training loss is NaN after ``good_forwards`` training forward passes."""
    import stages.training.models as models
    import stages.training.pretrain as pretrain_core

    real_build = models.build_model

    def build(*a, **k):
        model = real_build(*a, **k)
        forward, calls = model.forward, {"n": 0}

        def poisoned(*args, **kwargs):
            out = forward(*args, **kwargs)
            if model.training:
                calls["n"] += 1
                if calls["n"] > good_forwards:
                    out["loss"] = out["loss"] * float("nan")
            return out

        model.forward = poisoned
        return model

    monkeypatch.setattr(pretrain_core, "build_model", build)  # the pre-training core builds the model


@pytest.mark.parametrize("checkpoint_every,log_every,good,diverged_at,last_good", [
    (4, 4, 10, 12, 8),      # caught at the log step 12; checkpoints at 4 and 8 were good
    (6, 4, 4, 6, None),     # caught before saving step 6 (a checkpoint between log steps): nothing saved yet
    (6, 4, 8, 12, 6),       # NaN from step 9, caught at log step 12: step 6 kept
])
def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(datasets, tmp_path, monkeypatch, capsys,
                                                         checkpoint_every, log_every, good, diverged_at, last_good):
    params = write_params(tmp_path / "params.yaml", checkpoint_every=checkpoint_every, log_every=log_every)
    out, ck = tmp_path / "out", tmp_path / "ck"
    poison_after(monkeypatch, good)
    assert main(datasets.args("gpt", out, params, checkpoints=ck, metrics=tmp_path / "m.json")) == 1
    err = capsys.readouterr().err
    assert "error: " in err and "loss is nan" in err
    assert f"step {diverged_at}:" in err
    if last_good is None:
        assert ckpt.read_state(ck) is None and "none yet" in err
    else:
        assert f"step {last_good} in {ck}" in err
        state = ckpt.read_state(ck)
        assert state["step"] == last_good
        assert all(math.isfinite(r["loss"]) for r in state["history"])
        # the kept weights are finite (a NaN state was never saved)
        assert all(torch.isfinite(t).all() for t in weights(ck / "model").values())
    assert not out.exists() and not (tmp_path / "m.json").exists()


def test_missing_token_dataset_is_exit_1_naming_it(datasets, tmp_path, capsys):
    params = write_params(tmp_path / "params.yaml")
    missing = tmp_path / "no-tokens"
    assert main(datasets.args("gpt", tmp_path / "out", params, tokens=missing)) == 1
    err = capsys.readouterr().err
    assert str(missing / "manifest.json") in err and "tokens stage" in err
    assert not (tmp_path / "out").exists()


def test_token_dataset_of_another_paradigm_is_exit_1(datasets, tmp_path, capsys):
    params = write_params(tmp_path / "params.yaml")
    assert main(datasets.args("bert", tmp_path / "out", params, tokens=datasets.tokens["gpt"])) == 1
    err = capsys.readouterr().err
    assert "blocks for gpt, not bert" in err and str(datasets.tokens["gpt"]) in err
    assert not (tmp_path / "out").exists()


def test_unknown_corpus_is_exit_1(datasets, tmp_path, capsys):
    params = write_params(tmp_path / "params.yaml")
    assert main(datasets.args("gpt", tmp_path / "out", params, corpus="legal")) == 1
    err = capsys.readouterr().err
    assert "no corpus 'legal'" in err and "general" in err and "domain" in err


@pytest.mark.parametrize("section,edit,key", [
    ("pretrain", lambda d: d["pretrain"].__setitem__("gpt", {"train": {"lrr": 0.1}}), "pretrain.gpt.train.lrr"),
    ("pretrain", lambda d: d["pretrain"]["defaults"]["model"].__setitem__("layer", 3), "pretrain.gpt.model.layer"),
    ("pretrain", lambda d: d["pretrain"]["defaults"]["train"].__setitem__("micro_batch", 0),
     "pretrain.gpt.train.micro_batch"),
    ("dapt", lambda d: d["dapt"].__setitem__("gpt", {"model": {"layers": 2}}), "dapt.gpt.model"),
])
def test_bad_params_are_exit_1_naming_the_dotted_key(datasets, tmp_path, capsys, section, edit, key):
    data = params_dict()
    edit(data)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(data))
    args = datasets.args("gpt", tmp_path / "out", params, section=section)
    assert main(args) == 1
    err = capsys.readouterr().err
    assert f"error: {key}:" in err
    assert not (tmp_path / "out").exists()
