"""What the stage writes: models that stock transformers loads (fill-mask, generate), training.json with the
run's fingerprint, inputs' hashes and metrics, the metrics and plot files; and DAPT from a saved model."""

from __future__ import annotations

import csv
import hashlib
import math

import pytest
import torch

from stages.pretrain import main
from tests.unit.training.conftest import read_json, weights, write_params

PARADIGMS = ("gpt", "bert", "t5")


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def pretrained(datasets, tmp_path_factory):
    """One short pre-training run per paradigm: {paradigm: (output folder, metrics path, plot path)}."""
    root = tmp_path_factory.mktemp("pretrained")
    params = write_params(root / "params.yaml")
    runs = {}
    for p in PARADIGMS:
        out, metrics, plot = root / "models" / p, root / f"metrics-{p}.json", root / f"plot-{p}.tsv"
        rc = main(datasets.args(p, out, params, checkpoints=root / "ck" / p, metrics=metrics, plot=plot))
        assert rc == 0, p
        runs[p] = (out, metrics, plot)
    return runs


def test_bert_works_in_the_fill_mask_pipeline(pretrained):
    from transformers import AutoModelForMaskedLM, pipeline

    out = pretrained["bert"][0]
    model, info = AutoModelForMaskedLM.from_pretrained(str(out), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]        # nothing newly initialised
    fill = pipeline("fill-mask", model=str(out), top_k=3, device="cpu")
    preds = fill("The old farmer [MASK] the river near the station.")
    assert len(preds) == 3
    assert all({"score", "token", "token_str", "sequence"} <= set(p) for p in preds)
    scores = [p["score"] for p in preds]
    assert scores == sorted(scores, reverse=True) and all(0 <= s <= 1 for s in scores)
    assert all(0 <= p["token"] < model.config.vocab_size for p in preds)
    assert all("[MASK]" not in p["sequence"] for p in preds)


def test_gpt_generates_with_its_tokenizer(pretrained):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = pretrained["gpt"][0]
    tok = AutoTokenizer.from_pretrained(str(out))
    model, info = AutoModelForCausalLM.from_pretrained(str(out), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    enc = tok("The old farmer", return_tensors="pt")
    gen = model.generate(**enc, max_new_tokens=6, min_new_tokens=6, do_sample=False, pad_token_id=tok.eos_token_id)
    assert gen.shape == (1, enc["input_ids"].shape[1] + 6)
    assert (gen[0, : enc["input_ids"].shape[1]] == enc["input_ids"][0]).all()
    assert tok.decode(gen[0]).startswith("The old farmer")
    # the saved weights are the trained ones (the tokenizer and model agree on the vocabulary)
    assert model.config.vocab_size == len(tok)


def test_t5_generates_from_a_sentinel_input(pretrained):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    out = pretrained["t5"][0]
    tok = AutoTokenizer.from_pretrained(str(out))
    model, info = AutoModelForSeq2SeqLM.from_pretrained(str(out), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    enc = tok("The old farmer <extra_id_0> the river near the station.", return_tensors="pt")
    sentinel = tok.convert_tokens_to_ids("<extra_id_0>")
    assert sentinel == model.config.vocab_size - 1 and sentinel in enc["input_ids"][0].tolist()
    gen = model.generate(**enc, max_new_tokens=4, do_sample=False)
    assert gen.shape[0] == 1 and 2 <= gen.shape[1] <= 5
    assert gen[0, 0].item() == model.config.decoder_start_token_id == tok.pad_token_id
    assert isinstance(tok.decode(gen[0], skip_special_tokens=False), str)


@pytest.mark.parametrize("paradigm", PARADIGMS)
def test_training_json_metrics_and_plot(pretrained, datasets, paradigm):
    out, metrics_path, plot_path = pretrained[paradigm]
    info = read_json(out / "training.json")
    manifest_path = datasets.tokens[paradigm] / "manifest.json"
    manifest = read_json(manifest_path)
    assert info["stage"] == "pretrain" and info["paradigm"] == paradigm and info["corpus"] == "general"
    assert len(info["fingerprint"]) == 16 and int(info["fingerprint"], 16) >= 0
    inputs = info["inputs"]
    assert inputs["tokens"]["manifest_sha256"] == sha256(manifest_path)
    assert inputs["tokens"]["corpus"] == manifest["corpora"]["general"]
    assert inputs["tokenizer"]["sha256"] == sha256(datasets.tok[paradigm] / "tokenizer.json")
    assert inputs["tokenizer"]["sha256"] == manifest["tokenizer"]["sha256"]
    assert inputs["init"] is None
    assert info["config"]["model"] == {"layers": 1, "d_model": 32, "heads": 2, "d_ff": 64, "dropout": 0.0,
                                       "arch": "bert", "conv_kernel": 3, "local_bias": 0.0,
                                       "cross_match": 0.0}
    assert info["layout"] == manifest["layout"]
    # the tokenizer travels with the model
    assert (out / "tokenizer.json").read_bytes() == (datasets.tok[paradigm] / "tokenizer.json").read_bytes()

    metrics = read_json(metrics_path)
    assert info["metrics"] == metrics
    assert metrics["steps"] == 24 and metrics["tokens"] == 24 * 4 * 32
    assert metrics["devices"] == 1
    # nothing that differs between two runs of the same inputs (timings live in the live log)
    assert not {"tokens_per_second", "flops_per_second", "mfu", "resumed_from"} & set(metrics)
    assert all(set(r) == {"step", "tokens", "loss", "lr"} for r in info["history"])
    assert metrics["parameters"] > 0 and metrics["flops_per_token"] > 6 * metrics["parameters"] * 0.1
    assert math.isfinite(metrics["eval_loss"]) and 0 < metrics["eval_loss"] < 20
    assert math.isfinite(metrics["train_loss"]) and metrics["train_loss"] == info["history"][-1]["loss"]
    if paradigm == "gpt":
        assert metrics["eval_perplexity"] == pytest.approx(math.exp(metrics["eval_loss"]), rel=1e-3)
    if paradigm == "bert":
        assert 0 <= metrics["eval_accuracy"] <= 1
    # the loss came down from the uniform guess over the vocabulary
    assert info["history"][-1]["loss"] < info["history"][0]["loss"]
    assert [r["step"] for r in info["history"]] == [4, 8, 12, 16, 20, 24]
    assert [e["step"] for e in info["evals"]] == [12, 24]
    assert info["evals"][-1]["eval_loss"] == metrics["eval_loss"]

    rows = list(csv.DictReader(plot_path.read_text().splitlines(), delimiter="\t"))
    assert [int(r["step"]) for r in rows] == [4, 8, 12, 16, 20, 24]
    assert [float(r["loss"]) for r in rows] == [r["loss"] for r in info["history"]]
    assert [r["eval_loss"] != "" for r in rows] == [False, False, True, False, False, True]


def test_dapt_starts_from_the_pretrained_weights(pretrained, datasets, tmp_path, monkeypatch):
    import stages.training.loop as loop
    import stages.training.pretrain as pretrain_core

    init = pretrained["gpt"][0]
    seen = {}
    real_train = loop.train

    def spy(model, *a, **k):
        seen["weights"] = {n: t.detach().clone() for n, t in model.state_dict().items()}
        return real_train(model, *a, **k)

    monkeypatch.setattr(pretrain_core, "train", spy)  # the pre-training core calls the loop's train
    params = write_params(tmp_path / "params.yaml")
    out, metrics = tmp_path / "dapt", tmp_path / "dapt.json"
    assert main(datasets.args("gpt", out, params, section="dapt", corpus="domain", init=init, metrics=metrics,
                              checkpoints=tmp_path / "ck")) == 0
    start = seen["weights"]
    for name, tensor in weights(init).items():
        assert torch.equal(start[name], tensor), name                      # training began from the init
    assert any(not torch.equal(weights(out)[n], t) for n, t in weights(init).items())   # and moved on

    info = read_json(out / "training.json")
    assert info["stage"] == "dapt" and info["corpus"] == "domain"
    assert info["inputs"]["init"] == {"path": str(init), "sha256": sha256(init / "model.safetensors")}
    assert set(info["config"]) == {"train"}
    assert info["config"]["train"]["lr"] == 0.001
    assert info["inputs"]["tokens"]["corpus"] == read_json(datasets.tokens["gpt"] / "manifest.json")["corpora"]["domain"]
    m = read_json(metrics)
    assert m["stage"] == "dapt" and m["steps"] == 8 and m["tokens"] == 8 * 4 * 32
    assert m["parameters"] == read_json(pretrained["gpt"][1])["parameters"]
    assert [r["step"] for r in info["history"]] == [2, 4, 6, 8]
    # the general model already knows the language: its first DAPT loss is far below a fresh model's first loss
    general_first = read_json(init / "training.json")["history"][0]["loss"]
    assert info["history"][0]["loss"] < general_first


def test_dapt_from_a_model_with_another_vocabulary_is_exit_1(pretrained, datasets, tmp_path, capsys):
    params = write_params(tmp_path / "params.yaml")
    bert = pretrained["bert"][0]
    rc = main(datasets.args("gpt", tmp_path / "out", params, section="dapt", corpus="domain", init=bert))
    assert rc == 1
    err = capsys.readouterr().err
    assert "error: " in err and str(bert) in err and "vocabulary 293 != the tokenizer's 400" in err
    assert not (tmp_path / "out").exists()


def test_a_rerun_of_the_same_inputs_writes_the_same_bytes(pretrained, datasets, tmp_path):
    """What git tracks (metrics, plot) and what dvc.lock hashes (the model folder) do not change when the same
    run is repeated: the timings that would (tokens/s, MFU) are in the untracked live log only."""
    out, metrics_path, plot_path = pretrained["gpt"]
    params = write_params(tmp_path / "params.yaml")
    again = tmp_path / "again"
    live = tmp_path / "live"
    assert main(datasets.args("gpt", again, params, metrics=tmp_path / "m.json", plot=tmp_path / "p.tsv",
                              live=live)) == 0
    assert (tmp_path / "m.json").read_bytes() == metrics_path.read_bytes()
    assert (tmp_path / "p.tsv").read_bytes() == plot_path.read_bytes()
    for f in sorted(p.name for p in out.iterdir()):
        assert (again / f).read_bytes() == (out / f).read_bytes(), f
    summary = read_json(live / "metrics.json")
    assert summary["tokens_per_second"] > 0 and summary["train_seconds"] > 0 and summary["steps"] == 24
    loss_rows = (live / "plots" / "metrics" / "train" / "loss.tsv").read_text().splitlines()
    assert len(loss_rows) == 1 + 6 and (live / "plots" / "metrics" / "train" / "tokens_per_second.tsv").is_file()


def test_the_stage_writes_a_model_card_from_its_inputs(datasets, tmp_path):
    """``--sources`` manifests -> the folder's card.json and README.md; DAPT carries the general run's."""
    import json

    from stages.provenance import stagecard

    manifests = []
    for corpus, licence in (("general", "MIT, research use"), ("domain", "DFSG-free")):
        (tmp_path / corpus).mkdir()
        (tmp_path / corpus / "manifest.json").write_text(json.dumps({
            "corpus": corpus, "counts": {"documents": 60},
            "sources": [{"kind": "files", "description": corpus, "licence": licence, "records": 60}]}))
        manifests.append(str(tmp_path / corpus / "manifest.json"))
    params = write_params(tmp_path / "params.yaml")
    pre, dapt = tmp_path / "pre", tmp_path / "dapt"
    assert main(datasets.args("bert", pre, params, metrics=tmp_path / "m.json") + ["--sources", manifests[0]]) == 0
    assert main(datasets.args("bert", dapt, params, section="dapt", corpus="domain", init=pre)
                + ["--sources", manifests[1]]) == 0
    facts = stagecard.read_facts(dapt)
    metrics = read_json(tmp_path / "m.json")
    assert facts["training"][0] == {"stage": "pretrain", "corpus": "general", "tokens": metrics["tokens"],
                                    "objective": stagecard.objective_text("bert", "", 0.15)}
    assert [t["stage"] for t in facts["training"]] == ["pretrain", "dapt"] and set(facts["corpora"]) == {
        "general", "domain"}
    for folder in (pre, dapt):
        assert (folder / "README.md").read_text() == stagecard.render(stagecard.read_facts(folder))
        assert stagecard.check(folder, {c: json.loads((tmp_path / c / "manifest.json").read_text())
                                        for c in ("general", "domain")})[0] == []
    assert "licence: DFSG-free" in (dapt / "README.md").read_text()


def test_a_missing_sources_manifest_is_named_in_the_card(datasets, tmp_path):
    params = write_params(tmp_path / "params.yaml")
    out = tmp_path / "out"
    assert main(datasets.args("gpt", out, params) + ["--sources", str(tmp_path / "nowhere" / "manifest.json")]) == 0
    assert "sources and licences: unknown" in (out / "README.md").read_text()
