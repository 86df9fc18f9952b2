"""Cleaning and tokenization shards on a Dask ``LocalCluster`` with 2 worker processes, through a plain Dask
client: the outputs are byte-identical to the local run, the shards ran on both workers as one task each, a
failed shard fails the stage with its own error, and no Prefect is involved."""

from __future__ import annotations

import json
import operator
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def cluster():
    from stages.common.shards import environ_kept

    # environ_kept: the nanny's OMP_NUM_THREADS=1 would otherwise stay in this process's environment, and the
    # stages later tests start would train on one thread (other weights than the tiny project's first run)
    with environ_kept(), distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                                  dashboard_address=None) as c, distributed.Client(c) as client:
        yield c, client


def workers_used(client, run):
    """Run ``run()`` and return (the Dask workers that executed tasks meanwhile, the number of tasks)."""
    with distributed.get_task_stream(client=client) as stream:
        run()
    return {t["worker"] for t in stream.data}, len(stream.data)


@pytest.mark.timeout(600)
def test_cleaning_on_two_dask_workers_is_byte_identical(tmp_path, cluster, monkeypatch):
    from stages.clean import main
    from stages.common.shards import ENV
    from tests.helpers import english_page, seed_badwords
    from tests.unit.test_clean_stage import corpus

    inp = corpus(tmp_path)
    with inp.open("a") as f:  # more pages, so there are several shards
        for i in range(100, 130):
            f.write(json.dumps({"text": english_page(i), "url": f"http://more{i % 7}.example/"}) + "\n")
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"clean": {"defaults": {"workers": 1, "shard_docs": 4}, "web": {}}}))
    seed_badwords(tmp_path / "cache")

    def clean(out):
        return main(["--input", str(inp), "--output", str(tmp_path / out), "--corpus", "web", "--params",
                     str(params), "--cache-dir", str(tmp_path / "cache"), "--report", str(tmp_path / f"{out}.json")])

    monkeypatch.delenv(ENV, raising=False)
    assert clean("local") == 0
    monkeypatch.setenv(ENV, cluster[0].scheduler_address)
    codes = []
    workers, tasks = workers_used(cluster[1], lambda: codes.append(clean("dask")))
    assert codes == [0]
    assert len(workers) == 2, workers
    for name in ("documents.parquet", "stats.json", "rejects.jsonl"):
        assert (tmp_path / "local" / name).read_bytes() == (tmp_path / "dask" / name).read_bytes(), name
    stats = json.loads((tmp_path / "dask" / "stats.json").read_text())
    assert stats["documents_out"] >= 15
    shards = -(-stats["documents_in"] // 4) - 1      # 2 lines of the input are not JSON objects
    assert tasks >= 2 * (shards - 1), (tasks, shards)  # two per-shard phases


@pytest.mark.timeout(600)
@pytest.mark.parametrize("paradigm", ["bert", "gpt", "t5"])
def test_tokenization_on_two_dask_workers_is_byte_identical(tmp_path, cluster, monkeypatch, paradigm):
    from stages.common.shards import ENV
    from tests.helpers import english_page
    from tests.unit.tokenization.conftest import PARAMS, write_docs
    from tests.unit.tokenization.test_tokens_stage import run, tokenizer

    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(PARAMS))                  # batch_docs 7: about 13 batches
    texts = [english_page(i, sentences=8) for i in range(60)]
    texts[3] += " A literal [MASK] and <|endoftext|> and <extra_id_0> and </s> stay text."
    corpora = {"general": write_docs(tmp_path / "general.parquet", texts),
               "domain": write_docs(tmp_path / "domain.parquet", texts[::-1][:30])}
    tok = tokenizer(tmp_path, params, corpora, paradigm)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.delenv(ENV, raising=False)
    code, local = run(tmp_path / "a", params, corpora, paradigm, tok)
    assert code == 0
    monkeypatch.setenv(ENV, cluster[0].scheduler_address)
    result = []
    workers, tasks = workers_used(cluster[1],
                                  lambda: result.append(run(tmp_path / "b", params, corpora, paradigm, tok)))
    code, dist = result[0]
    assert code == 0 and len(workers) == 2, workers
    files = sorted(p.relative_to(local) for p in local.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(dist) for p in dist.rglob("*") if p.is_file())
    assert any(str(f).endswith("train.npy") for f in files)
    for f in files:
        assert (local / f).read_bytes() == (dist / f).read_bytes(), f
    assert (tmp_path / "a" / f"m-{paradigm}.json").read_bytes() == (tmp_path / "b" / f"m-{paradigm}.json").read_bytes()
    assert tasks >= 9                                            # general: 60 documents in batches of 7


@pytest.mark.timeout(300)
def test_shards_come_back_in_input_order_and_a_failed_shard_raises_its_error(cluster):
    from stages.common.shards import DaskShards

    got = []
    with DaskShards(cluster[0].scheduler_address, name="test") as engine:
        assert engine.workers == 2 and engine.window == 4
        workers, tasks = workers_used(cluster[1], lambda: engine.map(operator.mul, ((i, 3) for i in range(25)),
                                                                     got.append, desc="mul"))
        assert got == [3 * i for i in range(25)] and tasks == 25
        engine.map(operator.add, [(1, 1)] * 3, got.append, desc="equal arguments")  # one task per call
        assert got[25:] == [2, 2, 2]
        with pytest.raises(ValueError, match="invalid literal for int"):
            engine.map(int, [("1",), ("x",), ("3",)], got.append, desc="int")


@pytest.mark.timeout(300)
def test_a_stage_maps_shards_on_dask_without_prefect(cluster, tmp_path):
    """No Prefect API, no Prefect import: orchestration stays in flows/."""
    code = textwrap.dedent(f"""
        import operator, sys
        from stages.common.shards import DaskShards
        got = []
        with DaskShards({cluster[0].scheduler_address!r}, name="no-prefect") as engine:
            engine.map(operator.mul, [(i, 2) for i in range(6)], got.append, desc="mul")
        assert got == [0, 2, 4, 6, 8, 10], got
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("prefect", "prefect_dask")))
    """)
    root = Path(__file__).resolve().parents[2]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(root)}  # no PREFECT_API_URL
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=root,
                         timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.timeout(300)
def test_a_local_cluster_started_by_a_stage_leaves_its_environment_as_it_was(monkeypatch):
    """LMPIPE_DASK=local starts a LocalCluster in the stage's process; Dask's nanny sets OMP_NUM_THREADS=1 there
    for its workers. The stage's environment must come back as it was (its later work, and what it starts,
    would run on one thread)."""
    import os

    from stages.common.shards import ENV, open_shards

    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MALLOC_TRIM_THRESHOLD_"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(ENV, "local:1")
    before = dict(os.environ)
    with open_shards(1, name="env") as engine:
        assert engine.engine == "dask"
        results = []
        engine.map(operator.neg, [(1,), (2,)], results.append, desc="neg")
        assert dict(os.environ) == before
    assert results == [-1, -2] and dict(os.environ) == before
