"""Optional filters beyond C4: Gopher quality and repetition, MinHash near-duplicates."""

from __future__ import annotations

import numpy as np

from stages.cleaning.base import Doc
from stages.cleaning.gopher import GopherQualityConfig, GopherQualityFilter, GopherRepetitionConfig, GopherRepetitionFilter
from stages.cleaning.dedup import MinHashConfig, band_hashes, duplicates

PROSE = ("The river rose quickly after the storm, and the people of the valley moved their animals to higher "
         "ground. Many of them had seen floods before, but this one came faster than any they could remember. "
         "By the evening the water had reached the old mill, and the bridge to the town was closed. Volunteers "
         "with boats helped the families that were still waiting near the church to leave before night fell.")


def doc(text):
    return Doc(id="d", text=text, source="", url=None, meta="")


def test_gopher_quality_keeps_prose_and_names_each_failure():
    f = GopherQualityFilter(GopherQualityConfig(enabled=True))
    assert f.apply(doc(PROSE)) is None
    assert f.apply(doc("Too short to count.")) == "too_few_words"
    assert f.apply(doc(" ".join(["#tag"] * 60))) in ("hash_ratio", "stop_words")
    assert f.apply(doc("\n".join(f"- item number {i} of the list and the rest" for i in range(60)))) == "bullet_lines"
    assert f.apply(doc(" ".join(["1234"] * 80) + " the and")) == "non_alpha_words"
    no_stop = " ".join(["river", "valley", "animal", "storm", "flood"] * 12)
    assert f.apply(doc(no_stop)) == "stop_words"


def test_gopher_repetition_drops_repeated_lines_and_ngrams():
    f = GopherRepetitionFilter(GopherRepetitionConfig(enabled=True))
    assert f.apply(doc(PROSE)) is None
    assert f.apply(doc("\n".join(["Buy cheap watches today now."] * 5 + ["Other text here."]))) == "dup_lines"
    spam = " ".join(["buy now"] * 50)
    assert f.apply(doc(spam)) is not None


def test_minhash_removes_near_duplicates_and_keeps_the_smallest_id():
    cfg = MinHashConfig(enabled=True)
    variant = PROSE.replace("old mill", "old stone mill")
    other = "A completely different text about cooking pasta with tomatoes, garlic and basil for dinner tonight."
    texts = {"b": PROSE, "a": variant, "c": other}
    ids = list(texts)
    bands = np.stack([band_hashes(t, cfg) for t in texts.values()])
    assert duplicates(ids, bands) == {"b"}  # "a" and "b" collide; the smaller id survives
    assert duplicates(["x"], bands[:1]) == set()


def test_minhash_is_deterministic_for_a_seed():
    cfg = MinHashConfig(enabled=True, seed=3)
    assert band_hashes(PROSE, cfg).tolist() == band_hashes(PROSE, cfg).tolist()
    assert band_hashes(PROSE, cfg).tolist() != band_hashes(PROSE, MinHashConfig(enabled=True, seed=4)).tolist()
