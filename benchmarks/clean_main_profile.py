"""Where the clean stage's main process spends its CPU: the stage run in this process (its workers as usual) with
clocks read around each map over the workers, the gate's validation, and the background import of Great
Expectations (a thread that overlaps the first map), written as JSON.

    python benchmarks/clean_main_profile.py --out benchmarks/results/clean_main_profile.json -- \
        --corpus general --params params.yaml --input data/ingested/general/documents.parquet \
        --output /tmp/clean-profile --task data/ingested/task/documents.parquet --report /tmp/clean-profile.json

Arguments after ``--`` are the clean stage's. ``process_cpu_s`` counts every thread of this process;
``main_thread_cpu_s`` only the thread that runs the stage (what cannot overlap the workers).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("stage", nargs=argparse.REMAINDER, help="-- then the clean stage's arguments")
    args = ap.parse_args()
    stage_args = args.stage[1:] if args.stage[:1] == ["--"] else args.stage
    sys.path.insert(0, str(ROOT))

    from stages import clean
    from stages.common import shards
    from stages.quality import gate

    marks: list[tuple[str, float, float, float]] = []

    def mark(what: str) -> None:
        marks.append((what, time.process_time(), time.thread_time(), time.perf_counter()))

    def timed(label, fn):
        def wrapper(*a, **k):
            mark(f"{label(*a)} start")
            try:
                return fn(*a, **k)
            finally:
                mark(f"{label(*a)} end")
        return wrapper

    shards.Shards._ordered = timed(lambda self, submit, fn, arg_lists, consume, desc: f"map {desc}",
                                   shards.Shards._ordered)
    gate.validate = timed(lambda *a, **k: "gate validation and Data Docs", gate.validate)
    imported: dict[str, float] = {}
    try_import = gate._try_import_gx

    def import_in_background() -> None:
        start = time.thread_time()
        try_import()
        imported["cpu_s"] = round(time.thread_time() - start, 2)

    gate._try_import_gx = import_in_background
    mark("start")
    code = clean.main(stage_args)
    mark("end")
    steps = [{"until": what, "process_cpu_s": round(p - p0, 2), "main_thread_cpu_s": round(t - t0, 2),
              "wall_s": round(w - w0, 2)}
             for (_, p0, t0, w0), (what, p, t, w) in zip(marks, marks[1:])]
    result = {"stage_args": stage_args, "exit_code": code, "steps": steps,
              "gx_import_thread_cpu_s": imported.get("cpu_s"),
              "process_cpu_s": round(marks[-1][1] - marks[0][1], 2),
              "main_thread_cpu_s": round(marks[-1][2] - marks[0][2], 2),
              "wall_s": round(marks[-1][3] - marks[0][3], 2)}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "steps"}, indent=1))
    return code


if __name__ == "__main__":  # the stage's spawned workers import this file again: run only here
    sys.exit(main())
