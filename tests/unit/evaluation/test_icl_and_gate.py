"""In-context scoring (the cached prompt gives the same label scores as scoring each full sequence), prompt
lengths, and the model quality gate's selection and verdict."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from stages.evaluation.gate import ModelGateConfig, decide
from stages.evaluation.icl import IclConfig, PromptBuilder, calibrate, icl_accuracy, label_scores
from tests.unit.finetuning.conftest import LABELS


@pytest.fixture(scope="module")
def gpt(models):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = models.models["gpt"]
    return AutoModelForCausalLM.from_pretrained(str(path)).eval(), AutoTokenizer.from_pretrained(str(path))


def brute_force(model, prompt: list[int], labels: list[list[int]]) -> np.ndarray:
    out = []
    with torch.no_grad():
        for ids in labels:
            seq = torch.tensor([prompt + ids])
            logp = torch.log_softmax(model(input_ids=seq).logits[0].double(), -1)
            out.append(sum(logp[len(prompt) - 1 + j, t].item() for j, t in enumerate(ids)))
    return np.array(out)


def test_cached_label_scores_equal_full_sequence_scores(gpt):
    model, tok = gpt
    prompt = tok("The old farmer visited the market.\nSection:", add_special_tokens=False)["input_ids"]
    labels = [tok(" " + w, add_special_tokens=False)["input_ids"] for w in ["river", "market", "castle",
                                                                             "hamradio electronics"]]
    assert max(map(len, labels)) > 1 and min(map(len, labels)) == 1  # single- and multi-token labels
    np.testing.assert_allclose(label_scores(model, prompt, labels), brute_force(model, prompt, labels),
                               rtol=1e-4, atol=1e-4)


def test_prompts_fit_the_context_and_too_many_shots_fail(gpt):
    _, tok = gpt
    b = PromptBuilder(tok, LABELS, separator="\nSection:", context=128)
    long = "word " * 200
    for shots in (0, 1, 5):
        ids = b.prompt(long, [(long, i % 3) for i in range(shots)])
        assert len(ids) + b.widest <= 128
        assert ids[-len(b.sep):] == b.sep
    with pytest.raises(ValueError, match="30 shots do not fit a context of 128"):
        b.budget(30)


def test_icl_is_reproducible_and_reports_each_k(gpt):
    model, tok = gpt
    rows = [(f"the {w} by the {w}", i % 3) for i, w in enumerate(["river", "market", "castle"] * 8)]
    cfg = IclConfig(shots=(0, 2), max_examples=9, separator="\nSection:", seed=3, orderings=2)
    a = icl_accuracy(model, tok, LABELS, rows[:12], rows[12:], cfg, context=64)
    b = icl_accuracy(model, tok, LABELS, rows[:12], rows[12:], cfg, context=64)
    assert a == b and a["examples"] == 9
    for k in ("0", "2"):
        for r in (a[k], a[k]["calibrated"]):
            assert 0 <= r["accuracy"] <= 1 and 1 <= r["predicted_labels"] <= 3 and r["accuracy_std"] >= 0
    assert (a["0"]["orderings"], a["2"]["orderings"]) == (1, 2) and a["0"]["accuracy_std"] == 0
    assert a["tokens_per_example"] == {"0": 64, "2": 21}


class WordTokenizer:
    """One id per whitespace-separated word (enough for PromptBuilder)."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}

    def __call__(self, text, add_special_tokens=False, verbose=False):
        return {"input_ids": [self.vocab.setdefault(w, len(self.vocab)) for w in text.split()]}


def test_contextual_calibration_removes_a_label_bias():
    # a scorer with a strong prior for label 0 (log-odds 3) plus a weaker signal (1) for the query's label:
    # uncalibrated it always says 0; the content-free inputs measure the prior and calibration removes it
    tok = WordTokenizer()
    cue = {"harbour": 0, "factory": 1, "museum": 2}
    sep = tok("Section:")["input_ids"]

    def score(ids):
        end = max(i for i in range(len(ids)) if ids[i: i + len(sep)] == sep)
        query = set(ids[max(0, end - 2): end])                   # the query's words ("the <cue>")
        logits = np.array([3.0, 0.0, 0.0])
        for w, label in cue.items():
            if tok.vocab.get(w) in query:
                logits[label] += 1.0
        return logits - np.log(np.exp(logits).sum())

    rows = [(f"the {w}", label) for w, label in cue.items()] * 4
    cfg = IclConfig(shots=(0, 2), max_examples=0, separator="\nSection:", orderings=3)
    r = icl_accuracy(None, tok, LABELS, rows, rows, cfg, context=64, score=score)
    for k in ("0", "2"):
        assert r[k]["accuracy"] == pytest.approx(1 / 3, abs=1e-4) and r[k]["predicted_labels"] == 1
        assert r[k]["calibrated"]["accuracy"] == 1.0 and r[k]["calibrated"]["macro_f1"] == 1.0
    p = np.array([0.7, 0.2, 0.1])
    np.testing.assert_allclose(calibrate(p, p), [1 / 3] * 3)     # the bias itself calibrates to uniform


@pytest.mark.parametrize("mode", ["shared", "per_query"])
def test_demonstrations_are_shared_per_ordering_or_drawn_per_query(mode):
    """shared (Zhao et al. 2021): one demonstration list per ordering for all queries, so calibration's
    content-free prompts run once per ordering; per_query: a new list for each query."""
    tok = WordTokenizer()
    sep = tok("Section:")["input_ids"]
    prompts = []

    def score(ids):
        prompts.append(list(ids))
        return np.log(np.array([0.5, 0.3, 0.2]))

    rows = [(f"the {w} number {i}", i % 3) for i, w in enumerate(["harbour", "factory", "museum"] * 6)]
    cfg = IclConfig(shots=(2,), max_examples=0, separator="\nSection:", orderings=2, demonstrations=mode,
                    content_free=("N/A", ""))
    icl_accuracy(None, tok, LABELS, rows[:9], rows[9:], cfg, context=64, score=score)

    def ends(ids):
        return [i for i in range(len(ids)) if ids[i: i + len(sep)] == sep]

    def demos(ids):  # everything before the query: the demonstration part of the prompt
        e = ends(ids)
        return tuple(ids[: max(i for i in range(e[-2], e[-1]) if ids[i] == tok.vocab["the"])])

    queries = [p for p in prompts if tok.vocab["number"] in p[ends(p)[-1] - 2: ends(p)[-1]]]  # not "N/A"
    assert len(queries) == 2 * 9
    per_ordering = [{demos(p) for p in queries[o * 9: (o + 1) * 9]} for o in range(2)]
    calibration = len(prompts) - len(queries)
    if mode == "shared":
        assert [len(d) for d in per_ordering] == [1, 1] and per_ordering[0] != per_ordering[1]
        assert calibration == 2 * 2  # two content-free inputs, once per ordering
    else:
        assert all(len(d) > 1 for d in per_ordering)
        assert calibration > 2 * 2


def test_unknown_demonstrations_mode_is_refused():
    with pytest.raises(ValueError, match="demonstrations"):
        IclConfig(demonstrations="sometimes")


def run(name, val, test_f1, test_acc=0.5):
    return {"best_val_macro_f1": val, "test_macro_f1": test_f1, "test_accuracy": test_acc,
            "majority_test_macro_f1": 0.1, "majority_test_accuracy": 0.4}


def test_gate_selects_on_validation_never_on_test():
    runs = {"bert-random": run("a", 0.30, 0.50), "gpt-dapt": run("b", 0.40, 0.20)}
    verdict = decide(runs, ModelGateConfig(min_macro_f1_margin=0.05))
    assert verdict["selected"] == "gpt-dapt" and verdict["passed"]   # the test split does not choose
    only = decide(runs, ModelGateConfig(candidates=("bert-random",)))
    assert only["selected"] == "bert-random"


def test_gate_fails_below_the_margins():
    runs = {"bert-dapt": run("a", 0.3, 0.12, test_acc=0.6)}
    verdict = decide(runs, ModelGateConfig(min_macro_f1_margin=0.05))
    assert not verdict["passed"]
    assert [c["passed"] for c in verdict["checks"]] == [False, True]
    assert verdict["checks"][0]["value"] == pytest.approx(0.02)
    assert not decide({"x": run("a", 0.3, 0.5, test_acc=0.3)}, ModelGateConfig())["passed"]  # below majority acc
    with pytest.raises(ValueError, match="no fine-tuned run named 'gpt-nope'"):
        decide(runs, ModelGateConfig(candidates=("gpt-nope",)))


def test_gate_ignores_runs_without_a_validation_score_and_reports_seeds():
    runs = {"a-x": run("a", float("nan"), 0.9), "b-y": run("b", 0.2, 0.5) | {"seeds": [{}, {}, {}],
                                                                            "test_macro_f1_std": 0.01}}
    verdict = decide(runs, ModelGateConfig())
    assert verdict["selected"] == "b-y" and verdict["seeds"] == 3 and "mean over 3 seeds" in verdict["selected_by"]
    assert verdict["metrics"]["test_macro_f1_std"] == 0.01


@pytest.mark.parametrize("mode", ["shared", "per_query"])
def test_report_says_how_the_demonstrations_were_drawn(mode):
    from stages.evaluation.report import icl_section

    spread = {"accuracy": 0.1, "accuracy_std": 0.01, "macro_f1": 0.05, "macro_f1_std": 0.01}
    run = {"examples": 9, "tokens_per_example": {"0": 64, "2": 21},
           **{k: {**spread, "calibrated": spread} for k in ("0", "2")}}
    result = {"icl": {"gpt-dapt": run}, "majority": {"test_accuracy": 0.3, "test_macro_f1": 0.1},
              "config": {"icl": {"orderings": 3, "demonstrations": mode, "shots": [0, 2], "separator": "\nSection:",
                                 "content_free": ["N/A"]}}}
    text = "\n".join(icl_section(result))
    if mode == "shared":
        assert "3 demonstration lists" in text and "shared by every query" in text and "anew" not in text
    else:
        assert "3 prompt orderings per query" in text and "shared" not in text
    assert "| gpt-dapt | 2 | 0.100 ± 0.010 |" in text
