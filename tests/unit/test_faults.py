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
