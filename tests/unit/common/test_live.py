"""The live log (stages.common.live): DVCLive's files, written at every step, with the run's timings."""

from __future__ import annotations

import json

from stages.common.live import LiveLog, read_summary


def rows(path):
    return [line.split("\t") for line in path.read_text().splitlines()]


def test_each_step_is_on_disk_before_the_run_ends(tmp_path):
    with LiveLog(tmp_path / "run") as live:
        live.log(10, {"train/loss": 5.0, "train/mfu": None, "train/tokens_per_second": float("nan")})
        # readable while the run goes on: what `dvc plots show` draws of a live run
        assert rows(tmp_path / "run" / "plots" / "metrics" / "train" / "loss.tsv") == [["step", "loss"], ["10", "5.0"]]
        live.log(20, {"train/loss": 4.0, "eval/loss": 4.5})
        assert json.loads((tmp_path / "run" / "metrics.json").read_text())["train"]["loss"] == 4.0
        live.summary({"tokens_per_second": 1000.0, "mfu": None})
    plots = tmp_path / "run" / "plots" / "metrics"
    assert rows(plots / "train" / "loss.tsv")[1:] == [["10", "5.0"], ["20", "4.0"]]
    assert rows(plots / "eval" / "loss.tsv")[1:] == [["20", "4.5"]]
    assert not (plots / "train" / "mfu.tsv").exists() and not (plots / "train" / "tokens_per_second.tsv").exists()
    summary = read_summary(tmp_path / "run")
    assert summary["tokens_per_second"] == 1000.0 and "mfu" not in summary
    assert not (tmp_path / "run" / "dvc.yaml").exists()  # the pipeline's dvc.yaml declares the plots


def test_a_resumed_run_appends_and_a_new_run_starts_over(tmp_path):
    with LiveLog(tmp_path / "run") as live:
        live.log(4, {"train/loss": 3.0})
    with LiveLog(tmp_path / "run") as live:
        live.start(4)                      # resumed from a checkpoint at step 4
        live.log(8, {"train/loss": 2.0})
    loss = tmp_path / "run" / "plots" / "metrics" / "train" / "loss.tsv"
    assert [r[0] for r in rows(loss)[1:]] == ["4", "8"]
    with LiveLog(tmp_path / "run") as live:
        live.log(4, {"train/loss": 1.0})
    assert rows(loss)[1:] == [["4", "1.0"]]


def test_no_folder_logs_nothing(tmp_path):
    with LiveLog(None) as live:
        live.log(1, {"train/loss": 1.0})
        live.summary({"seconds": 1.0})
    assert read_summary(tmp_path / "missing") == {}


def test_the_repository_around_is_left_alone(tmp_path, monkeypatch):
    import subprocess

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    monkeypatch.chdir(tmp_path)
    with LiveLog(tmp_path / "run") as live:  # stock DVCLive would `dvc init` a git repository without DVC
        live.log(1, {"train/loss": 1.0})
    assert not (tmp_path / ".dvc").exists() and not (tmp_path / "dvc.yaml").exists()


def test_a_resume_drops_the_rows_logged_after_the_checkpoint(tmp_path):
    with LiveLog(tmp_path / "run") as live:
        for step in (4, 8, 12):  # killed after step 12; the checkpoint was saved at step 8
            live.log(step, {"train/loss": 1.0 / step})
    with LiveLog(tmp_path / "run") as live:
        live.start(8)
        live.log(12, {"train/loss": 0.5})
        live.log(16, {"train/loss": 0.4})
    loss = tmp_path / "run" / "plots" / "metrics" / "train" / "loss.tsv"
    assert [r[0] for r in rows(loss)[1:]] == ["4", "8", "12", "16"] and rows(loss)[3][1] == "0.5"
