"""Cleaning and tokenization on each shard engine: the local default against Dask, same inputs.

    .venv/bin/python benchmarks/dask_shards.py [--workers 2] [--repeats 2] [--out benchmarks/results/dask_shards.json]

Runs the stages' own commands (``python -m stages.clean`` on the general corpus, ``python -m stages.tokens``
for GPT on both corpora) in fresh processes, outputs to a temporary folder, alternating engines:
- ``local``: cleaning's process pool of ``--workers`` processes; tokenization's Rust threads;
- ``dask``: ``LMPIPE_DASK=local:<workers>`` (a LocalCluster of single-threaded worker processes started by
  the stage, its shards submitted through a plain Dask client).
Reports wall seconds per run (process start to exit, gate included) and whether every output file is
byte-identical to the workspace's DVC output, and the engine's own cost: starting a LocalCluster and mapping
40 trivial shards. Needs the workspace's ``data/ingested``, ``data/cleaned`` and
``data/tokenizers`` (``dvc repro`` or ``dvc pull`` first).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The Dask engine's own cost, in a fresh process: start a LocalCluster, map 40 shards that do nothing.
OVERHEAD = """
import json, operator, time
from stages.common.shards import DaskShards
t0 = time.perf_counter()
with DaskShards("local:{workers}", name="overhead") as engine:
    t1 = time.perf_counter()
    engine.map(operator.mul, [(i, 2) for i in range(40)], lambda r: None, desc="trivial")
    t2 = time.perf_counter()
print(json.dumps({{"start_seconds": round(t1 - t0, 2), "map_seconds": round(t2 - t1, 2)}}))
"""


def commands(tmp: Path, tag: str) -> dict[str, tuple[list[str], Path, Path]]:
    """stage: (command, output folder, the workspace's folder to compare with)."""
    py = sys.executable
    return {
        "clean@general": ([py, "-m", "stages.clean", "--corpus", "general", "--params", "params.yaml",
                           "--cache-dir", ".cache/sources", "--input", "data/ingested/general/documents.parquet",
                           "--task", "data/ingested/task/documents.parquet", "--output", str(tmp / tag / "general"), "--report", str(tmp / tag / "clean.json")],
                          tmp / tag / "general", ROOT / "data/cleaned/general"),
        "tokens@gpt": ([py, "-m", "stages.tokens", "--paradigm", "gpt", "--params", "params.yaml",
                        "--tokenizer", "data/tokenizers/gpt",
                        "--corpus", "general=data/cleaned/general/documents.parquet",
                        "--corpus", "domain=data/cleaned/domain/documents.parquet",
                        "--output", str(tmp / tag / "tokens"), "--report", str(tmp / tag / "tokens.json")],
                       tmp / tag / "tokens", ROOT / "data/tokens/gpt"),
    }


def identical(a: Path, b: Path) -> bool:
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    return files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file()) and all(
        (a / f).read_bytes() == (b / f).read_bytes() for f in files)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    results: dict[str, dict[str, list]] = {}
    with tempfile.TemporaryDirectory(prefix="dask-bench-") as t:
        tmp = Path(t)
        base = {**os.environ, "GX_ANALYTICS_ENABLED": "false", "HF_HUB_OFFLINE": "1"}
        base.pop("LMPIPE_DASK", None)
        overhead = json.loads(subprocess.run([sys.executable, "-c", OVERHEAD.format(workers=args.workers)], cwd=ROOT,
                                             env=base, check=True, capture_output=True, text=True).stdout)
        print(f"Dask engine: start {overhead['start_seconds']} s, 40 trivial shards {overhead['map_seconds']} s",
              flush=True)
        for r in range(args.repeats):
            for engine in ("local", "dask"):
                env = dict(base)
                if engine == "dask":
                    env["LMPIPE_DASK"] = f"local:{args.workers}"
                tag = f"{engine}-{r}"
                for stage, (cmd, out, ref) in commands(tmp, tag).items():
                    if stage.startswith("clean"):
                        cmd = [*cmd, "--workers", str(args.workers)]
                    t0 = time.perf_counter()
                    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
                    wall = time.perf_counter() - t0
                    if proc.returncode != 0:
                        print(proc.stderr[-3000:], file=sys.stderr)
                        return 1
                    same = identical(out, ref)
                    results.setdefault(stage, {}).setdefault(engine, []).append(
                        {"seconds": round(wall, 1), "identical_to_workspace": same})
                    print(f"{stage:14s} {engine:6s} run {r}: {wall:6.1f} s, identical: {same}", flush=True)
    summary = {s: {e: statistics.median(x["seconds"] for x in runs) for e, runs in v.items()}
               for s, v in results.items()}
    doc = {"date": datetime.date.today().isoformat(), "machine": {"cpus": os.cpu_count(),
           "python": platform.python_version()}, "workers": args.workers, "runs": results,
           "median_seconds": summary, "dask_engine": overhead}
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
