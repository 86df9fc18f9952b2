"""Permuted LM through the pretrain stage: GPT-2 trains on it, its held-out loss is the targets' cross-entropy,
it saves as a stock GPT2LMHeadModel (which then generates and fine-tunes as any GPT), and the card says so."""

from __future__ import annotations

import math

from stages.pretrain import main
from tests.unit.training.conftest import read_json, write_params


def test_gpt_pretrains_with_permuted_lm_and_saves_a_stock_model(datasets, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    params = write_params(tmp_path / "params.yaml", objective="permuted", budget_tokens=24 * 4 * 32)
    out, metrics = tmp_path / "plm", tmp_path / "m.json"
    assert main(datasets.args("gpt", out, params, metrics=metrics, checkpoints=tmp_path / "ck")) == 0
    m = read_json(metrics)
    info = read_json(out / "training.json")
    losses = [row["loss"] for row in info["history"]]
    assert losses[-1] < losses[0]  # it learns
    assert math.isfinite(m["eval_loss"]) and 0 <= m["eval_accuracy"] <= 1 and "eval_perplexity" not in m
    # ceil(32 / 6) = 6 targets per block of 32: the body runs over 38 rows, the output layer at 6 of them
    params_causal = write_params(tmp_path / "p2.yaml", budget_tokens=4 * 4 * 32)
    assert main(datasets.args("gpt", tmp_path / "clm", params_causal, metrics=tmp_path / "c.json")) == 0
    assert m["flops_per_token"] != read_json(tmp_path / "c.json")["flops_per_token"]
    model, loading = AutoModelForCausalLM.from_pretrained(str(out), output_loading_info=True)
    assert not loading["missing_keys"] and not loading["unexpected_keys"]
    tok = AutoTokenizer.from_pretrained(str(out))
    enc = tok("The old farmer", return_tensors="pt")
    with torch.no_grad():
        gen = model.generate(**enc, max_new_tokens=3, min_new_tokens=3, do_sample=False, pad_token_id=tok.eos_token_id)
    assert gen.shape[1] == enc["input_ids"].shape[1] + 3
    assert "permuted language modelling (XLNet" in (out / "README.md").read_text()
