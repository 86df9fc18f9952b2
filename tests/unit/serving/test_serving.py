"""The service's inference code on tiny models: the classifier answers what the fine-tuning stage measured;
the pre-trained models fill masks, continue prompts and fill sentinel spans."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from stages.serving.inference import FillMask, Generator, Text2Text, TextClassifier
from tests.unit.finetuning.conftest import LABELS
from tests.unit.finetuning.test_finetune import run


@pytest.mark.parametrize("paradigm", ["bert", "gpt", "t5"])
def test_classifier_reproduces_the_stage_test_accuracy(models, tmp_path, paradigm):
    rc, out = run(models, tmp_path, paradigm, "random")
    assert rc == 0
    metrics = json.loads((tmp_path / "m.json").read_text())
    test = pd.read_parquet(models.task)
    test = test[test["split"] == "test"]
    clf = TextClassifier(out, device="cpu", batch_size=7)  # batches unlike the stage's: same answers
    preds = clf.classify(test["text"].tolist())
    assert len(preds) == len(test)
    for p in preds:
        assert p["label"] in LABELS and list(p["scores"]) == LABELS
        assert sum(p["scores"].values()) == pytest.approx(1.0, abs=1e-4)
        assert p["label"] == max(p["scores"], key=p["scores"].get)
    accuracy = sum(p["label"] == y for p, y in zip(preds, test["label"])) / len(test)
    assert accuracy == pytest.approx(metrics["test_accuracy"], abs=1e-4)
    assert clf.classify([]) == []
    cut, whole = clf.classify(["network " * (clf.cfg.max_len * 2), "a font"])
    assert cut["truncated"] and cut["tokens"] == clf.cfg.max_len  # read as in training, and said so
    assert not whole["truncated"] and 0 < whole["tokens"] < clf.cfg.max_len


def test_classifier_needs_a_finetuned_folder(models):
    with pytest.raises(FileNotFoundError, match="finetune.json"):
        TextClassifier(models.models["bert"])


def test_fill_mask_ranks_candidates_for_each_mask(models):
    fm = FillMask(models.models["bert"], device="cpu")
    out = fm.fill("the old [MASK] visited the [MASK] .", top_k=3)
    assert len(out) == 2 and out[0]["position"] < out[1]["position"]
    for m in out:
        scores = [c["score"] for c in m["candidates"]]
        assert len(scores) == 3 and scores == sorted(scores, reverse=True) and 0 < sum(scores) <= 1
    with pytest.raises(ValueError, match=r"no \[MASK\] token"):
        fm.fill("nothing to fill here")


def test_generator_is_greedy_at_temperature_zero_and_seeded_when_sampling(models):
    gen = Generator(models.models["gpt"], device="cpu")
    a = gen.generate("The old farmer", max_new_tokens=6)
    assert a == gen.generate("The old farmer", max_new_tokens=6) and isinstance(a, str)
    s1 = gen.generate("The old farmer", max_new_tokens=6, temperature=1.0, seed=3)
    assert s1 == gen.generate("The old farmer", max_new_tokens=6, temperature=1.0, seed=3)
    assert gen.generate("The old farmer", max_new_tokens=6, temperature=1e-45) == a  # too cold to sample: greedy
    with pytest.raises(ValueError, match="at most"):
        gen.generate("word " * 5000, max_new_tokens=4)


def test_text2text_fills_sentinel_spans(models):
    t2t = Text2Text(models.models["t5"], device="cpu")
    out = t2t.generate("The old farmer <extra_id_0> the castle.", max_new_tokens=5)
    assert isinstance(out, str) and "<pad>" not in out and "</s>" not in out
