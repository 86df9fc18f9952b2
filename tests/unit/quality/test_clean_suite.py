"""The gate after cleaning: its per-document features, and the sampled second language opinion."""

from __future__ import annotations

import json

import pandas as pd

from stages.cleaning.config import CleanConfig
from stages.cleaning.base import Doc
from stages.cleaning.config import CleanerConfig
from stages.common.documents import doc_id
from stages.cleaning.features import document_features
from stages.quality.clean_suite import cleaned_suite
from stages.quality.gate import validate
from tests.helpers import english_page

GERMAN = ("Die Stadt liegt am Ufer des Flusses und hat viele alte Häuser. Im Sommer kommen viele Besucher "
          "in die Altstadt. Die Kirche wurde im zwölften Jahrhundert gebaut und ist heute ein Museum.")


def docs(texts: list[str]) -> list[Doc]:
    return [Doc(id=f"d{i}", text=t, source="s", url=None, meta=json.dumps({})) for i, t in enumerate(texts)]


def test_the_second_opinion_is_asked_of_a_content_hash_sample_whatever_the_sharding() -> None:
    texts = [english_page(i) for i in range(60)] + [GERMAN + f" Nummer {i}." for i in range(20)]
    cfg = CleanerConfig()
    every = document_features(docs(texts), cfg)
    assert every["english_second_opinion"].tolist() == [True] * 60 + [False] * 20

    half = document_features(docs(texts), cfg, english_rate=0.5)
    asked = half["english_second_opinion"].notna()
    in_sample = [int(doc_id(t)[:8], 16) < 0x80000000 for t in texts]
    assert asked.tolist() == in_sample and 20 < sum(in_sample) < 60
    assert half.loc[asked, "english_second_opinion"].tolist() == every.loc[asked, "english_second_opinion"].tolist()
    # the same documents are asked when the corpus is cut into other shards
    parts = pd.concat([document_features(docs(texts)[:33], cfg, english_rate=0.5),
                       document_features(docs(texts)[33:], cfg, english_rate=0.5)], ignore_index=True)
    assert parts["english_second_opinion"].notna().tolist() == in_sample
    # every other feature is measured on every document
    assert half.drop(columns="english_second_opinion").equals(every.drop(columns="english_second_opinion"))


def english_check(features: pd.DataFrame):
    tables, checks = cleaned_suite(features, columns=["id", "text", "source", "url", "meta"], duplicate_lines=0,
                                   cfg=CleanConfig(), kept_fraction=0.5)
    result = validate("clean-test", tables, checks)
    return next(c for c in result.checks if c.name.endswith("(english_second_opinion)"))


def test_the_gate_counts_the_sampled_documents_only() -> None:
    texts = [english_page(i) for i in range(80)]
    feats = document_features(docs(texts), CleanerConfig(), english_rate=0.25)
    asked = int(feats["english_second_opinion"].notna().sum())
    assert 5 < asked < 40
    check = english_check(feats)
    assert check.success
    # 3 non-English answers among the sampled documents are more than 5% of them: the gate fails, although
    # they are under 5% of all 80 documents
    no = feats.index[feats["english_second_opinion"].notna()][:3]
    feats.loc[no, "english_second_opinion"] = False
    check = english_check(feats)
    assert not check.success
