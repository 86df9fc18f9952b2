"""GPT's causal language modelling on packed blocks: predict every next token (Radford et al. 2018/2019).
The model shifts the labels itself (transformers' ``*ForCausalLM`` convention), so labels = inputs."""

from __future__ import annotations

import numpy as np


class CausalLM:
    name = "causal_lm"

    def __init__(self, layout) -> None:
        self.layout = layout

    def __call__(self, rows: np.ndarray, rng: np.random.Generator) -> dict:
        import torch

        ids = torch.from_numpy(np.asarray(rows, dtype=np.int64))
        return {"input_ids": ids, "labels": ids.clone()}

    def input_tokens(self, rows: int) -> int:
        return rows * self.layout.seq_len
