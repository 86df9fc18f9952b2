"""The pipeline as a Prefect flow: one task per DVC stage, in the order of the graph ``dvc.yaml`` defines.

    python -m flows.pipeline                      # everything, like `dvc repro`
    python -m flows.pipeline --target evaluate    # what evaluate needs
    python -m flows.pipeline --profile tiny       # with profiles/tiny.yaml applied to params.yaml for the run
    python -m flows.pipeline --dask tcp://scheduler:8786      # cleaning and tokenization shards on Dask
    python -m flows.pipeline --train-processes 8             # pre-training and DAPT in 8 processes (torchrun)

Each task runs ``dvc repro --single-item <stage>``, so DVC's cache still skips whatever is unchanged and the
stage's code runs exactly as under ``dvc repro``; the flow holds no stage logic. A stage that fails (a gate
included) fails its task with the stage's own error line, and the tasks downstream of it do not run. Stages
that reach the registries (``ingest``, ``clean``) retry. After each stage its gate reports and metrics are
published as artifacts (``flows.artifacts``); after the run, the evaluation report and links.

Scale-out goes through the stages' environment, which DVC does not track because the outputs do not depend
on it: ``dask`` sets ``LMPIPE_DASK`` (``stages.common.shards``: the cleaning and tokenization shards run as
Prefect tasks on that Dask cluster, each stage's shards as a flow run of their own), and ``train_processes``
/ ``launcher`` / ``launch_args`` set ``LMPIPE_TRAIN_*`` for the pre-training and DAPT stages
(``stages.training.launch``: the stage starts itself under ``torchrun`` or ``accelerate launch``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.futures import wait
from prefect.task_runners import ThreadPoolTaskRunner

NETWORK_STAGES = {"ingest", "clean"}  # they fetch packages on a cold cache; a retry rides out a flaky mirror
TRAINING_STAGES = {"pretrain", "dapt"}  # data-parallel under a launcher (stages.training.launch)
RETRIES, RETRY_DELAY_S = 2, 10


class StageFailed(RuntimeError):
    """A stage exited non-zero; the message is its own error line."""


def dvc_command() -> list[str]:
    """The dvc of this interpreter's environment (the project's venv), else the one on PATH."""
    beside = Path(sys.executable).parent / "dvc"
    return [str(beside) if beside.exists() else "dvc"]


def stage_env(stage: str, *, dask: str | None = None, train_processes: int = 1, launcher: str = "torchrun",
              launch_args: str = "") -> dict[str, str]:
    """The variables a stage gets on top of the flow's environment: where its shards and processes run, and
    the Prefect API the flow reports to (so the stage's shard flows land on the same server)."""
    from prefect.settings import get_current_settings

    from stages.common.shards import ENV as DASK
    from stages.training import launch

    env: dict[str, str] = {}
    api = get_current_settings().api.url
    if api:
        env["PREFECT_API_URL"] = api
    if dask:
        env[DASK] = dask
    if stage.split("@", 1)[0] in TRAINING_STAGES and (train_processes > 1 or launch_args):
        launch.launch_command("stages.pretrain", [], train_processes, launcher)  # a bad value fails here, early
        env.update({launch.PROCESSES: str(train_processes), launch.LAUNCHER: launcher, launch.LAUNCH_ARGS: launch_args})
    return env


def run_dvc(stage: str, root: Path, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``dvc repro --single-item STAGE`` in ``root``, with ``extra_env`` on top of this process's environment."""
    env = {**os.environ, **(extra_env or {}),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run([*dvc_command(), "repro", "--single-item", stage], cwd=root, env=env,
                          capture_output=True, text=True)


def error_line(proc: subprocess.CompletedProcess) -> str:
    """The stage's own ``error: ...`` line (a failed gate names its checks there), else the last lines."""
    lines = (proc.stderr or "").splitlines() + (proc.stdout or "").splitlines()
    errors = [line for line in lines if line.startswith("error:")]
    return errors[-1] if errors else " | ".join(line for line in lines[-5:] if line.strip()) or "no output"


@task(task_run_name="{stage}")
def run_stage(stage: str, root: str, outs: list[str], env: dict[str, str] | None = None) -> dict:
    """One stage through DVC; its artifacts published when it succeeds."""
    from flows.artifacts import publish_stage

    logger = get_run_logger()
    for key in sorted(k for k in (env or {}) if k.startswith("LMPIPE_")):
        logger.info(f"{key}={env[key]}")
    proc = run_dvc(stage, Path(root), env)
    for line in (proc.stdout or "").splitlines():
        if line.strip():
            logger.info(line)
    for line in (proc.stderr or "").splitlines():  # the stages' own log lines: "[clean] ...", "[launch] ..."
        if proc.returncode == 0 and line.startswith("["):
            logger.info(line)
    if proc.returncode != 0:
        for line in (proc.stderr or "").splitlines()[-40:]:
            logger.error(line)
        raise StageFailed(f"{stage}: {error_line(proc)}")
    skipped = "didn't change, skipping" in (proc.stdout or "") or "is cached" in (proc.stdout or "")
    artifacts = publish_stage(stage, outs, Path(root))
    return {"stage": stage, "skipped": skipped, "artifacts": artifacts}


def apply_profile(root: Path, name: str) -> dict:
    """Set the profile's keys in params.yaml, keeping its comments and layout (as ``dvc exp run -S`` does)."""
    from dvc.utils.serialize import modify_yaml

    from stages.config import load_params
    from stages.profile import apply, load_profile, validate

    profile = load_profile(name, root)
    validate(apply(load_params(root / "params.yaml"), profile, f"profiles/{name}.yaml"))
    with modify_yaml(root / "params.yaml") as data:
        for dotted, value in profile.items():
            node = data
            *parents, last = str(dotted).split(".")
            for part in parents:
                node = node[part]
            node[last] = value
    return profile


@contextmanager
def profile_applied(root: Path, name: str):
    """``params.yaml`` with the profile's keys set while the block runs, and exactly as it was afterwards
    (also when a stage fails): a flow run with a profile leaves the user's workspace on its own params."""
    path = root / "params.yaml"
    original = path.read_bytes()
    try:
        yield apply_profile(root, name)
    finally:
        tmp = path.with_name(f".{path.name}.restore")
        tmp.write_bytes(original)
        os.replace(tmp, path)


# One stage at a time: each stage already uses the machine's cores (cleaning workers, tokenizer threads,
# torch), and every `dvc repro` rewrites the workspace's dvc.lock, which DVC does not promise to merge across
# processes. The graph still decides the order, and a failure still stops only what depends on it.
@flow(name="lm-pipeline", log_prints=True, task_runner=ThreadPoolTaskRunner(max_workers=1))
def pipeline(target: str | None = None, profile: str | None = None, root: str = ".", dask: str | None = None,
             train_processes: int = 1, launcher: str = "torchrun", launch_args: str = "") -> dict:
    """Run ``target`` (a stage, a ``foreach`` group such as ``clean``, or everything when empty) and what it
    needs, one task per stage; ``profile`` applies ``profiles/<profile>.yaml`` to params.yaml for the run
    (restored afterwards).
    ``dask``: a Dask scheduler address (or ``local[:N]``) for the cleaning and tokenization shards;
    ``train_processes``, ``launcher`` (torchrun | accelerate), ``launch_args``: pre-training and DAPT in that
    many processes per machine (``launch_args`` e.g. ``--nnodes 2 --node_rank 0 --rdzv_endpoint head:29500``)."""
    base = Path(root).resolve()
    logger = get_run_logger()
    if profile:
        with profile_applied(base, profile) as applied:
            logger.info(f"profile {profile}: {len(applied)} params set in params.yaml for this run "
                        "(restored afterwards)")
            return _run(base, target, dask, train_processes, launcher, launch_args, logger)
    return _run(base, target, dask, train_processes, launcher, launch_args, logger)


def _run(base: Path, target: str | None, dask, train_processes: int, launcher: str, launch_args: str,
         logger) -> dict:
    from flows.artifacts import publish_run
    from flows.graph import closure, read_pipeline

    graph, outs = read_pipeline(base)
    order = closure(graph, [target] if target else None)
    futures = {}
    for stage in order:
        options = {"retries": RETRIES, "retry_delay_seconds": RETRY_DELAY_S} if (
            stage.split("@", 1)[0] in NETWORK_STAGES) else {}
        env = stage_env(stage, dask=dask, train_processes=train_processes, launcher=launcher,
                        launch_args=launch_args)
        futures[stage] = run_stage.with_options(**options).submit(
            stage, str(base), outs.get(stage, []), env, wait_for=[futures[d] for d in graph[stage] if d in futures])
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flows.pipeline", description="Run the pipeline as a Prefect flow.")
    ap.add_argument("--target", help="a stage or foreach group (default: every stage)")
    ap.add_argument("--profile", help="a profile under profiles/ applied to params.yaml for this run (restored after)")
    ap.add_argument("--root", default=".")
    ap.add_argument("--dask", help="Dask scheduler address (tcp://host:8786) or local[:N] for cleaning and tokenization")
    ap.add_argument("--train-processes", type=int, default=1, help="processes per machine for pre-training and DAPT")
    ap.add_argument("--launcher", choices=("torchrun", "accelerate"), default="torchrun")
    ap.add_argument("--launch-args", default="", help='extra launcher arguments, e.g. "--nnodes 2 --node_rank 0 '
                                                        '--rdzv_endpoint head:29500"')
    args = ap.parse_args(argv)
    try:
        pipeline(target=args.target, profile=args.profile, root=args.root, dask=args.dask,
                 train_processes=args.train_processes, launcher=args.launcher, launch_args=args.launch_args)
    except (StageFailed, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
