from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from stages.finetuning.core import Body
from stages.provenance.chain import render
from stages.provenance.hashing import folder_manifest
from stages.provenance.record import LineageError, Lock, collect
from stages.provenance.targets import Target
from stages.provenance.verify import verify
from tests.unit.provenance.workspace import entry, make_workspace, write


def record_of(root: Path) -> dict:
    """As a reader gets it: through JSON (no shared objects inside)."""
    return json.loads(json.dumps(collect(root, model_name="m1", model_dir=Path("data/models/finetune/m1"),
                                         gate_report=Path("reports/quality/model-gate.json"))))


def packaged(root: Path, name: str = "m1") -> list[dict]:
    return [{"name": "lm-classifier:v1", "role": "classifier", "source": None,
             "files": folder_manifest(root / "data/models/finetune" / name)}]


def packaged_copy(root: Path, model: Path) -> Path:
    """Model m1's folder copied out of the workspace with its lineage record, as packaging leaves it."""
    model.mkdir()
    for f in (root / "data/models/finetune/m1").iterdir():
        (model / f.name).write_bytes(f.read_bytes())
    (model / "lineage.json").write_text(json.dumps(record_of(root)))
    return model


def test_upstream_follows_outputs_to_their_producers(tmp_path):
    lock = Lock.read(make_workspace(tmp_path) / "dvc.lock")
    assert lock.upstream(["finetune@m1"]) == ["ingest@task", "finetune@m1"]
    # evaluate reads the whole data/models/finetune folder: both fine-tunes are upstream of it
    assert set(lock.upstream(["evaluate"])) == {"ingest@task", "finetune@m1", "finetune@m2", "evaluate"}
    with pytest.raises(LineageError, match="no stage nope"):
        lock.upstream(["nope"])


def test_record_holds_the_chain_and_verifies_against_its_workspace(tmp_path):
    root = make_workspace(tmp_path)
    rec = record_of(root)
    assert list(rec["stages"]) [0] == "ingest@task" and "evaluate" in rec["stages"]
    assert rec["model"]["name"] == "m1" and rec["model"]["labels"] == ["river", "market"]
    assert set(rec["model"]["files"]) == {"config.json", "model.safetensors", "finetune.json"}
    assert rec["files"]["data/ingested/task"]["files"]["manifest.json"]
    assert rec["sources"]["task"]["sources"][0]["files"][0]["sha256"] == "ab" * 32
    assert rec["gates"]["reports/quality/ingest-task.json"]["success"] is True
    assert "checks" not in rec["gates"]["reports/quality/ingest-task.json"]  # observations stay in the report
    assert rec["model_gate"]["selected"] == "m1"
    assert rec["params"]["finetune.defaults"] == {"epochs": 3}
    assert rec["metrics"]["reports/metrics/finetune-m1.json"]["test_macro_f1"] == 0.9
    verdict = verify(Target(rec, packaged=packaged(root)), workspace=root)
    assert verdict.ok, verdict.mismatches
    assert verdict.checked >= len(rec["files"]) + len(rec["stages"])
    text = render(rec, {"tag": "lm:v1"})
    for part in ("1. Raw sources", "ab" * 32, "finetune@m1", "model gate: PASSED, selected m1", "Bento lm:v1"):
        assert part in text
    # every source's licence travels with the model and is printed, a missing one is flagged
    task_src = rec["sources"]["task"]["sources"]
    assert task_src[0]["licence"] == "each package's own licence" and task_src[0]["records"] == 2
    assert task_src[0]["packages"][0]["name"] == "corpus-x"
    assert "licence: each package's own licence" in text and "package corpus-x@1.2.3  sha512-xyz" in text
    assert "licence: NOT RECORDED" in text
    assert "finetune@m2   (compared by the evaluation, not upstream of this model)" in text


def test_a_changed_upstream_file_is_named(tmp_path):
    root = make_workspace(tmp_path)
    rec = record_of(root)
    write(root / "data/ingested/task/documents.parquet", "other rows\n")
    verdict = verify(Target(rec, packaged=packaged(root)), workspace=root)
    assert not verdict.ok
    assert any(m.startswith("data/ingested/task/documents.parquet: md5") for m in verdict.mismatches)
    (root / "stages/finetune.py").unlink()
    verdict = verify(Target(rec), workspace=root)
    assert any(m.startswith("stages/finetune.py: missing") for m in verdict.mismatches)


def test_a_changed_lock_entry_or_param_is_named(tmp_path):
    root = make_workspace(tmp_path)
    rec = record_of(root)
    lock = yaml.safe_load((root / "dvc.lock").read_text())
    lock["stages"]["finetune@m1"]["outs"][0]["md5"] = "0" * 32 + ".dir"
    lock["stages"]["ingest@task"]["params"]["params.yaml"]["ingest.task"]["labeled"] = False
    (root / "dvc.lock").write_text(yaml.safe_dump(lock))
    mismatches = verify(Target(rec), workspace=root).mismatches
    assert any(m.startswith("dvc.lock: finetune@m1 outs data/models/finetune/m1: md5 000") for m in mismatches)
    assert "dvc.lock: ingest@task params differ from the record" in mismatches


def test_changed_packaged_weights_are_named_without_a_workspace(tmp_path):
    root = make_workspace(tmp_path)
    rec = record_of(root)
    items = packaged(root)
    items[0]["files"]["model.safetensors"] = "f" * 32
    items[0]["files"]["lineage.json"] = "e" * 32  # added by packaging: not a mismatch
    verdict = verify(Target(rec, packaged=items))
    assert verdict.mismatches == [f"lm-classifier:v1 (packaged)/model.safetensors: md5 {'f' * 32}, recorded "
                                  f"{rec['model']['files']['model.safetensors']}"]


def test_a_workspace_that_differs_from_dvc_lock_cannot_be_recorded(tmp_path):
    root = make_workspace(tmp_path)
    write(root / "data/models/finetune/m2/model.safetensors", "retrained outside dvc")
    with pytest.raises(LineageError, match="data/models/finetune/m2: .* in the workspace"):
        record_of(root)


PIPELINE = """stages:
  ingest:
    foreach: [task]
    do:
      cmd: python -m stages.ingest
      deps: [stages/ingest.py]
      outs:
      - data/ingested/${item}
  finetune:
    foreach: ${runs}
    do:
      cmd: python -m stages.finetune ${item}
      deps: [data/ingested/task, stages/finetune.py]
      outs:
      - data/models/finetune/${item}
  evaluate:
    cmd: python -m stages.evaluate
    deps: [data/models/finetune, stages/evaluate.py]
    outs: [reports/quality/model-gate.json]
"""


def test_a_stage_the_pipeline_no_longer_defines_is_left_out_of_the_record(tmp_path):
    from dvc.repo import Repo

    root = make_workspace(tmp_path)
    Repo.init(str(root), no_scm=True).close()
    write(root / "dvc.yaml", PIPELINE)
    write(root / "params.yaml", "runs: [m1, m2]\n")
    assert "finetune@m2" in record_of(root)["stages"]
    # m2 taken out of the runs and its folder deleted: dvc.lock keeps finetune@m2's entry, which no stage writes now
    write(root / "params.yaml", "runs: [m1]\n")
    for item in sorted((root / "data/models/finetune/m2").rglob("*"), reverse=True):
        item.unlink()
    (root / "data/models/finetune/m2").rmdir()
    lock = yaml.safe_load((root / "dvc.lock").read_text())  # evaluate run again over the runs left
    lock["stages"]["evaluate"]["deps"] = entry(root, [d["path"] for d in lock["stages"]["evaluate"]["deps"]])
    (root / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False))
    rec = record_of(root)
    assert "finetune@m2" not in rec["stages"] and {"finetune@m1", "evaluate", "ingest@task"} <= set(rec["stages"])
    verdict = verify(Target(rec, packaged=packaged(root)), workspace=root)
    assert verdict.ok, verdict.mismatches


def test_an_edited_output_file_is_named_with_a_fix_that_works(tmp_path):
    """DVC misses an edit that keeps a file's size and time; the record names the file (from the folder's listing
    in the DVC cache, as DVC writes it) and says how to restore it."""
    root = make_workspace(tmp_path)
    recorded = yaml.safe_load((root / "dvc.lock").read_text())["stages"]["finetune@m2"]["outs"][0]
    folder = root / "data/models/finetune/m2"
    listing = [{"md5": md5, "relpath": rel} for rel, md5 in sorted(folder_manifest(folder).items())]
    write(root / ".dvc/cache/files/md5" / recorded["md5"][:2] / recorded["md5"][2:], json.dumps(listing))
    write(folder / "config.json", json.dumps({"name": "m9"}))
    write(folder / "extra.bin", "x")
    with pytest.raises(LineageError) as err:
        record_of(root)
    assert "finetune@m2: data/models/finetune/m2: config.json changed, extra.bin added" in str(err.value)
    assert "`dvc checkout data/models/finetune/m2`" in str(err.value) and "dvc repro --force finetune@m2" in str(
        err.value)
    (folder / "model.safetensors").unlink()
    with pytest.raises(LineageError, match="model.safetensors missing"):
        record_of(root)


def test_a_damaged_cache_object_is_named_and_the_advice_is_a_rebuild_not_a_checkout(tmp_path):
    """`dvc checkout` from a damaged cache writes the damaged bytes again: the advice must not be to delete and
    check out."""
    root = make_workspace(tmp_path)
    recorded = yaml.safe_load((root / "dvc.lock").read_text())["stages"]["finetune@m2"]["outs"][0]
    folder = root / "data/models/finetune/m2"
    good = folder_manifest(folder)
    cache = root / ".dvc/cache/files/md5"
    listing = [{"md5": md5, "relpath": rel} for rel, md5 in sorted(good.items())]
    write(cache / recorded["md5"][:2] / recorded["md5"][2:], json.dumps(listing))
    md5 = good["config.json"]
    write(cache / md5[:2] / md5[2:], "damaged bytes")          # the cache's copy of config.json
    write(folder / "config.json", "damaged bytes")              # and what `dvc checkout` put back from it
    with pytest.raises(LineageError) as err:
        record_of(root)
    message = str(err.value)
    assert "config.json changed" in message and f".dvc/cache/files/md5/{md5[:2]}/{md5[2:]}" in message
    assert "dvc repro --force finetune@m2" in message and "running `dvc checkout" not in message


def test_an_edited_licence_in_the_record_is_caught_against_the_workspace(tmp_path):
    root = make_workspace(tmp_path)
    record = record_of(root)
    assert verify(Target(record), workspace=root).ok
    record["sources"]["task"]["sources"][0]["licence"] = "public domain"
    verdict = verify(Target(record), workspace=root)
    assert not verdict.ok and any("sources of task[0].licence: 'public domain' in the record, \"each package's own "
                                  "licence\" in the manifest of ingest@task" in m for m in verdict.mismatches)
    del record["sources"]["task"]
    assert any("sources of task: not in the record" in m for m in verify(Target(record), workspace=root).mismatches)


@pytest.mark.timeout(60)  # a FIFO that is read would block forever
def test_links_and_special_files_in_a_model_folder_are_named_not_followed(tmp_path, capsys):
    import os

    from stages.lineage import main

    root = make_workspace(tmp_path / "ws")
    model = packaged_copy(root, tmp_path / "packaged")
    (model / "config.json").unlink()
    (model / "config.json").symlink_to(root / "data/models/finetune/m1/config.json")  # same bytes, but a link
    os.mkfifo(model / "pipe.jsonl")
    assert main([str(model), "--verify", "--details", "--workspace", str(root)]) == 1
    out = capsys.readouterr().out
    assert "config.json: not a regular file" in out and "pipe.jsonl: not a regular file" in out

    # in a workspace, a link out of it (and its DVC cache) or a FIFO stops the record with the file named
    folder = root / "data/models/finetune/m2"
    (folder / "config.json").rename(tmp_path / "moved.json")
    (folder / "config.json").symlink_to(tmp_path / "moved.json")
    with pytest.raises(OSError, match="m2/config.json: a link to .*moved.json, outside"):
        record_of(root)
    (folder / "config.json").unlink()
    cache = root / ".dvc/cache/files/md5/ab/cdef"  # DVC's symlink cache type: links into the cache are its own
    cache.parent.mkdir(parents=True)
    (tmp_path / "moved.json").rename(cache)
    (folder / "config.json").symlink_to(cache)
    record_of(root)
    os.mkfifo(folder / "pipe.bin")
    with pytest.raises(OSError, match="m2/pipe.bin: not a regular file"):
        record_of(root)


def test_lineage_command_on_a_model_folder(tmp_path, capsys):
    from stages.lineage import main

    root = make_workspace(tmp_path / "ws")
    model = packaged_copy(root, tmp_path / "packaged")
    assert main([str(model), "--verify", "--details", "--workspace", str(root)]) == 0
    out = capsys.readouterr().out
    assert "verify: OK" in out and "Model m1: bert, random initialisation, 2 labels" in out
    assert main([str(model), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["record"]["model"]["name"] == "m1"
    write(root / "stages/evaluate.py", "# changed\n")
    assert main([str(model), "--verify", "--details", "--workspace", str(root)]) == 1
    assert "MISMATCH stages/evaluate.py: md5" in capsys.readouterr().out
    assert main([str(tmp_path / "nothing-here")]) == 2


def test_a_consumer_older_than_its_producer_is_refused(tmp_path):
    """`dvc repro ingest@task` alone: ingest's output is new, the fine-tunes still pin the old one."""
    root = make_workspace(tmp_path)
    write(root / "data/ingested/task/documents.parquet", "new rows\n")
    from stages.provenance.hashing import path_hashes

    lock = yaml.safe_load((root / "dvc.lock").read_text())
    lock["stages"]["ingest@task"]["outs"][0]["md5"] = path_hashes(root / "data/ingested/task")[0]
    (root / "dvc.lock").write_text(yaml.safe_dump(lock))
    with pytest.raises(LineageError, match="finetune@m1 deps data/ingested/task: .* in the workspace"):
        record_of(root)


def test_a_record_that_disagrees_with_itself_fails_without_a_workspace(tmp_path):
    root = make_workspace(tmp_path)
    rec = record_of(root)
    items = packaged(root)
    items[0]["files"]["model.safetensors"] = "f" * 32
    rec["model"]["files"]["model.safetensors"] = "f" * 32  # weights and record swapped together
    mismatches = verify(Target(rec, packaged=items)).mismatches
    assert mismatches == ["record: the model's files differ from data/models/finetune/m1 as its stage wrote it"]
    rec = record_of(root)
    rec["files"]["data/ingested/task"]["files"]["documents.parquet"] = "0" * 32
    mismatches = verify(Target(rec)).mismatches
    assert any(m.startswith("record: data/ingested/task: its files' hashes add up to") for m in mismatches)


def test_a_stage_missing_from_the_record_is_named(tmp_path):
    root = make_workspace(tmp_path)
    rec = record_of(root)
    del rec["stages"]["ingest@task"]
    lock = yaml.safe_load((root / "dvc.lock").read_text())
    lock["stages"]["finetune@m1"]["deps"].append({"path": "stages/evaluate.py", "md5": "1" * 32})
    (root / "dvc.lock").write_text(yaml.safe_dump(lock))
    mismatches = verify(Target(rec), workspace=root).mismatches
    assert "dvc.lock: stage ingest@task is upstream of the model but not in the record" in mismatches
    assert "dvc.lock: finetune@m1 lists stages/evaluate.py in deps; the record does not" in mismatches


def _bento_file(path: Path, record: dict, model_files: dict[str, bytes]) -> Path:
    import io
    import tarfile

    def add(tar, name, data):
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))

    with tarfile.open(path, "w:xz") as tar:
        add(tar, "bento.yaml", b"name: lm\nversion: v1\n")
        for rel, data in model_files.items():
            add(tar, f"models/lm-classifier/v1/{rel}", data)
        add(tar, "models/lm-classifier/v1/lineage.json", json.dumps(record).encode())
        add(tar, "models/lm-classifier/v1/model.yaml", b"name: lm-classifier\n")
    return path


def test_verify_says_its_verdict_first_and_counts_the_detail_that_details_lists(tmp_path, capsys, monkeypatch):
    from stages.lineage import main

    root = make_workspace(tmp_path / "ws")
    model = root / "data/models/finetune/m1"
    bento = _bento_file(tmp_path / "lm-v1.bento", record_of(root),
                        {f.name: f.read_bytes() for f in model.iterdir()})
    monkeypatch.chdir(tmp_path)
    assert main([str(bento), "--verify"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("verify: OK, UNPINNED (") and "UNVERIFIED " not in out and "checked: " not in out
    assert "note: workspace: none" in out.split("\n")[1]
    assert "file(s) of the Bento that nothing outside it binds (UNVERIFIED); --details lists them" in out
    assert "Bento lm:v1" in out  # the chain after the verdict
    assert main([str(bento), "--verify", "--details"]) == 0
    assert "  UNVERIFIED bento.yaml\n" in capsys.readouterr().out


def test_an_exported_bento_is_read_in_place_and_a_broken_one_is_a_clear_error(tmp_path, capsys, monkeypatch):
    from stages.lineage import main

    root = make_workspace(tmp_path / "ws")
    model = root / "data/models/finetune/m1"
    bento = _bento_file(tmp_path / "lm-v1.bento", record_of(root),
                        {f.name: f.read_bytes() for f in model.iterdir()})
    monkeypatch.chdir(tmp_path)  # no dvc.lock here or above: packaged files and the record only
    assert main([str(bento), "--verify", "--details"]) == 0
    out = capsys.readouterr().out
    assert "Bento lm:v1" in out and "packaged files only" in out
    # what could not be verified is listed in full, and the verdict says what an unpinned pass is worth
    assert "verify: OK, UNPINNED" in out and "consistency, not origin" in out and "Exit status 0" in out
    for rel in ("bento.yaml", "models/lm-classifier/v1/lineage.json", "models/lm-classifier/v1/model.yaml"):
        assert f"  UNVERIFIED {rel}\n" in out, rel
    assert "more" not in out.split("unverified:", 1)[1]
    assert main([str(bento), "--verify", "--details", "--workspace", str(root)]) == 0
    capsys.readouterr()
    (tmp_path / "broken.bento").write_bytes(bento.read_bytes()[: bento.stat().st_size // 2])
    assert main([str(tmp_path / "broken.bento")]) == 2
    assert "broken.bento: cannot be read" in capsys.readouterr().err
    (tmp_path / "other.bento").write_bytes(b"not an archive")
    assert main([str(tmp_path / "other.bento")]) == 2
    wrong = _bento_file(tmp_path / "wrong.bento", {"schema": 99}, {})
    assert main([str(wrong)]) == 2
    assert "not a schema-1 lineage record" in capsys.readouterr().err


def test_the_bentos_code_is_checked_against_the_code_recorded_at_packaging(tmp_path):
    root = make_workspace(tmp_path)
    rec = record_of(root)
    rec["served_code"] = {"service.py": "a" * 32, "stages/serving/classifier.py": "b" * 32}
    src = {"service.py": "a" * 32, "stages/serving/classifier.py": "b" * 32, "bento_config.json": "c" * 32}
    assert verify(Target(rec, src=src)).ok
    src["stages/serving/classifier.py"] = "d" * 32
    assert verify(Target(rec, src=src)).mismatches == [f"Bento src/stages/serving/classifier.py: md5 {'d' * 32}, "
                                                f"recorded {'b' * 32}"]


def test_a_forged_model_with_a_matching_record_passes_alone_and_fails_against_a_pin(tmp_path, capsys, monkeypatch):
    """Rewriting a weight file and lineage.json together fools the record when no workspace is at hand; the
    archive's SHA-256, pinned from where the publisher cannot rewrite it, does not agree."""
    import hashlib

    from stages.lineage import main
    from stages.provenance.hashing import dir_md5

    root = make_workspace(tmp_path / "ws")
    model = root / "data/models/finetune/m1"
    files = {f.name: f.read_bytes() for f in model.iterdir()}
    good = _bento_file(tmp_path / "lm-v1.bento", record_of(root), files)
    pin = hashlib.sha256(good.read_bytes()).hexdigest()
    monkeypatch.chdir(tmp_path)
    assert main([str(good), "--verify", "--details", "--pin", pin]) == 0
    out = capsys.readouterr().out
    assert "archive's SHA-256 is the pinned one" in out
    # the forgery: a changed weight file and a record rewritten to match it
    name = sorted(files)[0]
    files[name] = files[name] + b"tampered"
    forged_record, new = record_of(root), hashlib.md5(files[name]).hexdigest()
    model_rec = forged_record["model"]
    model_rec["files"][name] = new
    model_rec["md5"] = dir_md5(model_rec["files"])
    full = f"{model_rec['path']}/{name}"
    for path, info in forged_record["files"].items():  # every recorded folder that holds the file
        if full.startswith(path.rstrip("/") + "/"):
            info["files"][full[len(path.rstrip("/")) + 1:]] = new
            info["md5"] = dir_md5(info["files"])
            for entry in forged_record["stages"].values():
                for e in entry.get("deps", []) + entry.get("outs", []):
                    if e["path"] == path:
                        e["md5"] = info["md5"]
    forged = _bento_file(tmp_path / "forged.bento", forged_record, files)
    # consistent with itself: unpinned, the audit cannot tell, and says so instead of a plain OK
    assert main([str(forged), "--verify", "--details"]) == 0
    out = capsys.readouterr().out
    assert "verify: OK, UNPINNED" in out and "consistency, not origin" in out
    assert "verify: OK (" not in out
    assert "  UNVERIFIED models/lm-classifier/v1/lineage.json" in out and "  UNVERIFIED bento.yaml" in out
    assert main([str(forged), "--verify", "--details", "--pin", pin]) == 1
    assert f"pinned {pin}" in capsys.readouterr().out
    folder = tmp_path / "model-folder"
    folder.mkdir()
    (folder / "lineage.json").write_text(json.dumps(record_of(root)))
    assert main([str(folder), "--verify", "--details", "--pin", pin]) == 2  # a model folder is no Bento: nothing to pin
    assert "--pin check a Bento" in capsys.readouterr().err


def test_byte_code_in_a_bentos_src_is_a_mismatch(tmp_path):
    root = make_workspace(tmp_path)
    rec = record_of(root)
    rec["served_code"] = {"service.py": "a" * 32}
    files = ["bento.yaml", "src/service.py", "src/__pycache__/service.cpython-311.pyc"]
    v = verify(Target(rec, src={"service.py": "a" * 32}, all_files=files))
    assert v.mismatches == ["Bento src/__pycache__/service.cpython-311.pyc: byte-code in the Bento (packaging "
                            "ships none; Python would run it instead of the checked source)"]
    assert v.unverified == ["bento.yaml"]


def test_a_workspace_model_folder_gets_its_record_its_card_and_a_check_against_its_own_workspace(
        tmp_path, monkeypatch, capsys):
    from stages.lineage import main

    root = make_workspace(tmp_path / "ws")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # no dvc.lock here: the folder's own workspace must be the one checked
    m2 = root / "data/models/finetune/m2"
    assert main([str(m2), "--card"]) == 0
    card = capsys.readouterr().out
    assert card.startswith("# Model card: m2 (lm-pipeline classifier)")  # its own record, not the gate's choice
    assert "Generated by `python -m stages.lineage --card` from this model's lineage record" in card
    assert "Note: the gate selected `m1`, not this model (`m2`)." in card
    assert "licence: each package's own licence" in card
    assert main([str(m2), "--verify", "--details"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("verify: OK (")  # the verdict first, then the folder's record
    assert "\nWorkspace model folder data/models/finetune/m2 (written by finetune@m2)" in out
    assert f"note: workspace: {root.resolve()}" in out
    write(root / "data/ingested/task/documents.parquet", "other rows\n")  # upstream data changed since dvc.lock
    assert main([str(m2), "--verify", "--details"]) == 2  # the record cannot be built from a workspace that disagrees
    assert "data/ingested/task" in capsys.readouterr().err
    assert main([str(root / "data/ingested/task")]) == 2  # not a model folder
    assert "data/ingested/task: not a model folder a finetune, adapt, pretrain, dapt or base stage wrote" in capsys.readouterr().err


def test_verify_on_a_workspace_folder_checks_the_card_its_stage_wrote(tmp_path, monkeypatch, capsys):
    from stages.lineage import main
    from stages.provenance import stagecard
    from tests.unit.provenance.workspace import entry

    root = make_workspace(tmp_path / "ws")
    m2 = root / "data/models/finetune/m2"
    monkeypatch.chdir(root)

    def relock():  # what `dvc commit` would record for the folder as it now is
        lock = yaml.safe_load((root / "dvc.lock").read_text())
        lock["stages"]["finetune@m2"]["outs"] = entry(root, ["data/models/finetune/m2",
                                                             "reports/metrics/finetune-m2.json"])
        lock["stages"]["evaluate"]["deps"] = entry(root, ["data/models/finetune", "stages/evaluate.py"])
        (root / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False))

    def card(task_manifest):
        stagecard.write(m2, stagecard.finetune_facts(
            Body("bert", "random", m2), labels=["river", "market"], config={"head": "pooled", "max_len": 64},
            metrics={"test_macro_f1": 0.4}, sources=stagecard.corpora([task_manifest]), parameters=4))

    card(root / "data/ingested/task/manifest.json")
    relock()
    assert main([str(m2), "--verify", "--details"]) == 0
    out = capsys.readouterr().out
    assert "data/models/finetune/m2/README.md: the card its card.json renders" in out
    assert "the sources and licences of 1 corpora against their ingest manifests" in out

    (m2 / "README.md").write_text((m2 / "README.md").read_text().replace("each package's own licence", "CC0"))
    relock()  # an edited card that was committed: the hashes agree, the card does not
    assert main([str(m2), "--verify", "--details"]) == 1
    assert "README.md: not the card its card.json renders" in capsys.readouterr().out

    other = tmp_path / "other/task"
    other.mkdir(parents=True)
    facts = json.loads((root / "data/ingested/task/manifest.json").read_text())
    facts["sources"][0]["licence"] = "proprietary"
    (other / "manifest.json").write_text(json.dumps(facts))
    card(other / "manifest.json")  # a card whose licence is not the ingest manifest's
    relock()
    assert main([str(m2), "--verify", "--details"]) == 1
    assert "the sources of corpus 'task' (licences included) differ from its ingest manifest's" in \
        capsys.readouterr().out


def test_verify_names_a_users_source_file_that_changed_since_ingest(tmp_path):
    """A user's own files are no DVC dependency: the record's SHA-256 of each is checked against the file."""
    import hashlib

    from tests.unit.provenance.workspace import relock

    root = make_workspace(tmp_path / "ws")
    own = root / "own" / "tickets.jsonl"
    write(own, '{"text": "a ticket", "label": "bug"}\n')
    manifest_path = root / "data/ingested/task/manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["sources"].append({"kind": "files", "description": "own/tickets.jsonl", "licence": "", "records": 1,
                                "files": [{"path": "own/tickets.jsonl", "role": "input", "bytes": own.stat().st_size,
                                           "sha256": hashlib.sha256(own.read_bytes()).hexdigest()},
                                          {"path": "~/elsewhere/absent.jsonl", "role": "input", "bytes": 1,
                                           "sha256": "0" * 64}]})
    write(manifest_path, json.dumps(manifest))
    relock(root)
    rec = record_of(root)
    verdict = verify(Target(rec, packaged=packaged(root)), workspace=root)
    assert verdict.ok, verdict.mismatches
    assert any("~/elsewhere/absent.jsonl of task: not on this machine" in n for n in verdict.notes)
    write(own, '{"text": "a ticket", "label": "billing"}\n')  # relabelled after ingest; dvc status sees nothing
    verdict = verify(Target(rec, packaged=packaged(root)), workspace=root)
    assert [m for m in verdict.mismatches if m.startswith("own/tickets.jsonl: sha256 ")], verdict.mismatches
    assert "`dvc repro --force ingest@task`" in " ".join(verdict.mismatches)


def test_manifest_paths_are_relative_to_the_workspace_or_the_home_folder(tmp_path, monkeypatch):
    from stages.sources.ingest import portable_path

    home, work = tmp_path / "home" / "someone", tmp_path / "home" / "someone" / "project"
    work.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    assert portable_path(str(work / "data" / "x.parquet")) == "data/x.parquet"
    assert portable_path(str(home / "corpora" / "x.jsonl")) == "~/corpora/x.jsonl"
    assert portable_path("/srv/shared/x.jsonl") == "/srv/shared/x.jsonl"
    shared = tmp_path / "shared-cache"  # a download cache outside the workspace, linked into it
    (shared / "npm").mkdir(parents=True)
    (work / ".cache").mkdir()
    (work / ".cache" / "sources").symlink_to(shared)
    assert portable_path(str(work / ".cache" / "sources" / "npm" / "p.tgz")) == ".cache/sources/npm/p.tgz"
    assert portable_path(".cache/sources/npm/p.tgz") == ".cache/sources/npm/p.tgz"
