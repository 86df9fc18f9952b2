"""Fault injection: params that can only be mistakes, hostile YAML, special files and links where a user names a
path, concurrent runs of one stage. Each case must end in one line naming the key or file, never a hang, a
traceback or lost outputs."""

from __future__ import annotations

import re

import pytest

from stages.config import ConfigError, build
from stages.training.config import TrainConfig


@pytest.mark.parametrize("train, message", [
    ({"budget_tokens": 10**14}, "pretrain.bert.train.budget_tokens: at most 1e+13"),
    ({"budget_flops": 1e40}, "pretrain.bert.train.budget_flops: at most 6e+25"),
])
def test_budgets_no_machine_can_run_are_refused_naming_the_key(train, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        build(TrainConfig, train, "pretrain.bert.train")
    assert build(TrainConfig, {"budget_tokens": 10**13}, "pretrain.bert.train").budget_tokens == 10**13


def _alias_bomb(levels: int = 7) -> str:
    """A "billion laughs" YAML document: each level an alias list of ten of the one before."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_in_params_or_a_profile_is_refused_in_one_line(tmp_path):
    from stages.config import load_params
    from stages.profile import load_profile

    (tmp_path / "params.yaml").write_text(_alias_bomb())
    with pytest.raises(ConfigError, match=r"params.yaml: its YAML aliases expand to 12,345,685 values"):
        load_params(tmp_path / "params.yaml")
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles/bomb.yaml").write_text(_alias_bomb())
    with pytest.raises(ConfigError, match=r"bomb.yaml: its YAML aliases expand"):
        load_profile("bomb", tmp_path)
    (tmp_path / "params.yaml").write_text("base: &base {lr: 0.001}\npretrain: {bert: {train: *base}}\n")
    assert load_params(tmp_path / "params.yaml")["pretrain"]["bert"]["train"] == {"lr": 0.001}  # aliases still work


def test_a_key_given_twice_in_params_or_a_profile_is_refused_naming_it_and_both_lines(tmp_path):
    from stages.config import load_params, main
    from stages.profile import load_profile

    (tmp_path / "params.yaml").write_text("finetune:\n  defaults:\n    lr: 0.001\n    seeds: [0]\n    lr: 0.003\n")
    with pytest.raises(ConfigError, match=r"params.yaml: line 5: key finetune.defaults.lr is given twice \(first on "
                                          r"line 3\)"):
        load_params(tmp_path / "params.yaml")
    assert main([str(tmp_path / "params.yaml")]) == 1  # what `make run` runs before DVC reads the file
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles/twice.yaml").write_text("tokens.defaults.seq_len: 64\ntokens.defaults.seq_len: 128\n")
    with pytest.raises(ConfigError, match=r"twice.yaml: line 2: key tokens.defaults.seq_len is given twice"):
        load_profile("twice", tmp_path)
    (tmp_path / "params.yaml").write_text("a: &a {x: 1}\nb: {<<: *a, y: 2}\nc: [{x: 1}, {x: 2}]\n")
    assert load_params(tmp_path / "params.yaml")["b"] == {"x": 1, "y": 2}  # merge keys and lists are not repeats


@pytest.mark.parametrize("text, key", [
    ("pretrain:\n  bert:\n    train: {lr: .inf}\n", "pretrain.bert.train.lr: inf"),
    ("finetune:\n  seeds: [1, .nan]\n", "finetune.seeds[1]: nan"),
])
def test_a_non_finite_number_anywhere_is_refused_naming_its_key(tmp_path, text, key):
    from stages.config import main

    (tmp_path / "params.yaml").write_text(text)
    with pytest.raises(ConfigError, match=re.escape(key) + " is not a finite number"):
        from stages.config import load_params
        load_params(tmp_path / "params.yaml")
    assert main([str(tmp_path / "params.yaml")]) == 1


@pytest.mark.parametrize("name", ["../params", "/etc/passwd", "sub/x", ".hidden", "gpu/../../params"])
def test_a_profile_is_a_name_under_profiles_never_a_path(tmp_path, name):
    from stages.profile import load_profile

    (tmp_path / "profiles").mkdir()
    (tmp_path / "params.yaml").write_text("a: 1\n")
    with pytest.raises(ConfigError, match="a profile is a name under"):
        load_profile(name, tmp_path)
    (tmp_path / "profiles/link.yaml").symlink_to(tmp_path / "params.yaml")  # a link out of profiles/ too
    with pytest.raises(ConfigError, match="a profile is a name under"):
        load_profile("link", tmp_path)


def test_lm_pipeline_run_refuses_a_bad_params_file_before_dvc(tmp_path, monkeypatch, capsys):
    from flows.cli import run

    (tmp_path / ".dvc").mkdir()
    (tmp_path / "params.yaml").write_text(_alias_bomb())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("subprocess.call", lambda *a, **k: pytest.fail("DVC must not start"))
    assert run([]) == 1 and "its YAML aliases expand" in capsys.readouterr().err
    assert run(["--profile", "../params"]) == 1 and "a profile is a name under" in capsys.readouterr().err


@pytest.mark.timeout(60)  # reading a FIFO or /dev/zero would never end
@pytest.mark.parametrize("layout", ["file", "folder", "glob"])
def test_special_files_in_a_files_source_are_named_not_read(tmp_path, layout):
    import os

    from stages.sources.base import Provenance, SourceError
    from stages.sources.files import FilesSource, read_files

    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("A page of text.\n")
    os.mkfifo(data / "pipe.jsonl")
    (data / "zero.jsonl.gz").symlink_to("/dev/zero")
    path = {"file": str(data / "zero.jsonl.gz"), "folder": str(data), "glob": str(data / "*")}[layout]
    cfg = build(FilesSource, {"kind": "files", "path": path}, "ingest.general.sources[0]")
    with pytest.raises(SourceError, match="not a regular file"):
        list(read_files(cfg, Provenance(kind="files")))


def _toy_stage(payload: bytes = b"new"):
    """A stage with a folder output (``--output``) and a metrics file (``--metrics``), as every stage has."""
    import argparse
    from pathlib import Path

    from stages.common.cli import Stage

    def arguments(ap: argparse.ArgumentParser) -> None:
        ap.add_argument("--output", type=Path, required=True)
        ap.add_argument("--metrics", type=Path, required=True)

    def run(args, log):
        (args.staged.path / "weights.bin").write_bytes(payload)
        return {args.metrics: {"bytes": len(payload)}}

    return Stage("stages.toy", "a toy stage", arguments, run, outputs=("metrics",), folder="output")


def _previous_output(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "weights.bin").write_bytes(b"old")
    return out


def test_a_metrics_file_that_cannot_be_written_leaves_the_previous_output_in_place(tmp_path, capsys):
    from stages.common.cli import entry

    out = _previous_output(tmp_path)
    (tmp_path / "reports").write_text("a file where a folder should be")
    assert entry(lambda: _toy_stage().main(["--output", str(out), "--metrics", str(tmp_path / "reports/m.json")])) == 1
    assert (out / "weights.bin").read_bytes() == b"old" and "reports" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "reports"]  # no temporaries left
    assert _toy_stage().main(["--output", str(out), "--metrics", str(tmp_path / "m.json")]) == 0
    assert (out / "weights.bin").read_bytes() == b"new"


@pytest.fixture
def full_disk(tmp_path):
    """A 64 KiB tmpfs, filled (needs root and mount rights; skipped without)."""
    import os
    import subprocess

    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
                                           capture_output=True).returncode != 0:
        pytest.skip("mounting a small tmpfs needs root and mount rights")
    try:
        (mount / "filler").write_bytes(b"x" * 60_000)
        try:
            (mount / "filler2").write_bytes(b"x" * 60_000)
        except OSError:
            pass
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_under_each_output_names_it_and_keeps_the_previous_one(tmp_path, full_disk):
    from stages.common.cli import entry

    import contextlib
    import io

    out = _previous_output(tmp_path)
    err = []
    for argv in (["--output", str(out), "--metrics", str(full_disk / "m.json")],  # metrics on the full disk
                 ["--output", str(full_disk / "out"), "--metrics", str(tmp_path / "m.json")]):  # the output there
        buf = io.StringIO()
        with contextlib.redirect_stderr(buf):
            assert entry(lambda: _toy_stage(b"y" * 200_000).main(argv)) == 1
        err.append(buf.getvalue())
    assert "no space left on device" in err[0] and str(full_disk / "m.json") in err[0], err[0]
    assert "no space left on device" in err[1] and str(full_disk / "out") in err[1], err[1]
    assert (out / "weights.bin").read_bytes() == b"old" and not (tmp_path / "m.json").exists()


@pytest.mark.timeout(120)
def test_two_runs_on_one_output_the_second_is_refused_and_the_first_keeps_its_work(tmp_path):
    import subprocess
    import sys
    import time
    from pathlib import Path

    from stages.common.atomic import BusyOutput, Staged

    target = tmp_path / "out"
    child = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from stages.common.atomic import Staged\n"
        f"p = Staged({str(target)!r}).path; print(p, flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE, text=True)
    try:
        working = child.stdout.readline().strip()
        with pytest.raises(BusyOutput, match=f"another run \\(pid {child.pid}\\) is writing it now"):
            Staged(target).path
        assert (tmp_path / working.rsplit("/", 1)[1]).is_dir()  # the first run's work is not swept away
    finally:
        child.kill()
    for _ in range(100):  # killed, not yet reaped: a zombie is no writer
        if Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            break
        time.sleep(0.05)
    assert Staged(target).path.is_dir()  # its writer gone, the leftover is swept and the output is free
    assert [p.name.startswith(".out.tmp-") for p in tmp_path.iterdir()] == [True]
    child.wait()
