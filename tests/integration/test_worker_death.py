"""A clean-stage worker killed (SIGKILL) in the middle of a shard. With the local process pool the stage fails
with one error line and publishes nothing (the previous output stays), and the next run's output is the
uninterrupted run's, byte for byte. On Dask the scheduler runs the lost task again on another worker (every task
leaves its inputs for a later task to delete), so the same run finishes with the same bytes, also when the shards
go through a scratch URL."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers import english_page, seed_badwords

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

PY = sys.executable
ROOT = Path(__file__).resolve().parents[2]


def _corpus(tmp_path: Path, pages: int = 1500) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"text": english_page(i), "url": f"http://site{i % 97}.example/{i}"}) + "\n"
                            for i in range(pages)))
    return path


def _params(tmp_path: Path, workers: int) -> Path:
    path = tmp_path / f"params-{workers}.yaml"
    path.write_text(yaml.safe_dump({"clean": {"defaults": {"workers": workers, "shard_docs": 25}, "web": {}}}))
    return path


def _files(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def _in_filters(tmp_path: Path) -> bool:
    return any(tmp_path.rglob("filtered-*.parquet"))


def _command(tmp_path: Path, inp: Path, out: Path, params: Path) -> list[str]:
    return [PY, "-m", "stages.clean", "--input", str(inp), "--output", str(out), "--corpus", "web", "--params",
            str(params), "--cache-dir", str(tmp_path / "cache"), "--report", str(tmp_path / "gate.json")]


def test_a_killed_pool_worker_fails_the_stage_cleanly_and_the_next_run_matches(tmp_path):
    import psutil

    seed_badwords(tmp_path / "cache")
    inp, out, params = _corpus(tmp_path), tmp_path / "out", _params(tmp_path, 2)
    env = {**os.environ, "GX_ANALYTICS_ENABLED": "false", "LMPIPE_DEBUG": "", "PYTHONPATH": str(ROOT)}
    env.pop("LMPIPE_DASK", None)
    first = subprocess.run(_command(tmp_path, inp, out, params), cwd=ROOT, env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr[-3000:]
    before = _files(out)

    proc = subprocess.Popen(_command(tmp_path, inp, out, params), cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not _in_filters(tmp_path) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proc.poll() is None, "the stage finished before a worker could be killed"
    workers = [c for c in psutil.Process(proc.pid).children(recursive=True)
               if "spawn_main" in " ".join(c.cmdline()) and "resource_tracker" not in " ".join(c.cmdline())]
    assert len(workers) == 2, [c.cmdline() for c in workers]
    os.kill(workers[0].pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=300)

    assert proc.returncode == 1, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    line = next(ln for ln in err.splitlines() if ln.startswith("error:"))
    assert "a worker process died" in line and "nothing was published" in line, line
    assert _files(out) == before  # the previous output, whole
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no scratch left

    again = subprocess.run(_command(tmp_path, inp, out, params), cwd=ROOT, env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-3000:]
    assert _files(out) == before


@pytest.mark.parametrize("through", ["work folder", "scratch URL"])
def test_a_killed_dask_worker_is_replaced_and_the_run_gives_the_same_bytes(tmp_path, monkeypatch, through):
    distributed = pytest.importorskip("distributed")
    from stages.clean import main
    from stages.cleaning.scratch import ENV as SCRATCH
    from stages.common.shards import ENV, environ_kept

    seed_badwords(tmp_path / "cache")
    inp = _corpus(tmp_path)
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.delenv(SCRATCH, raising=False)
    assert main(_command(tmp_path, inp, tmp_path / "local", _params(tmp_path, 1))[3:]) == 0
    shared = tmp_path / "shared"  # through fsspec, as an object store would be
    if through == "scratch URL":
        shared.mkdir()
        monkeypatch.setenv(SCRATCH, f"file://{shared}")

    with environ_kept(), distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        monkeypatch.setenv(ENV, cluster.scheduler_address)
        pids = client.run(os.getpid)
        codes: list[int] = []
        run = threading.Thread(target=lambda: codes.append(
            main(_command(tmp_path, inp, tmp_path / "dask", _params(tmp_path, 1))[3:])))
        run.start()
        deadline = time.monotonic() + 300
        while not _in_filters(tmp_path) and run.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert run.is_alive(), "the stage finished before a worker could be killed"
        os.kill(next(iter(pids.values())), signal.SIGKILL)
        run.join(timeout=600)
    assert codes == [0]
    assert _files(tmp_path / "dask") == _files(tmp_path / "local")
    if through == "scratch URL":
        assert list(shared.iterdir()) == []
