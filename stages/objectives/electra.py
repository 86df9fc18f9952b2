"""ELECTRA's replaced-token detection (Clark et al. 2020) for the BERT paradigm: the generator's masked-LM loss
plus ``rtd_weight`` (the paper's lambda) x the discriminator's binary cross-entropy on original vs replaced.

Generator and discriminator are one tied model (the paper's section 3.2 variant) unless ``train.generator_size``
asks for a separate one: a masked-LM transformer of ``generator_size`` x the discriminator's width (the paper finds
1/4 to 1/2 best, 3.2-3.3) on the shared word embeddings. The saved model is the stock masked-LM class; the
discriminator's head goes beside it in ``rtd_head.safetensors``, a separate generator in ``generator.safetensors``
(its size in ``generator.json``), so the folder still loads as the stock class and DAPT continues all of them.
Replacements are sampled by inverse CDF from one uniform number per position that the builder draws, so the draws
come from the per-block streams. The objective's own settings (``rtd_weight``, ``generator_size``) are its
``own_keys``; every other objective refuses them.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from stages.objectives import Objective, tensors, wrap
from stages.objectives.masked_lm import MaskedLM, body_name, masked_positions, mlm_result, share, sparse_mlm
from stages.training.models import (add_side_module, attach_side_head, attention_flops, flops_per_token,
                                    save_tensors)

RTD_HEAD_FILE = "rtd_head.safetensors"
GENERATOR_FILE = "generator.safetensors"
GENERATOR_CONFIG = "generator.json"


class ReplacedTokenDetection(MaskedLM):
    name = "electra"

    def __init__(self, layout, *, select: float = 0.15, rtd_weight: float = 50.0) -> None:
        if rtd_weight <= 0:
            raise ValueError("electra: rtd_weight must be > 0")
        super().__init__(layout, select=select, mask=1.0, random=0.0)
        self.rtd_weight = rtd_weight

    def __call__(self, rows: np.ndarray, rng) -> dict:
        ids = np.asarray(rows, dtype=np.int64)
        return {**super().__call__(rows, rng),
                **tensors(original_ids=ids, sample_u=rng.random(ids.shape).astype(np.float32))}


@functools.cache
def generator_class():
    """The separate generator's module class (defined on first use: it imports torch); ``forward`` returns its
    vocabulary logits at the flat ``positions``."""
    import torch

    class Generator(torch.nn.Module):
        def __init__(self, disc_config, size: float) -> None:
            super().__init__()
            self.size = size
            emb = disc_config.hidden_size  # the word embedding width (the discriminator's hidden size)
            hidden = max(8, int(round(emb * size)))
            heads = max(1, hidden // 64)
            hidden -= hidden % heads
            values = disc_config.to_dict()
            values.update(hidden_size=hidden, num_attention_heads=heads, intermediate_size=4 * hidden,
                          vocab_size=max(1, int(disc_config.pad_token_id or 0) + 1))  # it reads embeddings, not ids
            cfg = type(disc_config).from_dict(values)
            from transformers import AutoModel

            self.hidden = hidden
            self.proj_in = torch.nn.Linear(emb, hidden)
            self.body = AutoModel.from_config(cfg)
            self.transform = torch.nn.Sequential(
                torch.nn.Linear(hidden, emb), torch.nn.GELU(),
                torch.nn.LayerNorm(emb, eps=getattr(disc_config, "layer_norm_eps", 1e-7)))
            self.bias = torch.nn.Parameter(torch.zeros(disc_config.vocab_size))

        def forward(self, input_ids, attention_mask, positions, embeddings):
            states = self.body(inputs_embeds=self.proj_in(embeddings(input_ids)), attention_mask=attention_mask)[0]
            picked = states.reshape(-1, self.hidden).index_select(0, positions)
            return self.transform(picked) @ embeddings.weight.T + self.bias

    return Generator


def attach_generator(model, *, size: float, seed: int, init=None) -> None:
    """Give a masked-LM model a generator of ``size`` x its width as the submodule ``electra_generator``;
    with ``init`` (a model folder that holds one) the trained generator, which must be of that size."""
    import torch

    saved = Path(init) / GENERATOR_CONFIG if init is not None else None
    if saved is not None and saved.is_file():
        was = json.loads(saved.read_text())["size"]
        if abs(was - size) > 1e-9:
            raise ValueError(f"generator_size: {size} but {init} continues a generator of size {was}")
    generator = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))
        gen = generator_class()(model.config, size)
    with torch.no_grad():
        for layer in (gen.proj_in, gen.transform[0]):
            layer.weight.normal_(0.0, model.config.initializer_range, generator=generator)
            layer.bias.zero_()
    if saved is not None and saved.is_file():
        from safetensors.torch import load_file

        gen.load_state_dict(load_file(str(Path(init) / GENERATOR_FILE)))
    model.electra_generator = gen.to(next(model.parameters()).device)
    add_side_module(model, "electra_generator", save_generator)


def save_generator(gen, folder) -> None:
    save_tensors(gen, Path(folder) / GENERATOR_FILE)
    (Path(folder) / GENERATOR_CONFIG).write_text(json.dumps({"size": gen.size, "hidden_size": gen.hidden}) + "\n")


def generator_flops_per_token(gen, *, seq_len: int, select: float) -> float:
    """Training FLOPs per input token of the generator: its transformer, input projection and attention at
    every position, its output layer at the selected share."""
    cfg = gen.body.config
    per_position = sum(p.numel() for p in gen.body.parameters()) - gen.body.get_input_embeddings().weight.numel()
    per_position += sum(p.numel() for p in gen.proj_in.parameters())
    attention = attention_flops(cfg, width=gen.hidden, layers=cfg.num_hidden_layers, seq_len=seq_len)
    out = sum(p.numel() for p in gen.transform.parameters()) + gen.bias.numel() * gen.transform[0].out_features
    return 6 * per_position + attention + 6 * select * out


def attach_rtd_head(model, *, seed: int, init=None) -> None:
    """Give a masked-LM model ELECTRA's discriminator head (dense, GELU, one logit per token) as the
    submodule ``rtd_head``; with ``init`` its trained weights from ``rtd_head.safetensors``."""
    attach_side_head(model, "rtd_head", "GELU", 1, file=RTD_HEAD_FILE, seed=seed, init=init)


def electra_flops_per_token(model, layout, *, select: float) -> float:
    """Tied generator: masked LM's ``flops_per_token`` plus a second transformer pass and the head at every
    position. Separate generator: the discriminator's pass and head plus the generator's own count."""
    cfg = model.config
    head = getattr(model, "rtd_head", None)
    generator = getattr(model, "electra_generator", None)
    head_params = sum(p.numel() for p in head.parameters()) if head is not None else 0
    gen_params = sum(p.numel() for p in generator.parameters()) if generator is not None else 0
    n = sum(p.numel() for p in model.parameters()) - head_params - gen_params
    d, layers = cfg.hidden_size, cfg.num_hidden_layers
    body = 6 * (n - (d * d + cfg.vocab_size * d))  # without the vocabulary output layer
    attention = attention_flops(cfg, width=d, layers=layers, seq_len=layout.seq_len)
    if generator is not None:
        return (body + attention + 6 * head_params
                + generator_flops_per_token(generator, seq_len=layout.seq_len, select=select))
    # flops_per_token counts every parameter of ``model``, the head's included (6 x its size per token)
    return flops_per_token(model, layout, predicted_fraction=select) + body + attention


def setup(model, layout, builder, train, init) -> float:
    """The discriminator head and, with ``train.generator_size``, a separate generator; their FLOPs."""
    attach_rtd_head(model, seed=train.seed, init=init)
    if train.generator_size:
        attach_generator(model, size=train.generator_size, seed=train.seed + 1, init=init)
    elif init is not None and (Path(init) / GENERATOR_CONFIG).is_file():
        raise ValueError(f"{init}: was trained with a separate ELECTRA generator; set train.generator_size")
    return electra_flops_per_token(model, layout, select=builder.select)


def electra_view(model, builder):
    """ELECTRA's training module (replacements sampled without gradient); in eval mode the generator's masked-LM
    loss alone, comparable with masked-LM runs."""
    import torch

    body, rtd_weight = body_name(model), builder.rtd_weight
    if body is None or not hasattr(model, "cls") or not hasattr(model, "rtd_head"):
        raise ValueError("electra: needs a masked-LM model with an rtd_head (attach_rtd_head)")

    def forward(inner, input_ids, attention_mask=None, labels=None, positions=None, original_ids=None, sample_u=None,
                **kwargs):
        separate = getattr(inner, "electra_generator", None)
        if separate is None:
            generator = sparse_mlm(inner, body, input_ids, attention_mask, labels, positions, **kwargs)
        else:  # the smaller generator, on the shared word embeddings
            embeddings = getattr(inner, body).embeddings.word_embeddings
            generator = mlm_result(separate(input_ids, attention_mask, positions, embeddings),
                                   labels.reshape(-1).index_select(0, positions), positions)
        if not inner.training:
            return generator
        with torch.no_grad():
            cdf = torch.softmax(generator.logits.float(), dim=-1).cumsum(-1)
            u = sample_u.reshape(-1).index_select(0, positions).unsqueeze(1) * cdf[:, -1:]
            sampled = torch.searchsorted(cdf, u).squeeze(1).clamp(max=cdf.size(1) - 1)
            corrupted = original_ids.reshape(-1).clone()
            corrupted[positions] = sampled
            corrupted = corrupted.view_as(original_ids)
            replaced = (corrupted != original_ids).float()
        disc = getattr(inner, body)(input_ids=corrupted, attention_mask=attention_mask, **kwargs)[0]
        rtd_logits = inner.rtd_head(disc).squeeze(-1).float()
        real = attention_mask.bool() if attention_mask is not None else torch.ones_like(replaced, dtype=torch.bool)
        rtd = torch.nn.functional.binary_cross_entropy_with_logits(rtd_logits[real], replaced[real])
        return SimpleNamespace(loss=generator.loss + rtd_weight * rtd, logits=generator.logits,
                               labels=generator.labels, mlm_loss=generator.loss, rtd_loss=rtd)

    return wrap(model, forward), masked_positions


def card(select, generator_size) -> str:
    generator = (f"a separate generator {generator_size:g} of the discriminator's width, sharing its word "
                 "embeddings" if isinstance(generator_size, (int, float)) and generator_size > 0
                 else "generator and discriminator tied")
    return f"replaced-token detection (ELECTRA; {generator})" + share(select, "masked for the generator")


OBJECTIVES = (
    Objective(name="electra", paradigm="bert", builder=ReplacedTokenDetection, view=electra_view, setup=setup,
              own_keys=("rtd_weight", "generator_size"),
              settings=lambda train: {"select": train.mlm_select, "rtd_weight": train.rtd_weight}, card=card),
)
