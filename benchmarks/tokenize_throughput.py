"""Tokenizer training time and token-dataset throughput against calling the tokenizer directly.

    python benchmarks/tokenize_throughput.py [--repeats 5] [--train-repeats 3] \
        [--out benchmarks/results/tokenize_throughput.json]

Measured per paradigm (bert = WordPiece, gpt = byte-level BPE, t5 = Unigram), with params.yaml's settings:
a. ``training``: ``stages.tokenization.trainers.train`` on the train split of the cleaned general corpus,
   texts read into memory before the timer; median seconds, and seconds per million characters.
b. ``throughput``: on each cleaned corpus, with the saved tokenizer in ``data/tokenizers/<paradigm>``:
   - ``stage``: the whole ``stages.tokenization.datasets.tokenize_corpus`` call (reads Parquet, hashes ids for the
     split, encodes, packs, writes ``train.npy``/``heldout.npy``, hashes the input file);
   - ``encode_batch`` (the issue's baseline) and ``encode_batch_fast``: the same texts, already in memory,
     in batches of 1000, ``add_special_tokens=False``, ids turned into Python lists (``[e.ids ...]``).
   tokens/s counts the documents' tokens (the stage: train + held-out ``tokens``; packing adds none of
   them). overhead = 1 - stage / baseline (negative: the stage is faster), from the medians. Methods are
   interleaved within each repeat so that drift in the machine's speed hits all of them alike; one
   warm-up pass first. ``best_tokens_per_s`` (fastest run) is kept to show how noisy a median was.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PARADIGMS = ("bert", "gpt", "t5")
CORPORA = {"general": ROOT / "data/cleaned/general/documents.parquet",
           "domain": ROOT / "data/cleaned/domain/documents.parquet"}
PARAMS = ROOT / "params.yaml"
BATCH = 1000


def bench_training(paradigm: str, repeats: int) -> dict:
    from stages.tokenization.split import texts_of
    from stages.tokenization.trainers import capped, train
    from stages.tokenization.tokenizer import load_tokenizer_config as load_config

    cfg, split = load_config(PARAMS, paradigm)
    # What the trainer actually sees (capped as train() caps it), read once: only training is timed.
    texts = list(capped(texts_of(CORPORA["general"], split, "train", batch_docs=cfg.batch_docs),
                        cfg.max_train_chars))
    chars = sum(map(len, texts))
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    seconds, vocab = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        tok = train(texts, cfg)
        seconds.append(time.perf_counter() - t0)
        vocab = tok.get_vocab_size()
    med = statistics.median(seconds)
    return {"kind": cfg.kind, "vocab_size": cfg.vocab_size, "vocab_reached": vocab, "documents": len(texts),
            "mchars": round(chars / 1e6, 3), "mb_utf8": round(mb, 3), "seconds": [round(s, 2) for s in seconds],
            "median_seconds": round(med, 2), "seconds_per_mchar": round(med / (chars / 1e6), 2)}


def run_stage(path: Path, layout, tok, split, tmp: Path, n: int) -> int:
    from stages.tokenization.datasets import tokenize_corpus

    counts, _ = tokenize_corpus(path, layout, tok, split, tmp / f"run{n}", batch_docs=BATCH)
    return counts["train"]["tokens"] + counts["heldout"]["tokens"]


def run_direct(tok, texts: list[str], fast: bool) -> int:
    encode = tok.encode_batch_fast if fast else tok.encode_batch
    tokens = 0
    for i in range(0, len(texts), BATCH):
        ids = [e.ids for e in encode(texts[i: i + BATCH], add_special_tokens=False)]
        tokens += sum(map(len, ids))
    return tokens


def bench_throughput(paradigm: str, corpus: str, repeats: int) -> dict:
    import pyarrow.parquet as pq

    from stages.sources.base import sha256_file
    from stages.tokenization.layout import load_layout
    from stages.tokenization.config import load_tokens_config as load_config

    cfg, split = load_config(PARAMS, paradigm)
    # The saved tokenizer is rebuilt by the pipeline; record which one was measured.
    tok_sha = sha256_file(ROOT / f"data/tokenizers/{paradigm}/tokenizer.json")
    layout, tok = load_layout(ROOT / f"data/tokenizers/{paradigm}", paradigm, seq_len=cfg.seq_len,
                              noise_density=cfg.noise_density, mean_span=cfg.mean_span)
    path = CORPORA[corpus]
    texts = pq.read_table(path, columns=["text"]).column(0).to_pylist()  # baselines: read outside the timer
    methods = {"stage": None, "encode_batch": False, "encode_batch_fast": True}
    seconds = {m: [] for m in methods}
    tokens = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(repeats + 1):  # r == 0 is the warm-up, not recorded
            for m, fast in methods.items():
                t0 = time.perf_counter()
                n = run_stage(path, layout, tok, split, Path(tmp), r) if fast is None else run_direct(tok, texts, fast)
                dt = time.perf_counter() - t0
                if tokens.setdefault(m, n) != n:
                    raise RuntimeError(f"{paradigm}/{corpus}/{m}: token count changed between runs")
                if r:
                    seconds[m].append(dt)
    if len(set(tokens.values())) != 1:  # the stage and the baselines must encode exactly the same text
        raise RuntimeError(f"{paradigm}/{corpus}: token counts differ: {tokens}")
    out = {"tokenizer_sha256": tok_sha, "documents": len(texts), "mchars": round(sum(map(len, texts)) / 1e6, 3),
           "mb_utf8": round(sum(len(t.encode("utf-8")) for t in texts) / 1e6, 3), "tokens": tokens["stage"]}
    for m in methods:
        med = statistics.median(seconds[m])
        out[m] = {"seconds": [round(s, 3) for s in seconds[m]], "median_seconds": round(med, 3),
                  "tokens_per_s": int(tokens[m] / med), "best_tokens_per_s": int(tokens[m] / min(seconds[m]))}
    for m in ("encode_batch", "encode_batch_fast"):
        out[f"overhead_vs_{m}"] = round(1 - out["stage"]["tokens_per_s"] / out[m]["tokens_per_s"], 3)
    return out


def machine() -> dict:
    return {"cpu_count": os.cpu_count(), "cpus_usable": len(os.sched_getaffinity(0)),
            "cpu": platform.processor() or platform.machine(), "python": platform.python_version(),
            "tokenizers": metadata.version("tokenizers"), "numpy": metadata.version("numpy"),
            "pyarrow": metadata.version("pyarrow"),
            "TOKENIZERS_PARALLELISM": os.environ.get("TOKENIZERS_PARALLELISM"),
            "date": datetime.date.today().isoformat()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/tokenize_throughput.json")
    ap.add_argument("--repeats", type=int, default=5, help="timed throughput runs per method (median reported)")
    ap.add_argument("--train-repeats", type=int, default=3, help="timed trainings per paradigm (median reported)")
    ap.add_argument("--paradigm", choices=PARADIGMS, action="append", help="only these (repeatable)")
    ap.add_argument("--skip-training", action="store_true")
    args = ap.parse_args()
    paradigms = args.paradigm or list(PARADIGMS)

    result = {"command": "python " + " ".join([f"benchmarks/{Path(__file__).name}", *sys.argv[1:]]),
              "machine": machine(), "repeats": args.repeats, "train_repeats": args.train_repeats,
              "batch_docs": BATCH, "training": {}, "throughput": {}}
    if not args.skip_training:
        for p in paradigms:
            print(f"training {p} x{args.train_repeats} ...", file=sys.stderr)
            result["training"][p] = bench_training(p, args.train_repeats)
    for p in paradigms:
        for c in CORPORA:
            print(f"throughput {p}/{c} x{args.repeats} ...", file=sys.stderr)
            result["throughput"][f"{p}/{c}"] = bench_throughput(p, c, args.repeats)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")

    if result["training"]:
        print(f"{'paradigm':<9}{'kind':<10}{'M chars':>8}{'MB':>7}{'median s':>10}{'s / M chars':>12}")
        for p, t in result["training"].items():
            print(f"{p:<9}{t['kind']:<10}{t['mchars']:>8.2f}{t['mb_utf8']:>7.2f}{t['median_seconds']:>10.2f}"
                  f"{t['seconds_per_mchar']:>12.2f}")
        print()
    print(f"{'paradigm/corpus':<16}{'tokens':>10}{'stage tok/s':>13}{'encode_batch':>14}{'ebatch_fast':>13}"
          f"{'ovh vs eb':>11}{'ovh vs fast':>12}")
    for key, t in result["throughput"].items():
        print(f"{key:<16}{t['tokens']:>10,}{t['stage']['tokens_per_s']:>13,}{t['encode_batch']['tokens_per_s']:>14,}"
              f"{t['encode_batch_fast']['tokens_per_s']:>13,}{t['overhead_vs_encode_batch']:>11.1%}"
              f"{t['overhead_vs_encode_batch_fast']:>12.1%}")
    print(f"\nwrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
