"""The clean stage on a Dask cluster whose workers share no folder with the main process: ``LMPIPE_SCRATCH`` names
an S3 bucket (moto's S3 server, started here), the workers are separate processes with their own local
directories, and no task is sent a path of the main process (its work folder, the input, the task file), only
names under the URL. The output is byte-identical to the local process pool's, every exchanged file went through
the bucket, and the bucket is empty afterwards, also after a failed run."""

from __future__ import annotations

import gzip
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from unittest import mock

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

pytestmark = pytest.mark.integration

distributed = pytest.importorskip("distributed")
pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")

BUCKET = "lmpipe-scratch"


@pytest.fixture(scope="module")
def s3_cluster():
    """An S3 endpoint and a 2-process LocalCluster whose workers reach it through the environment only."""
    import fsspec
    import s3fs

    from stages.common.shards import environ_kept

    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1",
           "FSSPEC_S3_ENDPOINT_URL": f"http://{host}:{port}"}
    workers_dir = tempfile.mkdtemp(prefix="dask-workers-")  # not under any test's folder
    try:
        with mock.patch.dict(os.environ, env), \
                mock.patch.dict(fsspec.config.conf, {"s3": {"endpoint_url": env["FSSPEC_S3_ENDPOINT_URL"]}}), \
                environ_kept(), \
                distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                         local_directory=workers_dir) as cluster, \
                distributed.Client(cluster) as client:
            s3fs.S3FileSystem.clear_instance_cache()
            fs = fsspec.filesystem("s3")
            fs.mkdir(BUCKET)
            yield cluster, client, fs
    finally:
        server.stop()
        shutil.rmtree(workers_dir, ignore_errors=True)


def _inputs(folder: Path) -> Path:
    """Three kinds of input file: plain JSONL (read in byte ranges), gzipped JSONL, Parquet of several row groups."""
    from tests.helpers import english_page

    folder.mkdir()
    rows = [{"id": f"p{i}", "text": english_page(i), "url": f"http://site{i % 9}.example/{i}",
             "meta": json.dumps({"package": f"pkg{i}", "source_package": f"src{i}"})} for i in range(40)]
    rows.append({"id": "same-package", "text": english_page(140), "meta": json.dumps({"package": "foo"})})
    (folder / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:20]))
    with gzip.open(folder / "b.jsonl.gz", "wt") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows[20:30]))
    pq.write_table(pa.Table.from_pylist(rows[30:]), folder / "c.parquet", row_group_size=3)
    return folder


@pytest.mark.timeout(600)
def test_cleaning_through_an_object_store_on_dask_workers_is_byte_identical(tmp_path, s3_cluster, monkeypatch,
                                                                              caplog):
    import cloudpickle

    from stages.clean import main
    from stages.cleaning import readers
    from stages.cleaning.scratch import ENV as SCRATCH
    from stages.common.shards import ENV, DaskShards
    from tests.helpers import seed_badwords
    from tests.unit.cleaning.test_task_guard import TASK, task_file

    cluster, client, fs = s3_cluster
    inp = _inputs(tmp_path / "in")
    task = task_file(tmp_path / "task.parquet", TASK)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"clean": {"defaults": {"workers": 2, "shard_docs": 4},
                                                "web": {"task": {"guard": True, "tapt": True}}}}))
    seed_badwords(tmp_path / "cache")
    monkeypatch.setattr(readers, "SPLIT_BYTES", 6000)  # a.jsonl in several byte ranges

    def clean(out):
        return main(["--input", str(inp), "--output", str(tmp_path / out), "--corpus", "web", "--params",
                     str(params), "--cache-dir", str(tmp_path / "cache"), "--task", str(task),
                     "--report", str(tmp_path / f"{out}.json")])

    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.delenv(SCRATCH, raising=False)
    assert clean("local") == 0

    sent: list[bytes] = []
    submit = DaskShards._submit
    monkeypatch.setattr(DaskShards, "_submit",
                        lambda self, fn, args: sent.append(cloudpickle.dumps(args)) or submit(self, fn, args))
    monkeypatch.setenv(ENV, cluster.scheduler_address)
    monkeypatch.setenv(SCRATCH, f"s3://{BUCKET}/runs")
    caplog.set_level(logging.INFO, logger="werkzeug")  # moto's request log
    with distributed.get_task_stream(client=client) as stream:
        assert clean("remote") == 0

    for name in ("documents.parquet", "stats.json", "rejects.jsonl"):
        assert (tmp_path / "local" / name).read_bytes() == (tmp_path / "remote" / name).read_bytes(), name
    stats = json.loads((tmp_path / "remote" / "stats.json").read_text())
    assert stats["task"]["dropped"] and stats["task"]["tapt_added"] == 1  # the guard and TAPT ran on the workers
    assert len({t["worker"] for t in stream.data}) == 2
    # The workers were told names under the URL, never a path of this machine's test folder.
    assert len(sent) == len(stream.data) and sent
    assert not [blob for blob in sent if str(tmp_path).encode() in blob]
    # Every kind of exchanged file went through the bucket, and the run's prefix is gone.
    puts = " ".join(r.getMessage() for r in caplog.records if '"PUT /' in r.getMessage())
    for kind in ("input/00000/a.jsonl", "task/task.parquet", "in-", "rules-", "pairs-", "line-selection.part",
                 "filtered-", "feat-", "lines-", "part-"):
        assert f"/{BUCKET}/runs/" in puts and kind in puts, kind
    assert fs.ls(BUCKET, refresh=True) == []


@pytest.mark.timeout(300)
def test_a_failed_run_through_an_object_store_leaves_the_bucket_empty_and_the_output_as_it_was(
        tmp_path, s3_cluster, monkeypatch, capsys):
    from stages.clean import main
    from stages.cleaning.scratch import ENV as SCRATCH
    from stages.common.shards import ENV
    from tests.helpers import seed_badwords

    cluster, _, fs = s3_cluster
    inp = _inputs(tmp_path / "in")
    seed_badwords(tmp_path / "cache")
    args = ["--input", str(inp), "--output", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache")]
    monkeypatch.setenv(ENV, cluster.scheduler_address)
    monkeypatch.setenv(SCRATCH, f"s3://{BUCKET}/runs")
    assert main(args) == 0
    before = (tmp_path / "out" / "documents.parquet").read_bytes()
    (inp / "b.jsonl.gz").write_bytes(b"\x1f\x8b not gzip")  # found by a worker, mid-run
    assert main(args) == 1
    err = capsys.readouterr().err
    assert f"{inp / 'b.jsonl.gz'}: cannot read compressed stream" in err, err
    assert (tmp_path / "out" / "documents.parquet").read_bytes() == before
    assert fs.ls(BUCKET, refresh=True) == []
