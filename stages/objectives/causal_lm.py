"""GPT's causal language modelling on packed blocks: predict every next token (Radford et al. 2018/2019).
The model shifts the labels itself (transformers' ``*ForCausalLM`` convention), so labels = inputs."""

from __future__ import annotations

import numpy as np

from stages.objectives import Builder, Objective, tensors, wrap


class CausalLM(Builder):
    name = "causal_lm"

    def __call__(self, rows: np.ndarray, rng: np.random.Generator) -> dict:
        ids = np.asarray(rows, dtype=np.int64)
        # Packed blocks have no padding; said explicitly, as GPT-2's pad id is its end-of-text id (a warning otherwise)
        return tensors(input_ids=ids, attention_mask=np.ones_like(ids), labels=ids.copy())


def fused_view(model, builder):
    """The training module with the loss of :func:`stages.training.lce.linear_cross_entropy`: the body's last
    hidden states and the output layer's weights, never the full logits; the same loss as the stock forward (token
    t+1 from position t, the mean over the batch's predicted tokens). Used on GPUs (:func:`~stages.training.kernels.
    use_fused`)."""
    from types import SimpleNamespace

    from stages.training.lce import linear_cross_entropy

    def forward(inner, input_ids, attention_mask, labels):
        hidden = inner.base_model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        head = inner.get_output_embeddings()
        return SimpleNamespace(loss=linear_cross_entropy(hidden[:, :-1], head.weight, labels[:, 1:], bias=head.bias))

    return wrap(model, forward), (lambda batch: batch)


OBJECTIVES = (Objective(name="causal_lm", paradigm="gpt", builder=CausalLM, fused_view=fused_view,
                        shifts_labels=True,  # the model predicts token t+1 from position t (perplexity reported)
                        card=lambda select, generator_size: "causal (next-token) language modelling"),)
