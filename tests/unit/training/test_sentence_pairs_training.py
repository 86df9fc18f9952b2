"""NSP and SOP in training: the pair head on [CLS], the summed loss (masked LM alone in evaluation), the head
saved beside the stock class and continued by DAPT, and a pre-training stage run end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from stages.objectives import for_paradigm, training_view
from stages.objectives.sentence_pairs import PAIR_HEAD_FILE, attach_pair_head
from stages.training.data import generators, make_batch
from stages.training.models import build_model, save_model
from tests.unit.training.test_electra import electra_params
from tests.unit.training.test_schedule_and_flops import BERT, SMALL


def pair_batch(task: str, rows: int = 6, seed: int = 3) -> dict:
    rng = np.random.default_rng(seed)
    blocks = rng.integers(5, BERT.vocab_size, size=(rows, BERT.block_len)).astype(np.uint32)
    blocks[:, 0], blocks[:, -1] = BERT.cls_id, BERT.sep_id
    ids = np.arange(rows)
    objective = for_paradigm(BERT, objective=task, select=0.3, sentence_ends=())
    return make_batch(objective, blocks, ids, generators(seed, 0, [0] * rows, ids))


@pytest.mark.parametrize("task", ["nsp", "sop"])
def test_the_loss_is_masked_lm_plus_the_pair_loss_on_cls(task):
    model = build_model(BERT, SMALL, seed=1)
    attach_pair_head(model, seed=0)
    batch = pair_batch(task)
    assert set(batch["pair_labels"].tolist()) <= {0, 1}
    view, prepare = training_view(model, for_paradigm(BERT, objective=task, select=0.3))
    out = view(**prepare(batch))
    mlm_view, mlm_prepare = training_view(model, for_paradigm(BERT))
    mlm = mlm_view(**mlm_prepare({k: batch[k] for k in ("input_ids", "attention_mask", "labels")}))
    torch.testing.assert_close(out.mlm_loss, mlm.loss)
    body = getattr(model, "deberta", None) or model.bert
    hidden = body(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])[0]
    expected = torch.nn.functional.cross_entropy(model.pair_head(hidden[:, 0]).float(), batch["pair_labels"])
    torch.testing.assert_close(out.pair_loss, expected)
    torch.testing.assert_close(out.loss, out.mlm_loss + out.pair_loss)
    out.loss.backward()
    assert model.pair_head[2].weight.grad.abs().sum() > 0
    model.eval()
    torch.testing.assert_close(view(**prepare(batch)).loss, out.mlm_loss.detach())  # evaluation: masked LM only


def test_the_view_refuses_a_model_without_a_pair_head():
    with pytest.raises(ValueError, match="pair_head"):
        training_view(build_model(BERT, SMALL, seed=1), for_paradigm(BERT, objective="sop"))


def test_saved_model_is_the_stock_class_with_the_pair_head_beside_it(tmp_path):
    from transformers import AutoModelForMaskedLM

    model = build_model(BERT, SMALL, seed=1)
    attach_pair_head(model, seed=5)
    save_model(model, tmp_path)
    assert hasattr(model, "pair_head") and (tmp_path / PAIR_HEAD_FILE).is_file()
    loaded = AutoModelForMaskedLM.from_pretrained(str(tmp_path))
    assert not hasattr(loaded, "pair_head")
    attach_pair_head(loaded, seed=99, init=tmp_path)  # DAPT continues the trained head
    for a, b in zip(model.pair_head.parameters(), loaded.pair_head.parameters()):
        assert torch.equal(a, b)


def test_pretrain_and_dapt_stages_train_sentence_order_prediction(datasets, tmp_path):
    from stages.pretrain import main

    path = electra_params(tmp_path, {"objective": "sop", "mlm_select": 0.25})
    out, dapt = tmp_path / "general", tmp_path / "dapt"
    assert main(datasets.args("bert", out, path, metrics=tmp_path / "m.json")) == 0
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert metrics["eval_loss"] > 0 and (out / PAIR_HEAD_FILE).is_file() and "eval_pair_accuracy" in metrics
    assert json.loads((out / "training.json").read_text())["config"]["train"]["objective"] == "sop"
    assert main(datasets.args("bert", dapt, path, section="dapt", corpus="domain", init=out)) == 0
    assert (dapt / PAIR_HEAD_FILE).is_file()


def test_evaluation_reports_the_pair_heads_accuracy_over_the_held_out_blocks():
    from stages.training.config import TrainConfig
    from stages.training.data import EVAL_KEY
    from stages.training.heldout import evaluate

    rng = np.random.default_rng(8)
    blocks = rng.integers(5, BERT.vocab_size, size=(10, BERT.block_len)).astype(np.uint32)
    blocks[:, 0], blocks[:, -1] = BERT.cls_id, BERT.sep_id
    model = build_model(BERT, SMALL, seed=1)
    attach_pair_head(model, seed=0)
    objective = for_paradigm(BERT, objective="sop", select=0.3, sentence_ends=())
    cfg = TrainConfig(micro_batch=4, eval_blocks=10, seed=3)
    result = evaluate(model, objective, blocks, cfg, "cpu", False)
    hits = 0
    model.eval()
    with torch.no_grad():
        for lo in range(0, 10, 4):  # the same micro-batches and masks as the evaluation
            ids = np.arange(lo, min(lo + 4, 10))
            batch = make_batch(objective, blocks, ids, generators(3, EVAL_KEY, [0] * len(ids), ids))
            hidden = model.deberta(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])[0] \
                if hasattr(model, "deberta") else model.bert(input_ids=batch["input_ids"],
                                                             attention_mask=batch["attention_mask"])[0]
            hits += int((model.pair_head(hidden[:, 0]).argmax(-1) == batch["pair_labels"]).sum())
    assert result["eval_pair_accuracy"] == round(hits / 10, 5)
    assert "eval_pair_accuracy" not in evaluate(model, for_paradigm(BERT, objective="masked_lm", select=0.3),
                                                blocks, cfg, "cpu", False)
