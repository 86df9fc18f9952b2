"""Outputs are replaced atomically: a failure inside leaves the previous output byte-identical."""

from __future__ import annotations

import json

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
