"""The team workflow through a DVC remote: the tiny run is pushed to a local-folder remote, a colleague clones the
repository and pulls, and finds nothing to re-run and a lineage that verifies."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_ingest_pipeline import _dvc, changed

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]


def _git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-c", "user.name=ci", "-c", "user.email=ci@localhost", *args], cwd=cwd,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_a_colleague_pulls_the_run_and_has_nothing_to_repro(tiny_project, tmp_path):
    project = tiny_project
    (project / ".git" / "info").mkdir(parents=True, exist_ok=True)
    (project / ".git" / "info" / "exclude").write_text("/.bentoml/\n")  # the test's model store, not the repo's
    remote = tmp_path / "dvc-store"
    assert _dvc(project, "remote", "add", "-d", "-f", "team", str(remote)).returncode == 0  # in .dvc/config
    proc = _dvc(project, "push")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    _git(project, "add", "-A")
    _git(project, "commit", "-qm", "the tiny run")

    fresh = tmp_path / "colleague"
    _git(tmp_path, "clone", "-q", str(project), str(fresh))
    assert not (fresh / "data" / "models").exists()
    proc = _dvc(fresh, "pull")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    status = _dvc(fresh, "status")
    assert status.returncode == 0 and changed(status) == [], status.stdout[-3000:]  # but the own files' listings:
    assert all(f"sources@{c}:\n\talways changed" in status.stdout for c in ("general", "domain", "task")), \
        status.stdout[-3000:]  # they look at the files on every run

    bento = sorted((project / "dist").glob("lm-pipeline-*.bento"))[0]
    env = {**os.environ, "BENTOML_HOME": str(tmp_path / "bentoml"), "BENTOML_DO_NOT_TRACK": "True"}
    proc = subprocess.run([sys.executable, "-m", "stages.lineage", str(bento), "--verify"], cwd=fresh, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "verify: OK" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]
