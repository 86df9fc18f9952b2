"""XLNet's permuted LM (Yang et al. 2019) for GPT: partial prediction of the last ceil(L / 6) tokens of a uniform
random factorisation order, and two-stream attention (as MPNet lays it out: content rows, then one query row
per target). Checked against the paper's definition: the mask's rules, the target statistics (5 binomial
standard deviations over 2,000 blocks), and, through a real GPT-2, that a target's prediction never sees its
own token while the content stream sees exactly what comes before it in the order."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stages.objectives import for_paradigm
from stages.objectives.permuted_lm import K, PermutedLM, permuted_masks
from stages.tokenization.layout import BlockLayout

EOT, VOCAB, WIDTH, ROWS = 0, 300, 32, 2000
LAYOUT = BlockLayout(paradigm="gpt", seq_len=WIDTH, block_len=WIDTH, vocab_size=VOCAB, eos_id=EOT)


def blocks(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(1, VOCAB, size=(n, WIDTH)).astype(np.uint16)


def test_the_train_config_chooses_it_for_gpt_only():
    from stages.config import ConfigError, build
    from stages.training.config import TrainConfig

    assert isinstance(for_paradigm(LAYOUT, objective="permuted"), PermutedLM)
    assert for_paradigm(LAYOUT).name == "causal_lm"
    assert build(TrainConfig, {"objective": "permuted"}, "pretrain.gpt.train").objective == "permuted"
    with pytest.raises(ValueError, match=r"not one of gpt.s objectives \(causal_lm, permuted\)"):
        for_paradigm(LAYOUT, objective="bart")
    with pytest.raises(ConfigError, match="pretrain.gpt.train.objective"):
        build(TrainConfig, {"objective": "xlnet"}, "pretrain.gpt.train")


def test_masks_follow_the_two_stream_rules():
    rng = np.random.default_rng(1)
    obj = PermutedLM(LAYOUT)
    ranks, all_targets = obj.draw(20, WIDTH, rng)
    for rank, targets in zip(ranks, all_targets):
        allowed = permuted_masks(rank, targets)
        c = obj.targets
        content, query = allowed[:WIDTH, :WIDTH], allowed[WIDTH:, :WIDTH]
        # content stream: position i sees exactly the positions not later than it in the order, itself included
        assert (content == (rank[None, :] <= rank[:, None])).all() and content.diagonal().all()
        # query stream of target z_t: the content of z_<t, never its own token
        for k, pos in enumerate(targets):
            assert not query[k, pos]
            assert set(np.flatnonzero(query[k])) == set(np.flatnonzero(rank < rank[pos]))
        assert not allowed[:, WIDTH:].any()  # no row attends to a query row, not even the query itself
        assert sorted(rank[targets]) == list(range(WIDTH - c, WIDTH))  # the targets are the order's last c


def test_targets_are_the_last_ceil_l_over_k_of_a_uniform_order():
    obj = PermutedLM(LAYOUT)
    assert K == 6 and obj.targets == math.ceil(WIDTH / 6)
    rows = blocks(ROWS)
    batch = obj(rows, np.random.default_rng(5))
    positions = batch["position_ids"].numpy()[:, WIDTH:]
    labels = batch["labels"].numpy()
    assert (labels == np.take_along_axis(rows.astype(np.int64), positions, 1)).all()  # each query's own token
    # every position is a target with probability c / L
    hits = np.bincount(positions.ravel(), minlength=WIDTH) / ROWS
    p = obj.targets / WIDTH
    assert (np.abs(hits - p) <= 5 * math.sqrt(p * (1 - p) / ROWS)).all()
    # the order is uniform: the rank of position 0 is uniform over 0..L-1 (each rank's share within 5 sigma)
    ranks, _ = obj.draw(ROWS, WIDTH, np.random.default_rng(9))
    share = np.bincount(ranks[:, 0], minlength=WIDTH) / ROWS
    q = 1 / WIDTH
    assert (np.abs(share - q) <= 5 * math.sqrt(q * (1 - q) / ROWS)).all()
    # queries carry the query token and their target's position; content rows keep the block and 0..L-1
    ids = batch["input_ids"].numpy()
    assert (ids[:, :WIDTH] == rows).all() and (ids[:, WIDTH:] == EOT).all()
    assert (batch["position_ids"].numpy()[:, :WIDTH] == np.arange(WIDTH)).all()
    assert batch["attention_mask"].shape == (ROWS, 1, WIDTH + obj.targets, WIDTH + obj.targets)


def test_a_blocks_order_depends_on_its_own_stream_only():
    from stages.training.data import generators, make_batch

    obj, rows = PermutedLM(LAYOUT), blocks(6)
    together = make_batch(obj, rows, [0, 1, 2, 3, 4, 5], generators(0, 1, [0] * 6, [0, 1, 2, 3, 4, 5]))
    alone = make_batch(obj, rows, [3], generators(0, 1, [0], [3]))
    assert all((together[k][3] == alone[k][0]).all() for k in together)  # the same draw in any batch
    again = make_batch(obj, rows, [3], generators(0, 1, [1], [3]))  # the next epoch: another order
    assert not (again["position_ids"] == alone["position_ids"]).all()


@pytest.fixture(scope="module")
def gpt():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=VOCAB, n_positions=WIDTH, n_embd=32, n_layer=2, n_head=2, bos_token_id=EOT,
                     eos_token_id=EOT)
    cfg._attn_implementation = "sdpa"
    return GPT2LMHeadModel(cfg).eval()


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_a_target_never_sees_its_own_token_a_later_target_does(gpt, impl):
    import torch

    from stages.objectives import training_view

    gpt.config._attn_implementation = impl
    view, prepare = training_view(gpt, for_paradigm(LAYOUT, objective="permuted"))
    obj = PermutedLM(LAYOUT)
    rows = blocks(1, seed=4)
    batch = prepare(obj(rows, np.random.default_rng(2)))
    c = obj.targets
    with torch.no_grad():
        base = view(**batch)
        hidden = gpt.transformer(input_ids=batch["input_ids"], position_ids=batch["position_ids"],
                                 attention_mask=batch["attention_mask"] if impl == "sdpa" else
                                 torch.where(batch["attention_mask"], 0.0, torch.finfo(torch.float32).min))[0]
    positions = batch["position_ids"][0, WIDTH:].tolist()
    rank = batch["attention_mask"][0, 0, :WIDTH, :WIDTH].sum(1).numpy() - 1  # row i attends rank(i) + 1 positions
    order = sorted(range(c), key=lambda k: rank[positions[k]])
    first, last = order[0], order[-1]
    changed = {k: v.clone() for k, v in batch.items()}
    changed["input_ids"][0, positions[first]] = (rows[0, positions[first]] % (VOCAB - 1)) + 1  # another token
    with torch.no_grad():
        after = view(**changed)
    # the first target's own prediction is blind to its token; a later target's sees it
    assert torch.allclose(after.logits[0, first], base.logits[0, first], atol=1e-5)
    assert not torch.allclose(after.logits[0, last], base.logits[0, last], atol=1e-5)
    assert base.loss.item() == pytest.approx(math.log(VOCAB), rel=0.1)  # a fresh model: near uniform
    assert hidden.shape[1] == WIDTH + c
    gpt.config._attn_implementation = "sdpa"


def test_flops_count_the_query_rows_and_the_sparse_output_layer(gpt):
    from stages.objectives.permuted_lm import permuted_flops_per_token
    from stages.training.models import flops_per_token

    obj = PermutedLM(LAYOUT)
    causal = flops_per_token(gpt, LAYOUT)
    permuted = permuted_flops_per_token(gpt, LAYOUT, obj.targets)
    n, out = sum(p.numel() for p in gpt.parameters()), VOCAB * 32
    rows = WIDTH + obj.targets
    assert permuted == pytest.approx(6 * (n - out) * rows / WIDTH + 6 * out * obj.targets / WIDTH
                                     + 12 * 2 * 32 * rows * rows / WIDTH)
    assert permuted != causal
