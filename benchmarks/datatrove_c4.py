"""Throughput of datatrove's C4 filters on one core, configured to C4's own thresholds.

Peer measurement for our C4 cleaner: datatrove's C4QualityFilter followed by C4BadWordsFilter
(English list, keep_fraction 0) run on the same input, one core, in-process. Not part of the
project's environment: run it with a separate venv that has datatrove (see --help epilog).

    /tmp/dtvenv/bin/python benchmarks/datatrove_c4.py --input data/ingested/general/documents.parquet \
        --out benchmarks/results/datatrove_c4_general.json [--limit N] [--repeat R] [--kept-out kept.jsonl]

Timing excludes imports, reading the input, building Documents and loading spaCy / compiling
the bad-words regex (a warm-up on a few documents does that first). MB means 10^6 UTF-8 bytes of
input text.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

# C4's own settings (tensorflow_datasets text/c4_utils.py); datatrove's defaults are 3 words / 5 sentences.
C4_MIN_WORDS_PER_LINE = 5
C4_MIN_NUM_SENTENCES = 3
C4_MAX_WORD_LENGTH = 1000
C4_END_MARKS = (".", "?", "!", '"')  # datatrove's END_PUNCTUATION also has "'"

DEFAULT_BADWORDS_JSON = "/tmp/naughty-words/package/en.json"
WARMUP_DOCS = 20

SEMANTIC_NOTES = [
    "Thresholds: C4QualityFilter defaults to min_words_per_line=3, min_num_sentences=5; set here to C4's 5 / 3. "
    "max_word_length=1000, citation removal, lorem ipsum / '{' page drops, javascript and policy line drops and "
    "the order of the line checks match c4_utils.clean_page.",
    "End marks: datatrove's END_PUNCTUATION is . ? ! \" ' (adds the single quote); C4's is . ? ! \". It is a module "
    "constant, not a constructor argument; this script patches it to C4's tuple unless --stock-endmarks is given.",
    "Word count: datatrove counts words on the line BEFORE citation removal (words = line.split() is computed "
    "once, first); C4 counts len(line.split()) AFTER removing citations, so 'One two three [1] [2].' passes "
    "datatrove's 5-word check (kept as 'One two three  .') but fails C4's (4 words).",
    "Sentence counting: datatrove counts sentences per kept line with spaCy (spacy.blank('en') + the rule-based "
    "'sentencizer' pipe, via datatrove.utils.text.split_into_sentences, language 'eng' -> SpaCyTokenizer); C4 "
    "uses NLTK punkt english.pickle. Counts differ on abbreviations, numbers, quotes, etc. (the sentencizer "
    "splits 'See Fig. 3 for details.' in two). NLTK is not used.",
    "Page kept: both keep the page as '\\n'.join(kept lines).strip(), with lines stripped and split by "
    "str.splitlines() (split_paragraph=True, the default).",
    "Bad words regex: same as current tfds get_badwords_filter_fn, (?:\\W|^)(w1|w2|...)(?:\\W|$) with re on "
    "text.lower() of the whole cleaned page. The original C4 (tfds 2.x) instead used [^a-z](...)[^a-z] per "
    "kept line inside clean_page (before sentence counting).",
    "Bad words list: datatrove downloads the same pinned LDNOOBW 'en' file as tfds (commit 25e679f0, 377 words) "
    "and subtracts an allowlist meant for ja/zh (sm, ..., no effect on English). npm naughty-words@1.0.2 en.json "
    "equals that file; naughty-words@1.2.0 has 403 words (26 more, e.g. 'sexual', 'sexuality', 'horny', "
    "'viagra'), so it drops more pages than C4.",
    "Bad words sampling: keep_fraction=0 drops every matching page (tfds filter_fraction=1.0, its default for "
    "C4, is equivalent). For keep_fraction>0 datatrove samples with numpy RNG, tfds with an MD5 hash of the URL.",
    "Bad words language: datatrove picks the list from doc.metadata['language'] (default 'en', as here); tfds "
    "from langdetect's label, and only after langdetect >= 0.99 and line dedup.",
    "Not covered by these two filters (C4 does them in other steps): page length <= 1.9e5 chars, URL "
    "normalization and dedup, corpus-wide exact line dedup followed by a second punkt 3-sentence check on the "
    "deduped page, langdetect English >= 0.99 with seed 0. C4's order is length, URL dedup, clean_page, line "
    "dedup, langdetect, bad words; here clean_page and bad words run back to back.",
]


def load_records(path: str, limit: int | None) -> list[dict]:
    """Read id/text/url rows from Parquet or JSONL(.gz)."""
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        cols = [c for c in ("id", "text", "url") if c in table.column_names]
        rows = table.select(cols).slice(0, limit).to_pylist() if limit else table.select(cols).to_pylist()
    else:
        opener = gzip.open if path.endswith(".gz") else open
        rows = []
        with opener(path, "rt", encoding="utf-8") as f:
            for line in f:
                if limit and len(rows) >= limit:
                    break
                if line.strip():
                    rows.append(json.loads(line))
    return [
        {"id": str(r.get("id", i)), "text": r["text"], "url": r.get("url") or (r.get("metadata") or {}).get("url")}
        for i, r in enumerate(rows)
    ]


def seed_badwords_cache(words_json: str) -> dict:
    """Put the English bad-words list where C4BadWordsFilter looks for its download, so it runs offline.

    C4BadWordsFilter._get_badwords calls datatrove.io.cached_asset_path_or_download(_EN_BADWORDS_URL,
    namespace="filters", subfolder="c4_badwords"). That resolves the folder with huggingface_hub's
    cached_assets_path(library_name="datatrove", namespace="filters", subfolder="c4_badwords")
    (default ~/.cache/huggingface/assets/datatrove/filters/c4_badwords, moved by HF_ASSETS_CACHE or
    HF_HOME), names the file strip_protocol(url).replace("/", "_"), and skips the download when
    "<file>.completed" exists. The file is read as plain text, one word per line (line.strip()).
    So: write the JSON array as UTF-8 lines, then create the empty ".completed" marker.
    """
    from datatrove.pipeline.filters import c4_filters
    from fsspec.core import strip_protocol
    from huggingface_hub import cached_assets_path

    words = json.loads(Path(words_json).read_text(encoding="utf-8"))
    words = [w.strip() for w in words if w.strip()]  # an empty entry would make the regex match almost anything
    folder = cached_assets_path(library_name="datatrove", namespace="filters", subfolder="c4_badwords")
    target = Path(folder) / strip_protocol(c4_filters._EN_BADWORDS_URL).replace("/", "_")
    body = "\n".join(words) + "\n"
    target.write_text(body, encoding="utf-8")
    Path(f"{target}.completed").touch()
    return {
        "source": words_json,
        "words": len(words),
        "sha256": hashlib.sha256(body.encode("utf-8")).hexdigest(),
        "cache_file": str(target),
    }


def make_docs(records: list[dict]):
    from datatrove.data import Document

    return [Document(text=r["text"], id=r["id"], metadata={"url": r["url"]} if r["url"] else {}) for r in records]


def make_filters():
    from datatrove.pipeline.filters import C4BadWordsFilter, C4QualityFilter

    quality = C4QualityFilter(
        split_paragraph=True,
        remove_citations=True,
        filter_no_terminal_punct=True,
        min_num_sentences=C4_MIN_NUM_SENTENCES,
        min_words_per_line=C4_MIN_WORDS_PER_LINE,
        max_word_length=C4_MAX_WORD_LENGTH,
        filter_lorem_ipsum=True,
        filter_javascript=True,
        filter_curly_bracket=True,
        filter_policy=True,
        language="eng",
    )
    badwords = C4BadWordsFilter(keep_fraction=0.0, fail_on_missing_language=True, seed=0, default_language="en")
    badwords._get_badwords("en")  # compile the regex now (it is otherwise built on the first document)
    return quality, badwords


def warm_up(records: list[dict]) -> None:
    """Load spaCy's English tokenizer (cached process-wide by datatrove) on a few documents."""
    quality, badwords = make_filters()
    for doc in make_docs(records[:WARMUP_DOCS]):
        if quality.filter(doc) is True:
            badwords.filter(doc)


def step_summary(step) -> dict:
    stats = step.stats
    drops = {k: v.total for k, v in stats.stats.items() if k.startswith("dropped")}
    return {
        "name": step.name,
        "seconds": round(stats.time_stats.total, 4),
        "docs_in": stats.stats["total"].total if "total" in stats.stats else 0,
        "docs_forwarded": stats.stats["forwarded"].total if "forwarded" in stats.stats else 0,
        "drops": drops,
        "line_counts": {k: v.total for k, v in stats.stats.items() if k.startswith("line-")},
    }


def run_inprocess(records: list[dict]) -> tuple[float, list, list]:
    """One pass through datatrove's own generator chain (what an executor task runs), no executor."""
    docs = make_docs(records)
    quality, badwords = make_filters()
    start = time.perf_counter()
    kept = list(badwords.run(quality.run(iter(docs))))
    seconds = time.perf_counter() - start
    return seconds, kept, [step_summary(quality), step_summary(badwords)]


def run_executor(records: list[dict]) -> tuple[float, int]:
    """Same filters under LocalPipelineExecutor(tasks=1, workers=1): adds logging, deepcopy, stats files."""
    from datatrove.executor import LocalPipelineExecutor

    docs = make_docs(records)
    kept = []

    def source(_data, _rank, _world_size):  # a plain function: the executor's deepcopy does not copy the docs
        return iter(docs)

    def sink(data, _rank, _world_size):
        for doc in data:
            kept.append(doc)
            yield doc

    quality, badwords = make_filters()
    with tempfile.TemporaryDirectory() as logs:
        executor = LocalPipelineExecutor(
            pipeline=[source, quality, badwords, sink], tasks=1, workers=1, logging_dir=logs, skip_completed=False
        )
        start = time.perf_counter()
        executor.run()
        seconds = time.perf_counter() - start
    return seconds, len(kept)


PACKAGES = ("datatrove", "spacy", "regex", "numpy", "pyarrow", "huggingface_hub", "fsspec", "fasteners", "aiohttp")


def versions(packages=PACKAGES) -> dict:
    """Python, platform and the installed versions of ``packages`` (None where one is missing)."""
    out = {"python": platform.python_version(), "platform": platform.platform(), "cpu": platform.processor()}
    for pkg in packages:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="venv: python3 -m venv /tmp/dtvenv && /tmp/dtvenv/bin/pip install datatrove==0.10.1 spacy regex "
        "fasteners aiohttp requests pyarrow (fasteners: datatrove's asset cache lock; aiohttp/requests: fsspec "
        "needs them to name an https asset even when it is cached); word list: cd /tmp && npm pack naughty-words@1.0.2 && mkdir -p naughty-words && "
        "tar xzf naughty-words-1.0.2.tgz -C naughty-words",
    )
    parser.add_argument("--input", required=True, help="Parquet with a text column, or JSONL(.gz) with text")
    parser.add_argument("--out", required=True, help="result JSON")
    parser.add_argument("--limit", type=int, default=None, help="first N documents only")
    parser.add_argument("--repeat", type=int, default=3, help="timed passes; seconds reported as the median")
    parser.add_argument("--kept-out", default=None, help="JSONL of kept documents: id, url, cleaned text")
    parser.add_argument("--badwords-json", default=DEFAULT_BADWORDS_JSON, help="npm naughty-words en.json")
    parser.add_argument("--stock-endmarks", action="store_true", help="keep datatrove's end marks (adds ')")
    parser.add_argument("--executor", action="store_true", help="also time LocalPipelineExecutor(tasks=1)")
    parser.add_argument("--no-pin", action="store_true", help="do not pin the process to one CPU")
    args = parser.parse_args(argv)

    if not args.no_pin and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

    from datatrove.pipeline.filters import c4_filters
    from loguru import logger

    logger.remove()  # datatrove logs every pipeline step to stderr; keep the output to our summary
    logger.add(sys.stderr, level="WARNING")

    if not Path(args.badwords_json).exists():
        parser.error(f"{args.badwords_json} missing; see the epilog for the npm pack command")
    badwords_info = seed_badwords_cache(args.badwords_json)
    if not args.stock_endmarks:
        c4_filters.END_PUNCTUATION = C4_END_MARKS  # read as a module global on every line

    records = load_records(args.input, args.limit)
    input_bytes = sum(len(r["text"].encode("utf-8")) for r in records)
    warm_up(records)

    passes = [run_inprocess(records) for _ in range(max(1, args.repeat))]
    seconds = statistics.median(p[0] for p in passes)
    _, kept, steps = passes[0]
    mb = input_bytes / 1e6
    result = {
        "input": args.input,
        "limit": args.limit,
        "input_mb": round(mb, 4),
        "docs_in": len(records),
        "docs_kept": len(kept),
        "chars_in": sum(len(r["text"]) for r in records),
        "chars_out": sum(len(d.text) for d in kept),
        "bytes_out": sum(len(d.text.encode("utf-8")) for d in kept),
        "mode": "in-process generator chain C4QualityFilter.run -> C4BadWordsFilter.run, 1 core",
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "repeat": len(passes),
        "seconds": round(seconds, 4),
        "seconds_all": [round(p[0], 4) for p in passes],
        "mb_per_s": round(mb / seconds, 3),
        "mb_per_s_best": round(mb / min(p[0] for p in passes), 3),
        "per_filter": steps,
        "config": {
            "min_words_per_line": C4_MIN_WORDS_PER_LINE,
            "min_num_sentences": C4_MIN_NUM_SENTENCES,
            "max_word_length": C4_MAX_WORD_LENGTH,
            "end_marks": list(c4_filters.END_PUNCTUATION),
            "badwords_keep_fraction": 0.0,
            "badwords_language": "en",
            "badwords_list": badwords_info,
        },
        "versions": versions(),
        "semantic_differences_vs_tfds_c4": SEMANTIC_NOTES,
    }
    if args.executor:
        ex = [run_executor(records) for _ in range(max(1, args.repeat))]
        ex_seconds = statistics.median(e[0] for e in ex)
        result["executor"] = {
            "mode": "LocalPipelineExecutor(tasks=1, workers=1), docs fed by a function step",
            "seconds": round(ex_seconds, 4),
            "seconds_all": [round(e[0], 4) for e in ex],
            "mb_per_s": round(mb / ex_seconds, 3),
            "docs_kept": ex[0][1],
        }

    if args.kept_out:
        Path(args.kept_out).parent.mkdir(parents=True, exist_ok=True)
        with open(args.kept_out, "w", encoding="utf-8") as f:
            for d in kept:
                f.write(json.dumps({"id": d.id, "url": d.metadata.get("url"), "text": d.text}, ensure_ascii=False) + "\n")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    summary = {k: result[k] for k in ("input_mb", "docs_in", "docs_kept", "seconds", "mb_per_s")}
    print(json.dumps(summary | ({"executor_mb_per_s": result["executor"]["mb_per_s"]} if args.executor else {})))
    return 0


if __name__ == "__main__":
    sys.exit(main())
