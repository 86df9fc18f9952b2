"""In-context scoring (the cached prompt gives the same label scores as scoring each full sequence), prompt
lengths, and the model quality gate's selection and verdict."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from stages.evaluation.gate import ModelGateConfig, decide
from stages.evaluation.icl import IclConfig, PromptBuilder, icl_accuracy, label_scores
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
    cfg = IclConfig(shots=(0, 2), max_examples=9, separator="\nSection:", seed=3)
    a = icl_accuracy(model, tok, LABELS, rows[:12], rows[12:], cfg, context=64)
    b = icl_accuracy(model, tok, LABELS, rows[:12], rows[12:], cfg, context=64)
    assert a == b and a["examples"] == 9
    for k in ("0", "2"):
        assert 0 <= a[k]["accuracy"] <= 1 and 1 <= a[k]["predicted_labels"] <= 3
    assert a["tokens_per_example"] == {"0": 64, "2": 21}


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
