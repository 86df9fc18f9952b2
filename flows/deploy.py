"""Serve the pipeline flow as a scheduled Prefect deployment.

    python -m flows.deploy                                   # deployment lm-pipeline/scheduled, nightly at 03:00
    python -m flows.deploy --cron "0 */6 * * *" --profile tiny --target package

``flow.serve`` registers the deployment (schedule and default parameters) with the server at
``PREFECT_API_URL`` and runs its runs in this process until stopped; trigger one from the UI or with
``prefect deployment run lm-pipeline/scheduled --param profile=tiny``.
"""

from __future__ import annotations

import argparse
import sys

DEPLOYMENT = "scheduled"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flows.deploy", description="Serve the scheduled pipeline deployment.")
    ap.add_argument("--cron", default="0 3 * * *", help="the schedule (default: every day at 03:00)")
    ap.add_argument("--profile", default=None, help="default profile parameter of scheduled runs")
    ap.add_argument("--target", default=None, help="default target stage of scheduled runs (default: all)")
    ap.add_argument("--root", default=".", help="the project folder the runs work in")
    ap.add_argument("--dask", default=None, help="default Dask scheduler address (or local[:N]) of scheduled runs")
    ap.add_argument("--train-processes", type=int, default=1, help="default processes for pre-training and DAPT")
    ap.add_argument("--launcher", choices=("torchrun", "accelerate"), default="torchrun")
    ap.add_argument("--launch-args", default="", help="default extra launcher arguments")
    ap.add_argument("--stage-timeout-hours", type=float, default=None,
                    help="how long any one stage may run (default: per kind of stage, flows.pipeline.STAGE_TIMEOUT_H)")
    args = ap.parse_args(argv)
    from pathlib import Path

    from flows.pipeline import pipeline

    pipeline.serve(name=DEPLOYMENT, cron=args.cron, tags=["lm-pipeline"],
                   parameters={"profile": args.profile, "target": args.target, "root": str(Path(args.root).resolve()),
                               "dask": args.dask, "train_processes": args.train_processes, "launcher": args.launcher,
                               "launch_args": args.launch_args, "stage_timeout_hours": args.stage_timeout_hours},
                   limit=1, global_limit=1,  # one run at a time (the flow also locks the workspace)
                   description="The lm-pipeline stages as tasks (dvc repro per stage), on a schedule.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
