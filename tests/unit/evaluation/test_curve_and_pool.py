"""The data-efficiency curve's process pool (results in job order, the same for one worker or two; workers
leave with their parent)."""

from __future__ import annotations

import pytest

from stages.common.pool import Plan, run_ordered, run_plan, run_plans

LABELS = ["river", "market", "castle"]


def cheap(state, job):
    return {"job": job, "value": state["base"] + job * job}


@pytest.mark.parametrize("jobs", [[3, 1, 2, 0, 5], [7]])
def test_run_ordered_is_the_same_for_one_or_two_workers(jobs):
    one = run_ordered(cheap, {"base": 10}, jobs, workers=1)
    two = run_ordered(cheap, {"base": 10}, jobs, workers=2)
    assert one == two == [{"job": j, "value": 10 + j * j} for j in jobs]


def negate(state, job):
    return -job * state["scale"]


def test_plans_on_one_pool_give_each_part_what_it_gives_alone():
    plans = {"squares": Plan(cheap, {"base": 1}, [4, 0, 2], finish=lambda rs: [r["value"] for r in rs]),
             "empty": Plan(cheap, {"base": 0}, [], finish=lambda rs: ("empty", rs)),
             "negated": Plan(negate, {"scale": 3}, [1, 5], finish=sum)}
    alone = {name: run_plan(plan, workers=1) for name, plan in plans.items()}
    assert alone == {"squares": [17, 1, 5], "empty": ("empty", []), "negated": -18}
    assert run_plan(plans["negated"].then(abs), workers=1) == 18  # a finish over the finished result
    for workers in (1, 2):
        done, seconds = run_plans(plans, workers=workers)
        assert done == alone
        assert set(seconds) == set(plans) and seconds["empty"] == 0 and all(s >= 0 for s in seconds.values())


def test_curve_runs_agree_for_one_and_two_workers(models):
    from stages.evaluation.config import CurveConfig, EvaluateConfig
    from stages.evaluation.curve import data_efficiency
    from stages.finetuning.core import read_task
    from tests.unit.finetuning.conftest import FINETUNE

    df = read_task(models.task)
    config = {**FINETUNE["defaults"], "epochs": 1, "eval_every": 2, "threads": 0}
    seeds = [{"seed": s, "test_macro_f1": f, "test_accuracy": f, "best_val_macro_f1": f} for s, f in ((0, 0.5), (1, 0.7))]
    runs = {"bert-random": {"config": config, "labels": LABELS,
                            "metrics": {"train_examples": 72, "test_macro_f1": 0.6, "test_accuracy": 0.6, "seeds": seeds}}}
    dirs = {"pretrain-bert": models.models["bert"]}
    out = {}
    for workers in (1, 2):
        cfg = EvaluateConfig(curve=CurveConfig(paradigms=("bert",), inits=("random",), sizes=(8, 100), seeds=(0, 1),
                                               min_steps=3, workers=workers))
        out[workers] = data_efficiency(cfg, runs, df, dirs, log=lambda m: None)
    assert out[1] == out[2]
    pts = out[1]["bert-random"]
    assert [p["train_examples"] for p in pts] == [8, 72] and [p["macro_f1"]["runs"] for p in pts] == [2, 2]
    assert pts[1]["macro_f1"]["mean"] == pytest.approx(0.6)                # the finetune stage's seeds
    assert pts[1]["macro_f1"]["std"] == pytest.approx(0.14142, abs=1e-4)


def sleepy(state: dict, job: int) -> int:
    """A long job that first leaves its worker's pid in a file (for the orphan test)."""
    import os
    import time
    from pathlib import Path

    Path(state["dir"], f"{os.getpid()}.pid").write_text(str(os.getpid()))
    time.sleep(job)
    return job


def test_pool_workers_leave_when_the_parent_is_killed(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    parent = subprocess.Popen([sys.executable, "-c", (
        "from stages.common.pool import run_ordered\n"
        "from tests.unit.evaluation.test_curve_and_pool import sleepy\n"
        f"run_ordered(sleepy, {{'dir': {str(tmp_path)!r}}}, [120, 120], workers=2)\n")],
        cwd=root, env={**os.environ, "PYTHONPATH": str(root)})

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
            with open(f"/proc/{pid}/stat") as stat:
                return stat.read().split(")")[-1].split()[0] != "Z"  # a zombie has left
        except (ProcessLookupError, FileNotFoundError):
            return False

    workers: list[int] = []
    try:
        deadline = time.time() + 120
        while len(list(tmp_path.glob("*.pid"))) < 2 and time.time() < deadline and parent.poll() is None:
            time.sleep(0.2)
        workers = [int(p.stem) for p in tmp_path.glob("*.pid")]
        assert parent.poll() is None and len(workers) == 2, "the pool did not start two workers"
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.time() + 15
        while any(alive(p) for p in workers) and time.time() < deadline:
            time.sleep(0.2)
        assert not any(alive(p) for p in workers), "orphaned workers are still running"
    finally:
        parent.kill()
        for pid in workers:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
