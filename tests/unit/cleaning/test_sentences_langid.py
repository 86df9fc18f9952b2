"""Punkt sentence counting and language ID for the C4 rules (stages.cleaning.sentences / .langid).

Expected splits below were checked against NLTK's Punkt algorithm fed the same English parameters
(benchmarks/cleaning_agreement.py); the two deliberate divergences of the package are pinned as such.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from stages.cleaning.langid import detect, get_langid, is_english
from stages.cleaning.sentences import count_sentences, split_sentences

ROOT = Path(__file__).resolve().parents[3]

ENGLISH = ("The committee met on Tuesday to discuss the new budget for the city's public libraries. "
           "Several members argued that the opening hours should be extended during the summer, while "
           "others wanted to spend the money on new books and computers for the children's section.")
FRENCH = ("Le comité s'est réuni mardi pour discuter du nouveau budget des bibliothèques publiques de la "
          "ville. Plusieurs membres ont demandé que les horaires d'ouverture soient prolongés pendant l'été.")
GERMAN = ("Der Ausschuss traf sich am Dienstag, um über den neuen Haushalt der städtischen Bibliotheken zu "
          "sprechen. Mehrere Mitglieder forderten längere Öffnungszeiten während der Sommermonate.")
CHINESE = "委员会周二开会讨论了城市公共图书馆的新预算。几位成员认为夏季应该延长开放时间，另一些人则希望为儿童区购买新书和电脑。"


@pytest.mark.parametrize(("text", "expected"), [
    ("Dr. Smith went to Washington. He arrived.", ["Dr. Smith went to Washington.", "He arrived."]),
    ("Mr. J. R. R. Tolkien wrote books.", ["Mr. J. R. R. Tolkien wrote books."]),
    ("The U.S. economy grew. It was 5 p.m. when we met.",
     ["The U.S. economy grew.", "It was 5 p.m. when we met."]),
    # decimals are never boundary candidates; an ellipsis ends a sentence only when the model says so
    ("The price rose 3.5 percent. It then fell to 2.75 percent.",
     ["The price rose 3.5 percent.", "It then fell to 2.75 percent."]),
    ("He paused... Then he spoke.", ["He paused... Then he spoke."]),
    ("It costs 3.5 dollars. Then... he left. Really?! Yes.",
     ["It costs 3.5 dollars.", "Then... he left.", "Really?!", "Yes."]),
    ('He said "Hi." Then left.', ['He said "Hi."', "Then left."]),
    ("no end mark at all", ["no end mark at all"]),
])
def test_split_matches_punkt(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected
    assert count_sentences(text) == len(expected)


def test_package_divergences_from_nltk_are_pinned() -> None:
    # NLTK gives ["Wow!!", "!"] and ["Wait .", ".", ".", "what?"]; the package keeps runs together.
    assert count_sentences("Wow!!!") == 1
    assert count_sentences("Wait . . . what?") == 2


@pytest.mark.parametrize("text", ["", " ", "\n\t ", "...", "a", "a.", "  padded line  ", "x. y. z.",
                                  "Hello world! ( Goodbye. )", 'She left. ")" Next one.',
                                  'Hi. ")"'])
def test_count_equals_len_split(text: str) -> None:
    # count_sentences has a no-end-mark shortcut and skips string building; it must stay exact, also
    # where boundary realignment swallows a span ('Hi. ")"' is 1 sentence, 2 spans before realignment)
    assert count_sentences(text) == len(split_sentences(text))


def test_empty_text_has_no_sentences() -> None:
    assert count_sentences("") == 0
    assert split_sentences("") == []
    assert count_sentences("   \n ") == 0


@pytest.mark.parametrize("backend", ["langdetect", "py3langid"])
def test_english_paragraph_is_kept(backend: str) -> None:
    assert is_english(ENGLISH, backend=backend) == (True, "ok")
    lang, prob = detect(ENGLISH, backend=backend)
    assert lang == "en" and 0.99 <= prob <= 1.0


@pytest.mark.parametrize(("text", "reason"), [
    (FRENCH, "not_english:fr"), (GERMAN, "not_english:de"), (CHINESE, "not_english:zh-cn"),
])
def test_other_languages_are_dropped_with_c4_reason(text: str, reason: str) -> None:
    assert is_english(text) == (False, reason)


@pytest.mark.parametrize("backend", ["langdetect", "py3langid"])
@pytest.mark.parametrize("text", ["", "   \n\t", "1234 5678 90", "!!! ... ???"])
def test_undetectable_text_is_dropped_without_raising(backend: str, text: str) -> None:
    keep, reason = is_english(text, backend=backend)
    assert not keep
    assert reason in {"langdetect_exception", "no_predictions", "low_confidence"} or reason.startswith(
        "not_english:")
    if text.strip() == "":
        assert detect(text, backend=backend) is None


def test_confidence_is_checked_before_language() -> None:
    # C4 counts an unsure non-English page as low confidence, not as another language
    lang, prob = detect("Otec matka syn.")
    assert lang != "en" and prob < 0.99
    assert is_english("Otec matka syn.") == (False, "low_confidence")
    assert is_english("Otec matka syn.", min_probability=0.5) == (False, f"not_english:{lang}")


def test_langdetect_is_deterministic_across_calls_threads_and_processes() -> None:
    texts = [ENGLISH, FRENCH, GERMAN, CHINESE, "Otec matka syn.", "Hello", "ok ok ok"]
    first = [detect(t) for t in texts]
    assert [detect(t) for t in texts] == first
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(detect, texts * 4)) == first * 4
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]);"
            "from stages.cleaning.langid import detect;"
            "print(json.dumps([detect(t) for t in json.load(sys.stdin)]))")
    out = subprocess.run([sys.executable, "-c", code, str(ROOT)], input=json.dumps(texts),
                         capture_output=True, text=True, check=True, timeout=120).stdout
    assert [tuple(p) if p else None for p in json.loads(out)] == first


def test_sentence_counts_are_stable_under_threads() -> None:
    texts = ["Dr. Smith went to Washington. He arrived.", ENGLISH, "Wow!!!", ""] * 25
    expected = [count_sentences(t) for t in texts]
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(count_sentences, texts)) == expected


def test_identifiers_are_loaded_once_and_unknown_backend_fails() -> None:
    assert get_langid("langdetect") is get_langid("langdetect")
    assert get_langid("py3langid") is get_langid("py3langid")
    with pytest.raises(ValueError, match="unknown language-ID backend"):
        get_langid("cld3")


def _engine_results(monkeypatch, engine: str, texts: list[str]) -> list:
    from stages.cleaning.langid import LangdetectID, Undetectable

    monkeypatch.setenv("LMPIPE_LANGDETECT", engine)
    ident = LangdetectID()
    out = []
    for t in texts:
        try:
            out.append(ident.best(t))
        except Undetectable as exc:
            out.append(str(exc))
    return ident.engine, out


def test_the_rust_engine_gives_langdetects_exact_probabilities(monkeypatch) -> None:
    """langdetect-rs runs the C4 backend when installed; its (language, probability) must be langdetect's
    bit for bit, on clear, mixed, short, ambiguous and featureless texts alike."""
    pytest.importorskip("langdetect_rs")
    words = {"en": "the people who live in this small town have always been proud of their river and bridges",
             "fr": "les habitants de cette petite ville ont toujours été fiers de leur rivière et de leurs ponts",
             "de": "die Menschen in dieser kleinen Stadt waren immer stolz auf ihren Fluss und ihre Brücken",
             "es": "la gente que vive en este pequeño pueblo siempre ha estado orgullosa de su río"}
    texts = list(words.values()) + ["", "12345 67890", "!!! ???", "ok", "Paris Berlin Madrid",
                                    words["en"] + " " + words["fr"], words["de"][:20], "日本語のテキストです"]
    texts += [" ".join(words[k].split()[i:i + 5]) for k in words for i in range(0, 10, 3)]
    rust_engine, rust = _engine_results(monkeypatch, "rust", texts)
    python_engine, python = _engine_results(monkeypatch, "python", texts)
    assert (rust_engine, python_engine) == ("langdetect-rs", "langdetect")
    assert rust == python
    assert {r[0] for r in rust if isinstance(r, tuple)} >= {"en", "fr", "de", "es"}
    assert "langdetect_exception" in rust


def test_a_wrong_engine_setting_is_an_error(monkeypatch) -> None:
    from stages.cleaning.langid import LangdetectID

    monkeypatch.setenv("LMPIPE_LANGDETECT", "fortran")
    with pytest.raises(ValueError, match="LMPIPE_LANGDETECT: one of auto, python, rust"):
        LangdetectID()


LIMIT_PAGES = [
    "",
    "One line. Two sentences.",
    "Dr.\nSmith arrived. He left.",                      # an abbreviation at a line's end: no boundary there
    "First line has no mark\nSecond one has. Two.\nThird.",
    "He said \"Hi.\"\n\")\" closing only.\nNext. And more. And more.",
    "a.\nb.\nc.\nd.\ne.\nf.\ng.\nh.\ni.",
    "Wait . . .\nwhat? Yes.\n\n\nNo.",
    "\n".join(f"Line {i} of the page ends here. It has two sentences." for i in range(40)),
    "Mr.\nJ.\nR.\nR.\nTolkien wrote books.",
]


@pytest.mark.parametrize("page", LIMIT_PAGES)
@pytest.mark.parametrize("limit", [0, 1, 2, 3, 5])
def test_count_with_a_limit_is_the_capped_count(page: str, limit: int) -> None:
    # C4 only compares a page's count with a minimum; counting prefixes of whole lines must give the same
    # answer as splitting the whole page, also where a line ends in an abbreviation.
    assert count_sentences(page, limit) == min(limit, count_sentences(page))


def test_any_text_with_a_non_space_character_has_a_sentence() -> None:
    # count_sentences(text, 1) answers without Punkt on this property; every string of up to 3 characters
    # from an alphabet of marks, quotes, brackets, letters and spaces checks it, realignment included.
    import itertools

    alphabet = ['.', '!', '?', '"', ')', '(', 'a', 'A', ' ', '\n', "'", ']', '…', '-', '1']
    for n in range(1, 4):
        for chars in itertools.product(alphabet, repeat=n):
            text = "".join(chars)
            assert (len(split_sentences(text)) >= 1) == bool(text.strip()), repr(text)
            assert count_sentences(text, 1) == min(1, len(split_sentences(text)))
