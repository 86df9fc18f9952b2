"""Own source files DVC cannot see: an edit, a new file matching the glob or a removed file since the last ingest
names its ingest stage, which the run entry points force."""

from __future__ import annotations

import json
import os
import stat

import yaml

from stages.ingest import main as ingest_main
from stages.sources.stale import reingest, stale_corpora


def _workspace(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus").mkdir()
    for i in range(2):
        (tmp_path / "corpus" / f"part{i}.jsonl").write_text(
            "".join(json.dumps({"text": f"document {i}-{j} of the corpus."}) + "\n" for j in range(5)))
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"ingest": {"general": {
        "sources": [{"kind": "files", "path": "corpus/*.jsonl"}], "gate": {"min_rows": 1}}}}))
    args = ["--corpus", "general", "--params", "params.yaml", "--cache-dir", ".cache", "--output",
            "data/ingested/general", "--report", "r.json", "--metrics", "m.json"]
    assert ingest_main(args) == 0
    return tmp_path


def test_an_unchanged_workspace_has_nothing_stale(tmp_path, monkeypatch):
    root = _workspace(tmp_path, monkeypatch)
    assert stale_corpora(root) == {}


def test_an_edited_added_or_removed_file_names_its_corpus(tmp_path, monkeypatch):
    root = _workspace(tmp_path, monkeypatch)
    part = root / "corpus" / "part1.jsonl"
    original = part.read_bytes()
    part.write_text(part.read_text().replace("document 1-3", "document 1-3, relabelled"))
    assert stale_corpora(root) == {"general": "corpus/part1.jsonl changed since it was ingested"}
    part.write_bytes(original)
    (root / "corpus" / "part2.jsonl").write_text(json.dumps({"text": "a new one."}) + "\n")
    assert stale_corpora(root) == {"general": "corpus/part2.jsonl is new to its source"}
    (root / "corpus" / "part2.jsonl").unlink()
    (root / "corpus" / "part0.jsonl").unlink()
    assert stale_corpora(root) == {"general": "corpus/part0.jsonl is gone"}


def test_reingest_forces_only_the_stale_stage(tmp_path, monkeypatch):
    root = _workspace(tmp_path, monkeypatch)
    calls = root / "calls.txt"
    dvc = root / "dvc"
    dvc.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n")
    dvc.chmod(dvc.stat().st_mode | stat.S_IEXEC)
    said = []
    assert reingest(root, str(dvc), dict(os.environ), log=said.append) == 0 and not calls.exists()
    (root / "corpus" / "part0.jsonl").write_text(json.dumps({"text": "other bytes."}) + "\n")
    assert reingest(root, str(dvc), dict(os.environ), log=said.append) == 0
    assert calls.read_text().split() == ["repro", "--force", "--single-item", "ingest@general"]
    assert said == ["[sources] ingest@general: corpus/part0.jsonl changed since it was ingested; ingesting it again"]


def test_a_profile_run_ingests_an_edited_source_again_before_its_repro(tmp_path, monkeypatch):
    from stages.profile_run import run

    root = _workspace(tmp_path, monkeypatch)
    (root / "profiles").mkdir()
    (root / "profiles" / "small.yaml").write_text("ingest.general.gate.min_rows: 2\n")
    calls = root / "calls.txt"
    dvc = root / "dvc"
    dvc.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n")
    dvc.chmod(dvc.stat().st_mode | stat.S_IEXEC)
    (root / "corpus" / "part1.jsonl").write_text(json.dumps({"text": "edited."}) + "\n")
    assert run("small", root, dvc=str(dvc), env=dict(os.environ)) == 0
    assert calls.read_text().splitlines() == ["repro --force --single-item ingest@general", "repro"]
