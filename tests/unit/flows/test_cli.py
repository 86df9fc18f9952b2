"""The `lm-pipeline` console command: each subcommand is its module's own command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.cli import MODULES, main

ROOT = Path(__file__).resolve().parents[3]


def test_usage_lists_every_subcommand_and_an_unknown_one_is_refused(capsys):
    assert main([]) == 2 and main(["--help"]) == 0
    listed = capsys.readouterr().out
    for name in ("run", "serve", *MODULES):
        assert f"\n  {name} " in listed
    assert main(["nope"]) == 2
    assert "error: no subcommand 'nope'" in capsys.readouterr().err


def test_a_subcommand_takes_its_modules_arguments(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["profile", "tiny"]) == 0  # stages.profile: the dvc exp run arguments of profiles/tiny.yaml
    out = capsys.readouterr().out
    assert "-S ++ingest.domain.max_docs=3000" in out and "-S dapt.t5.train.budget_tokens=16000" in out
    with pytest.raises(SystemExit) as exc:
        main(["lineage", "--help"])
    assert exc.value.code == 0 and "--verify" in capsys.readouterr().out


def test_stage_errors_are_one_line_as_under_python_m(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "docs.jsonl"  # missing
    assert main(["clean", "--input", str(bad), "--output", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "docs.jsonl" in err.splitlines()[0] and "Traceback" not in err
    assert not (tmp_path / "out").exists()
    assert main(["run"]) == 1 and "not a DVC project" in capsys.readouterr().err
