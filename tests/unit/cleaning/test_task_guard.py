"""The clean stage's task guard (no held-out task example in a pre-training corpus) and TAPT texts."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from stages.cleaning.task_guard import HeldOut, TaskConfig, normal_text
from stages.clean import main
from stages.sources.debian import unwrap
from tests.helpers import english_page, seed_badwords


def task_file(path, rows):
    n = len(rows)
    pq.write_table(pa.table({"id": [f"t{i}" for i in range(n)], "text": [r[0] for r in rows],
                             "source": ["task"] * n, "url": pa.array([None] * n, pa.string()),
                             "meta": [json.dumps(r[2]) for r in rows], "label": ["x"] * n,
                             "split": [r[1] for r in rows]}), path)
    return path


TASK = [
    (english_page(100), "test", {"package": "foo", "source_package": "foo-src"}),
    (english_page(101), "validation", {"package": "bar", "source_package": "bar"}),
    ("A tool that the task trains on. It has three sentences. This is the third one.", "train",
     {"package": "baz", "source_package": "baz"}),
]


def corpus(path):
    rows = [{"id": f"p{i}", "text": english_page(i), "meta": json.dumps({"package": f"pkg{i}",
                                                                           "source_package": f"src{i}"})}
            for i in range(8)]
    rows.append({"id": "same-package", "text": english_page(40), "meta": json.dumps({"package": "foo"})})
    rows.append({"id": "same-source", "text": english_page(41),
                 "meta": json.dumps({"package": "foo-doc", "source_package": "foo-src"})})
    # the validation text re-wrapped and re-cased: a near-exact copy
    rows.append({"id": "copy", "text": english_page(101).upper().replace(" ", "  ")})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def params(path, **task):
    path.write_text(yaml.safe_dump({"clean": {"defaults": {"workers": 1, "language": {"enabled": False}},
                                              "demo": {"task": task}}}))
    return path


def run(tmp_path, task_cfg, *extra):
    seed_badwords(tmp_path / "cache")
    task = task_file(tmp_path / "task.parquet", TASK)
    out = tmp_path / "out"
    rc = main(["--input", str(corpus(tmp_path / "in.jsonl")), "--output", str(out), "--corpus", "demo",
               "--params", str(params(tmp_path / "params.yaml", **task_cfg)), "--cache-dir", str(tmp_path / "cache"),
               "--task", str(task), "--report", str(tmp_path / "gate.json"), *extra])
    return rc, out


def test_guard_drops_held_out_packages_sources_and_copies_and_tapt_adds_train_texts(tmp_path):
    rc, out = run(tmp_path, {"guard": True, "tapt": True})
    assert rc == 0
    df = pd.read_parquet(out / "documents.parquet")
    raw = {json.loads(m).get("raw_id") for m in df["meta"]}
    assert {"same-package", "same-source", "copy"}.isdisjoint(raw)
    assert {f"p{i}" for i in range(8)} <= raw
    tapt = df[df["source"] == "task-train"]
    assert tapt["text"].tolist() == [TASK[2][0]]  # only the train split, never validation or test
    stats = json.loads((out / "stats.json").read_text())
    assert stats["task"]["dropped"] == {"held-out package": 1, "held-out source package": 1, "held-out text": 1}
    assert stats["task"]["tapt_added"] == 1


def test_a_leak_left_in_fails_the_gate_and_publishes_nothing(tmp_path):
    rc, out = run(tmp_path, {"guard": False})
    assert rc == 1 and not out.exists()
    report = json.loads((tmp_path / "gate.json").read_text())
    failed = [c for c in report["checks"] if not c["success"]]
    assert failed and "task_guard" in json.dumps(failed)
    assert "held-out" in json.dumps(failed)


def test_guard_or_tapt_without_a_task_is_a_clear_error(tmp_path, capsys):
    seed_badwords(tmp_path / "cache")
    rc = main(["--input", str(corpus(tmp_path / "in.jsonl")), "--output", str(tmp_path / "out"), "--corpus", "demo",
               "--params", str(params(tmp_path / "params.yaml", guard=True)), "--cache-dir", str(tmp_path / "cache")])
    assert rc == 1 and "--task" in capsys.readouterr().err


def test_held_out_index_and_normalisation():
    df = pd.DataFrame({"text": ["Net tool, v2.", "Other"], "split": ["test", "train"],
                       "meta": [json.dumps({"package": "a", "source_package": "b"}), "{}"]})
    held = HeldOut(df, ("validation", "test"))
    assert held.reason("net   TOOL v2", "{}") == "held-out text"
    assert held.reason("other", "{}") == ""  # train texts are not held out
    assert held.reason("x", json.dumps({"source_package": "b"})) == "held-out source package"
    assert normal_text("Hello,\n  World!") == "hello world"
    with pytest.raises(ValueError, match="holdout_splits"):
        TaskConfig(holdout_splits=("train",))


def test_unwrap_joins_wrapped_paragraph_lines_only():
    body = "A tool that\nwraps its lines.\n\nFeatures:\n* one\n* two\n  verbatim"
    assert unwrap(body) == "A tool that wraps its lines.\n\nFeatures:\n* one\n* two\n  verbatim"


def test_the_held_out_index_is_built_once_however_the_task_path_is_spelled(tmp_path, monkeypatch):
    from stages.cleaning.task_guard import held_out

    task = task_file(tmp_path / "task.parquet", TASK)
    monkeypatch.chdir(tmp_path)
    assert held_out(task.relative_to(tmp_path), ("test",)) is held_out(task, ("test",))
