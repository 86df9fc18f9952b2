"""A stage's command line ends an error with one line naming the file, and shows the traceback only on
request."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from stages.common.cli import entry


def _raise(exc):
    def main() -> int:
        raise exc
    return main


def test_an_os_error_is_one_line_naming_the_file(capsys, monkeypatch):
    monkeypatch.delenv("LMPIPE_DEBUG", raising=False)
    monkeypatch.setattr(sys, "argv", ["stage"])
    assert entry(_raise(PermissionError(13, "Permission denied", "/data/cleaned/general"))) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[0] == "error: permission denied: /data/cleaned/general"
    assert "Traceback" not in err


def test_other_errors_name_their_type_and_ctrl_c_is_130(capsys, monkeypatch):
    monkeypatch.delenv("LMPIPE_DEBUG", raising=False)
    monkeypatch.setattr(sys, "argv", ["stage"])
    assert entry(_raise(KeyError("labels"))) == 1
    assert capsys.readouterr().err.splitlines()[0] == "error: KeyError: 'labels'"
    assert entry(_raise(KeyboardInterrupt())) == 130


@pytest.mark.parametrize("how", ["flag", "env"])
def test_debug_shows_the_traceback(monkeypatch, how):
    monkeypatch.setattr(sys, "argv", ["stage", "--debug"] if how == "flag" else ["stage"])
    if how == "env":
        monkeypatch.setenv("LMPIPE_DEBUG", "1")
    with pytest.raises(PermissionError):
        entry(_raise(PermissionError(13, "Permission denied", "/x")))
    assert "--debug" not in sys.argv  # the stage's own parser never sees it


def test_a_stage_run_as_users_run_it_prints_no_traceback(tmp_path):
    (tmp_path / "blocker").write_text("a file where the output's parent folder should be")
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"text": "hello"}) + "\n")
    proc = subprocess.run([sys.executable, "-m", "stages.clean", "--input", str(inp), "--output",
                           str(tmp_path / "blocker" / "out"), "--cache-dir", str(tmp_path / "cache")],
                          capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[0].startswith("error: ") and str(tmp_path / "blocker") in proc.stderr
