"""Where shard functions run (this process, local processes or a Dask cluster; the output is the same): a
:class:`Shards` ``map`` passes each result to ``consume`` in input order. Dask is chosen by the environment, not
params (DVC must not rerun a stage for it)::

    LMPIPE_DASK=tcp://scheduler:8786   # an existing Dask cluster
    LMPIPE_DASK=local                  # a LocalCluster with one single-threaded worker process per core
    LMPIPE_DASK=local:2                # ... with 2 workers
    LMPIPE_DASK_TIMEOUT=60s            # how long to wait for the scheduler (default 60s)
"""

from __future__ import annotations

import os
import sys
from collections import deque
from collections.abc import Callable, Iterable
from contextlib import ExitStack, suppress
from functools import partial
from types import SimpleNamespace
from typing import Any
from unittest import mock

from tqdm import tqdm

ENV = "LMPIPE_DASK"


class Shards:
    """In-process: ``map`` calls the function itself, one shard after another."""

    engine = "local"
    workers = 1

    def __enter__(self) -> Shards:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        pass

    @property
    def window(self) -> int:
        return 2 * self.workers

    def _submit(self, fn: Callable, args: tuple) -> Any:
        return SimpleNamespace(result=partial(fn, *args))  # runs when its result is taken: one shard at a time

    def map(self, fn: Callable, arg_lists: Iterable[tuple], consume: Callable[[Any], None], *, desc: str) -> None:
        self._ordered(self._submit, fn, arg_lists, consume, desc)

    def _ordered(self, submit: Callable[[Callable, tuple], Any], fn: Callable, arg_lists: Iterable[tuple],
                 consume: Callable[[Any], None], desc: str) -> None:
        """Submit with at most ``window`` in flight; consume in order. A failed shard raises here, once the shards
        still running have finished (they may write files the caller removes on the error)."""
        pending: deque = deque()
        n = len(arg_lists) if hasattr(arg_lists, "__len__") else None
        with tqdm(total=n, desc=desc, unit="shard", file=sys.stderr, disable=None, mininterval=1.0) as bar:
            try:
                for args in arg_lists:
                    if len(pending) >= self.window:
                        consume(pending.popleft().result())
                        bar.update()
                    pending.append(submit(fn, args))
                while pending:
                    consume(pending.popleft().result())
                    bar.update()
            except Exception:
                for future in pending:
                    if self.engine != "local":  # in this process a shard only runs when its result is taken
                        with suppress(Exception):
                            future.result()
                raise


class ProcessShards(Shards):
    """Local worker processes (spawned, so nothing is inherited by accident)."""

    engine = "processes"

    def __init__(self, workers: int) -> None:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        self.workers = workers
        self._pool = ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"))

    def close(self) -> None:
        self._pool.shutdown(cancel_futures=True)

    def _submit(self, fn, args):
        return self._pool.submit(fn, *args)


def environ_kept():
    """This process's environment restored after the block (Dask's nanny leaves ``OMP_NUM_THREADS=1`` in it)."""
    return mock.patch.dict(os.environ)


class DaskShards(Shards):
    """A Dask cluster: an existing one (``tcp://...``) or a LocalCluster started here."""

    engine = "dask"

    def __init__(self, spec: str, name: str) -> None:
        from distributed import Client

        self.name = name
        with ExitStack() as stack:  # closed on an error, else kept for close()
            if spec == "local" or spec.startswith("local:"):
                from distributed import LocalCluster

                count = spec.partition(":")[2] or "0"
                if not count.isdigit():
                    raise ValueError(f"{ENV}={spec!r}: expected local, local:N or a scheduler address "
                                     "(tcp://host:8786)")
                with environ_kept():
                    cluster = stack.enter_context(LocalCluster(n_workers=int(count) or os.cpu_count() or 1,
                                                               threads_per_worker=1, processes=True,
                                                               dashboard_address=None))
                self.address = cluster.scheduler_address
            else:
                self.address = spec
            try:  # the scheduler's worker count sizes the window
                self._client = stack.enter_context(Client(
                    self.address, timeout=os.environ.get("LMPIPE_DASK_TIMEOUT", "60s"), set_as_default=False))
                self.workers = len(self._client.scheduler_info(n_workers=-1).get("workers", {}))
            except (OSError, TimeoutError, ValueError) as exc:
                raise ValueError(f"{ENV}={spec!r}: cannot reach the Dask scheduler ({type(exc).__name__}: {exc})"
                                 ) from exc
            if not self.workers:
                raise ValueError(f"{ENV}={spec!r}: the Dask scheduler has no workers")
            self._stack = stack.pop_all()

    def close(self) -> None:
        self._stack.close()

    def _submit(self, fn, args):
        return self._client.submit(fn, *args, pure=False)  # a task per shard, even for equal arguments


def open_shards(workers: int, *, name: str) -> Shards:
    """Dask when ``LMPIPE_DASK`` is set, else ``workers`` local processes (0 = one per core; 1 = this process)."""
    spec = os.environ.get(ENV, "").strip()
    if spec:
        return DaskShards(spec, name)
    n = workers or os.cpu_count() or 1
    return ProcessShards(n) if n > 1 else Shards()
