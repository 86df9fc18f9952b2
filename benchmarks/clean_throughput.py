"""Cleaning throughput (MB/s per core) against datatrove's C4 filters, plus line-dedup memory.

    python benchmarks/clean_throughput.py --input data/ingested/general/documents.parquet \
        --out benchmarks/results/clean_general.json [--datatrove-python /tmp/dtvenv/bin/python]

Measured, on one core, in one run over the same documents:
- ``ours_c4_badwords``: our C4 line rules + bad-words filter, in process (the same filter set as
  datatrove's C4QualityFilter + C4BadWordsFilter, configured by benchmarks/datatrove_c4.py to C4's
  thresholds);
- ``ours_full``: the whole cleaning pipeline with one worker (URL dedup, C4 rules, line dedup,
  langdetect, bad words), and with two workers for wall-clock speed;
- ``datatrove``: benchmarks/datatrove_c4.py run with a Python that has datatrove installed (optional);
- ``line_dedup_memory``: peak traced memory of building the line-selection table for 1M and 4M line
  occurrences, with 1 and 16 buckets.
MB are UTF-8 megabytes (1e6 bytes) of input text.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402


def load_texts(path: Path, limit: int | None) -> list[dict]:
    import pyarrow.parquet as pq

    rows = pq.read_table(path, columns=["id", "text", "url"]).to_pylist()
    return rows[:limit] if limit else rows


def bench_c4_badwords(rows: list[dict], words: list[str], repeat: int) -> dict:
    from stages.cleaning.base import Doc
    from stages.cleaning.c4 import BadWordsFilter, C4LinesFilter, C4Rules

    mb = sum(len(r["text"].encode("utf-8")) for r in rows) / 1e6
    best = None
    for _ in range(repeat):
        c4 = C4LinesFilter(C4Rules())
        bad = BadWordsFilter(words)
        c4(Doc(id="w", text="Warm up the sentence model. It has two sentences. And three.", source="", url=None, meta=""))
        t0 = time.perf_counter()
        kept = {}
        for r in rows:
            d = Doc(id=r["id"], text=r["text"], source="", url=r["url"], meta="")
            if c4(d) and bad(d):
                kept[d.id] = d.text
        dt = time.perf_counter() - t0
        if best is None or dt < best["seconds"]:
            best = {"seconds": round(dt, 3), "mb": round(mb, 3), "mb_per_s": round(mb / dt, 3), "docs_in": len(rows),
                    "docs_kept": len(kept), "kept": kept, "c4_seconds": round(c4.stats.seconds, 3), "badwords_seconds": round(bad.stats.seconds, 3)}
    return best


def bench_full(rows: list[dict], words: list[str], workers: int) -> dict:
    from stages.cleaning.config import CleanerConfig
    from stages.cleaning.pipeline import clean_corpus
    from stages.cleaning.recipe import Recipe

    with tempfile.TemporaryDirectory() as tmp:
        inp = Path(tmp) / "in.jsonl"  # the stage's input as a user gives it (written before the clock starts)
        inp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        t0 = time.perf_counter()
        res = clean_corpus(inp, Recipe(CleanerConfig(workers=workers), tuple(words)), work=Path(tmp) / "w",
                           out_parquet=Path(tmp) / "out.parquet", log=lambda m: None)
        dt = time.perf_counter() - t0
    mb = res.bytes_in / 1e6
    return {"workers": workers, "seconds": round(dt, 2), "mb": round(mb, 3), "mb_per_s_wall": round(mb / dt, 3),
            "mb_per_s_per_core": round(mb / dt / workers, 3), "docs_in": res.docs_in, "docs_out": res.docs_out,
            "filter_cpu_seconds": {k: round(v.seconds, 2) for k, v in res.filters.items()},
            "step_seconds": {k: round(v, 2) for k, v in res.step_seconds.items()}}


def bench_dedup_memory(occurrences: int, buckets: int) -> dict:
    from stages.cleaning.dedup import line_table, write_shard_pairs
    from stages.cleaning.scratch import Scratch

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        files, bounds = [], []
        per = occurrences // 8
        distinct = rng.integers(0, 2**64 - 1, size=occurrences // 2, dtype=np.uint64, endpoint=True)
        for i in range(8):  # 8 shards drawing from half as many distinct lines: many lines repeat
            pairs = rng.integers(0, 2**63, size=(per, 2), dtype=np.uint64)
            pairs[:, 0] = distinct[rng.integers(0, len(distinct), size=per)]
            f = Path(tmp) / f"p{i}.npy"
            bounds.append(write_shard_pairs([pairs], f, buckets))
            files.append(str(f))
        tracemalloc.start()
        t0 = time.perf_counter()
        _, distinct = line_table(Scratch(tmp), files, bounds, buckets)
        dt = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return {"line_occurrences": occurrences, "distinct_lines": distinct, "buckets": buckets,
            "peak_mb": round(peak / 1e6, 1), "peak_mb_per_million_lines": round(peak / 1e6 / (occurrences / 1e6), 1),
            "seconds": round(dt, 2), "on_disk_bytes_per_occurrence": 16, "table_bytes_per_distinct_line": 16}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--limit", type=int)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--cache-dir", type=Path, default=Path(".cache/sources"))
    ap.add_argument("--datatrove-python", help="a Python with datatrove installed (see benchmarks/datatrove_c4.py)")
    ap.add_argument("--skip-full", action="store_true")
    args = ap.parse_args()

    from stages.cleaning.c4 import BadWordsConfig, load_words

    words, _ = load_words(BadWordsConfig(), args.cache_dir)
    rows = load_texts(args.input, args.limit)
    result = {"input": str(args.input), "machine": {"python": platform.python_version(), "cpu": platform.processor()
                                                    or platform.machine()}}
    print(f"ours: C4 rules + bad words on {len(rows)} documents ...", file=sys.stderr)
    result["ours_c4_badwords"] = bench_c4_badwords(rows, words, args.repeat)
    ours_kept = result["ours_c4_badwords"].pop("kept")
    if args.datatrove_python:
        print("datatrove: C4QualityFilter + C4BadWordsFilter ...", file=sys.stderr)
        with tempfile.TemporaryDirectory() as tmp:
            words_json = Path(tmp) / "en.json"  # the same word list for both sides
            words_json.write_text(json.dumps(words))
            cmd = [args.datatrove_python, str(Path(__file__).with_name("datatrove_c4.py")), "--input", str(args.input),
                   "--out", f"{tmp}/dt.json", "--repeat", str(args.repeat), "--badwords-json", str(words_json),
                   "--kept-out", f"{tmp}/kept.jsonl"]
            if args.limit:
                cmd += ["--limit", str(args.limit)]
            subprocess.run(cmd, check=True)
            result["datatrove"] = json.loads(Path(f"{tmp}/dt.json").read_text())
            theirs = {}
            for line in Path(f"{tmp}/kept.jsonl").read_text().splitlines():
                rec = json.loads(line)
                theirs[rec["id"]] = rec["text"]
        both = set(ours_kept) & set(theirs)
        result["agreement_with_datatrove"] = {
            "kept_by_both": len(both), "kept_only_by_ours": len(set(ours_kept) - set(theirs)),
            "kept_only_by_datatrove": len(set(theirs) - set(ours_kept)),
            "identical_text_among_both": sum(ours_kept[i] == theirs[i] for i in both)}
        dt = result["datatrove"].get("mb_per_s")
        if dt:
            result["speedup_vs_datatrove"] = round(result["ours_c4_badwords"]["mb_per_s"] / dt, 2)
    if not args.skip_full:
        for workers in (1, 2):
            print(f"ours: full pipeline, {workers} worker(s) ...", file=sys.stderr)
            result[f"ours_full_{workers}w"] = bench_full(rows, words, workers)
    result["line_dedup_memory"] = [bench_dedup_memory(n, b) for n in (1_000_000, 4_000_000) for b in (1, 16)]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "datatrove"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
