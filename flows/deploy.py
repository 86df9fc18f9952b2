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
from pathlib import Path

DEPLOYMENT = "scheduled"


def main(argv: list[str] | None = None) -> int:
    from flows.pipeline import pipeline, run_options

    ap = argparse.ArgumentParser(prog="python -m flows.deploy", description="Serve the scheduled pipeline deployment; "
                                 "the options but --cron are the defaults of its runs.")
    ap.add_argument("--cron", default="0 3 * * *", help="the schedule (default: every day at 03:00)")
    run_options(ap)
    parameters = vars(ap.parse_args(argv))
    cron = parameters.pop("cron")
    parameters["root"] = str(Path(parameters["root"]).resolve())
    pipeline.serve(name=DEPLOYMENT, cron=cron, tags=["lm-pipeline"], parameters=parameters,
                   limit=1, global_limit=1,  # one run at a time (the flow also locks the workspace)
                   description="The lm-pipeline stages as tasks (dvc repro per stage), on a schedule.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
