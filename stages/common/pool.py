"""Independent, pure jobs on a few spawned processes (forking after torch loads can deadlock), one torch thread
each, results in the order of the jobs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

_STATE: dict[str, Any] = {}


def _exit_with_parent(parent: int, every_s: float = 1.0) -> None:
    """Leave when the process that made the pool is gone, rather than train on orphaned."""
    import os
    import time

    while True:
        time.sleep(every_s)
        if os.getppid() != parent:
            os._exit(1)


def _init_worker(fn: Callable, state: Any, parent: int) -> None:
    import threading

    import torch

    torch.set_num_threads(1)
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True, name="exit-with-parent").start()
    _STATE.update(fn=fn, state=state)


def _call(job: Any) -> Any:
    return _STATE["fn"](_STATE["state"], job)


class WorkerPool:
    """``workers`` spawned processes that get ``state`` once and run batches of jobs (<= 1: in this process)."""

    def __init__(self, fn: Callable[[Any, Any], Any], state: Any, *, workers: int) -> None:
        self.fn, self.state, self.workers, self._pool = fn, state, workers, None

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def run(self, jobs: Sequence[Any]) -> list:
        """``[fn(state, job) for job in jobs]``, in the order of the jobs whichever worker finishes first."""
        jobs = list(jobs)
        if self.workers <= 1 or (len(jobs) <= 1 and self._pool is None):
            return [self.fn(self.state, job) for job in jobs]
        if self._pool is None:
            import multiprocessing
            import os
            from concurrent.futures import ProcessPoolExecutor

            self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_init_worker, initargs=(self.fn, self.state, os.getpid()))
        return list(self._pool.map(_call, jobs))  # map yields in the order of the jobs


def run_ordered(fn: Callable[[Any, Any], Any], state: Any, jobs: Sequence[Any], *, workers: int) -> list:
    """``[fn(state, job) for job in jobs]`` on ``workers`` processes (``fn`` module-level, the rest picklable)."""
    jobs = list(jobs)
    with WorkerPool(fn, state, workers=min(workers, len(jobs))) as pool:
        return pool.run(jobs)
