"""Which blocks each optimizer step trains on (``BlockSampler``) and the per-block mask generators."""

from __future__ import annotations

import numpy as np
import pytest

from stages.objectives import for_paradigm
from stages.objectives.masked_lm import MaskedLM
from stages.tokenization.layout import BlockLayout
from stages.training.data import EVAL_KEY, TRAIN_KEY, BlockSampler, generators, make_batch


def stream(sampler: BlockSampler, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids, epochs) of ``steps`` optimizer steps, micro-batches concatenated in order."""
    parts = [mb for s in range(steps) for mb in sampler.micro_batches(s)]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


@pytest.mark.parametrize("rows,micro,accum", [(10, 3, 1), (10, 4, 1), (37, 2, 3), (8, 8, 1), (5, 3, 2)])
def test_every_block_once_per_epoch(rows, micro, accum):
    sampler = BlockSampler(rows=rows, micro_batch=micro, grad_accum=accum, seed=3)
    steps = -(-4 * rows // sampler.global_batch)           # at least four epochs, crossing epoch boundaries
    ids, epochs = stream(sampler, steps)
    assert len(ids) == steps * micro * accum
    assert (epochs == np.arange(len(ids)) // rows).all()   # positions run through the epochs in order
    for e in range(4):
        assert sorted(ids[epochs == e].tolist()) == list(range(rows)), f"epoch {e}"
    # each epoch is a fresh permutation
    assert not all((ids[epochs == e] == ids[epochs == 0]).all() for e in range(1, 4))
    for ids_mb, ep_mb in sampler.micro_batches(steps - 1):
        assert len(ids_mb) == len(ep_mb) == micro


def test_deterministic_for_a_seed_and_different_across_seeds():
    a = stream(BlockSampler(rows=50, micro_batch=4, grad_accum=2, seed=7), 20)
    b = stream(BlockSampler(rows=50, micro_batch=4, grad_accum=2, seed=7), 20)
    c = stream(BlockSampler(rows=50, micro_batch=4, grad_accum=2, seed=8), 20)
    assert (a[0] == b[0]).all() and (a[1] == b[1]).all()
    assert not (a[0] == c[0]).all()
    # a step depends on the step alone (a resumed run continues the stream)
    s = BlockSampler(rows=50, micro_batch=4, grad_accum=2, seed=7)
    for step in (0, 6, 13):
        again = BlockSampler(rows=50, micro_batch=4, grad_accum=2, seed=7).micro_batches(step)
        for (x, ex), (y, ey) in zip(s.micro_batches(step), again):
            assert (x == y).all() and (ex == ey).all()


@pytest.mark.parametrize("accum", [1, 3])
@pytest.mark.parametrize("world", [2, 3])
def test_ranks_together_see_the_single_process_batch(world, accum):
    m, rows = 3, 29
    single = BlockSampler(rows=rows, micro_batch=world * m, grad_accum=accum, seed=1)
    ranks = [BlockSampler(rows=rows, micro_batch=m, grad_accum=accum, world=world, rank=r, seed=1)
             for r in range(world)]
    assert all(r.global_batch == single.global_batch for r in ranks)
    for step in range(12):
        ref = single.micro_batches(step)
        per_rank = [r.micro_batches(step) for r in ranks]
        assert len(ref) == accum and all(len(p) == accum for p in per_rank)
        for a in range(accum):
            ids = np.concatenate([p[a][0] for p in per_rank])
            epochs = np.concatenate([p[a][1] for p in per_rank])
            assert ids.tolist() == ref[a][0].tolist(), (step, a)
            assert epochs.tolist() == ref[a][1].tolist()
        # the ranks never share a stream position: each (block, epoch) is trained on by one rank
        all_ids = np.concatenate([mb[0] for p in per_rank for mb in p])
        all_ep = np.concatenate([mb[1] for p in per_rank for mb in p])
        assert len(set(zip(all_ids.tolist(), all_ep.tolist()))) == single.global_batch


def test_grad_accum_slices_the_step_batch_in_order():
    one = BlockSampler(rows=23, micro_batch=12, grad_accum=1, seed=5)
    four = BlockSampler(rows=23, micro_batch=3, grad_accum=4, seed=5)
    for step in range(10):
        whole = one.micro_batches(step)[0]
        parts = four.micro_batches(step)
        assert [len(p[0]) for p in parts] == [3] * 4
        assert np.concatenate([p[0] for p in parts]).tolist() == whole[0].tolist()
        assert np.concatenate([p[1] for p in parts]).tolist() == whole[1].tolist()


def test_no_blocks_is_an_error():
    with pytest.raises(ValueError, match="no training blocks"):
        BlockSampler(rows=0, micro_batch=2, grad_accum=1)


def draws(seed, kind, epoch, block, n=16):
    return generators(seed, kind, [epoch], [block])[0].random(n)


def test_generators_are_keyed_by_seed_kind_epoch_and_block():
    ref = draws(0, TRAIN_KEY, 2, 7)
    assert (ref == draws(0, TRAIN_KEY, 2, 7)).all()                     # the same key, the same draws
    assert (ref == generators(0, TRAIN_KEY, np.array([2]), np.array([7], dtype=np.uint32))[0].random(16)).all()
    assert not (ref == draws(0, TRAIN_KEY, 3, 7)).any()                 # another epoch: fresh masks
    assert not (ref == draws(0, TRAIN_KEY, 2, 8)).any()                 # another block
    assert not (ref == draws(1, TRAIN_KEY, 2, 7)).any()                 # another seed
    assert not (ref == draws(0, EVAL_KEY, 2, 7)).any()                  # evaluation masks are not training's
    gens = generators(0, TRAIN_KEY, [0, 1, 0], [4, 4, 5])
    assert len(gens) == 3 and len({g.random() for g in gens}) == 3


def test_dynamic_masks_repeat_per_key_and_change_per_epoch():
    layout = BlockLayout(paradigm="bert", seq_len=64, block_len=64, vocab_size=500, pad_id=0, unk_id=1, cls_id=2,
                         sep_id=3, mask_id=4)
    blocks = np.random.default_rng(0).integers(5, 500, size=(6, 64)).astype(np.uint16)
    objective = MaskedLM(layout)
    ids = np.array([4, 1, 4])

    def batch(epochs):
        return make_batch(objective, blocks, ids, generators(9, TRAIN_KEY, epochs, ids))

    a, b, c = batch([0, 0, 0]), batch([0, 0, 0]), batch([1, 0, 0])
    for k in a:
        assert (a[k] == b[k]).all()
    assert a["input_ids"].shape == (3, 64)
    assert (a["labels"][0] == a["labels"][2]).all()        # block 4 in epoch 0 twice: the same masks
    assert not (a["labels"][0] == c["labels"][0]).all()    # block 4 in epoch 1: other masks
    assert (a["labels"][1:] == c["labels"][1:]).all()      # the other rows are unchanged


T5_LAYOUT = BlockLayout(paradigm="t5", seq_len=48, block_len=53, vocab_size=600, pad_id=0, unk_id=2, eos_id=1,
                        sentinel_top=599, sentinels=20, targets_len=11, noise_density=0.15, mean_span=3.0)
BERT_LAYOUT = BlockLayout(paradigm="bert", seq_len=64, block_len=64, vocab_size=500, pad_id=0, unk_id=1, cls_id=2,
                          sep_id=3, mask_id=4)


@pytest.mark.parametrize("layout", [BERT_LAYOUT, T5_LAYOUT], ids=["masked_lm", "span_corruption"])
def test_a_block_gets_the_same_batch_row_whatever_shares_its_batch(layout):
    """The objectives build a micro-batch in one call, yet each row depends on its own block's key only:
    the property that keeps masks equal across device counts, batch sizes and resumes."""
    blocks = np.random.default_rng(1).integers(5, 500, size=(12, layout.block_len)).astype(np.uint16)
    objective = for_paradigm(layout)
    assert objective.batched
    ids, epochs = np.array([3, 7, 0, 11, 5]), np.array([0, 2, 1, 0, 4])
    whole = make_batch(objective, blocks, ids, generators(4, TRAIN_KEY, epochs, ids))
    for b in range(len(ids)):
        alone = make_batch(objective, blocks, ids[b:b + 1], generators(4, TRAIN_KEY, epochs[b:b + 1], ids[b:b + 1]))
        for k in whole:
            assert (whole[k][b] == alone[k][0]).all(), (b, k)
    regrouped = make_batch(objective, blocks, ids[::-1], generators(4, TRAIN_KEY, epochs[::-1], ids[::-1]))
    for k in whole:
        assert (regrouped[k].flip(0) == whole[k]).all()


def test_block_streams_draw_uniform_numbers_per_key():
    streams = generators(0, TRAIN_KEY, [0, 0, 1], [5, 6, 5])
    u = streams.random((3, 20000))
    assert u.min() >= 0 and u.max() < 1
    assert np.allclose(u.mean(axis=1), 0.5, atol=0.01) and np.allclose(u.var(axis=1), 1 / 12, atol=0.005)
    assert np.abs(np.corrcoef(u)[np.triu_indices(3, 1)]).max() < 0.03     # rows are independent streams
    assert not (u[:, :-1] == u[:, 1:]).any()
    again = generators(0, TRAIN_KEY, [0, 0, 1], [5, 6, 5])
    assert (again.random((3, 20000)) == u).all()                         # the same keys, the same numbers
    assert not (again.random((3, 20000)) == u).any()                     # the next draw: other numbers
    ints = generators(0, TRAIN_KEY, [0], [5]).integers(7, (1, 70000))
    assert ints.min() == 0 and ints.max() == 6 and np.allclose(np.bincount(ints[0]) / 70000, 1 / 7, atol=0.01)
    with pytest.raises(ValueError, match="3 rows for 2 blocks"):
        generators(0, TRAIN_KEY, [0, 0], [1, 2]).random((3, 4))


def test_the_epoch_permutation_is_drawn_once_per_epoch():
    """The host cost of a step does not grow with the corpus: steps within an epoch reuse its permutation."""
    from stages.training import data

    data._permutation.cache_clear()
    sampler = BlockSampler(rows=1000, micro_batch=10, grad_accum=1, seed=2)
    for step in range(250):  # 2.5 epochs
        sampler.micro_batches(step)
    info = data._permutation.cache_info()
    assert info.misses == 3 and info.hits == 247
    assert (sampler._stream(0, 1000)[0] == np.random.default_rng([2, 0]).permutation(1000)).all()
