"""The clean stage before and after a change, on the same input, with ``--workers`` processes (default one):
wall time and CPU time (user + system of the stage's process tree) per run, MB/s per core, and
the MD5 of each run's ``documents.parquet`` (the kept documents and texts must be the same bytes).

    git worktree add /tmp/before 9e004ab^          # the code the issue started from (Python langdetect)
    python benchmarks/clean_before_after.py --before /tmp/before --corpus domain \
        --input data/ingested/domain/documents.parquet --task data/ingested/task/documents.parquet \
        --rounds 2 --out benchmarks/results/clean_before_after_domain.json

Each tree's stage runs from its own folder with its own ``params.yaml`` (the ``clean.<corpus>`` section as
that version shipped it) and this interpreter; the rounds alternate before / after so that a load that
changes during the run weighs on both.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_once(tree: Path, corpus: str, inp: Path, task: Path | None, cache: Path, work: Path,
             workers: int = 1) -> dict:
    out = work / "out"
    cmd = [sys.executable, "-m", "stages.clean", "--corpus", corpus, "--params", "params.yaml", "--cache-dir",
           str(cache), "--input", str(inp), "--output", str(out), "--report", str(work / "gate.json"),
           "--metrics", str(work / "metrics.json"), "--workers", str(workers)] + (["--task", str(task)] if task else [])
    env = {**os.environ, "GX_ANALYTICS_ENABLED": "false", "HF_HUB_OFFLINE": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise SystemExit(f"{tree}: the clean stage failed:\n{proc.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    digest = hashlib.md5((out / "documents.parquet").read_bytes()).hexdigest()
    kept = json.loads((work / "metrics.json").read_text())["documents_out"]
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "documents_md5": digest, "documents_out": kept}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, required=True, help="a checkout of the earlier code")
    ap.add_argument("--after", type=Path, default=ROOT, help="a checkout of the later code (default: this one)")
    ap.add_argument("--corpus", required=True, help="the clean.<corpus> params section")
    ap.add_argument("--input", type=Path, required=True)
    ap.add_argument("--task", type=Path)
    ap.add_argument("--cache-dir", type=Path, default=ROOT / ".cache" / "sources")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workers", type=int, default=1, help="the stage's worker processes (the default run: 2)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    mb = sum(len(t.encode("utf-8")) for t in _texts(args.input)) / 1e6
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for r in range(args.rounds):
        for name, tree in (("before", args.before), ("after", args.after)):
            with tempfile.TemporaryDirectory(prefix="clean-ba-") as tmp:
                res = run_once(tree.resolve(), args.corpus, args.input.resolve(),
                               args.task.resolve() if args.task else None, args.cache_dir.resolve(), Path(tmp),
                               args.workers)
            runs[name].append(res)
            print(f"round {r + 1} {name}: {res}", flush=True)
    best = {k: min(v, key=lambda x: x["cpu_s"]) for k, v in runs.items()}
    result = {
        "input": str(args.input), "corpus": args.corpus, "mb": round(mb, 2), "workers": args.workers,
        "before": {"tree": str(args.before), "commit": _commit(args.before), "runs": runs["before"]},
        "after": {"tree": str(args.after), "commit": _commit(args.after), "runs": runs["after"]},
        "mb_per_cpu_second": {k: round(mb / v["cpu_s"], 3) for k, v in best.items()},
        "mb_per_wall_second": {k: round(mb / min(x["wall_s"] for x in runs[k]), 3) for k in runs},
        "speedup_cpu": round(best["before"]["cpu_s"] / best["after"]["cpu_s"], 2),
        "same_documents": len({x["documents_md5"] for v in runs.values() for x in v}) == 1,
        "cpus": os.cpu_count(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("mb", "mb_per_cpu_second", "speedup_cpu", "same_documents")}))
    return 0


def _texts(path: Path):
    import pyarrow.parquet as pq

    yield from pq.read_table(path, columns=["text"])["text"].to_pylist()


def _commit(tree: Path) -> str:
    proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tree, capture_output=True, text=True)
    return proc.stdout.strip()


if __name__ == "__main__":
    sys.exit(main())
