"""Local file sources: every supported format, and bad input named by file and line."""

from __future__ import annotations

import gzip
import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stages.sources.base import Provenance, SourceError
from stages.sources.files import FilesSource, read_files


def _read(path, **kw):
    prov = Provenance(kind="files")
    cfg = FilesSource(kind="files", path=str(path), **kw)
    return list(read_files(cfg, prov)), prov


def _jsonl(rows):
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


ROWS = [{"text": "First document.", "url": "http://a.example/1", "lang": "en"},
        {"text": "Second document.", "url": None, "lang": "en"}]


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".jsonl.zst"])
def test_jsonl_plain_and_compressed(tmp_path, suffix):
    data = _jsonl(ROWS)
    if suffix.endswith(".gz"):
        data = gzip.compress(data)
    elif suffix.endswith(".zst"):
        import zstandard

        data = zstandard.ZstdCompressor().compress(data)
    path = tmp_path / f"docs{suffix}"
    path.write_bytes(data)
    recs, prov = _read(path)
    assert [r.text for r in recs] == ["First document.", "Second document."]
    assert recs[0].url == "http://a.example/1" and recs[1].url is None
    assert recs[0].meta == {"lang": "en"}  # unknown fields are kept as meta
    assert recs[0].source == "docs" + suffix
    assert prov.files[0]["sha256"] and prov.files[0]["bytes"] == len(data)


def test_malformed_json_line_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(_jsonl(ROWS[:1]) + b"\n" + b'{"text": "oops"\n' + _jsonl(ROWS[1:]))
    with pytest.raises(SourceError, match=r"bad\.jsonl:3: invalid JSON"):
        _read(path)
    recs, prov = _read(path, on_error="skip")
    assert len(recs) == 2 and prov.skipped == {"invalid_json": 1}


def test_invalid_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "latin.jsonl"
    path.write_bytes(_jsonl(ROWS[:1]) + b'{"text": "caf\xe9"}\n')
    with pytest.raises(SourceError, match=r"latin\.jsonl:2: invalid UTF-8"):
        _read(path)
    txt = tmp_path / "folder"
    txt.mkdir()
    (txt / "a.txt").write_bytes(b"line one\nline two \xff\n")
    with pytest.raises(SourceError, match=r"a\.txt:2: invalid UTF-8"):
        _read(txt)


def test_missing_field_wrong_type_and_non_object(tmp_path):
    path = tmp_path / "f.jsonl"
    path.write_bytes(b'{"body": "x"}\n')
    with pytest.raises(SourceError, match=r"f\.jsonl:1: missing field 'text'"):
        _read(path)
    path.write_bytes(b'{"text": 5}\n')
    with pytest.raises(SourceError, match=r"f\.jsonl:1: field 'text' is int"):
        _read(path)
    path.write_bytes(b'["text"]\n')
    with pytest.raises(SourceError, match=r"f\.jsonl:1: expected a JSON object"):
        _read(path)
    recs, prov = _read(path, on_error="skip")
    assert recs == [] and prov.skipped == {"not_an_object": 1}


def test_empty_file_missing_path_and_corrupt_gzip(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    with pytest.raises(SourceError, match=r"empty\.jsonl: file is empty"):
        _read(empty)
    with pytest.raises(SourceError, match=r"nowhere\.jsonl: no such file or folder"):
        _read(tmp_path / "nowhere.jsonl")
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(gzip.compress(_jsonl(ROWS))[:-12])
    with pytest.raises(SourceError, match=r"broken\.jsonl\.gz: cannot read compressed stream"):
        _read(broken)
    with pytest.raises(SourceError, match="glob matched no files"):
        _read(tmp_path / "*.parquet")


def test_parquet_with_labels_and_groups(tmp_path):
    path = tmp_path / "task.parquet"
    pq.write_table(pa.table({"text": ["a b c", "d e f"], "label": ["x", "y"], "pkg": ["p1", "p2"]}), path)
    recs, _ = _read(path, label_field="label", group_field="pkg")
    assert [(r.text, r.label, r.group) for r in recs] == [("a b c", "x", "p1"), ("d e f", "y", "p2")]
    with pytest.raises(SourceError, match=r"task\.parquet: no column 'body'"):
        _read(path, text_field="body")


def test_folder_of_text_files_in_sorted_order(tmp_path):
    (tmp_path / "b.txt").write_text("Bee.\n")
    (tmp_path / "a.txt").write_text("Ay.\n")
    (tmp_path / "README").write_text("not read: unknown suffix")
    recs, prov = _read(tmp_path)
    assert [r.text for r in recs] == ["Ay.\n", "Bee.\n"]
    assert [f["path"].rsplit("/", 1)[1] for f in prov.files] == ["a.txt", "b.txt"]


def test_common_crawl_wet(tmp_path):
    from warcio.warcwriter import WARCWriter

    buf = io.BytesIO()
    writer = WARCWriter(buf, gzip=True)
    for url, body in [("http://x.example/", "Hello world.\nSecond line."), ("http://y.example/", "Another.")]:
        rec = writer.create_warc_record(url, "conversion", payload=io.BytesIO(body.encode()),
                                        warc_content_type="text/plain")
        writer.write_record(rec)
    path = tmp_path / "sample.warc.wet.gz"
    path.write_bytes(buf.getvalue())
    recs, _ = _read(path)
    assert [(r.url, r.text) for r in recs] == [("http://x.example/", "Hello world.\nSecond line."),
                                              ("http://y.example/", "Another.")]
    assert recs[0].meta["warc_record_id"].startswith("<urn:uuid:")
    junk = tmp_path / "junk.warc.wet.gz"
    junk.write_bytes(gzip.compress(b"this is not a warc file\n"))
    with pytest.raises(SourceError, match=r"junk\.warc\.wet\.gz: not a readable WARC/WET file"):
        _read(junk)


def test_a_binary_wet_file_is_not_echoed_into_the_error(tmp_path):
    junk = tmp_path / "binary.warc.wet.gz"
    junk.write_bytes(gzip.compress(b"caf\xc3\xa9 \x1b[2J\xff\xfe " + bytes(range(160, 256)) * 40 + b"\njunk\n"))
    with pytest.raises(SourceError) as err:
        _read(junk)
    message = str(err.value)
    assert message.startswith(f"{junk}: not a readable WARC/WET file")
    detail = message[len(str(junk)):]
    assert all(" " <= c <= "~" for c in detail), detail  # no terminal escapes, no raw bytes
    assert "caf\\xc3\\xa9" in detail and len(detail) < 300


def test_unpaired_surrogate_is_invalid_text(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text('{"text": "ok"}\n{"text": "bad \\ud800 char"}\n')
    with pytest.raises(SourceError, match=r"s\.jsonl:2: field 'text' has an unpaired surrogate"):
        _read(path)
    recs, prov = _read(path, on_error="skip")
    assert [r.text for r in recs] == ["ok"] and prov.skipped == {"bad_field": 1}


def test_a_parquet_file_with_corrupt_pages_is_refused_naming_it(tmp_path):
    path = tmp_path / "task.parquet"
    texts = [f"document {i} " + "word " * (i % 50) for i in range(20000)]
    pq.write_table(pa.table({"text": texts}), path, row_group_size=5000, compression="snappy")
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle: middle + 4096] = bytes(4096)  # pages of a middle row group zeroed, the footer intact
    path.write_bytes(bytes(data))
    with pytest.raises(SourceError, match=r"task\.parquet: not a readable Parquet file after row [\d,]+ \("):
        _read(path)
