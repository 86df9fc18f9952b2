"""T5's decoder cross-attention started as a token matcher (``ModelConfig.cross_match``): the first head of
each decoder layer attends, from the first step, to the encoder positions that hold the token the decoder
position holds (the sentinel it writes in span corruption); the other heads and every other weight keep
T5's initialisation; the model stays a stock T5."""

from __future__ import annotations

import pytest
import torch

from stages.tokenization.layout import BlockLayout
from stages.training.config import ModelConfig
from stages.training.models import build_model

T5 = BlockLayout(paradigm="t5", seq_len=32, block_len=36, vocab_size=300, pad_id=0, unk_id=2, eos_id=1,
                 sentinel_top=299, sentinels=100, targets_len=9, noise_density=0.15, mean_span=3.0)
SIZE = dict(layers=1, d_model=64, heads=2, d_ff=64)


def first_head_cross_attention(model, enc_ids, dec_ids) -> torch.Tensor:
    model.set_attn_implementation("eager")  # attention weights come from the eager path only
    out = model(input_ids=enc_ids, decoder_input_ids=dec_ids, output_attentions=True)
    return out.cross_attentions[0][0, 0]  # (decoder position, encoder position) of head 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_decoder_starts_attending_to_its_own_token_in_the_encoder(seed):
    gen = torch.Generator().manual_seed(seed)
    enc = torch.randperm(190, generator=gen)[:32] + 3  # 32 distinct ordinary tokens
    sentinels = [299, 298, 297]
    where = [4, 15, 27]
    enc[where] = torch.tensor(sentinels)
    dec = torch.tensor([[0, *sentinels]])  # the start token, then the sentinels the decoder writes
    matched = first_head_cross_attention(build_model(T5, ModelConfig(**SIZE, cross_match=1.0), seed=seed),
                                         enc[None], dec)
    plain = first_head_cross_attention(build_model(T5, ModelConfig(**SIZE), seed=seed), enc[None], dec)
    for row, pos in zip((1, 2, 3), where):
        assert int(matched[row].argmax()) == pos
        assert matched[row, pos] > 0.5  # a uniform start gives each of the 32 positions about 0.03
        assert plain[row, pos] < 0.2


def test_only_the_first_cross_attention_head_changes_and_the_model_saves_as_stock_t5(tmp_path):
    plain = build_model(T5, ModelConfig(**SIZE), seed=0)
    matched = build_model(T5, ModelConfig(**SIZE, cross_match=0.5), seed=0)
    p, q = dict(plain.named_parameters()), dict(matched.named_parameters())
    changed = [n for n in p if not torch.equal(p[n], q[n])]
    assert changed == ["decoder.block.0.layer.1.EncDecAttention.q.weight",
                       "decoder.block.0.layer.1.EncDecAttention.k.weight"]
    d_kv = matched.config.d_kv
    att = matched.decoder.block[0].layer[1].EncDecAttention
    assert torch.equal(att.q.weight[:d_kv, :d_kv], 0.5 * torch.eye(d_kv))
    assert torch.equal(att.k.weight[:d_kv], torch.cat([torch.eye(d_kv), torch.zeros(d_kv, 64 - d_kv)], 1))
    assert torch.equal(att.q.weight[d_kv:], p["decoder.block.0.layer.1.EncDecAttention.q.weight"][d_kv:])
    matched.save_pretrained(tmp_path)
    from transformers import AutoModelForSeq2SeqLM

    again = AutoModelForSeq2SeqLM.from_pretrained(tmp_path)
    assert torch.equal(again.decoder.block[0].layer[1].EncDecAttention.k.weight, att.k.weight)


def test_cross_match_is_refused_when_negative_or_without_cross_attention():
    with pytest.raises(ValueError, match="cross_match"):
        ModelConfig(cross_match=-0.1)
    gpt = BlockLayout(paradigm="gpt", seq_len=32, block_len=32, vocab_size=300, eos_id=0)
    with pytest.raises(ValueError, match="model.cross_match: .* gpt has none"):
        build_model(gpt, ModelConfig(**SIZE, cross_match=0.1), seed=0)
