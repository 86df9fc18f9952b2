"""Fine-tuning methods: frozen (the pooled head only) and lora (adapters + head), their folders (head, adapter,
adaptation.json) and their reload against a checked base."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from stages.config import ConfigError
from stages.finetuning.core import Body, finetune, load_config, predict, read_task
from tests.unit.finetuning.conftest import LABELS, write_params


def _train(models, tmp_path, paradigm, method, init="pretrained", **extra):
    cfg = load_config(write_params(tmp_path / "p.yaml", epochs=1, head="pooled", method=method, **extra), paradigm)
    out = finetune(cfg, Body(paradigm, init, models.models[paradigm]), df=read_task(models.task), log=lambda m: None)
    return cfg, out


def _body(models, paradigm):
    from transformers import AutoModel, T5EncoderModel

    body = (T5EncoderModel if paradigm == "t5" else AutoModel).from_pretrained(str(models.models[paradigm]))
    # BERT's pooler is not in the pre-trained folder: drawn anew at each load, and unused by the pooled head
    return {k: v for k, v in body.state_dict().items() if not k.startswith("pooler.")}


def _reload_predictions(models, tmp_path, cfg, out, paradigm):
    """The in-memory classifier's predictions on the test texts and those of its saved folder, reloaded."""
    from stages.finetuning.heads import HeadSpec, make_classifier

    clf, tok = out["classifier"], out["tokenizer"]
    texts = read_task(models.task).query("split == 'test'")["text"].tolist()
    before = predict(clf, tok, texts, cfg, paradigm)
    saved = tmp_path / "saved"
    clf.model.save_pretrained(str(saved))
    tok.save_pretrained(str(saved))
    again = make_classifier(paradigm, saved, LABELS, tok, init="pretrained", seed=5, spec=HeadSpec(head="pooled"))
    return before, predict(again, tok, texts, cfg, paradigm), saved


@pytest.mark.parametrize("paradigm", ["bert", "gpt"])
def test_frozen_trains_the_head_only_and_reloads_the_same_predictions(models, tmp_path, paradigm):
    cfg, out = _train(models, tmp_path, paradigm, "frozen")
    model = out["classifier"].model
    assert not model.body.training or not model.training  # the body stays in eval mode while the head trains
    model.train()
    assert model.norm.training and not model.body.training
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    head = sum(p.numel() for n, p in model.named_parameters() if not n.startswith("body."))
    assert trainable == head > 0
    base = _body(models, paradigm)
    for k, v in base.items():  # the body's weights are the base's, unchanged
        assert torch.equal(v, model.body.state_dict()[k]), k
    before, after, saved = _reload_predictions(models, tmp_path, cfg, out, paradigm)
    np.testing.assert_array_equal(before, after)
    assert not (saved / "model.safetensors").exists()  # the head only
    rec = json.loads((saved / "adaptation.json").read_text())
    assert rec["method"] == "frozen" and rec["base"] == str(models.models[paradigm])
    assert rec["trainable_parameters"] == head and rec["total_parameters"] > head
    from stages.finetuning.adapt import base_digest

    assert rec["base_digest"] == base_digest(models.models[paradigm])


@pytest.mark.parametrize("paradigm", ["bert", "gpt", "t5"])
def test_lora_trains_adapters_and_head_and_reloads_the_same_predictions(models, tmp_path, paradigm):
    cfg, out = _train(models, tmp_path, paradigm, "lora", lora={"r": 4, "alpha": 8, "dropout": 0.0})
    model = out["classifier"].model
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n or not n.startswith("body.") for n in names)
    assert any("lora_B" in n for n in names)
    lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
    assert any(p.abs().sum() > 0 for p in lora_b)  # the adapters trained (B starts at zero)
    base = _body(models, paradigm)
    for n, p in model.body.get_base_model().named_parameters():  # the base weights unchanged
        if "lora_" not in n and not n.startswith("pooler."):
            assert torch.equal(p, base[n.replace(".base_layer", "")]), n
    before, after, saved = _reload_predictions(models, tmp_path, cfg, out, paradigm)
    np.testing.assert_array_equal(before, after)
    assert (saved / "adapter_model.safetensors").is_file() and (saved / "adapter_config.json").is_file()
    assert not (saved / "model.safetensors").exists()
    targets = json.loads((saved / "adapter_config.json").read_text())["target_modules"]
    assert len(targets) > 1 and targets == sorted(targets)  # PEFT's set, written in a stable order
    rec = json.loads((saved / "adaptation.json").read_text())
    assert rec["method"] == "lora" and rec["lora"]["r"] == 4
    assert rec["trainable_parameters"] == sum(p.numel() for n, p in model.named_parameters() if p.requires_grad)


def test_a_changed_base_is_refused_naming_the_folder(models, tmp_path):
    from stages.finetuning.heads import HeadSpec, make_classifier

    base = tmp_path / "base"
    shutil.copytree(models.models["bert"], base)
    cfg = load_config(write_params(tmp_path / "p.yaml", epochs=1, head="pooled", method="frozen"), "bert")
    out = finetune(cfg, Body("bert", "pretrained", base), df=read_task(models.task), log=lambda m: None)
    saved = tmp_path / "saved"
    out["classifier"].model.save_pretrained(str(saved))
    (base / "extra.txt").write_text("changed")
    with pytest.raises(ValueError, match=rf"{saved}: its base model {base} has digest .* not "):
        make_classifier("bert", saved, LABELS, out["tokenizer"], init="pretrained", seed=0, spec=HeadSpec(head="pooled"))


def test_random_init_with_lora_trains_in_full(models, tmp_path):
    _, out = _train(models, tmp_path, "bert", "lora", init="random")
    model = out["classifier"].model
    assert model.adaptation is None and all(p.requires_grad for p in model.parameters())
    model.save_pretrained(str(tmp_path / "saved"))
    assert (tmp_path / "saved" / "model.safetensors").is_file()
    assert not (tmp_path / "saved" / "adaptation.json").exists()


@pytest.mark.parametrize(("paradigm", "overrides", "key"), [
    ("gpt", {"method": "lora", "head": "pooled", "lora": {"targets": ["query"]}}, "finetune.gpt.lora.targets"),
    ("t5", {"method": "lora", "head": "pooled", "lora": {"targets": ["c_attn"]}}, "finetune.t5.lora.targets"),
    ("bert", {"method": "frozen", "head": "stock"}, "finetune.bert.method"),
    ("bert", {"method": "adapters"}, "finetune.bert.method"),
    ("bert", {"method": "lora", "head": "pooled", "lora": {"r": 0}}, "finetune.bert.lora.r"),
    ("bert", {"method": "lora", "head": "pooled", "reinit_layers": 1}, "finetune.bert.reinit_layers"),
])
def test_bad_method_config_is_refused_naming_the_key(tmp_path, paradigm, overrides, key):
    with pytest.raises(ConfigError, match=rf"^{key}: "):
        load_config(write_params(tmp_path / "p.yaml", **overrides), paradigm)


def test_stage_writes_the_head_and_a_card_naming_the_method_and_base(models, tmp_path):
    from stages.finetune import main
    from stages.provenance import stagecard

    params = write_params(tmp_path / "p.yaml", epochs=1, head="pooled", method="lora")
    out = tmp_path / "bert-pretrained"
    assert main(["--paradigm", "bert", "--init", "pretrained", "--params", str(params), "--task", str(models.task),
                 "--model", str(models.models["bert"]), "--output", str(out), "--metrics", str(tmp_path / "m.json"),
                 "--report", str(tmp_path / "gate.json"), "--no-progress"]) == 0
    facts = stagecard.read_facts(out)
    rec = json.loads((out / "adaptation.json").read_text())
    assert facts["adaptation"] == {k: rec[k] for k in ("method", "trainable_parameters", "base", "base_digest")}
    assert facts["parameters"] == rec["total_parameters"]
    card = (out / "README.md").read_text()
    assert "method `lora`" in card and rec["base_digest"] in card
    saved = json.loads((out / "finetune.json").read_text())
    assert saved["config"]["method"] == "lora"
    # the service loads the folder as it loads any fine-tuned folder
    from stages.serving.inference import TextClassifier

    assert TextClassifier(out).scores(["The farmer visited the castle."]).shape == (1, 3)


def test_a_packaged_base_loads_instead_of_the_path_named_and_is_checked_by_digest(models, tmp_path):
    """The model store's copy of the base (with BentoML's model.yaml and model.sig beside its files) is what a
    Bento's service loads: the workspace path adaptation.json names is not read; a changed byte is named."""
    import re

    from stages.finetuning.heads import HeadSpec, make_classifier

    cfg, out = _train(models, tmp_path, "bert", "lora", lora={"r": 4, "alpha": 8, "dropout": 0.0})
    before, _, saved = _reload_predictions(models, tmp_path, cfg, out, "bert")
    rec = json.loads((saved / "adaptation.json").read_text())
    (saved / "adaptation.json").write_text(json.dumps({**rec, "base": str(tmp_path / "not-here")}))
    stored = tmp_path / "store" / "base"
    shutil.copytree(models.models["bert"], stored)
    (stored / "model.yaml").write_text("name: base\n")
    (stored / "model.sig").write_text("{}")
    tok = out["tokenizer"]
    texts = read_task(models.task).query("split == 'test'")["text"].tolist()
    again = make_classifier("bert", saved, LABELS, tok, init="pretrained", seed=5, spec=HeadSpec(head="pooled", base=stored))
    np.testing.assert_array_equal(predict(again, tok, texts, cfg, "bert"), before)
    (stored / "config.json").write_text((stored / "config.json").read_text() + " ")
    with pytest.raises(ValueError, match=re.escape(f"{saved}: its base model {stored} (packaged from "
                                                   f"{tmp_path / 'not-here'}) has digest ") + ".* not "
                       + re.escape(f"{rec['base_digest']} as recorded in adaptation.json (the packaged base is not "
                                   "the one it was fine-tuned on)")):
        make_classifier("bert", saved, LABELS, tok, init="pretrained", seed=5, spec=HeadSpec(head="pooled", base=stored))
    with pytest.raises(ValueError, match="was given, but the folder has no adaptation.json"):
        make_classifier("bert", models.models["bert"], LABELS, tok, init="pretrained", seed=5, spec=HeadSpec(head="pooled", base=stored))


ADAPTER_SAVE = """
import sys
from pathlib import Path
import torch
from transformers import BertConfig, BertModel
from stages.finetuning.adapt import adapt_body, sort_adapter_config
torch.manual_seed(0)
body = BertModel(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=32))
adapt_body(body, "bert", {"method": "lora", "r": 2, "alpha": 4, "dropout": 0.0}).save_pretrained(sys.argv[1])
sort_adapter_config(Path(sys.argv[1]))
"""


def test_the_adapter_config_has_the_same_bytes_under_any_hash_seed(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    written = []
    for seed in ("1", "2", "3"):  # PEFT holds target_modules as a set: its order follows the hash seed
        out = tmp_path / seed
        subprocess.run([sys.executable, "-c", ADAPTER_SAVE, str(out)], cwd=root, check=True, timeout=300,
                       env={**os.environ, "PYTHONHASHSEED": seed})
        written.append((out / "adapter_config.json").read_bytes())
    assert written[0] == written[1] == written[2]
    assert json.loads(written[0])["target_modules"] == sorted(json.loads(written[0])["target_modules"])
