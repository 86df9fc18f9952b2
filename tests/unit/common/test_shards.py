"""Local shard engines: results in input order, a bounded number in flight, failures raised, engine choice."""

from __future__ import annotations

import operator
import time
from pathlib import Path

import pytest

from stages.common import shards


def test_in_process_and_process_pool_give_results_in_input_order(monkeypatch):
    monkeypatch.delenv(shards.ENV, raising=False)
    for workers, engine in ((1, "local"), (2, "processes")):
        got = []
        with shards.open_shards(workers, name="t") as e:
            assert e.engine == engine
            e.map(operator.mul, ((i, 2) for i in range(30)), got.append, desc="mul")
        assert got == [2 * i for i in range(30)]


def test_no_more_than_the_window_is_in_flight():
    class Engine(shards.Shards):
        workers = 3

    submitted, consumed, peak = [], [], [0]

    class Done:
        def __init__(self, v):
            self.v = v

        def result(self):
            return self.v

    def submit(fn, args):
        submitted.append(args[0])
        peak[0] = max(peak[0], len(submitted) - len(consumed))
        return Done(fn(*args))

    Engine()._ordered(submit, operator.neg, ((i,) for i in range(50)), consumed.append, "neg")
    assert consumed == [-i for i in range(50)]
    assert peak[0] == 6                   # the window: 2 x 3 workers


def test_a_failed_shard_raises_its_own_error(monkeypatch):
    monkeypatch.delenv(shards.ENV, raising=False)
    with shards.open_shards(2, name="t") as e, pytest.raises(ValueError, match="invalid literal for int"):
        e.map(int, [("1",), ("x",)], lambda r: None, desc="int")


def _fail_or_write_late(kind: str, path: str) -> None:
    if kind == "fail":
        raise ValueError("shard 0 is bad")
    time.sleep(1.0)
    Path(path).write_text("written after the failure")


def test_a_failure_is_raised_once_the_shards_still_running_have_finished(tmp_path, monkeypatch):
    # A caller removes its files on the error: a shard still running must not write into them afterwards.
    monkeypatch.delenv(shards.ENV, raising=False)
    late = tmp_path / "late.txt"
    with shards.open_shards(2, name="t") as e:
        with pytest.raises(ValueError, match="shard 0 is bad"):
            e.map(_fail_or_write_late, [("fail", ""), ("write", str(late))], lambda _: None, desc="t")
        assert late.read_text() == "written after the failure"


def test_a_bad_or_unreachable_dask_address_is_a_clear_error(monkeypatch):
    import socket

    monkeypatch.setenv(shards.ENV, "local:two")
    with pytest.raises(ValueError, match=r"LMPIPE_DASK='local:two': expected local, local:N or a scheduler"):
        shards.open_shards(1, name="t")
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv(shards.ENV, f"tcp://127.0.0.1:{port}")
    monkeypatch.setenv("LMPIPE_DASK_TIMEOUT", "2s")
    with pytest.raises(ValueError, match=rf"LMPIPE_DASK='tcp://127.0.0.1:{port}': cannot reach the Dask scheduler"):
        shards.open_shards(1, name="t")
