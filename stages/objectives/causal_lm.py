"""GPT's causal language modelling on packed blocks: predict every next token (Radford et al. 2018/2019).
The model shifts the labels itself (transformers' ``*ForCausalLM`` convention), so labels = inputs."""

from __future__ import annotations

import numpy as np

from stages.objectives import Builder, Objective, tensors


class CausalLM(Builder):
    name = "causal_lm"
    shifts_labels = True  # the model predicts token t+1 from position t (scores shift; perplexity reported)

    def __call__(self, rows: np.ndarray, rng: np.random.Generator) -> dict:
        ids = np.asarray(rows, dtype=np.int64)
        # Packed blocks have no padding; said explicitly, as GPT-2's pad id is its end-of-text id (a warning otherwise)
        return tensors(input_ids=ids, attention_mask=np.ones_like(ids), labels=ids.copy())


OBJECTIVES = (Objective(name="causal_lm", paradigm="gpt", builder=CausalLM,
                        card=lambda select, generator_size: "causal (next-token) language modelling"),)
