"""Independent, pure jobs on a few spawned processes (forking after torch loads can deadlock), one torch thread
each, results in the order of the jobs. :func:`run_plans` runs several parts' jobs (:class:`Plan`) on one pool, so
a part with one long job does not leave the other workers idle."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
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


def _warm(prepare: Callable[[], None] | None) -> None:
    if prepare is not None:
        prepare()


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

    def start(self, prepare: Callable[[], None] | None = None) -> "WorkerPool":
        """Start the workers now, so they load the libraries, the state and whatever ``prepare`` (module-level)
        imports while this process goes on; a no-op with one worker."""
        if self.workers > 1 and self._pool is None:
            self._open()
            for _ in range(self.workers):  # one task each: a spawned pool starts a worker per task it cannot place
                self._pool.submit(_warm, prepare)
        return self

    def _open(self) -> None:
        import multiprocessing
        import os
        from concurrent.futures import ProcessPoolExecutor

        self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=_init_worker, initargs=(self.fn, self.state, os.getpid()))

    def run(self, jobs: Sequence[Any]) -> list:
        """``[fn(state, job) for job in jobs]``, in the order of the jobs whichever worker finishes first."""
        jobs = list(jobs)
        if self.workers <= 1 or (len(jobs) <= 1 and self._pool is None):
            return [self.fn(self.state, job) for job in jobs]
        if self._pool is None:
            self._open()
        return list(self._pool.map(_call, jobs))  # map yields in the order of the jobs


def run_ordered(fn: Callable[[Any, Any], Any], state: Any, jobs: Sequence[Any], *, workers: int) -> list:
    """``[fn(state, job) for job in jobs]`` on ``workers`` processes (``fn`` module-level, the rest picklable)."""
    jobs = list(jobs)
    with WorkerPool(fn, state, workers=min(workers, len(jobs))) as pool:
        return pool.run(jobs)


@dataclass
class Plan:
    """One part's jobs: ``fn(state, job)`` for each of ``jobs`` (``fn`` module-level, ``state`` and jobs picklable),
    and ``finish``, which makes the part's result from the jobs' results in job order (it runs in this process)."""

    fn: Callable[[Any, Any], Any]
    state: Any
    jobs: list
    finish: Callable[[list], Any] = field(default=list)

    def then(self, after: Callable[[Any], Any]) -> "Plan":
        """The same jobs, finished by ``after`` over this plan's finished result."""
        return dataclasses.replace(self, finish=lambda results: after(self.finish(results)))


def run_plan(plan: Plan, *, workers: int) -> Any:
    """One plan on its own pool of ``workers`` processes: ``plan.finish`` over its results."""
    return plan.finish(run_ordered(plan.fn, plan.state, plan.jobs, workers=workers))


def _plan_call(states: dict[str, tuple[Callable, Any]], job: tuple[str, Any]) -> tuple[Any, float]:
    name, inner = job
    fn, state = states[name]
    start = time.perf_counter()
    return fn(state, inner), time.perf_counter() - start


def run_plans(plans: dict[str, Plan], *, workers: int) -> tuple[dict[str, Any], dict[str, float]]:
    """Every plan's jobs on one pool of ``workers`` processes (each worker gets every plan's state once), queued plan
    after plan in the order given: a free worker takes the next job, so list the parts with the longest jobs first.
    Returns name -> ``finish`` over the plan's results (the same as :func:`run_plan` alone, whatever ``workers``)
    and name -> the seconds its jobs took, summed."""
    flat = [(name, job) for name, plan in plans.items() for job in plan.jobs]
    results = run_ordered(_plan_call, {name: (plan.fn, plan.state) for name, plan in plans.items()}, flat,
                          workers=workers)
    out, seconds = {}, {}
    for name, plan in plans.items():
        mine = [r for (part, _), r in zip(flat, results) if part == name]
        out[name] = plan.finish([r for r, _ in mine])
        seconds[name] = sum(s for _, s in mine)
    return out, seconds
