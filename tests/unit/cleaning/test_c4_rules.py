"""C4's line and page rules, one behaviour per test, in the reference's terms (c4_utils.clean_page)."""

from __future__ import annotations

import pytest

from stages.cleaning.base import Doc
from stages.cleaning.c4 import BadWordsFilter, C4LinesFilter, C4Rules, PageLengthFilter, compile_badwords, normalize_url

GOOD = [
    "The committee met on Tuesday to review the annual budget.",
    "Several members asked for more time to read the report.",
    "A final vote is expected before the end of the month.",
]


def clean(lines, rules=C4Rules()):
    f = C4LinesFilter(rules, reject_samples=5)
    doc = Doc(id="d", text="\n".join(lines), source="t", url=None, meta="{}")
    reason = f.apply(doc)
    return reason, doc.text, f.stats.lines_dropped


def test_good_page_is_kept_and_lines_are_stripped():
    reason, text, dropped = clean(["   " + GOOD[0] + "  ", GOOD[1], GOOD[2]])
    assert reason is None
    assert text == "\n".join(GOOD)
    assert not dropped


def test_citation_markers_are_removed():
    reason, text, _ = clean([GOOD[0].replace("annual", "annual[1]"), GOOD[1] + "[edit]",
                             "It was adopted[citation needed] without any changes at all.", GOOD[2]])
    assert reason is None
    assert "[1]" not in text and "[edit]" not in text and "[citation needed]" not in text
    assert "annual budget." in text


def test_lines_without_terminal_punctuation_or_with_ellipsis_are_dropped():
    reason, text, dropped = clean(GOOD + ["Home | About us | Contact the team", "And then the story goes on...",
                                          'He said it was "the best budget in years."'])
    assert reason is None
    assert "Home" not in text and "goes on" not in text
    assert text.endswith('"the best budget in years."')  # a closing quote is an end mark
    assert dropped["no_end_mark"] == 2


def test_short_lines_are_dropped():
    reason, text, dropped = clean(GOOD + ["Click here to buy."])  # four words
    assert reason is None and "Click" not in text and dropped["too_few_words"] == 1


def test_too_few_sentences_drops_the_page():
    assert clean(GOOD[:2])[0] == "too_few_sentences"
    assert clean(GOOD[:2], C4Rules(min_sentences=2))[0] is None


def test_lorem_ipsum_drops_the_page():
    assert clean(GOOD + ["Lorem ipsum dolor sit amet, consectetur adipiscing."])[0] == "lorem_ipsum"


def test_curly_brace_drops_the_page_but_only_on_a_line_that_passed_earlier_rules():
    assert clean(GOOD + ["The function returns {a: 1} for every input."])[0] == "curly_brace"
    # the same brace on a line without an end mark is dropped as a line first, as in the reference
    reason, text, _ = clean(GOOD + ["var x = {a: 1}"])
    assert reason is None and "{" not in text
    assert clean(GOOD + ["The function returns {a: 1} for every input."], C4Rules(curly_brace=False))[0] is None


def test_javascript_and_policy_lines_are_dropped():
    reason, text, dropped = clean(GOOD + ["Please enable JavaScript to view this page.",
                                          "Read our Privacy Policy before you continue.",
                                          "This site uses cookies to improve your visit."])
    assert reason is None and text == "\n".join(GOOD)
    assert dropped["javascript"] == 1 and dropped["policy"] == 2


def test_a_line_with_a_word_over_1000_characters_is_dropped():
    reason, text, dropped = clean(GOOD + ["This line holds " + "x" * 1001 + " inside it."])
    assert reason is None and "xxx" not in text and dropped["too_long_word"] == 1


def test_switching_rules_off():
    rules = C4Rules(end_marks=(), min_words_per_line=0, min_sentences=0, policy=False, javascript=False)
    reason, text, _ = clean(["Home", "Enable javascript", "privacy policy"], rules)
    assert reason is None and text == "Home\nEnable javascript\nprivacy policy"


def test_page_length_limit():
    f = PageLengthFilter(C4Rules(max_page_chars=100))
    assert f.apply(Doc(id="a", text="x" * 101, source="", url=None, meta="")) == "too_long"
    assert f.apply(Doc(id="a", text="x" * 100, source="", url=None, meta="")) is None


@pytest.mark.parametrize("text, dropped", [
    ("He grabbed a cutlass and asked for assistance.", False),
    ("The class of bass players passed the test.", False),
    ("You are an ass, he said.", True),
    ("ass at the very start", True),
    ("and at the very end: ass", True),
    ("Two words: 2 girls 1 cup.", True),
])
def test_bad_words_match_only_as_whole_words(text, dropped):
    f = BadWordsFilter(["ass", "2 girls 1 cup"])
    assert (f.apply(Doc(id="a", text=text, source="", url=None, meta="")) == "badword") is dropped


def test_bad_words_regex_escapes_words():
    assert compile_badwords(["a.b"]).search("axb") is None


def test_normalize_url_as_c4():
    assert normalize_url("https://www.example.com/a/?utm_source=x") == "example.com/a"
    assert normalize_url("http://example.com/page/") == "example.com/page"


def test_bad_documents_never_crash_a_filter():
    f = C4LinesFilter(C4Rules())
    junk = Doc(id="j", text="\x00\x01\xff" * 1000 + "\n" + "a" * 500_000, source="", url=None, meta="")
    assert f(junk) is False
    assert f.stats.dropped == {"too_few_sentences": 1}


def test_the_trie_regex_matches_exactly_where_c4s_flat_alternation_does():
    import random
    import re

    words = ["ass", "asshole", "2 girls 1 cup", "a.b", "b", "bo", "bob", "xx", "x-rated", "ñu", "a$$"]
    flat = re.compile(r"(?:\W|^)(" + "|".join(re.escape(w) for w in words) + r")(?:\W|$)")
    trie = compile_badwords(words)
    rng = random.Random(0)
    pieces = words + ["a", "s", "h", "o", "l", "e", " ", ".", "$", "-", "\n", "girls", "1", "cup", "ñ", "u"]
    for _ in range(20_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 8)))
        assert (flat.search(text) is None) == (trie.search(text) is None), repr(text)
