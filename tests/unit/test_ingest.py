"""The ingest core on small corpora made in code: schema, dedup, splits, gate, atomic publication."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from stages.common.atomic import Staged
from stages.config import build
from stages.sources.config import CorpusConfig, SplitConfig
from stages.sources.ingest import assign_split
from stages.ingest import main
from stages.sources.ingest import ingest
from stages.quality.gate import GateFailed


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _cfg(path, **extra):
    data = {"sources": [{"kind": "files", "path": str(path), "label_field": extra.pop("label_field", None),
                         "group_field": extra.pop("group_field", None)}], **extra}
    return build(CorpusConfig, data, "ingest.test")


def _run(cfg, tmp_path, name="out"):
    """The core, then what the stage's entry does with its result: check the gate, publish the folder."""
    staged = Staged(tmp_path / name)
    try:
        result = ingest(cfg, corpus="test", cache_dir=tmp_path / "cache", out=staged.path, log=lambda m: None)
        result.gate.check(tmp_path / "reports" / f"{name}.json")
        staged.publish()
    finally:
        staged.discard()
    return result


def test_documents_follow_the_schema_with_content_hash_ids_and_exact_dedup(tmp_path):
    src = _write_jsonl(tmp_path / "in.jsonl", [
        {"text": "Alpha text.", "url": "http://a/", "lang": "en"},
        {"text": "Beta text."},
        {"text": "Alpha text.", "url": "http://a-copy/"},
    ])
    result = _run(_cfg(src), tmp_path)
    df = pd.read_parquet(tmp_path / "out" / "documents.parquet")
    assert list(df.columns) == ["id", "text", "source", "url", "meta"]
    assert df["text"].tolist() == ["Alpha text.", "Beta text."]
    assert df["url"][0] == "http://a/" and df["url"].isna().tolist() == [False, True]  # first copy survives
    assert json.loads(df["meta"][0]) == {"lang": "en"}
    assert df["id"].str.len().eq(32).all() and df["id"].is_unique
    assert result.metrics["dropped"] == {"duplicate_text": 1}
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["counts"]["documents"] == 2
    assert manifest["sources"][0]["files"][0]["sha256"]
    assert manifest["outputs"]["documents.parquet"]["rows"] == 2
    report = json.loads((tmp_path / "reports" / "out.json").read_text())
    assert report["success"] is True


def test_nul_characters_are_removed_at_ingest_and_counted_in_the_manifest(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "one\\u0000 two\\u0000"}\n{"text": "clean text"}\n')  # JSON escapes of NUL
    _run(_cfg(src), tmp_path)
    df = pd.read_parquet(tmp_path / "out" / "documents.parquet")
    assert df["text"].tolist() == ["one two", "clean text"]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["sources"][0]["nul_characters_removed"] == 2
    clean = _write_jsonl(tmp_path / "clean.jsonl", [{"text": "clean text"}])
    _run(_cfg(clean), tmp_path, "plain")
    assert "nul_characters_removed" not in json.loads((tmp_path / "plain" / "manifest.json").read_text())["sources"][0]


def test_same_input_gives_byte_identical_outputs(tmp_path):
    src = _write_jsonl(tmp_path / "in.jsonl", [{"text": f"Document number {i}."} for i in range(50)])
    _run(_cfg(src), tmp_path, "a")
    _run(_cfg(src), tmp_path, "b")
    for name in ("documents.parquet", "manifest.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_labeled_splits_by_group_and_drops_label_conflicts(tmp_path):
    rows = []
    for g in range(40):
        for j in range(3):
            rows.append({"text": f"package {g} variant {j} does things", "label": "net" if g % 2 else "web",
                         "pkg": f"src{g}"})
    rows.append({"text": "ambiguous text", "label": "net", "pkg": "x1"})
    rows.append({"text": "ambiguous text", "label": "web", "pkg": "x2"})
    src = _write_jsonl(tmp_path / "task.jsonl", rows)
    cfg = _cfg(src, labeled=True, label_field="label", group_field="pkg",
               split={"validation": 0.2, "test": 0.2, "seed": 1}, gate={"labels": ["net", "web"]})
    result = _run(cfg, tmp_path)
    df = pd.read_parquet(tmp_path / "out" / "documents.parquet")
    assert list(df.columns) == ["id", "text", "source", "url", "meta", "label", "split"]
    assert "ambiguous text" not in set(df["text"])
    assert result.metrics["dropped"]["label_conflict"] == 1
    df["group"] = df["text"].str.extract(r"package (\d+)")[0]
    assert df.groupby("group")["split"].nunique().eq(1).all()  # a group never straddles splits
    assert set(df["split"]) == {"train", "validation", "test"}


def test_split_assignment_is_deterministic_and_close_to_the_shares():
    cfg = SplitConfig(validation=0.1, test=0.1, seed=0)
    splits = [assign_split(f"group-{i}", cfg) for i in range(20000)]
    assert splits == [assign_split(f"group-{i}", cfg) for i in range(20000)]
    share = {s: splits.count(s) / len(splits) for s in ("train", "validation", "test")}
    assert abs(share["test"] - 0.1) < 0.01 and abs(share["validation"] - 0.1) < 0.01
    assert assign_split("group-1", SplitConfig(seed=1)) in ("train", "validation", "test")


def test_failed_gate_keeps_previous_good_output(tmp_path):
    good = _write_jsonl(tmp_path / "good.jsonl", [{"text": f"Good document {i}."} for i in range(5)])
    _run(_cfg(good, gate={"min_rows": 5}), tmp_path)
    before = (tmp_path / "out" / "documents.parquet").read_bytes()
    bad = _write_jsonl(tmp_path / "bad.jsonl", [{"text": ""}, {"text": " "}, {"text": "x"}, {"text": "y"}, {"text": "z"}])
    with pytest.raises(GateFailed) as err:
        _run(_cfg(bad, gate={"min_rows": 5, "min_nonempty_ratio": 0.9}), tmp_path)
    assert "ingest-test" in str(err.value)
    assert (tmp_path / "out" / "documents.parquet").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temp debris
    report = json.loads((tmp_path / "reports" / "out.json").read_text())
    assert report["success"] is False  # the failing report is kept for the reader


def test_a_label_outside_the_heads_label_set_is_refused_at_ingest_naming_the_key(tmp_path, capsys):
    rows = [{"text": f"ticket {i}", "label": lab} for i, lab in enumerate(["billing", "bug", "feature", "other"] * 5)]
    src = _write_jsonl(tmp_path / "tickets.jsonl", rows)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({
        "ingest": {"task": {"labeled": True, "sources": [{"kind": "files", "path": str(src), "label_field": "label"}],
                            "gate": {"min_rows": 1, "max_class_share": 0.5}}},
        "finetune": {"defaults": {"labels": ["billing", "bug", "feature"]}}}))
    args = ["--corpus", "task", "--params", str(params), "--cache-dir", str(tmp_path / "c"),
            "--output", str(tmp_path / "out"), "--report", str(tmp_path / "r.json"),
            "--metrics", str(tmp_path / "m.json")]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "ExpectColumnValuesToBeInSet(label)" in err and "(set by finetune.defaults.labels)" in err
    assert not (tmp_path / "out").exists()


def test_cli_reports_one_line_errors_and_writes_nothing(tmp_path, capsys):
    params = tmp_path / "params.yaml"
    src = _write_jsonl(tmp_path / "in.jsonl", [{"text": "ok."}])
    src.write_text(src.read_text() + "{broken\n")
    params.write_text(yaml.safe_dump({"ingest": {"mine": {"sources": [{"kind": "files", "path": str(src)}]}}}))
    args = ["--corpus", "mine", "--params", str(params), "--cache-dir", str(tmp_path / "c"),
            "--output", str(tmp_path / "out"), "--report", str(tmp_path / "r.json"),
            "--metrics", str(tmp_path / "m.json")]
    assert main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and "in.jsonl:2: invalid JSON" in err
    assert not (tmp_path / "out").exists() and not (tmp_path / "m.json").exists()

    params.write_text(yaml.safe_dump({"ingest": {"mine": {"sources": [{"kind": "files", "path": str(src)}],
                                                          "gate": {"min_row": 1}}}}))
    assert main(args) == 1
    assert "ingest.mine.gate.min_row: unknown key" in capsys.readouterr().err

    params.write_text(yaml.safe_dump({"ingest": {"mine": {"sources": [{"kind": "files", "path": str(src),
                                                                       "on_error": "skip"}]}}}))
    assert main(args) == 0
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert metrics["documents"] == 1 and metrics["skipped"] == {"invalid_json": 1}


@pytest.mark.parametrize(("name", "how"), [("docs.parquet", "truncated"), ("docs.parquet", "garbage"),
                                           ("docs.jsonl.gz", "truncated"), ("docs.jsonl.zst", "garbage"),
                                           ("docs.jsonl", "garbage")])
def test_a_corrupt_source_file_is_one_error_line_naming_it_and_the_last_output_stays(tmp_path, capsys, name, how):
    # The fault-injection suite's rule for ingest's own inputs: each kind of file the files source reads, cut
    # in half or overwritten, gives one line naming it; the previous good output, report and metrics stay.
    import gzip

    import zstandard

    rows = [{"text": f"Document number {i} of the corpus."} for i in range(8)]
    src = tmp_path / name
    if name.endswith(".parquet"):
        pd.DataFrame(rows).to_parquet(src)
    else:
        data = "".join(json.dumps(r) + "\n" for r in rows).encode()
        src.write_bytes(gzip.compress(data) if name.endswith(".gz") else
                        zstandard.ZstdCompressor().compress(data) if name.endswith(".zst") else data)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"ingest": {"mine": {"sources": [{"kind": "files", "path": str(src)}]}}}))
    args = ["--corpus", "mine", "--params", str(params), "--cache-dir", str(tmp_path / "c"),
            "--output", str(tmp_path / "out"), "--report", str(tmp_path / "r.json"),
            "--metrics", str(tmp_path / "m.json")]
    assert main(args) == 0
    before = {p: p.read_bytes() for p in [*(tmp_path / "out").iterdir(), tmp_path / "m.json", tmp_path / "r.json"]}
    good = src.read_bytes()
    src.write_bytes(good[: len(good) // 2] if how == "truncated" else b"\x00\xffnot this format\x9c" * 64)
    capsys.readouterr()
    assert main(args) == 1
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and name in lines[0] and "Traceback" not in err, err
    assert {p: p.read_bytes() for p in before} == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
