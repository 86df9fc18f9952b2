"""Outputs are replaced atomically: a failure inside leaves the previous output byte-identical."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stages.common.atomic import atomic_dir, write_json_atomic


def test_success_replaces_previous_folder(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with atomic_dir(target) as tmp:
        (tmp / "new.txt").write_text("new")
        assert not (target / "new.txt").exists()  # nothing visible until the block succeeds
    assert sorted(p.name for p in target.iterdir()) == ["new.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temporary or old folders left


def test_failure_keeps_previous_folder_and_leaves_no_debris(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "good.txt").write_text("good")
    with pytest.raises(RuntimeError):
        with atomic_dir(target) as tmp:
            (tmp / "half.txt").write_text("half")
            raise RuntimeError("gate failed")
    assert (target / "good.txt").read_text() == "good"
    assert sorted(p.name for p in target.iterdir()) == ["good.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_json_is_stable_and_atomic(tmp_path):
    path = tmp_path / "m" / "metrics.json"
    write_json_atomic(path, {"b": 1, "a": "é"})
    first = path.read_bytes()
    write_json_atomic(path, {"a": "é", "b": 1})
    assert path.read_bytes() == first
    assert json.loads(first) == {"a": "é", "b": 1}
    assert [p.name for p in path.parent.iterdir()] == ["metrics.json"]


@pytest.mark.parametrize("swap", [True, False])
def test_replace_dir_never_leaves_the_target_missing_where_it_can_swap(tmp_path, monkeypatch, swap):
    from stages.common import atomic

    target, new = tmp_path / "out", tmp_path / ".out.work-1"
    (target / "sub").mkdir(parents=True)
    (target / "sub" / "old.txt").write_text("old")
    new.mkdir()
    (new / "new.txt").write_text("new")
    if not swap:
        monkeypatch.setattr(atomic, "exchange", lambda a, b: False)  # a system without renameat2
    else:
        (tmp_path / "probe-a").mkdir()
        (tmp_path / "probe-b" / "x").mkdir(parents=True)
        if not atomic.exchange(tmp_path / "probe-a", tmp_path / "probe-b"):
            pytest.skip("this system cannot swap two paths atomically")
        assert (tmp_path / "probe-a" / "x").is_dir()  # swapped
    real_replace = atomic.os.replace
    seen = []

    def watching(a, b):  # the target must exist at every rename, if the system can swap
        seen.append(target.exists())
        real_replace(a, b)

    monkeypatch.setattr(atomic.os, "replace", watching)
    atomic.replace_dir(new, target)
    assert sorted(p.name for p in target.iterdir()) == ["new.txt"]
    assert not new.exists() and not list(tmp_path.glob(".out.old-*"))
    if swap:
        assert seen == []  # one atomic swap, no rename window
    else:
        assert seen == [True, False]  # the fallback: renamed aside, then the new one in


def _dead_pid() -> int:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_sweep_removes_what_dead_writers_left_and_keeps_live_work(tmp_path):
    import os

    from stages.common.atomic import _HOST, sweep_dead

    models = tmp_path / "data" / "models"
    models.mkdir(parents=True)
    dead = models / f".bert.tmp-{_dead_pid()}@{_HOST}-abcd"
    live = models / f".gpt.tmp-{os.getpid()}@{_HOST}-abcd"
    elsewhere = models / f".t5.work-{_dead_pid()}@00000000-abcd"   # another host's: its pid means nothing here
    legacy = tmp_path / "reports" / ".evaluation.md.tmp-x1y2"         # untagged: from before writers were named
    dead_file = models / f".metrics.json.tmp-{_dead_pid()}@{_HOST}-q"
    for d in (dead, live, elsewhere):
        d.mkdir()
        (d / "weights").write_text("w")
    legacy.parent.mkdir()
    legacy.write_text("x")
    dead_file.write_text("{}")
    kept = models / "bert"
    kept.mkdir()
    removed = sweep_dead([tmp_path / "data", tmp_path / "reports", tmp_path / "dist"])
    assert set(removed) == {dead, legacy, dead_file}
    assert live.is_dir() and elsewhere.is_dir() and kept.is_dir() and not dead.exists()


def test_every_stage_start_in_a_workspace_sweeps(tmp_path, monkeypatch, capsys):
    from stages.common.atomic import _HOST
    from stages.common.cli import entry

    left = tmp_path / "data" / "tokenizers" / f".bert.tmp-{_dead_pid()}@{_HOST}-zz"
    left.mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert entry(lambda: 0) == 0 and left.exists()     # not a workspace (no dvc.yaml): nothing touched
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    assert entry(lambda: 0) == 0 and not left.exists()
    assert "left by a run that was killed" in capsys.readouterr().err


def test_temporary_names_carry_their_writer(tmp_path):
    import os

    from stages.common.atomic import _HOST, work_dir

    seen = []
    with atomic_dir(tmp_path / "out") as tmp:
        seen.append(tmp.name)
    with work_dir(tmp_path / "out") as scratch:
        seen.append(Path(scratch).name)
    assert all(f"-{os.getpid()}@{_HOST}-" in name for name in seen)


def test_a_temporary_sibling_left_by_a_dead_writer_is_swept(tmp_path):
    # The package stage exports the Bento to temp_sibling(<name>.bento, ".bento") and renames it; a kill in
    # between leaves that file, which the next stage's sweep must find (keeping the writer's extension).
    import os

    from stages.common.atomic import sweep_dead, temp_sibling

    dist = tmp_path / "dist"
    dist.mkdir()
    mine = temp_sibling(dist / "lm-pipeline-abc.bento", suffix=".bento")
    assert mine.parent == dist and mine.name.endswith(".bento") and f".tmp-{os.getpid()}@" in mine.name
    dead = dist / mine.name.replace(f"-{os.getpid()}@", f"-{_dead_pid()}@")
    dead.write_bytes(b"half a tarball")
    mine.write_bytes(b"being written")
    assert sweep_dead([dist]) == [dead]
    assert mine.exists() and list(dist.glob(".*.tmp-*")) == [mine]  # the kill tests' leftover pattern sees it
