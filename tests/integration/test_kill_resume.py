"""SIGKILL in the middle of a stage, then run it again (issue 18's fault-injection suite, the kill half).

One stage of every kind (ingest, clean, tokenizer, tokens, pre-training, DAPT, fine-tuning, evaluate,
package) of the tiny-profile project, whose outputs are those of an uninterrupted run, is run again with
`dvc repro -f` and killed (SIGKILL to `dvc repro` and everything it started) at the moment the stage shows
that it is at work: a checkpoint saved, or a scratch or temporary folder beside one of its outputs (the moment
it starts to publish, the most delicate one). A stage that finishes without showing either has made an
uninterrupted run: its time is taken, and the next run is killed half way through it. Then the same command is
issued again. Expected: the killed run left each output either as it was or absent, never half-written; the
next run finishes and its outputs are byte for byte those of the uninterrupted run (a training stage resumes
from its checkpoint when it saved one, and removes it when it finishes); no scratch folder is left anywhere (each
stage sweeps, when it starts, what dead runs left: see ``stages.common.atomic.sweep_dead``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.test_fault_injection import _env, _files, _leftovers

pytestmark = [pytest.mark.integration, pytest.mark.timeout(3600)]

PY = sys.executable
KILLED = ["ingest@task", "clean@domain", "tokenizer@bert", "tokens@t5", "pretrain@gpt", "dapt@t5",
          "finetune@bert-dapt", "evaluate", "package"]
# Every build of a Bento gets a new version tag (BentoML's), so the package stage's record names another
# Bento after each run: for it the check is that the killed run left each record whole (the previous one, or the
# new Bento's when it was killed while publishing) and the next run publishes a complete one, not that the
# records are equal.
NEW_IDENTITY_EACH_RUN = {"package"}


def _outs(project: Path, stage: str) -> list[tuple[Path, bool]]:
    from dvc.repo import Repo

    with Repo(str(project)) as repo:
        st = next(s for s in repo.index.stages if s.name == stage)
        return [(Path(str(o.fs_path)), bool(o.use_cache)) for o in st.outs]


def _repro(project: Path, stage: str, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(PY).parent / "dvc"), "repro", "-s", *flags, stage], cwd=project,
                          env=_env(project), capture_output=True, text=True, timeout=1200)


def _stage_process(pgid: int) -> int | None:
    """The pid of the stage's own command (``python -m stages.<name>``) in process group ``pgid``, if running."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:  # after the command name: state, ppid, pgrp
                continue
            cmdline = (stat.parent / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if b"-m" in cmdline and any(arg.startswith(b"stages.") for arg in cmdline):
            return int(stat.parent.name)
    return None


def _run_timed(project: Path, stage: str) -> tuple[subprocess.Popen, float]:
    """``dvc repro -s -f stage`` in its own process group; returns the process once the stage's command has
    started, and that moment."""
    log = (project.parent / f"repro-{stage.replace('@', '-')}.log").open("w")  # read back when the run fails
    proc = subprocess.Popen([str(Path(PY).parent / "dvc"), "repro", "-s", "-f", stage], cwd=project,
                            env=_env(project), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    while proc.poll() is None and _stage_process(proc.pid) is None:
        time.sleep(0.005)
    return proc, time.monotonic()


def _log_tail(project: Path, stage: str) -> str:
    return (project.parent / f"repro-{stage.replace('@', '-')}.log").read_text(errors="replace")[-4000:]


def _at_work(project: Path, stage: str, outs: list[tuple[Path, bool]]) -> str | None:
    """What shows the stage is mid-way, or None: a saved checkpoint, or a scratch/temporary sibling of an
    output (``stages.common.atomic``: ``.<name>.work-*`` while working, ``.<name>.tmp-*`` while publishing)."""
    kind, _, item = stage.partition("@")
    state = project / "data" / "checkpoints" / kind / item / "state.json"
    if kind in ("pretrain", "dapt") and state.exists():
        return str(state.relative_to(project))
    for out, _ in outs:
        if out.parent.is_dir():
            for pattern in (f".{out.name}.work-*", f".{out.name}.tmp-*"):
                for hit in out.parent.glob(pattern):
                    return str(hit.relative_to(project))
    return None


@pytest.fixture(scope="module")
def workspace(tiny_project, tmp_path_factory):
    dest = tmp_path_factory.mktemp("kill") / "project"
    shutil.copytree(tiny_project, dest, symlinks=True)
    return dest


def _kill_when_at_work(project: Path, stage: str, outs: list, deadline: float | None) -> tuple[str | None, float]:
    """``dvc repro -s -f stage``, killed once it shows it is at work (:func:`_at_work`) or ``deadline`` seconds
    into its command; returns what it showed (None: it finished first, uninterrupted) and its command's time."""
    proc, started = _run_timed(project, stage)
    marker = None
    while marker is None and proc.poll() is None:
        marker = _at_work(project, stage, outs)
        if marker is None and deadline is not None and time.monotonic() - started >= deadline:
            marker = f"{deadline:.1f} s into its command"
        time.sleep(0.005)
    took = time.monotonic() - started
    if marker is None:  # finished: an uninterrupted run
        assert proc.wait(timeout=1200) == 0, f"{stage} failed when run uninterrupted:\n" + _log_tail(project, stage)
        return None, took
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    return marker, took


def _whole(out: Path, files: dict[str, str]) -> bool:
    """``out`` holds the files it held before, each JSON file complete (a record of another Bento, published whole)."""
    import json

    if set(_files(out)) != set(files):
        return False
    for p in [out] if out.is_file() else sorted(out.rglob("*.json")):
        try:
            json.loads(p.read_text())
        except ValueError:
            return False
    return True


def _same_as_before(stage: str, outs: list, before: dict, when: str) -> None:
    for out, _ in outs:
        if stage in NEW_IDENTITY_EACH_RUN:
            assert set(_files(out)) == set(before[out]), out
        else:
            assert _files(out) == before[out], f"{out} differs from the uninterrupted run {when}"


@pytest.mark.parametrize("stage", KILLED)
def test_a_killed_stage_leaves_whole_outputs_and_the_next_run_matches_an_uninterrupted_one(workspace, stage):
    project = workspace
    outs = _outs(project, stage)
    before = {out: _files(out) for out, _ in outs}  # the tiny project's run, uninterrupted

    # Killed when it shows it is at work (a checkpoint, a scratch or temporary sibling of an output); a stage that
    # computes before writing shows nothing and finishes: then it is killed half way through its command's time.
    marker, took = _kill_when_at_work(project, stage, outs, deadline=None)
    if marker is None:
        _same_as_before(stage, outs, before, f"when {stage} ran again uninterrupted")
        before = {out: _files(out) for out, _ in outs}  # a package record names the Bento this run built
        marker, _ = _kill_when_at_work(project, stage, outs, deadline=took / 2)
        assert marker is not None, f"{stage} finished before it could be interrupted"
    for out, _ in outs:  # as before the killed run, or gone, or (a new Bento's record) whole: never half-written
        whole = stage in NEW_IDENTITY_EACH_RUN and _whole(out, before[out])
        assert not out.exists() or _files(out) == before[out] or whole, \
            f"{out}: half-written by the {stage} killed at {marker}"

    again = _repro(project, stage, "-f")  # the command that was killed, issued again
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    _same_as_before(stage, outs, before, f"after {stage} killed at {marker}")
    assert not _leftovers(project), _leftovers(project)
    kind, _, item = stage.partition("@")  # the finished run resumed from its checkpoint, then removed it
    assert not (project / "data" / "checkpoints" / kind / item).exists(), f"{stage}: a checkpoint outlived its run"
