"""The pipeline as a Prefect flow (``python -m flows.pipeline --help``): one task per DVC stage, in the order of the
graph ``dvc.yaml`` defines (with ``experiments/compare/dvc.yaml``'s comparison stages when params.yaml names some:
``--profile compare``).

Each task runs ``dvc repro --single-item <stage>`` (DVC's cache skips what is unchanged; the flow holds no stage
logic). A failed stage fails its task with its own error line and nothing downstream runs; each stage's reports
are published as artifacts (``flows.artifacts``). Scale-out goes through the environment, which DVC does not
track: ``LMPIPE_DASK`` (``stages.common.shards``), ``LMPIPE_SCRATCH`` (``stages.cleaning.scratch``) and
``LMPIPE_TRAIN_*`` (``stages.training.launch``).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import NamedTuple

from prefect import flow, get_run_logger, task
from prefect.futures import wait
from prefect.task_runners import ThreadPoolTaskRunner

from flows.artifacts import publish_run, publish_stage
from flows.graph import closure, read_pipeline
from flows.ui import stop
from stages.cleaning.scratch import ENV as SCRATCH
from stages.common.shards import ENV as DASK
from stages.config import load_params
from stages.profile_run import RESULTS, label, profile_workspace, restore_after_kill
from stages.training import launch

NETWORK_STAGES = {"ingest", "clean"}  # they fetch packages on a cold cache; a retry rides out a flaky mirror
TRAINING_STAGES = {"pretrain", "dapt"}  # data-parallel under a launcher (stages.training.launch)
RETRIES, RETRY_DELAY_S = 2, 10


class StageFailed(RuntimeError):
    """A stage exited non-zero; the message is its own error line."""


def stage_env(stage: str, *, dask: str | None = None, train_processes: int = 1, launcher: str = "torchrun",
              launch_args: str = "", scratch: str | None = None) -> dict[str, str]:
    """The variables a stage gets on top of the flow's environment: where its shards and processes run, and
    where cleaning's shards exchange their files."""
    env: dict[str, str] = {}
    if dask:
        env[DASK] = dask
    if scratch and stage.split("@", 1)[0] == "clean":
        env[SCRATCH] = scratch
    if stage.split("@", 1)[0] in TRAINING_STAGES and (train_processes > 1 or launch_args):
        launch.launch_command("stages.pretrain", [], train_processes, launcher)  # a bad value fails here, early
        env.update({launch.PROCESSES: str(train_processes), launch.LAUNCHER: launcher, launch.LAUNCH_ARGS: launch_args})
    return env


# DVC's git/push advice after each stage, dropped from the task logs.
DVC_HINTS = ("To track the changes with git, run:", "git add ", "To enable auto staging, run:",
             "dvc config core.autostage true", "Use `dvc push` to send your updates to remote storage.")

# Hours a stage may run before it is stopped (``stage_timeout_hours`` overrides): ends a hung stage, not a slow one.
STAGE_TIMEOUT_H = {"ingest": 2, "clean": 24, "tokenizer": 6, "tokens": 12, "pretrain": 168, "dapt": 168,
                   "finetune": 48, "adapt": 48, "evaluate": 48, "package": 2}


def task_options(stage: str) -> dict:
    """Prefect options of a stage's task: retries only for the stages that download (``NETWORK_STAGES``)."""
    retried = stage.split("@", 1)[0] in NETWORK_STAGES
    return {"retries": RETRIES, "retry_delay_seconds": RETRY_DELAY_S} if retried else {}


def stage_timeout_s(stage: str, hours: float | None = None) -> float:
    """Seconds ``stage`` may run: ``hours`` when given, else its kind's entry in ``STAGE_TIMEOUT_H``."""
    if hours is not None and hours <= 0:
        raise ValueError(f"stage_timeout_hours: must be > 0, got {hours}")
    return 3600.0 * (hours if hours is not None else STAGE_TIMEOUT_H.get(stage.split("@", 1)[0], 24))


class StageRun(NamedTuple):
    """The outcome of one ``dvc repro --single-item``: exit code, the last lines, whether it timed out."""

    returncode: int
    lines: list[str]
    timed_out: bool = False


def split_output(buffer: str) -> tuple[list[tuple[str, bool]], str]:
    """Complete segments of ``buffer`` as ``(text, is_progress)`` and the incomplete rest. A segment ended by a
    carriage return is a progress update that the next one overwrites (tqdm); one ended by a newline is a line."""
    parts = re.split(r"([\r\n])", buffer)  # text, end, text, end, ..., the rest
    return [(text, end == "\r") for text, end in zip(parts[::2], parts[1::2])], parts[-1]


def run_dvc(stage: str, root: Path, extra_env: dict[str, str] | None = None, *, on_line=None, force: bool = False,
            timeout_s: float | None = None, progress_every_s: float = 30.0, keep: int = 400) -> StageRun:
    """``dvc repro --single-item STAGE`` in ``root`` with ``extra_env``; output goes to ``on_line`` as it comes
    (progress bars at most every ``progress_every_s``). Past ``timeout_s`` the process group is stopped.
    Returns the exit code and the last ``keep`` lines."""
    import codecs
    import collections
    import queue
    import threading
    import time

    env = {**os.environ, **(extra_env or {}), "PYTHONUNBUFFERED": "1",  # this environment's dvc first
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.Popen(["dvc", "repro", "--single-item", *(["--force"] if force else []), stage], cwd=root,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    chunks: queue.Queue = queue.Queue()

    def read() -> None:
        while chunk := os.read(proc.stdout.fileno(), 65536):
            chunks.put(chunk)
        chunks.put(None)

    threading.Thread(target=read, daemon=True).start()
    tail: collections.deque = collections.deque(maxlen=keep)
    emit = on_line or (lambda line: None)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    rest, last_progress = "", 0.0
    deadline = time.monotonic() + timeout_s if timeout_s else None
    timed_out = False
    while True:
        try:
            chunk = chunks.get(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            timed_out = True
            stop(proc, group=True)
            break
        text = decoder.decode(chunk or b"", final=chunk is None) + ("\n" if chunk is None else "")
        segments, rest = split_output(rest + text)
        for segment, is_progress in segments:
            line = segment.rstrip()
            if is_progress and line.strip() and time.monotonic() - last_progress >= progress_every_s:
                emit(line)  # a bar's last state ends with a newline: it comes as a line
                last_progress = time.monotonic()
            elif not is_progress and line.strip() and not line.strip().startswith(DVC_HINTS):
                tail.append(line)
                emit(line)
        if chunk is None:
            break
    return StageRun(proc.wait(), list(tail), timed_out)


def error_line(lines: list[str]) -> str:
    """The stage's own ``error: ...`` line (a failed gate names its checks there), else the last lines."""
    errors = [line for line in lines if line.startswith("error:")]
    return errors[-1] if errors else " | ".join(line for line in lines[-5:] if line.strip()) or "no output"


@task(task_run_name="{stage}")
def run_stage(stage: str, root: str, outs: list[str], env: dict[str, str] | None = None,
              timeout_hours: float | None = None, force: bool = False, address: str | None = None) -> dict:
    """One stage through DVC, its output streamed to the task's log; its artifacts published when it succeeds.
    ``address``: the stage as ``dvc repro`` names it when it is not in the root's dvc.yaml
    (``experiments/compare/dvc.yaml:compare-report@objectives``)."""
    logger = get_run_logger()
    for key in sorted(k for k in (env or {}) if k.startswith("LMPIPE_")):
        logger.info(f"{key}={env[key]}")
    limit = stage_timeout_s(stage, timeout_hours)
    proc = run_dvc(address or stage, Path(root), env, on_line=logger.info, timeout_s=limit, force=force)
    if proc.timed_out or proc.returncode != 0:
        line = (f"timed out after {limit / 3600:g} h (stopped; stage_timeout_hours raises the limit)"
                if proc.timed_out else error_line(proc.lines))
        logger.error(f"{stage}: {line}" if proc.timed_out else line)
        raise StageFailed(f"{stage}: {line}")
    skipped = any("didn't change, skipping" in line or "is cached" in line for line in proc.lines)
    return {"stage": stage, "skipped": skipped, "artifacts": publish_stage(stage, outs, Path(root))}


LOCK = ".dvc/tmp/lm-pipeline-flow.lock"


@contextmanager
def workspace_lock(root: Path):
    """Hold ``root/LOCK`` (an exclusive ``flock``, gone with its process) for a flow run: two runs on one
    workspace would rewrite each other's params, outputs and dvc.lock."""
    import fcntl
    import json
    import socket

    path = root / LOCK
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "unknown"
            raise StageFailed(f"another pipeline run is using {root} (lock {path}, held by {holder}); "
                              "wait for it to finish") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode(), 0)
        yield path
    finally:
        os.close(fd)  # releases the lock


# One stage at a time: each stage uses all cores, and concurrent `dvc repro`s would race on dvc.lock.
@flow(name="lm-pipeline", log_prints=True, task_runner=ThreadPoolTaskRunner(max_workers=1))
def pipeline(target: str | None = None, profile: str | None = None, root: str = ".", dask: str | None = None,
             train_processes: int = 1, launcher: str = "torchrun", launch_args: str = "",
             stage_timeout_hours: float | None = None, force: list[str] | None = None,
             scratch: str | None = None) -> dict:
    """Run ``target`` (a stage, a ``foreach`` group, or everything when empty) and what it needs, one task
    per stage; ``profile`` applies ``profiles/<profile>.yaml`` for the run. The other arguments are those of
    `main`'s options. A second run on the same workspace fails at once (`workspace_lock`)."""
    base = Path(root).resolve()
    logger = get_run_logger()
    stage_timeout_s("any", stage_timeout_hours)  # a bad value fails before anything runs
    if (base / "params.yaml").is_file():
        load_params(base / "params.yaml")  # and a params file DVC would choke on (an alias bomb, a NaN)
    with workspace_lock(base):
        if restored := restore_after_kill(base):
            logger.warning(restored)
        with (profile_workspace(base, profile, log=logger.info) if profile else nullcontext()) as applied:
            if profile:
                logger.info(f"profile {profile}: {len(applied)} params set in params.yaml for this run "
                            f"(its results go to {RESULTS}/{label(profile)}/, the workspace is put back afterwards)")
            graph, outs, targets = read_pipeline(base)
            order = closure(graph, [target] if target else None)
            force = list(force or [])
            if force:
                closure(graph, force)  # an unknown name fails here, before any stage runs
            forced = {s for s in graph if s in force or s.split("@", 1)[0] in force}  # not their dependencies
            futures = {}
            for stage in order:
                env = stage_env(stage, dask=dask, train_processes=train_processes, launcher=launcher,
                                launch_args=launch_args, scratch=scratch)
                futures[stage] = run_stage.with_options(**task_options(stage)).submit(
                    stage, str(base), outs.get(stage, []), env, stage_timeout_hours, stage in forced, targets[stage],
                    wait_for=[futures[d] for d in graph[stage] if d in futures])
            wait(list(futures.values()))
            states = {stage: f.state for stage, f in futures.items()}
            failed = [s for s, st in states.items() if st.is_failed()]
            not_run = [s for s, st in states.items() if not st.is_completed() and s not in failed]
            publish_run(base)
            if failed:
                messages = "; ".join(str(futures[s].state.result(raise_on_failure=False)) for s in failed)
                raise StageFailed(f"{len(failed)} stage(s) failed, {len(not_run)} not run: {messages}")
            ran = [s for s in order if not futures[s].result()["skipped"]]
            logger.info(f"{len(order)} stages, {len(ran)} ran, {len(order) - len(ran)} up to date")
            return {"stages": order, "ran": ran}


def run_options(ap: argparse.ArgumentParser) -> None:
    """The options of a run (the flow's parameters but ``force``), shared with the scheduled deployment."""
    ap.add_argument("--target", help="a stage or foreach group (default: every stage)")
    ap.add_argument("--profile", help="profiles under profiles/ (\"gpu gpu-quick\": later names win) applied to "
                    "params.yaml for this run (restored after)")
    ap.add_argument("--root", default=".", help="the project folder the runs work in")
    ap.add_argument("--dask", help="Dask scheduler address (tcp://host:8786) or local[:N] for cleaning and tokenization")
    ap.add_argument("--scratch", help="fsspec URL (s3://bucket/prefix, a shared folder) through which cleaning's "
                    "shards go, for Dask workers that share no folder with this machine")
    ap.add_argument("--train-processes", type=int, default=1, help="processes per machine for pre-training and DAPT")
    ap.add_argument("--launcher", choices=("torchrun", "accelerate"), default="torchrun")
    ap.add_argument("--launch-args", default="", help='extra launcher arguments, e.g. "--nnodes 2 --node_rank 0 '
                                                        '--rdzv_endpoint head:29500"')
    ap.add_argument("--stage-timeout-hours", type=float, default=None,
                    help="how long any one stage may run (default: per kind of stage, STAGE_TIMEOUT_H)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flows.pipeline", description="Run the pipeline as a Prefect flow.")
    run_options(ap)
    ap.add_argument("--force", action="append", metavar="STAGE",
                    help="run this stage (or foreach group) even if unchanged; repeatable")
    try:
        pipeline(**vars(ap.parse_args(argv)))
    except (StageFailed, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
