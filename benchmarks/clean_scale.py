"""The clean stage at scale: wall time, MB/s and peak memory of the main process and of each worker, for a
corpus of about ``--mb`` MB made from an ingested corpus, with 1 and 2 (or ``--workers``) worker processes.

    python benchmarks/clean_scale.py --input data/ingested/general/documents.parquet --mb 1000 \
        --out benchmarks/results/clean_scale.json

The corpus is the input repeated with every copy made distinct (so URL and line dedup do the work they would
on new pages, not drop whole copies): copy k gets its own URLs, ids and, before each line's final mark, the
token ``v<k>``; languages, line rules and sentence counts stay those of the input. Memory is sampled every
0.2 s with psutil over the stage's process tree (resident set size; the main process and the largest worker
reported apart).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKS = (".", "?", "!", '"')


def distinct_copy(text: str, k: int) -> str:
    out = []
    for line in text.split("\n"):
        s = line.rstrip()
        out.append(f"{s[:-1]} v{k}{s[-1]}" if s.endswith(MARKS) and len(s) > 1 else line)
    return "\n".join(out)


def make_corpus(src: Path, dst: Path, mb: float) -> tuple[int, int]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(src)
    rows = table.to_pylist()
    size = sum(len(r["text"].encode("utf-8")) for r in rows)
    copies = max(1, round(mb * 1e6 / size))
    writer = None
    n = total = 0
    for k in range(copies):
        out = []
        for r in rows:
            r = dict(r)
            r["text"] = distinct_copy(r["text"], k) if k else r["text"]
            if r.get("url"):
                r["url"] = f"{r['url']}?copy={k}" if k else r["url"]
            r["id"] = f"{r['id']}-{k}"
            out.append(r)
            total += len(r["text"].encode("utf-8"))
        batch = pa.Table.from_pylist(out, schema=table.schema)
        writer = writer or pq.ParquetWriter(dst, table.schema, compression="zstd")
        writer.write_table(batch)
        n += len(out)
    writer.close()
    return n, total


def run_stage(corpus: Path, params: Path, out: Path, workers: int, task: Path | None, cache: Path,
              section: str = "general", code: Path = ROOT) -> dict:
    import psutil
    import yaml

    p = yaml.safe_load(params.read_text())
    p["clean"]["defaults"]["workers"] = workers
    tmp_params = out.parent / f"params-{workers}.yaml"
    tmp_params.write_text(yaml.safe_dump(p, sort_keys=False))
    cmd = [sys.executable, "-m", "stages.clean", "--corpus", section, "--params", str(tmp_params),
           "--cache-dir", str(cache), "--input", str(corpus), "--output", str(out),
           "--report", str(out.parent / f"report-{workers}.json"), "--metrics", str(out.parent / f"m-{workers}.json")]
    if task is not None:
        cmd += ["--task", str(task)]
    path = os.pathsep.join(x for x in (str(code), os.environ.get("PYTHONPATH", "")) if x)  # keep a caller's site dirs
    env = {**os.environ, "GX_ANALYTICS_ENABLED": "false", "PYTHONPATH": path}
    t0 = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(cmd, cwd=code, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak = {"main": 0, "worker": 0, "total": 0}
    workers_cpu = [0.0]  # CPU seconds of the stage's finished child processes (its workers), as last seen
    stop = threading.Event()

    def sample() -> None:
        root = psutil.Process(proc.pid)
        while not stop.is_set():
            try:
                main = root.memory_info().rss
                kids = [c.memory_info().rss for c in root.children(recursive=True)]
                t = root.cpu_times()
                workers_cpu[0] = t.children_user + t.children_system
            except psutil.Error:
                kids, main = [], 0
            peak["main"] = max(peak["main"], main)
            peak["worker"] = max([peak["worker"], *kids])
            peak["total"] = max(peak["total"], main + sum(kids))
            time.sleep(0.2)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    log, _ = proc.communicate()
    stop.set()
    th.join()
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    total_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(f"clean failed ({proc.returncode}):\n{log[-3000:]}")
    core = next((ln for ln in log.splitlines() if " MB in " in ln), "")
    phases = next((ln for ln in log.splitlines() if "phases:" in ln), "")
    # The stage's CPU: all of it (its process tree, exact), its workers' (joined before the gate runs), the rest
    # is the main process's: the serial part that bounds the speed-up (Amdahl).
    main_cpu = total_cpu - workers_cpu[0] if workers > 1 else total_cpu
    return {"workers": workers, "wall_s": round(wall, 1), "log": core.strip(), "phases": phases.strip(),
            "cpu_s": {"total": round(total_cpu, 1), "main": round(main_cpu, 1),
                      "main_share": round(main_cpu / total_cpu, 4) if total_cpu else None},
            "peak_rss_mb": {k: round(v / 2**20) for k, v in peak.items()}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", type=Path, required=True)
    ap.add_argument("--mb", type=float, default=1000)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--corpus", default="general", help="the clean section whose params apply (general, domain)")
    ap.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    ap.add_argument("--task", type=Path, default=None, help="the task's documents (the general corpus's guard)")
    ap.add_argument("--cache-dir", type=Path, default=ROOT / ".cache" / "sources")
    ap.add_argument("--code", type=Path, default=ROOT, help="the checkout whose clean stage runs (before/after)")
    ap.add_argument("--keep", type=Path, help="keep the made corpus here (made once, reused when present)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="clean-scale-") as tmp:
        tmp = Path(tmp)
        corpus = args.keep or tmp / "documents.parquet"
        t0 = time.perf_counter()
        if corpus.is_file():
            import pyarrow.parquet as pq

            docs = pq.ParquetFile(corpus).metadata.num_rows
            size = sum(len(t.encode("utf-8")) for t in pq.read_table(corpus, columns=["text"])["text"].to_pylist())
        else:
            docs, size = make_corpus(args.input, corpus, args.mb)
        made_s = time.perf_counter() - t0
        runs = []
        for w in [int(x) for x in args.workers.split(",")]:
            r = run_stage(corpus, args.params, tmp / f"out-{w}", w, args.task, args.cache_dir, args.corpus, args.code)
            r["mb_per_s"] = round(size / 1e6 / r["wall_s"], 2)
            runs.append(r)
            print(json.dumps(r), flush=True)
    commit = subprocess.run(["git", "-C", str(args.code), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    result = {"input": str(args.input), "code": f"{args.code} ({commit})" if commit else str(args.code),
              "scratch": os.environ.get("LMPIPE_SCRATCH") or "the work folder", "corpus": args.corpus, "documents": docs, "mb": round(size / 1e6, 1), "made_s": round(made_s, 1),
              "cpus": os.cpu_count(), "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
