"""A profile run leaves params.yaml, dvc.lock and the tracked reports as it found them, keeps what it wrote under
reports/profiles/<label>/, says where, and a killed run is put back by the next one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from stages.config import ConfigError
from stages.profile_run import RESULTS, SNAPSHOT, apply_profile, label, profile_workspace, restore_after_kill

PARAMS = "split:\n  heldout_fraction: 0.05   # held out\n  salt: ''\n"


@pytest.fixture
def workspace(tmp_path) -> Path:
    (tmp_path / "params.yaml").write_text(PARAMS)
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "small.yaml").write_text("split.heldout_fraction: 0.1\n")
    (tmp_path / "dvc.lock").write_text("schema: '2.0'\nstages: {default: {}}\n")
    (tmp_path / "reports" / "metrics").mkdir(parents=True)
    (tmp_path / "reports" / "evaluation.md").write_text("# the default run's report\n")
    (tmp_path / "reports" / "metrics" / "package.json").write_text('{"bento": "lm-pipeline:default"}\n')
    (tmp_path / "reports" / "live").mkdir()
    return tmp_path


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and RESULTS not in p.as_posix() and ".dvc" not in p.parts}


def a_run(root: Path) -> None:
    """What a profile's `dvc repro` does to the workspace: dvc.lock and reports rewritten, reports added."""
    (root / "dvc.lock").write_text("schema: '2.0'\nstages: {tiny: {}}\n")
    (root / "reports" / "evaluation.md").write_text("# the tiny run's report\n")
    (root / "reports" / "metrics" / "package.json").write_text(
        '{"bento": "lm-pipeline:tiny", "exported": "dist/lm-pipeline-tiny.bento"}\n')
    (root / "reports" / "metrics" / "base-minilm.json").write_text("{}\n")
    (root / "reports" / "live" / "log.tsv").write_text("step\n")


def test_a_profile_is_applied_to_params_keeping_comments(workspace):
    assert apply_profile(workspace, "small") == {"split.heldout_fraction": 0.1}
    text = (workspace / "params.yaml").read_text()
    assert "heldout_fraction: 0.1" in text and "# held out" in text
    (workspace / "profiles" / "bad.yaml").write_text("split.nope: 1\n")
    with pytest.raises(ConfigError, match="split.nope: no such key"):
        apply_profile(workspace, "bad")


def test_the_workspace_comes_back_byte_for_byte_and_the_results_are_kept_and_named(workspace):
    before = snapshot(workspace)
    lines = []
    with profile_workspace(workspace, "small", log=lines.append) as profile:
        assert profile == {"split.heldout_fraction": 0.1}
        assert "heldout_fraction: 0.1" in (workspace / "params.yaml").read_text()
        a_run(workspace)
    after = snapshot(workspace)
    after.pop("reports/live/log.tsv")  # live logs are untracked: they stay
    assert after == before
    results = workspace / RESULTS / "small"
    assert (results / "reports" / "evaluation.md").read_text() == "# the tiny run's report\n"
    assert (results / "reports" / "metrics" / "base-minilm.json").is_file()
    assert "heldout_fraction: 0.1" in (results / "params.yaml").read_text()
    assert "tiny" in (results / "dvc.lock").read_text()
    said = "\n".join(lines)
    assert "reports/profiles/small/reports/evaluation.md" in said
    assert "Bento: lm-pipeline:tiny (exported to dist/lm-pipeline-tiny.bento)" in said
    assert "plain `make run` runs the default pipeline" in said
    assert not (workspace / SNAPSHOT).exists()


def test_a_failed_run_is_put_back_too_and_an_earlier_result_of_the_profile_replaced(workspace):
    (workspace / RESULTS / "small" / "reports").mkdir(parents=True)
    (workspace / RESULTS / "small" / "reports" / "stale.md").write_text("an earlier run's\n")
    before = snapshot(workspace)
    with pytest.raises(RuntimeError, match="a stage broke"):
        with profile_workspace(workspace, "small", log=lambda line: None):
            a_run(workspace)
            raise RuntimeError("a stage broke")
    after = snapshot(workspace)
    after.pop("reports/live/log.tsv")
    assert after == before
    assert not (workspace / RESULTS / "small" / "reports" / "stale.md").exists()


def test_a_killed_run_is_put_back_by_the_next_and_an_edit_since_is_kept(workspace):
    before = snapshot(workspace)
    killed = profile_workspace(workspace, "small", log=lambda line: None)
    killed.__enter__()  # ... and never exited, as after a SIGKILL
    a_run(workspace)
    said = restore_after_kill(workspace)
    assert "was killed" in said and "params.yaml restored" in said
    after = snapshot(workspace)
    after.pop("reports/live/log.tsv")
    assert after == before
    assert restore_after_kill(workspace) is None  # nothing left

    killed = profile_workspace(workspace, "small", log=lambda line: None)
    killed.__enter__()
    (workspace / "params.yaml").write_text("split:\n  heldout_fraction: 0.2\n  salt: ''\n")  # the user's edit
    said = restore_after_kill(workspace)
    assert "kept" in said and "params.yaml.before-profile" in said
    assert "0.2" in (workspace / "params.yaml").read_text()
    assert (workspace / "params.yaml.before-profile").read_text() == PARAMS


def test_labels_name_every_profile_of_a_spec():
    assert label("gpu gpu-quick") == "gpu+gpu-quick" == label(["gpu", "gpu-quick"]) == label("gpu,gpu-quick")


def test_the_command_runs_dvc_repro_under_the_profile_and_puts_the_workspace_back(workspace, tmp_path_factory):
    """`python -m stages.profile_run small` with a stand-in `dvc` that records the params it ran with."""
    bindir = tmp_path_factory.mktemp("bin")
    fake = bindir / "dvc"
    fake.write_text(f"#!{sys.executable}\nimport pathlib, sys\n"
                    "pathlib.Path('reports/evaluation.md').write_text(pathlib.Path('params.yaml').read_text())\n"
                    "pathlib.Path('ran').write_text(' '.join(sys.argv[1:]))\n")
    fake.chmod(0o755)
    before = snapshot(workspace)
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(workspace)}
    proc = subprocess.run([sys.executable, "-m", "stages.profile_run", "small"], cwd=workspace, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (workspace / "ran").read_text() == "repro"
    assert "heldout_fraction: 0.1" in (workspace / RESULTS / "small" / "reports" / "evaluation.md").read_text()
    after = snapshot(workspace)
    after.pop("ran")
    assert after == before
    assert "[profile] results: reports/profiles/small/" in proc.stderr


def test_a_profile_run_still_going_is_not_undone_by_another_run(workspace):
    import json
    import os

    running = profile_workspace(workspace, "small", log=lambda line: None)
    running.__enter__()
    manifest = workspace / SNAPSHOT / "manifest.json"
    parent = os.getppid()  # a live process other than this one stands in for the profile run
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "pid": parent}))
    with pytest.raises(ConfigError, match=rf"pid {parent}\) is using this workspace"):
        restore_after_kill(workspace)
    assert "heldout_fraction: 0.1" in (workspace / "params.yaml").read_text()  # left as the running profile set it
