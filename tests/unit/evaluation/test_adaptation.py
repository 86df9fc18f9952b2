"""The adaptation verdict: at each label count the method to use is the one training the fewest weights among those
the seeds do not separate from the best (twice the pooled seed std); the others are named as falling short."""

from __future__ import annotations

from stages.evaluation.adaptation import sentences, verdict


def row(method, weights, **points):
    return {"kind": "method", "series": f"bert-{method}", "method": method, "init": "dapt",
            "trainable_parameters": weights, "stored_bytes": weights * 4,
            "points": {n[1:]: {"mean": m, "std": s, "runs": 3} for n, (m, s) in points.items()}}


ROWS = [row("full", 1_000_000, n100=(0.50, 0.02), n1000=(0.80, 0.01)),
        row("lora", 20_000, n100=(0.49, 0.02), n1000=(0.70, 0.01)),
        row("frozen", 2_000, n100=(0.30, 0.02), n1000=(0.40, 0.01)),
        {"kind": "baseline", "series": "tfidf", "method": "baseline", "init": "-", "trainable_parameters": 10,
         "stored_bytes": None, "points": {"100": {"mean": 0.9, "std": 0.0, "runs": 1}}}]


def test_the_cheapest_method_within_the_noise_of_the_best_is_used():
    v = {x["train_examples"]: x for x in verdict(ROWS, [100, 1000])}
    assert v[100]["best"] == "bert-full" and v[100]["use"] == "bert-lora"   # 0.01 apart, pooled std 0.02
    assert set(v[100]["short"]) == {"bert-frozen"}                           # 0.20 below: beyond 2 x 0.02
    assert v[1000]["use"] == "bert-full" and set(v[1000]["short"]) == {"bert-lora", "bert-frozen"}
    assert all(x["use"] != "tfidf" for x in v.values())                     # baselines are shown, not chosen


def test_one_seed_resolves_nothing():
    one = [dict(r, points={n: dict(c, runs=1) for n, c in r["points"].items()}) for r in ROWS[:3]]
    v = verdict(one, [1000])[0]
    assert v["use"] == "bert-frozen" and not v["short"]


def test_the_sentences_name_the_method_its_score_and_the_shortfalls():
    text = sentences("bert", {"rows": ROWS, "verdict": verdict(ROWS, [100, 1000])})
    assert text[0].startswith("BERT at 100 labels: use **lora** (0.490 ± 0.020, 20 k weights trained)")
    assert "full scores 0.010 more, within twice the pooled seed std (0.020), and trains 50x the weights" in text[0]
    assert "frozen -0.200 (pooled std 0.020)" in text[0]
    assert text[1].startswith("BERT at 1000 labels: use **full**") and "lora -0.100" in text[1]
