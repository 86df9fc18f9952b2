"""The clean stage end to end on a corpus made in code: CLI, junk input, determinism, gate, params."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from stages.cleaning.config import config_from_section
from stages.clean import main
from stages.config import deep_merge
from stages.cleaning.config import load_config
from stages.config import ConfigError
from tests.helpers import english_page, seed_badwords

GERMAN = ("Die Stadt liegt am Ufer des Flusses und hat viele alte Häuser. Im Sommer kommen viele Besucher "
          "in die Altstadt. Die Kirche wurde im zwölften Jahrhundert gebaut und ist heute ein Museum.")


def corpus(tmp_path):
    rows = [{"id": f"p{i}", "text": english_page(i), "url": f"http://site{i}.example/page",
             "timestamp": "2020-01-01"} for i in range(12)]
    rows.append({"id": "dup-url", "text": english_page(99), "url": "https://www.site0.example/page/",
                 "timestamp": "2001-01-01"})  # same normalised URL as p0, older: dropped
    rows.append({"id": "lorem", "text": english_page(50) + "\nLorem ipsum dolor sit amet, consectetur elit."})
    rows.append({"id": "german", "text": "\n".join([GERMAN] * 1)})
    rows.append({"id": "bad", "text": english_page(60) + "\nHe called the referee an ass in public."})
    rows.append({"id": "shared", "text": english_page(3).split("\n")[0] + "\n" + english_page(3).split("\n")[1]})
    rows.append({"id": "giant", "text": "word " * 60_000})  # one 300k-character line
    rows.append({"id": "junk", "text": "\x00\x01\x02\ufffd" * 5000})
    rows.append({"id": "empty", "text": ""})
    rows.append({"id": "number", "text": 12345})
    path = tmp_path / "in.jsonl"
    lines = [json.dumps(r) for r in rows] + ["{not json", "[1, 2]"]
    path.write_text("\n".join(lines) + "\n")
    return path


def run(tmp_path, inp, out, *extra):
    seed_badwords(tmp_path / "cache")
    return main(["--input", str(inp), "--output", str(out), "--cache-dir", str(tmp_path / "cache"), *extra])


def test_cli_cleans_anyones_jsonl_and_counts_junk(tmp_path):
    out = tmp_path / "out"
    assert run(tmp_path, corpus(tmp_path), out, "--workers", "1") == 0
    df = pd.read_parquet(out / "documents.parquet")
    assert list(df.columns) == ["id", "text", "source", "url", "meta"]
    raw_ids = {json.loads(m)["raw_id"] for m in df["meta"]}
    assert raw_ids == {f"p{i}" for i in range(12)}  # every junk, duplicate and bad page is gone
    stats = json.loads((out / "stats.json").read_text())
    assert stats["documents_in"] == 23 and stats["documents_out"] == 12
    assert stats["input_dropped"] == {"invalid_json": 1, "invalid_record": 1, "invalid_text": 1}
    f = stats["filters"]
    assert f["url_dedup"]["dropped_by_reason"] == {"duplicate_url": 1}
    assert f["page_length"]["dropped_by_reason"] == {"too_long": 1}
    assert f["c4_lines"]["dropped_by_reason"]["lorem_ipsum"] == 1
    assert f["line_dedup"]["dropped_by_reason"] == {"empty": 1}  # "shared" only repeated p3's lines
    assert f["language"]["dropped_by_reason"] == {"not_english:de": 1}
    assert f["badwords"]["dropped_by_reason"] == {"badword": 1}
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    assert {(r["filter"], r["reason"]) for r in rejects} >= {("c4_lines", "lorem_ipsum"), ("badwords", "badword")}
    assert (tmp_path / "out.gate.json").exists()


def test_output_is_byte_identical_across_runs_and_worker_counts(tmp_path):
    inp = corpus(tmp_path)
    assert run(tmp_path, inp, tmp_path / "one", "--workers", "1") == 0
    assert run(tmp_path, inp, tmp_path / "two", "--workers", "2") == 0
    for name in ("documents.parquet", "stats.json", "rejects.jsonl"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()


def test_failed_gate_keeps_the_previous_output(tmp_path, capsys):
    inp = corpus(tmp_path)
    out = tmp_path / "out"
    assert run(tmp_path, inp, out, "--workers", "1") == 0
    before = (out / "documents.parquet").read_bytes()
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"clean": {"defaults": {"workers": 1}, "strict": {"gate": {"min_kept_fraction": 0.9}}}}))
    assert run(tmp_path, inp, out, "--corpus", "strict", "--params", str(params)) == 1
    err = capsys.readouterr().err
    assert "gate clean-out failed" in err and "kept_fraction" in err
    assert (out / "documents.parquet").read_bytes() == before


def test_params_are_presets_over_defaults_and_typos_are_named(tmp_path):
    base = {"c4": {"min_words_per_line": 5, "curly_brace": True}, "workers": 2}
    merged = deep_merge(base, {"c4": {"curly_brace": False}})
    assert merged == {"c4": {"min_words_per_line": 5, "curly_brace": False}, "workers": 2}
    cfg = config_from_section(merged, "clean.x")
    assert cfg.cleaner.c4.curly_brace is False and cfg.cleaner.c4.min_words_per_line == 5
    with pytest.raises(ConfigError, match="clean.x.c4.min_word: unknown key"):
        config_from_section({"c4": {"min_word": 5}}, "clean.x")
    with pytest.raises(ConfigError, match="clean.x.colour: unknown key"):
        config_from_section({"colour": 1}, "clean.x")
    assert load_config("params.yaml", "general").cleaner.c4.min_sentences == 3  # C4's rule
    domain = load_config("params.yaml", "domain")  # package descriptions: short pages
    assert domain.cleaner.c4.min_sentences == 1 and domain.task.guard and domain.task.tapt


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_user_ids_are_carried_not_trusted(tmp_path):
    # 40 distinct pages whose ids repeat: nothing may be merged on the user's id
    rows = [{"id": str(i % 20), "text": english_page(i)} for i in range(40)]
    out = tmp_path / "out"
    assert run(tmp_path, _jsonl(tmp_path / "in.jsonl", rows), out, "--workers", "1") == 0
    df = pd.read_parquet(out / "documents.parquet")
    assert len(df) == 40
    assert sorted(json.loads(m)["raw_id"] for m in df["meta"]) == sorted(str(i % 20) for i in range(40))


def test_page_length_applies_before_url_dedup_as_in_c4(tmp_path):
    old = {"id": "old", "text": english_page(1), "url": "http://a.example/x", "timestamp": "2019"}
    new_but_huge = {"id": "new", "text": english_page(2) + "\n" + "z" * 200_000, "url": "http://a.example/x",
                    "timestamp": "2020"}
    rows = [old, new_but_huge] + [{"text": english_page(i)} for i in range(10, 14)]
    out = tmp_path / "out"
    assert run(tmp_path, _jsonl(tmp_path / "in.jsonl", rows), out, "--workers", "1") == 0
    stats = json.loads((out / "stats.json").read_text())
    assert stats["filter_order"][:3] == ["page_length", "url_dedup", "c4_lines"]
    assert stats["filters"]["page_length"]["dropped_by_reason"] == {"too_long": 1}
    assert stats["filters"]["url_dedup"]["dropped_by_reason"] == {}  # the old page is the only one left
    raw = {json.loads(m)["raw_id"] for m in pd.read_parquet(out / "documents.parquet")["meta"]}
    assert "old" in raw


def test_without_line_dedup_identical_cleaned_pages_are_kept_once(tmp_path):
    page = english_page(5)
    rows = [{"text": page + "\nHome | Menu"}, {"text": page + "\nContact | About"}] + \
        [{"text": english_page(i)} for i in range(20, 24)]
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"clean": {"defaults": {"workers": 1, "line_dedup": {"enabled": False}},
                                                "nodedup": {}}}))
    out = tmp_path / "out"
    assert run(tmp_path, _jsonl(tmp_path / "in.jsonl", rows), out, "--corpus", "nodedup", "--params", str(params)) == 0
    stats = json.loads((out / "stats.json").read_text())
    assert stats["filters"]["exact_dedup"]["dropped_by_reason"] == {"duplicate_text": 1}
    assert pd.read_parquet(out / "documents.parquet")["id"].is_unique


def test_corrupt_compressed_input_is_a_one_line_error(tmp_path, capsys):
    import gzip

    bad = tmp_path / "broken.jsonl.gz"
    bad.write_bytes(gzip.compress(b'{"text": "hello"}\n' * 1000)[:-20])
    assert run(tmp_path, bad, tmp_path / "out") == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and "broken.jsonl.gz: cannot read compressed stream" in err
    assert not (tmp_path / "out").exists()


def test_outputs_are_readable_and_leftovers_of_killed_runs_are_swept(tmp_path):
    out = tmp_path / "out"
    stale = tmp_path / ".out.tmp-killed"
    stale.mkdir()
    (stale / "half.parquet").write_text("partial")
    assert run(tmp_path, _jsonl(tmp_path / "in.jsonl", [{"text": english_page(i)} for i in range(6)]), out,
               "--workers", "1") == 0
    assert not stale.exists()
    assert oct(out.stat().st_mode & 0o777) == "0o755"
    assert oct((out / "stats.json").stat().st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


@pytest.mark.parametrize("where", ["input_folder", "input_parent", "input_file"])
def test_an_output_that_would_hold_or_sit_in_the_input_is_refused_and_the_input_kept(tmp_path, capsys, where):
    folder = tmp_path / "corpus"
    folder.mkdir()
    inp = _jsonl(folder / "docs.jsonl", [{"text": english_page(i)} for i in range(6)])
    before = inp.read_bytes()
    out = {"input_folder": folder, "input_parent": tmp_path, "input_file": inp}[where]
    assert run(tmp_path, inp, out, "--workers", "1") == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: --output ") and "the input --input" in err
    assert inp.read_bytes() == before  # nothing the user passed in is touched
    assert sorted(p.name for p in folder.iterdir()) == ["docs.jsonl"]


def test_an_output_beside_the_input_file_is_fine(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    inp = _jsonl(folder / "docs.jsonl", [{"text": english_page(i)} for i in range(6)])
    assert run(tmp_path, inp, folder / "cleaned", "--workers", "1") == 0
    assert (folder / "cleaned" / "documents.parquet").is_file() and inp.is_file()


def test_a_killed_runs_scratch_folder_is_removed_by_the_next_run(tmp_path):
    out = tmp_path / "out"
    scratch = tmp_path / ".out.work-killed"
    (scratch / "phase1").mkdir(parents=True)
    assert run(tmp_path, _jsonl(tmp_path / "in.jsonl", [{"text": english_page(i)} for i in range(6)]), out,
               "--workers", "1") == 0
    assert not scratch.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith((".", "clean-"))) == []


@pytest.mark.parametrize("content, why", [(b"", "the input holds no record"),
                                          (bytes(range(256)) * 12, "invalid_json"),
                                          (b'{"text": 5}\n{"text": null}\n', "2 invalid_text")])
def test_input_without_any_text_is_a_one_line_error_naming_the_file(tmp_path, capsys, content, why):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(content)
    assert run(tmp_path, bad, tmp_path / "out", "--workers", "1") == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"error: {bad}: no document to clean") and why in err
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_invalid_utf8_is_kept_replaced_and_counted(tmp_path, capsys):
    inp = tmp_path / "in.jsonl"
    lines = [json.dumps({"text": english_page(i)}).encode() for i in range(6)]
    lines[2] = lines[2].replace(b"The ", b"The \xff\xfe ", 1)  # two bytes that are not UTF-8, in a JSON string
    assert b"\xff" in lines[2]
    inp.write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "out"
    assert run(tmp_path, inp, out, "--workers", "1") == 0
    stats = json.loads((out / "stats.json").read_text())
    assert stats["input_repaired"] == {"invalid_utf8_replaced": 1}
    assert stats["input_dropped"] == {}
    assert "1 records had invalid UTF-8" in capsys.readouterr().err
    texts = pd.read_parquet(out / "documents.parquet")["text"]
    assert texts.str.contains("\ufffd").sum() == 1


def test_a_corrupt_parquet_input_is_a_one_line_error_naming_it(tmp_path, capsys):
    bad = tmp_path / "docs.parquet"
    pd.DataFrame({"text": [english_page(i) for i in range(6)]}).to_parquet(bad)
    bad.write_bytes(bad.read_bytes()[:-40])  # the footer cut off, as by an interrupted copy
    assert run(tmp_path, bad, tmp_path / "out", "--workers", "1") == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"error: {bad}: not a readable Parquet file")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("rule", ["newest", "tfds"])
def test_url_dedup_rule_picks_the_newest_or_tfds_page(tmp_path, rule):
    import hashlib

    pages = [{"id": f"v{i}", "text": english_page(70 + i), "url": "http://a.example/x", "timestamp": f"20{10 + i}"}
             for i in range(4)]
    rows = pages + [{"text": english_page(i)} for i in range(30, 34)]
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"clean": {"defaults": {"workers": 1, "url_dedup_rule": rule}, "web": {}}}))
    out = tmp_path / "out"
    assert run(tmp_path, _jsonl(tmp_path / "in.jsonl", rows), out, "--corpus", "web", "--params", str(params)) == 0
    raw = {json.loads(m)["raw_id"] for m in pd.read_parquet(out / "documents.parquet")["meta"]}
    # newest: the latest timestamp; tfds (c4_utils.dedupe_urls): the largest MD5 hex digest of the raw text
    winner = max(pages, key=(lambda p: p["timestamp"]) if rule == "newest" else
                 (lambda p: hashlib.md5(p["text"].encode("utf-8")).hexdigest()))
    assert raw & {p["id"] for p in pages} == {winner["id"]}
    stats = json.loads((out / "stats.json").read_text())
    assert stats["filters"]["url_dedup"]["dropped_by_reason"] == {"duplicate_url": 3}


def test_an_unknown_url_dedup_rule_names_the_key(tmp_path, capsys):
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"clean": {"defaults": {"url_dedup_rule": "oldest"}, "web": {}}}))
    assert run(tmp_path, corpus(tmp_path), tmp_path / "out", "--corpus", "web", "--params", str(params)) == 1
    assert "url_dedup_rule" in capsys.readouterr().err


def test_byte_ranges_of_a_jsonl_file_hold_each_line_once(tmp_path):
    from stages.cleaning.readers import piece_lines, plan_pieces

    path = tmp_path / "in.jsonl"
    lines = [b'{"text": "a"}\n', b"\n", b'{"text": "' + b"b" * 40 + b'"}\n', b"\n", b"\n", b'{"text": "c"}']
    path.write_bytes(b"".join(lines))  # the last line has no newline
    for size in range(1, len(path.read_bytes()) + 2):
        pieces = plan_pieces(path, 10, split_bytes=size)
        assert len(pieces) == -(-path.stat().st_size // size)
        assert b"".join(b"".join(piece_lines(p)) for p in pieces) == path.read_bytes(), size


def test_output_is_the_same_whatever_pieces_the_input_is_read_in(tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from stages.cleaning import readers

    inp = corpus(tmp_path)
    assert run(tmp_path, inp, tmp_path / "whole", "--workers", "1") == 0
    monkeypatch.setattr(readers, "SPLIT_BYTES", 1000)  # the JSONL file read in byte ranges
    assert len(readers.plan_pieces(inp, 4 * 500)) > 10
    assert run(tmp_path, inp, tmp_path / "ranges", "--workers", "2") == 0
    for name in ("documents.parquet", "stats.json", "rejects.jsonl"):
        assert (tmp_path / "whole" / name).read_bytes() == (tmp_path / "ranges" / name).read_bytes()
    rows = [{"id": f"p{i}", "text": english_page(i), "url": f"http://site{i}.example/"} for i in range(40)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "one.parquet")
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "many.parquet", row_group_size=3)  # 14 pieces
    assert run(tmp_path, tmp_path / "one.parquet", tmp_path / "p1", "--workers", "1") == 0
    assert run(tmp_path, tmp_path / "many.parquet", tmp_path / "p2", "--workers", "2") == 0
    for name in ("documents.parquet", "stats.json", "rejects.jsonl"):
        assert (tmp_path / "p1" / name).read_bytes() == (tmp_path / "p2" / name).read_bytes()
    assert pq.ParquetFile(tmp_path / "p1" / "documents.parquet").metadata.num_rows == 40


def test_the_published_row_groups_follow_blocks_of_shard_docs_input_records(tmp_path):
    import pyarrow.parquet as pq

    inp = tmp_path / "in.jsonl"
    pages = [{"id": f"p{i}", "text": english_page(i) if i % 3 else "Too short."} for i in range(30)]
    inp.write_text("".join(json.dumps(p) + "\n" for p in pages))
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"clean": {"defaults": {"workers": 2, "shard_docs": 4}, "web": {}}}))
    assert run(tmp_path, inp, tmp_path / "out", "--corpus", "web", "--params", str(params)) == 0
    f = pq.ParquetFile(tmp_path / "out" / "documents.parquet")
    kept = [int(json.loads(m)["raw_id"][1:]) for m in f.read(columns=["meta"])["meta"].to_pylist()]
    assert kept == sorted(kept) and len(kept) == 20  # every third page is too short
    blocks = [i // 4 for i in kept]
    assert [f.metadata.row_group(g).num_rows for g in range(f.metadata.num_row_groups)] == \
        [blocks.count(b) for b in sorted(set(blocks))]
