"""The pipeline as a Prefect flow: one task per DVC stage, in the order of the graph ``dvc.yaml`` defines.

    python -m flows.pipeline                      # everything, like `dvc repro`
    python -m flows.pipeline --target evaluate    # what evaluate needs
    python -m flows.pipeline --profile tiny       # apply profiles/tiny.yaml to params.yaml first

Each task runs ``dvc repro --single-item <stage>``, so DVC's cache still skips whatever is unchanged and the
stage's code runs exactly as under ``dvc repro``; the flow holds no stage logic. A stage that fails (a gate
included) fails its task with the stage's own error line, and the tasks downstream of it do not run. Stages
that reach the registries (``ingest``, ``clean``) retry. After each stage its gate reports and metrics are
published as artifacts (``flows.artifacts``); after the run, the evaluation report and links.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.futures import wait
from prefect.task_runners import ThreadPoolTaskRunner

NETWORK_STAGES = {"ingest", "clean"}  # they fetch packages on a cold cache; a retry rides out a flaky mirror
RETRIES, RETRY_DELAY_S = 2, 10


class StageFailed(RuntimeError):
    """A stage exited non-zero; the message is its own error line."""


def dvc_command() -> list[str]:
    """The dvc of this interpreter's environment (the project's venv), else the one on PATH."""
    beside = Path(sys.executable).parent / "dvc"
    return [str(beside) if beside.exists() else "dvc"]


def run_dvc(stage: str, root: Path) -> subprocess.CompletedProcess:
    """``dvc repro --single-item STAGE`` in ``root`` (replaced in tests)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run([*dvc_command(), "repro", "--single-item", stage], cwd=root, env=env,
                          capture_output=True, text=True)


def error_line(proc: subprocess.CompletedProcess) -> str:
    """The stage's own ``error: ...`` line (a failed gate names its checks there), else the last lines."""
    lines = (proc.stderr or "").splitlines() + (proc.stdout or "").splitlines()
    errors = [line for line in lines if line.startswith("error:")]
    return errors[-1] if errors else " | ".join(line for line in lines[-5:] if line.strip()) or "no output"


@task(task_run_name="{stage}")
def run_stage(stage: str, root: str, outs: list[str]) -> dict:
    """One stage through DVC; its artifacts published when it succeeds."""
    from flows.artifacts import publish_stage

    logger = get_run_logger()
    proc = run_dvc(stage, Path(root))
    for line in (proc.stdout or "").splitlines():
        if line.strip():
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


# One stage at a time: each stage already uses the machine's cores (cleaning workers, tokenizer threads,
# torch), and every `dvc repro` rewrites the workspace's dvc.lock, which DVC does not promise to merge across
# processes. The graph still decides the order, and a failure still stops only what depends on it.
@flow(name="lm-pipeline", log_prints=True, task_runner=ThreadPoolTaskRunner(max_workers=1))
def pipeline(target: str | None = None, profile: str | None = None, root: str = ".") -> dict:
    """Run ``target`` (a stage, a ``foreach`` group such as ``clean``, or everything when empty) and what it
    needs, one task per stage; ``profile`` applies ``profiles/<profile>.yaml`` to params.yaml first."""
    from flows.artifacts import publish_run
    from flows.graph import closure, read_pipeline

    base = Path(root).resolve()
    logger = get_run_logger()
    if profile:
        applied = apply_profile(base, profile)
        logger.info(f"profile {profile}: {len(applied)} params set in params.yaml")
    graph, outs = read_pipeline(base)
    order = closure(graph, [target] if target else None)
    futures = {}
    for stage in order:
        options = {"retries": RETRIES, "retry_delay_seconds": RETRY_DELAY_S} if (
            stage.split("@", 1)[0] in NETWORK_STAGES) else {}
        futures[stage] = run_stage.with_options(**options).submit(
            stage, str(base), outs.get(stage, []), wait_for=[futures[d] for d in graph[stage] if d in futures])
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
    ap.add_argument("--profile", help="a profile under profiles/ to apply to params.yaml first")
    ap.add_argument("--root", default=".")
    args = ap.parse_args(argv)
    try:
        pipeline(target=args.target, profile=args.profile, root=args.root)
    except StageFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
