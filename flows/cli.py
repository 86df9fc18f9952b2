"""``lm-pipeline``: the project's console command, one entry point over the commands the README documents
(``lm-pipeline`` alone lists them, ``HELP``). Each subcommand is its module's own command line (same arguments and
exit codes; ``--help`` shows them); ``run`` wraps ``dvc repro`` (a profile's run: ``stages.profile_run``) and
``serve`` ``bentoml serve``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from stages.common.cli import entry
from stages.config import ConfigError, load_params
from stages.profile_run import restore_after_kill
from stages.profile_run import run as run_profile

MODULES = {  # subcommand -> module whose main(argv) it runs
    "flow": "flows.pipeline", "ui": "flows.ui", "deploy": "flows.deploy", "files": "flows.files",
    "ingest": "stages.ingest", "clean": "stages.clean", "tokenizer": "stages.tokenizer", "tokens": "stages.tokens",
    "pretrain": "stages.pretrain", "finetune": "stages.finetune", "evaluate": "stages.evaluate",
    "package": "stages.package", "lineage": "stages.lineage", "profile": "stages.profile", "pin": "stages.pin",
}
HELP = {
    "run": "the whole pipeline with dvc repro (--profile NAME: profiles/NAME.yaml applied for the run, its results in "
           "reports/profiles/NAME/, the workspace put back)",
    "serve": "bentoml serve a packaged pipeline (default lm-pipeline:latest) with bentoml's own options",
    "flow": "the pipeline as a Prefect flow", "ui": "local Prefect UI, scheduled deployment, reports server",
    "deploy": "only the scheduled deployment", "files": "the reports file server",
    "lineage": "print or --verify what made a packaged model or a model folder (--card: its model card)",
    "profile": "a profile's dvc exp run -S arguments (and targets), for a DVC experiment of your own",
    "pin": "fetch the remote sources as served now and record them in pins.yaml (accepts a moved upstream)",
    "clean": "C4 cleaning (a stage, or anyone's JSONL / Parquet)",
}


def _tool(name: str) -> str:
    """A console script of this environment (dvc, bentoml), else the one on PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else (shutil.which(name) or name)


def run(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="lm-pipeline run", description=HELP["run"])
    ap.add_argument("--profile", help="profiles under profiles/ (e.g. gpu, or \"gpu gpu-quick\": later names win), "
                    "applied for this run only: its results in reports/profiles/NAME/, the workspace put back")
    args = ap.parse_args(argv)
    if not Path(".dvc").is_dir():
        print("error: not a DVC project: run from the repository root", file=sys.stderr)
        return 1
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    try:
        if not args.profile:
            load_params("params.yaml")  # before DVC reads it: one line for what would make DVC choke
            if said := restore_after_kill(Path(".")):
                print(f"[profile] {said}", file=sys.stderr)
            return subprocess.call([_tool("dvc"), "repro"], env=env)
        return run_profile(args.profile, dvc=_tool("dvc"), env=env)  # the workspace put back afterwards
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def serve(argv: list[str]) -> int:
    named = bool(argv) and not argv[0].startswith("-")  # a Bento tag first, else the latest package
    return subprocess.call([_tool("bentoml"), "serve", argv[0] if named else "lm-pipeline:latest", *argv[named:]])


def usage() -> str:
    names = ["run", "serve", *MODULES]
    width = max(map(len, names))
    lines = [f"  {n:<{width}}  {HELP.get(n, 'the ' + n + ' stage')}" for n in names]
    return "usage: lm-pipeline SUBCOMMAND [ARGS ...]\n\nsubcommands:\n" + "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        try:
            print(usage(), flush=True)
        except BrokenPipeError:  # `lm-pipeline | head`: the reader left, nothing more to say
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command in ("run", "serve"):
        return (run if command == "run" else serve)(rest)
    if command not in MODULES:
        print(f"error: no subcommand {command!r}\n\n{usage()}", file=sys.stderr)
        return 2
    import importlib

    module = importlib.import_module(MODULES[command])
    sys.argv = [f"lm-pipeline {command}", *rest]  # what argparse names in its usage lines
    if MODULES[command].startswith("stages."):
        return entry(lambda: module.main(sys.argv[1:]))  # after entry() has taken --debug out
    return module.main(rest)


if __name__ == "__main__":
    sys.exit(main())
