"""BERT's MLM loss with the output layer applied at the selected positions only equals the stock
``BertForMaskedLM`` loss, gradients included; it is what the loop trains and evaluates with."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from stages.objectives import for_paradigm, training_view
from stages.training.data import generators, make_batch
from stages.training.models import build_model, flops_per_token
from tests.unit.training.test_schedule_and_flops import BERT, GPT, SMALL


def bert_batch(rows: int = 6, seed: int = 3) -> dict:
    rng = np.random.default_rng(seed)
    blocks = rng.integers(5, BERT.vocab_size, size=(rows, BERT.block_len)).astype(np.uint32)
    blocks[:, 0], blocks[:, -1] = BERT.cls_id, BERT.sep_id
    blocks[1, 20:] = BERT.pad_id  # a padded block: padding is never selected
    blocks[1, 19] = BERT.sep_id
    ids = np.arange(rows)
    return make_batch(for_paradigm(BERT), blocks, ids, generators(seed, 0, [0] * rows, ids))


def test_sparse_loss_and_gradients_equal_the_stock_forward():
    model = build_model(BERT, SMALL, seed=1)
    batch = bert_batch()
    assert 0 < int((batch["labels"] != -100).sum()) < batch["labels"].numel()
    dense = model(**batch)
    dense.loss.backward()
    dense_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)

    view, prepare = training_view(model, for_paradigm(BERT))
    sparse = view(**prepare(batch))
    torch.testing.assert_close(sparse.loss, dense.loss, rtol=1e-5, atol=1e-6)
    sparse.loss.backward()
    sparse_grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert sparse_grads.keys() == dense_grads.keys()
    for name, grad in dense_grads.items():
        torch.testing.assert_close(sparse_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)
    # the logits are those of the selected positions, in order, against their labels
    selected = batch["labels"] != -100
    torch.testing.assert_close(sparse.logits, dense.logits[selected], rtol=1e-5, atol=1e-5)
    assert torch.equal(sparse.labels, batch["labels"][selected])


def test_empty_selection_gives_zero_loss_not_nan():
    model = build_model(BERT, SMALL, seed=1)
    batch = bert_batch()
    batch["labels"] = torch.full_like(batch["labels"], -100)
    view, prepare = training_view(model, for_paradigm(BERT))
    out = view(**prepare(batch))
    assert out.loss.item() == 0.0


def test_other_objectives_train_the_model_itself():
    model = build_model(GPT, SMALL, seed=1)
    view, prepare = training_view(model, for_paradigm(GPT))
    batch = {"input_ids": torch.zeros(1, 4, dtype=torch.long)}
    assert view is model and prepare(batch) is batch


def test_flops_count_the_output_layer_at_the_predicted_share_only():
    model = build_model(BERT, SMALL, seed=0)
    dense, sparse = flops_per_token(model, BERT), flops_per_token(model, BERT, predicted_fraction=0.15)
    d, v = SMALL.d_model, BERT.vocab_size
    assert dense - sparse == pytest.approx(6 * 0.85 * (d * d + v * d))
    gpt = build_model(GPT, SMALL, seed=0)  # a causal LM predicts every position: nothing to discount
    assert flops_per_token(gpt, GPT, predicted_fraction=0.15) == flops_per_token(gpt, GPT)
