"""Masked LM with the halves' contrastive loss (DeCLUTR / Contriever-style crops): each block gives two rows,
the two halves of its longest document; row i pairs with row i + n; the loss is InfoNCE over the rows'
mean-pooled states (checked against a direct computation), added to masked LM in training only."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from stages.objectives import for_paradigm
from stages.objectives.contrastive import HalvesContrast
from stages.tokenization.layout import BlockLayout
from stages.training.data import generators, make_batch
from stages.training.models import build_model, contrastive_loss, training_view
from tests.unit.training.test_electra import electra_params
from tests.unit.training.test_schedule_and_flops import BERT, SMALL

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
LAYOUT = BlockLayout(paradigm="bert", seq_len=16, block_len=16, vocab_size=100, pad_id=PAD, unk_id=UNK,
                     cls_id=CLS, sep_id=SEP, mask_id=MASK)


def block(*docs: list[int]) -> np.ndarray:
    """[CLS] doc [SEP] doc [SEP] ... [PAD]..."""
    text = [CLS]
    for d in docs:
        text += list(d) + [SEP]
    row = np.full(LAYOUT.seq_len, PAD, dtype=np.int64)
    row[: len(text)] = text
    return row


def test_halves_come_from_the_longest_document_cut_in_the_middle():
    obj = HalvesContrast(LAYOUT)
    assert obj.half_len == 9  # ceil((16 - 2) / 2) + 2
    a, b = obj.halves(block([10, 11, 12], [20, 21, 22, 23, 24, 25, 26], [30]))
    assert a.tolist() == [CLS, 20, 21, 22, 23, SEP, PAD, PAD, PAD]
    assert b.tolist() == [CLS, 24, 25, 26, SEP, PAD, PAD, PAD, PAD]
    # one document filling the block (no inner [SEP]): the whole text, 14 tokens, 7 and 7
    whole = list(range(40, 54))
    a, b = obj.halves(block(whole))
    assert a[1:8].tolist() == whole[:7] and b[1:8].tolist() == whole[7:] and a[8] == b[8] == SEP
    # equal lengths: the first; a one-token document: A holds it, B is [CLS] [SEP]
    assert obj.halves(block([10, 11], [20, 21]))[0][1] == 10
    a, b = obj.halves(block([10]))
    assert a[:3].tolist() == [CLS, 10, SEP] and b[:2].tolist() == [CLS, SEP]


def test_a_batch_is_first_halves_then_second_halves_masked_per_block():
    rng = np.random.default_rng(0)
    blocks = np.stack([block(list(rng.integers(10, 100, size=14))) for _ in range(6)])
    obj = for_paradigm(LAYOUT, objective="contrastive", select=0.3, weight=2.0, temperature=0.1)
    assert isinstance(obj, HalvesContrast) and (obj.weight, obj.temperature) == (2.0, 0.1)
    ids = np.arange(6)
    batch = make_batch(obj, blocks, ids, generators(5, 0, [0] * 6, ids))
    assert batch["input_ids"].shape == (12, obj.half_len)
    labels = batch["labels"].numpy()
    original = np.where(labels != -100, labels, batch["input_ids"].numpy())
    for i in range(6):
        assert original[i, 1:8].tolist() == blocks[i, 1:8].tolist()
        assert original[i + 6, 1:8].tolist() == blocks[i, 8:15].tolist()
    selected = (labels != -100).mean()
    assert 0.15 < selected < 0.45
    # a block's masks are its own: the same block in another micro-batch gets the same two rows
    alone = make_batch(obj, blocks, np.array([3]), generators(5, 0, [0], [3]))
    assert torch.equal(alone["input_ids"][0], batch["input_ids"][3])
    assert torch.equal(alone["input_ids"][1], batch["input_ids"][9])
    # ... and a new epoch draws new ones
    again = make_batch(obj, blocks, ids, generators(5, 0, [1] * 6, ids))
    assert not torch.equal(again["input_ids"], batch["input_ids"])


def test_contrastive_loss_matches_infonce_written_out():
    torch.manual_seed(0)
    hidden = torch.randn(6, 5, 8)
    mask = torch.ones(6, 5, dtype=torch.long)
    mask[1, 3:] = 0
    loss, accuracy = contrastive_loss(hidden, mask, 0.5)
    pooled = torch.stack([hidden[i, : int(mask[i].sum())].mean(0) for i in range(6)])
    z = pooled / pooled.norm(dim=-1, keepdim=True)
    total = 0.0
    hits = 0
    for i in range(6):
        j = (i + 3) % 6
        logits = torch.tensor([float(z[i] @ z[k]) / 0.5 for k in range(6) if k != i])
        others = [k for k in range(6) if k != i]
        total += -torch.log_softmax(logits, 0)[others.index(j)]
        hits += int(others[int(logits.argmax())] == j)
    torch.testing.assert_close(loss, total / 6)
    assert float(accuracy) == pytest.approx(hits / 6)
    # identical halves far from the rest: loss near zero, every row finds its pair
    pairs = torch.eye(8)[:3].repeat(2, 1).unsqueeze(1) * 5
    low, acc = contrastive_loss(pairs, torch.ones(6, 1, dtype=torch.long), 0.05)
    assert float(low) < 1e-3 and float(acc) == 1.0
    with pytest.raises(ValueError, match="pairs"):
        contrastive_loss(torch.randn(5, 2, 4), torch.ones(5, 2, dtype=torch.long), 0.05)


def test_the_view_adds_the_weighted_contrastive_loss_in_training_only():
    model = build_model(BERT, SMALL, seed=1)
    rng = np.random.default_rng(3)
    blocks = rng.integers(5, BERT.vocab_size, size=(4, BERT.block_len)).astype(np.uint32)
    blocks[:, 0], blocks[:, -1] = BERT.cls_id, BERT.sep_id
    obj = for_paradigm(BERT, objective="contrastive", select=0.3, weight=2.0, temperature=0.05)
    ids = np.arange(4)
    batch = make_batch(obj, blocks, ids, generators(3, 0, [0] * 4, ids))
    view, prepare = training_view(model, "contrastive", contrast=(2.0, 0.05))
    out = view(**prepare(batch))
    mlm_view, mlm_prepare = training_view(model, "masked_lm")
    mlm = mlm_view(**mlm_prepare(batch))
    torch.testing.assert_close(out.mlm_loss, mlm.loss)
    hidden = model.deberta(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])[0] \
        if hasattr(model, "deberta") else model.bert(input_ids=batch["input_ids"],
                                                     attention_mask=batch["attention_mask"])[0]
    expected, _ = contrastive_loss(hidden, batch["attention_mask"], 0.05)
    torch.testing.assert_close(out.pair_loss, expected)
    torch.testing.assert_close(out.loss, out.mlm_loss + 2.0 * out.pair_loss)
    model.eval()
    torch.testing.assert_close(view(**prepare(batch)).loss, out.mlm_loss.detach())


def test_config_rejects_a_bad_weight_and_the_stage_trains_it(datasets, tmp_path):
    from stages.pretrain import main
    from stages.training.config import TrainConfig

    with pytest.raises(ValueError, match="contrast_temperature"):
        TrainConfig(objective="contrastive", contrast_temperature=0)
    path = electra_params(tmp_path, {"objective": "contrastive", "mlm_select": 0.3, "contrast_weight": 0.5})
    out = tmp_path / "general"
    assert main(datasets.args("bert", out, path, metrics=tmp_path / "m.json")) == 0
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert metrics["eval_loss"] > 0 and 0 <= metrics["eval_pair_accuracy"] <= 1
    assert json.loads((out / "training.json").read_text())["config"]["train"]["contrast_weight"] == 0.5
    assert main(datasets.args("bert", tmp_path / "dapt", path, section="dapt", corpus="domain", init=out)) == 0
