"""ELECTRA's separate generator (Clark et al. 2020, 3.2-3.3), used when ``train.generator_size`` > 0: a masked-LM
transformer of ``generator_size`` x the discriminator's width (the paper finds 1/4 to 1/2 best) on the shared word
embeddings. It is saved beside the stock model (``generator.safetensors``, its size in ``generator.json``), so the
folder still loads as the stock class and DAPT continues both.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from stages.training.models import add_side_module, save_tensors

GENERATOR_FILE = "generator.safetensors"
GENERATOR_CONFIG = "generator.json"


class Generator(torch.nn.Module):
    """The generator; ``forward`` returns its vocabulary logits at the flat ``positions``."""

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
        self.transform = torch.nn.Sequential(torch.nn.Linear(hidden, emb), torch.nn.GELU(),
                                             torch.nn.LayerNorm(emb, eps=getattr(disc_config, "layer_norm_eps", 1e-7)))
        self.bias = torch.nn.Parameter(torch.zeros(disc_config.vocab_size))

    def forward(self, input_ids, attention_mask, positions, embeddings: torch.nn.Embedding):
        states = self.body(inputs_embeds=self.proj_in(embeddings(input_ids)), attention_mask=attention_mask)[0]
        picked = states.reshape(-1, self.hidden).index_select(0, positions)
        return self.transform(picked) @ embeddings.weight.T + self.bias


def attach_generator(model, *, size: float, seed: int, init=None) -> None:
    """Give a masked-LM model a generator of ``size`` x its width as the submodule ``electra_generator``;
    with ``init`` (a model folder that holds one) the trained generator, which must be of that size."""
    saved = Path(init) / GENERATOR_CONFIG if init is not None else None
    if saved is not None and saved.is_file():
        was = json.loads(saved.read_text())["size"]
        if abs(was - size) > 1e-9:
            raise ValueError(f"generator_size: {size} but {init} continues a generator of size {was}")
    generator = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))
        gen = Generator(model.config, size)
    with torch.no_grad():
        for layer in (gen.proj_in, gen.transform[0]):
            layer.weight.normal_(0.0, model.config.initializer_range, generator=generator)
            layer.bias.zero_()
    if saved is not None and saved.is_file():
        from safetensors.torch import load_file

        gen.load_state_dict(load_file(str(Path(init) / GENERATOR_FILE)))
    model.electra_generator = gen.to(next(model.parameters()).device)
    add_side_module(model, "electra_generator", save_generator)


def save_generator(gen: Generator, folder) -> None:
    save_tensors(gen, Path(folder) / GENERATOR_FILE)
    (Path(folder) / GENERATOR_CONFIG).write_text(json.dumps({"size": gen.size, "hidden_size": gen.hidden}) + "\n")


def generator_flops_per_token(gen: Generator, *, seq_len: int, select: float) -> float:
    """Training FLOPs per input token of the generator: its transformer, input projection and attention at
    every position, its output layer at the selected share."""
    cfg = gen.body.config
    per_position = sum(p.numel() for p in gen.body.parameters()) - gen.body.get_input_embeddings().weight.numel()
    per_position += sum(p.numel() for p in gen.proj_in.parameters())
    disentangled = 2 if getattr(cfg, "model_type", "") == "deberta-v2" else 1
    attention = 12 * disentangled * cfg.num_hidden_layers * gen.hidden * seq_len
    out = sum(p.numel() for p in gen.transform.parameters()) + gen.bias.numel() * gen.transform[0].out_features
    return 6 * per_position + attention + 6 * select * out
