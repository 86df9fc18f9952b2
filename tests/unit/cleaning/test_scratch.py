"""The clean stage's scratch: files the tasks exchange, in the work folder or through an fsspec URL (here a local
folder reached through fsspec, the same code path as an object store)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from stages.cleaning.dedup import bucket_bounds, write_shard_pairs
from stages.cleaning.scratch import ENV, Scratch
from tests.helpers import build_line_table


def test_a_url_scratch_reads_ranges_uploads_what_a_task_wrote_and_keeps_nothing_after_a_failed_task(tmp_path):
    url = Scratch(str(tmp_path / "store" / "run"), url=True)
    local = Scratch(str(tmp_path / "work"))
    (tmp_path / "work").mkdir()
    rng = np.random.default_rng(0)
    two = np.sort(rng.integers(0, 2**63, size=(2, 50), dtype=np.uint64), axis=1)
    one = np.sort(rng.integers(0, 2**63, size=37, dtype=np.uint64))
    for scratch, folder in ((url, "a/"), (local, "")):  # a URL's folders are made as needed
        with scratch.files() as files:
            np.save(files.write(f"{folder}two.npy"), two)
            np.save(files.write("one.npy"), one)
    assert (tmp_path / "store" / "run" / "a" / "two.npy").read_bytes() == (tmp_path / "work" / "two.npy").read_bytes()
    with url.files() as remote, local.files() as here:
        for start, stop in ((0, 50), (3, 17), (49, 50), (10, 10)):
            assert np.array_equal(remote.rows("a/two.npy", start, stop), two[:, start:stop])
            assert np.array_equal(here.rows("two.npy", start, stop), two[:, start:stop])
        assert np.array_equal(remote.rows("one.npy", 5, 30), one[5:30])
        with remote.open("one.npy") as fh:
            assert fh.read() == (tmp_path / "work" / "one.npy").read_bytes()
    with pytest.raises(RuntimeError), url.files() as files:  # a failed task uploads nothing
        files.write("half.npy").write_bytes(b"x")
        raise RuntimeError("task failed")
    assert not (tmp_path / "store" / "run" / "half.npy").exists()
    with url.files() as files:
        files.delete(["one.npy", "never-written.npy"])
    assert not (tmp_path / "store" / "run" / "one.npy").exists()
    url.clear()
    assert not (tmp_path / "store" / "run").exists()


def test_each_process_joins_the_line_table_from_its_buckets_as_the_placed_table(tmp_path):
    rng = np.random.default_rng(1)
    shards = []
    for i in range(5):
        f = tmp_path / f"pairs-{i}.npy"
        bounds = write_shard_pairs([rng.integers(0, 2**64 - 1, size=(40, 2), dtype=np.uint64)], f, buckets=4)
        assert bounds == bucket_bounds(np.load(f)[0], 4) and bounds[0] == 0 and bounds[-1] == 40
        shards.append(f)
    placed, _ = build_line_table(shards, tmp_path, buckets=4)
    # the same buckets selected again, then joined by a URL scratch's Files.table
    scratch = Scratch(str(tmp_path / "store"), url=True)
    from stages.cleaning.dedup import bucket_entries, select_bucket

    names = []
    for f in shards:
        with scratch.files() as files:
            np.save(files.write(f.name), np.load(f))
            names.append(f.name)
    bounds = [bucket_bounds(np.load(f)[0], 4) for f in shards]
    parts = tuple(f"part{b}.npy" for b in range(4))
    for b in range(4):
        select_bucket(scratch, bucket_entries(names, bounds, b), parts[b])
    with scratch.files() as files:
        joined = files.table(parts)
        assert np.array_equal(np.load(joined), np.load(placed))
        assert files.table(parts) == joined  # made once per process
    scratch.clear()


def _stage(tmp_path, out, *extra):
    from stages.clean import main
    from tests.helpers import seed_badwords
    from tests.unit.test_clean_stage import corpus

    seed_badwords(tmp_path / "cache")
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"clean": {"defaults": {"workers": 1, "shard_docs": 4}, "web": {}}}))
    return main(["--input", str(corpus(tmp_path)),
                 "--output", str(tmp_path / out), "--corpus", "web", "--params", str(params),
                 "--cache-dir", str(tmp_path / "cache"), "--report", str(tmp_path / f"{out}.json"), *extra])


def test_the_stage_through_a_url_scratch_writes_the_same_bytes_and_leaves_the_url_empty(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert _stage(tmp_path, "local") == 0
    store = tmp_path / "store"
    store.mkdir()
    monkeypatch.setenv(ENV, str(store))
    assert _stage(tmp_path, "url") == 0
    for name in ("documents.parquet", "stats.json", "rejects.jsonl"):
        assert (tmp_path / "local" / name).read_bytes() == (tmp_path / "url" / name).read_bytes(), name
    reports = [json.loads((tmp_path / f"{out}.json").read_text()) for out in ("local", "url")]
    assert [r.pop("gate") for r in reports] == ["clean-local", "clean-url"]  # named after the output folder
    assert reports[0] == reports[1]
    assert list(store.iterdir()) == []


def test_an_unwritable_scratch_url_fails_before_any_work_naming_it(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(ENV, str(blocker / "scratch"))
    assert _stage(tmp_path, "out") == 1
    err = capsys.readouterr().err
    assert f"{ENV}={blocker / 'scratch'}: cannot write there" in err, err
    assert not (tmp_path / "out").exists()


def test_an_input_error_seen_by_a_worker_names_the_input_file_not_its_copy(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.jsonl").write_text(json.dumps({"text": "One sentence here. And another one."}) + "\n")
    (folder / "b.jsonl.gz").write_bytes(b"\x1f\x8b not really gzip")
    monkeypatch.setenv(ENV, str(tmp_path / "store"))
    from stages.clean import main
    from tests.helpers import seed_badwords

    seed_badwords(tmp_path / "cache")
    rc = main(["--input", str(folder), "--output", str(tmp_path / "out"), "--workers", "1",
               "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err
    assert rc == 1 and f"{folder / 'b.jsonl.gz'}: cannot read compressed stream" in err, err
    assert "input/00001" not in err
    assert list((tmp_path / "store").iterdir()) == []


def test_a_url_scratch_that_fails_mid_run_is_one_error_line_naming_the_file(tmp_path, monkeypatch, capsys):
    import fsspec.implementations.local as local_fs

    put = local_fs.LocalFileSystem.put_file

    def refuse_parts(self, lpath, rpath, *args, **kwargs):
        if "/part-" in str(rpath):
            raise PermissionError("access denied by the store")
        return put(self, lpath, rpath, *args, **kwargs)

    monkeypatch.setattr(local_fs.LocalFileSystem, "put_file", refuse_parts)
    monkeypatch.setattr(local_fs.LocalFileSystem, "rm", lambda self, *a, **k: (_ for _ in ()).throw(
        PermissionError("no delete either")))
    store = tmp_path / "store"
    store.mkdir()
    monkeypatch.setenv(ENV, str(store))
    assert _stage(tmp_path, "out") == 1
    err = capsys.readouterr().err
    line = next(ln for ln in err.splitlines() if ln.startswith("error:"))
    assert f"{ENV}: cannot upload to {store}/clean-out-" in line and "/part-000000.parquet" in line, line
    assert "PermissionError: access denied by the store" in line and "Traceback" not in err
    assert f"warning: {ENV}: could not remove {store}/clean-out-" in err  # the stage's error is the one reported
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("through", ["work folder", "scratch URL"])
def test_minhash_decides_from_the_ids_the_tasks_return(tmp_path, monkeypatch, through):
    from stages.clean import main
    from tests.helpers import english_page, seed_badwords

    pages = [english_page(i, sentences=12) for i in range(12)]
    near = pages[3].replace(".", " indeed.", 1)  # one word added: a near duplicate of page 3
    rows = [{"text": t, "url": f"http://s{i}.example/"} for i, t in enumerate([*pages, near, pages[5] + "\nMenu"])]
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"clean": {"defaults": {"workers": 1, "shard_docs": 3, "minhash": {"enabled": True},
                                                             "line_dedup": {"enabled": False}}, "near": {}}}))
    seed_badwords(tmp_path / "cache")
    monkeypatch.delenv(ENV, raising=False)
    if through == "scratch URL":
        (tmp_path / "store").mkdir()
        monkeypatch.setenv(ENV, str(tmp_path / "store"))
    assert main(["--input", str(inp), "--output", str(tmp_path / "out"), "--corpus", "near", "--params", str(params),
                 "--cache-dir", str(tmp_path / "cache"), "--report", str(tmp_path / "gate.json")]) == 0
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["filters"]["minhash"]["dropped_by_reason"] == {"near_duplicate": 2}  # page 3's pair, page 5's
    assert stats["documents_out"] == 12 and "exact_dedup" not in stats["filters"]  # MinHash took both first


def test_a_worker_keeps_the_copies_of_its_four_latest_runs():
    from stages.cleaning import scratch

    folders = [scratch._process_dir(f"memory://run-{i}") for i in range(6)]
    try:
        assert [f.exists() for f in folders] == [False, False, True, True, True, True]
        assert scratch._process_dir("memory://run-5") == folders[5]  # the same folder while its run lasts
    finally:
        for i in range(6):
            scratch._forget(f"memory://run-{i}")
    assert not any(f.exists() for f in folders)
