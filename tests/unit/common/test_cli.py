"""A stage's command line ends an error with one line naming the file, and shows the traceback only on
request."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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


def _stage(run, errors=(ValueError,)):
    from stages.common.cli import Stage

    def arguments(ap):
        ap.add_argument("--input", type=Path, required=True)
        ap.add_argument("--output", type=Path)
        ap.add_argument("--report", type=Path)
        ap.add_argument("--metrics", type=Path)
        ap.add_argument("--plots", type=Path)

    return Stage("stages.demo", "A demo stage.", arguments, run, inputs=("input",), folder="output",
                 outputs=("report", "metrics", "plots"), errors=errors)


class _Gate:
    """A gate as a core returns it (the shape of stages.quality.gate.Gate): writes its report, raises on failure."""

    def __init__(self, passed: bool) -> None:
        self.passed = passed

    def check(self, report_path):
        Path(report_path).write_text(json.dumps({"success": self.passed}))
        if not self.passed:
            raise ValueError("gate demo failed")


def _previous(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "old.txt").write_text("previous")
    (tmp_path / "m.json").write_text('{"previous": true}')
    return ["--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"), "--report",
            str(tmp_path / "gate.json"), "--metrics", str(tmp_path / "m.json")]


def _core(passed):
    def run(args, log):
        (args.staged.path / "new.txt").write_text("new")
        assert not (args.output / "new.txt").exists()  # the core never writes the published folder
        return {args.report: _Gate(passed), args.metrics: {"previous": False}}

    return run


def test_the_folder_and_files_are_published_only_after_the_gate_passed(tmp_path, capsys):
    argv = _previous(tmp_path)
    assert _stage(_core(False)).main(argv) == 1
    assert capsys.readouterr().err == "error: gate demo failed\n"
    assert json.loads((tmp_path / "gate.json").read_text()) == {"success": False}  # the evidence stays
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["old.txt"]
    assert (tmp_path / "m.json").read_text() == '{"previous": true}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gate.json", "m.json", "out"]  # no staging left

    assert _stage(_core(True)).main(argv) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["new.txt"]
    assert json.loads((tmp_path / "m.json").read_text()) == {"previous": False}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gate.json", "m.json", "out"]


def test_a_core_that_writes_no_folder_leaves_the_previous_one(tmp_path):
    argv = _previous(tmp_path)
    assert _stage(lambda args, log: 0).main(argv) == 0  # e.g. a launcher whose children publish
    assert _stage(lambda args, log: {args.metrics: {"previous": False}}).main(argv) == 0  # a non-first rank
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["old.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json", "out"]


def test_a_stage_publishes_what_its_core_returns_only_after_it_succeeds(tmp_path):
    from stages.common.cli import Folder

    calls = []

    def run(args, log):
        calls.append(args.argv)
        log("working")
        return {args.report: "# report\n", args.metrics: {"f1": 0.5}, args.plots: Folder({"a.tsv": b"x\t1\n"}),
                None: "an optional output not asked for"}

    argv = ["--input", str(tmp_path / "in"), "--report", str(tmp_path / "r.md"), "--metrics",
            str(tmp_path / "m.json"), "--plots", str(tmp_path / "plots")]
    assert _stage(run).main(argv) == 0
    assert calls == [argv]  # the command line as given, for a stage that relaunches itself
    assert (tmp_path / "r.md").read_text() == "# report\n"
    assert json.loads((tmp_path / "m.json").read_text()) == {"f1": 0.5}
    assert (tmp_path / "plots" / "a.tsv").read_bytes() == b"x\t1\n"


def test_a_users_error_is_one_line_and_leaves_the_previous_outputs(tmp_path, capsys):
    (tmp_path / "m.json").write_text('{"previous": true}')

    def run(args, log):
        raise ValueError("params.yaml: train.lr: expected a number")

    assert _stage(run).main(["--input", str(tmp_path / "in"), "--metrics", str(tmp_path / "m.json")]) == 1
    assert capsys.readouterr().err == "error: params.yaml: train.lr: expected a number\n"
    assert (tmp_path / "m.json").read_text() == '{"previous": true}'


def test_an_output_over_an_input_is_refused_before_the_core_runs(tmp_path, capsys):
    def run(args, log):
        raise AssertionError("the core must not run")

    assert _stage(run).main(["--input", str(tmp_path), "--report", str(tmp_path / "r.md")]) == 1
    assert "error:" in capsys.readouterr().err and not (tmp_path / "r.md").exists()


def test_other_errors_and_exit_statuses_pass_through(tmp_path):
    def crash(args, log):
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        _stage(crash).main(["--input", str(tmp_path / "in")])
    assert _stage(lambda args, log: 3).main(["--input", str(tmp_path / "in")]) == 3


def test_sigterm_runs_the_stages_own_cleanup_and_exits_143(tmp_path):
    """What a stopped packaging run relies on: its `except BaseException` removes what it put in the store."""
    script = tmp_path / "stage.py"
    script.write_text(
        "import pathlib, sys, time\n"
        "from stages.common.cli import entry\n"
        "def main():\n"
        "    made = pathlib.Path(sys.argv[1])\n"
        "    made.write_text('half done')\n"
        "    try:\n"
        "        print('ready', flush=True)\n"
        "        time.sleep(60)\n"
        "    except BaseException:\n"
        "        made.unlink()\n"
        "        raise\n"
        "    return 0\n"
        "sys.exit(entry(main))\n")
    made = tmp_path / "made"
    proc = subprocess.Popen([sys.executable, str(script), str(made)], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready" and made.exists()
    proc.terminate()
    assert proc.wait(timeout=30) == 143
    assert not made.exists() and "terminated (SIGTERM)" in proc.stderr.read()
