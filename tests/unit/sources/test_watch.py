"""The sources stage: the local files a corpus's sources name, with their SHA-256, so that DVC sees an edit, a new
match of a glob or a removed file as a changed dependency of ingest and runs it again (and leaves it alone when
nothing changed)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from stages.sources.watch import main

ROOT = Path(__file__).resolve().parents[3]
DVC = str(Path(sys.executable).parent / "dvc")


def _workspace(root: Path) -> Path:
    (root / "corpus").mkdir()
    for i in range(2):
        (root / "corpus" / f"part{i}.jsonl").write_text(
            "".join(json.dumps({"text": f"document {i}-{j} of the corpus."}) + "\n" for j in range(5)))
    (root / "params.yaml").write_text(yaml.safe_dump({"ingest": {"general": {
        "sources": [{"kind": "files", "path": "corpus/*.jsonl"}], "gate": {"min_rows": 1}}}}))
    return root


def _list(root: Path, capsys) -> tuple[dict, str]:
    argv = ["--corpus", "general", "--params", "params.yaml", "--cache-dir", ".cache", "--output",
            "data/sources/general.json"]
    assert main(argv) == 0
    return json.loads((root / "data/sources/general.json").read_text()), capsys.readouterr().err


def test_the_listing_names_every_file_with_its_sha256_and_what_changed(tmp_path, monkeypatch, capsys):
    root = _workspace(tmp_path)
    monkeypatch.chdir(root)
    listing, said = _list(root, capsys)
    part1 = root / "corpus" / "part1.jsonl"
    assert listing == {"corpus": "general", "files": [
        {"source": 0, "path": f"corpus/part{i}.jsonl",
         "sha256": hashlib.sha256((root / "corpus" / f"part{i}.jsonl").read_bytes()).hexdigest()} for i in range(2)]}
    assert said.strip() == "[sources] general: 2 local file(s)"
    first = (root / "data/sources/general.json").read_bytes()
    _, said = _list(root, capsys)
    assert (root / "data/sources/general.json").read_bytes() == first  # nothing changed: the same bytes for DVC
    assert said.strip() == "[sources] general: 2 local file(s), unchanged"

    part1.write_text(part1.read_text().replace("document 1-3", "document 1-3, edited"))
    (root / "corpus" / "part2.jsonl").write_text(json.dumps({"text": "a new one."}) + "\n")
    (root / "corpus" / "part0.jsonl").unlink()
    listing, said = _list(root, capsys)
    assert [f["path"] for f in listing["files"]] == ["corpus/part1.jsonl", "corpus/part2.jsonl"]
    assert listing["files"][0]["sha256"] == hashlib.sha256(part1.read_bytes()).hexdigest()
    assert said.strip() == ("[sources] general: corpus/part2.jsonl is new; corpus/part0.jsonl is gone; "
                            "corpus/part1.jsonl changed: ingest@general runs again")


def test_a_file_unchanged_on_disk_is_not_read_again(tmp_path, monkeypatch, capsys):
    root = _workspace(tmp_path)
    monkeypatch.chdir(root)
    listing, _ = _list(root, capsys)
    part0 = root / "corpus" / "part0.jsonl"
    st = part0.stat()
    part0.write_bytes(part0.read_bytes().replace(b"document", b"Document"))  # same size ...
    os.utime(part0, ns=(st.st_atime_ns, st.st_mtime_ns))  # ... and modification time: the stat cache answers
    assert _list(root, capsys)[0] == listing
    os.utime(part0, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # touched: read again
    assert _list(root, capsys)[0]["files"][0]["sha256"] == hashlib.sha256(part0.read_bytes()).hexdigest()


def test_a_source_that_reads_nothing_fails_naming_it(tmp_path, monkeypatch, capsys):
    root = _workspace(tmp_path)
    monkeypatch.chdir(root)
    for p in (root / "corpus").iterdir():
        p.unlink()
    argv = ["--corpus", "general", "--params", "params.yaml", "--output", "data/sources/general.json"]
    assert main(argv) == 1
    assert capsys.readouterr().err.strip() == "error: corpus/*.jsonl: glob matched no files"
    assert not (root / "data/sources/general.json").exists()


def test_remote_sources_list_no_files(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    for corpus in ("general", "domain", "task"):
        argv = ["--corpus", corpus, "--params", "params.yaml", "--output", f"data/sources/{corpus}.json"]
        assert main(argv) == 0
        assert json.loads((tmp_path / f"data/sources/{corpus}.json").read_text())["files"] == []


def test_the_pipeline_declares_the_listing_as_ingests_dependency():
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    assert stages["sources"]["do"]["always_changed"] is True
    assert stages["sources"]["foreach"] == stages["ingest"]["foreach"]
    assert stages["sources"]["do"]["outs"] == [{"data/sources/${item}.json": {"persist": True}}]
    assert "data/sources/${item}.json" in stages["ingest"]["do"]["deps"]


def test_dvc_runs_what_depends_on_the_listing_only_when_a_file_changed(tmp_path):
    """The pipeline's own sources stage under DVC, with a stand-in for ingest that counts its runs."""
    root = _workspace(tmp_path)
    spec = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["sources"]
    spec["do"].pop("deps")  # the stage's code lives in the repository, not in this project
    spec["foreach"] = ["general"]
    ingest = {"cmd": f"{sys.executable} -c \"import pathlib; p = pathlib.Path('runs.txt'); "
                     "p.write_text(p.read_text() + 'x' if p.exists() else 'x')\"; cp data/sources/general.json seen.json",
              "deps": ["data/sources/general.json"], "outs": [{"seen.json": {"cache": False}}]}
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"sources": spec, "ingest": ingest}}))
    subprocess.run([DVC, "init", "--no-scm", "-q"], cwd=root, check=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}

    def repro() -> str:
        proc = subprocess.run([DVC, "repro"], cwd=root, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout + proc.stderr

    repro()
    assert (root / "runs.txt").read_text() == "x"
    out = repro()
    assert (root / "runs.txt").read_text() == "x" and "Stage 'ingest' didn't change, skipping" in out
    (root / "corpus" / "part1.jsonl").write_text(json.dumps({"text": "relabelled."}) + "\n")
    out = repro()
    assert (root / "runs.txt").read_text() == "xx", out
    assert "corpus/part1.jsonl changed: ingest@general runs again" in out


def test_a_saved_hf_folder_lists_its_files(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    saved = tmp_path / "saved" / "train"
    saved.mkdir(parents=True)
    for name in ("data-00000-of-00001.arrow", "dataset_info.json", "state.json"):
        (saved / name).write_text(name)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"ingest": {"general": {
        "sources": [{"kind": "hf", "path": "saved"}], "gate": {"min_rows": 1}}}}))
    listing, _ = _list(tmp_path, capsys)
    assert [f["path"] for f in listing["files"]] == [f"saved/train/{n}" for n in
                                                     ("data-00000-of-00001.arrow", "dataset_info.json", "state.json")]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"ingest": {"general": {
        "sources": [{"kind": "hf", "path": "gone"}], "gate": {"min_rows": 1}}}}))
    assert main(["--corpus", "general", "--params", "params.yaml", "--output", "data/sources/general.json"]) == 1
    assert "gone: no such folder" in capsys.readouterr().err
