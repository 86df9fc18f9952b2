"""T5's relative position biases started as ALiBi's distance penalty (``ModelConfig.local_bias``): the bias of
each bucket is minus the head's slope times the bucket's smallest distance, so attention starts local; the
model stays a stock T5 that saves and loads; 0 keeps T5's own initialisation."""

from __future__ import annotations

import pytest
import torch

from stages.tokenization.layout import BlockLayout
from stages.training.config import ModelConfig
from stages.training.models import build_model, flops_per_token

T5 = BlockLayout(paradigm="t5", seq_len=32, block_len=36, vocab_size=300, pad_id=0, unk_id=2, eos_id=1,
                 sentinel_top=299, sentinels=100, targets_len=9, noise_density=0.15, mean_span=3.0)
SIZE = dict(layers=1, d_model=32, heads=4, d_ff=64)


def bias_of(model, stack: str, distances: list[int]) -> torch.Tensor:
    """(distance, head) biases the model's first layer of ``stack`` adds for these query-to-key offsets."""
    attn = getattr(model, stack).block[0].layer[0].SelfAttention
    rel = torch.tensor(distances)
    buckets = attn._relative_position_bucket(rel, bidirectional=stack == "encoder",
                                             num_buckets=model.config.relative_attention_num_buckets,
                                             max_distance=model.config.relative_attention_max_distance)
    return attn.relative_attention_bias(buckets).detach()


def test_biases_fall_linearly_with_distance_at_alibi_slopes():
    model = build_model(T5, ModelConfig(**SIZE, local_bias=1.0), seed=0)
    slopes = torch.tensor([2.0 ** (-8 * h / 4) for h in range(4)])
    for offsets in ([0, -1, -2, -3, -7], [0, 1, 2, 3, 7]):  # left and right of the query, exact buckets
        got = bias_of(model, "encoder", offsets)
        assert torch.allclose(got, -torch.tensor(offsets).abs()[:, None].float() * slopes[None, :])
    dec = bias_of(model, "decoder", [0, -1, -5])  # causal: distance to earlier positions
    assert torch.allclose(dec, -torch.tensor([0.0, 1.0, 5.0])[:, None] * slopes[None, :])
    far = bias_of(model, "encoder", [-100])[0]
    assert (far <= -64 * slopes).all()  # a log bucket counts from its nearest distance


def test_attention_starts_on_the_neighbours():
    model = build_model(T5, ModelConfig(**SIZE, local_bias=2.0), seed=0)
    model.set_attn_implementation("eager")  # the attention weights are returned by the eager path only
    ids = torch.randint(3, 199, (1, 32))
    out = model.encoder(input_ids=ids, output_attentions=True)
    first_head = out.attentions[0][0, 0]  # (query, key) of the sharpest head
    band = sum(torch.diagonal(first_head, k).sum() for k in (-1, 0, 1)) / 32
    assert band > 0.9  # without the prior a 32-token uniform start puts about 3/32 there


def test_zero_keeps_t5s_own_initialisation_and_the_model_is_stock(tmp_path):
    plain = build_model(T5, ModelConfig(**SIZE), seed=0)
    local = build_model(T5, ModelConfig(**SIZE, local_bias=1.0), seed=0)
    names = [n for n, _ in plain.named_parameters() if "relative_attention_bias" not in n]
    p, q = dict(plain.named_parameters()), dict(local.named_parameters())
    assert all(torch.equal(p[n], q[n]) for n in names)  # nothing else changes
    assert bias_of(plain, "encoder", [0, 1]).abs().max() < 1  # T5's small random biases
    assert flops_per_token(plain, T5) == flops_per_token(local, T5)
    local.save_pretrained(tmp_path)
    from transformers import AutoModelForSeq2SeqLM

    again = AutoModelForSeq2SeqLM.from_pretrained(tmp_path)
    assert torch.equal(bias_of(again, "encoder", [0, -3]), bias_of(local, "encoder", [0, -3]))


def test_a_negative_slope_is_refused():
    with pytest.raises(ValueError, match="local_bias"):
        ModelConfig(local_bias=-1.0)


def test_local_bias_is_refused_for_a_paradigm_without_relative_biases():
    gpt = BlockLayout(paradigm="gpt", seq_len=32, block_len=32, vocab_size=300, eos_id=0)
    with pytest.raises(ValueError, match="model.local_bias: .* gpt has none"):
        build_model(gpt, ModelConfig(**SIZE, local_bias=1.0), seed=0)
