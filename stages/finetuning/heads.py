"""A classifier per paradigm over a pre-trained (or freshly initialised) model, with one interface:
``loss(batch)`` for training, ``scores(batch)`` (one score per label) and ``predict(batch)`` (its argmax).

- BERT: the [CLS] representation and a linear head (``BertForSequenceClassification``; Devlin et al.).
- GPT: the last token's representation and a linear head (``GPT2ForSequenceClassification``), plus GPT-1's
  auxiliary language-modelling loss on the same text, weighted ``aux_lm_weight`` (Radford et al. 2018,
  section 3.2; 0 switches it off). The LM term is the mean cross-entropy over a random ``aux_lm_fraction``
  of the text's positions, drawn afresh each step: an unbiased estimate of the mean over all of them (a test
  checks both the exact value at 1.0 and the mean of the estimate) for that fraction of the vocabulary
  projection's cost, which for a small model with 8,192 words is most of a step.
- T5: text to text (Raffel et al. 2020): ``prefix + text`` in, the label word out; a prediction scores every
  label string under the model and takes the most likely, so it is always a valid label.

``init``: ``pretrained`` / ``dapt`` load the weights of ``model_dir``; ``random`` builds the same
architecture from its config with fresh weights (the baseline that shows what pre-training buys).
"""

from __future__ import annotations

from pathlib import Path

import torch


def _config(model_dir: Path, **kwargs):
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(str(model_dir), **kwargs)


class EncoderClassifier:
    """BERT and GPT: a sequence-classification model; GPT optionally with the auxiliary LM loss."""

    def __init__(self, paradigm: str, model_dir: Path, labels: list[str], *, init: str, seed: int,
                 aux_lm_weight: float = 0.0, aux_lm_fraction: float = 1.0) -> None:
        from transformers import BertForSequenceClassification, GPT2ForSequenceClassification

        cls = BertForSequenceClassification if paradigm == "bert" else GPT2ForSequenceClassification
        kwargs = {"num_labels": len(labels), "id2label": dict(enumerate(labels)),
                  "label2id": {lab: i for i, lab in enumerate(labels)}}
        torch.manual_seed(seed)  # the new head (and, for random init, everything) starts from this seed
        if init == "random":
            self.model = cls(_config(model_dir, **kwargs))
        else:
            from transformers.utils import logging

            verbosity = logging.get_verbosity()
            logging.set_verbosity_error()  # "newly initialized: score.weight" is the point of fine-tuning
            try:
                self.model = cls.from_pretrained(str(model_dir), **kwargs)
            finally:
                logging.set_verbosity(verbosity)
        if paradigm == "gpt":
            self.model.config.pad_token_id = self.model.config.eos_token_id
        self.paradigm, self.aux_lm_weight, self.aux_lm_fraction = paradigm, aux_lm_weight, aux_lm_fraction
        self.device = "cpu"

    def to(self, device: str) -> None:
        self.model.to(device)
        self.device = device

    def loss(self, batch: dict) -> torch.Tensor:
        aux = self.paradigm == "gpt" and self.aux_lm_weight > 0
        out = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                         labels=batch["labels"], output_hidden_states=aux)
        if not aux:
            return out.loss
        hidden = out.hidden_states[-1][:, :-1]  # after the final layer norm; position t predicts t + 1
        target = batch["input_ids"][:, 1:].masked_fill(batch["attention_mask"][:, 1:] == 0, -100)
        if self.aux_lm_fraction < 1:
            keep = torch.rand(target.shape, device=target.device) < self.aux_lm_fraction
            target = target.masked_fill(~keep, -100)
        picked = target != -100
        logits = hidden[picked] @ self.model.transformer.wte.weight.T  # the tied LM head, at the picked positions
        lm = torch.nn.functional.cross_entropy(logits.float(), target[picked], reduction="sum") / max(
            int(picked.sum()), 1)
        return out.loss + self.aux_lm_weight * lm

    @torch.no_grad()
    def scores(self, batch: dict) -> torch.Tensor:
        """One logit per label, ``[batch, labels]``."""
        return self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()

    def predict(self, batch: dict) -> torch.Tensor:
        return self.scores(batch).argmax(-1)


class TextToTextClassifier:
    """T5: the label word as the target; prediction by scoring each label string."""

    def __init__(self, model_dir: Path, labels: list[str], tokenizer, *, init: str, seed: int) -> None:
        from transformers import T5ForConditionalGeneration

        torch.manual_seed(seed)
        self.model = (T5ForConditionalGeneration(_config(model_dir)) if init == "random"
                      else T5ForConditionalGeneration.from_pretrained(str(model_dir)))
        enc = tokenizer(labels, add_special_tokens=True)["input_ids"]  # each label word + </s>
        width = max(map(len, enc))
        self.candidates = torch.full((len(labels), width), -100, dtype=torch.long)
        for i, ids in enumerate(enc):
            self.candidates[i, : len(ids)] = torch.tensor(ids)
        self.device = "cpu"

    def to(self, device: str) -> None:
        self.model.to(device)
        self.candidates = self.candidates.to(device)
        self.device = device

    def loss(self, batch: dict) -> torch.Tensor:
        target = self.candidates[batch["labels"]]
        return self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=target).loss

    @torch.no_grad()
    def scores(self, batch: dict) -> torch.Tensor:
        """log P(label | text) for each label, ``[batch, labels]``."""
        encoder = self.model.get_encoder()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        n, k = batch["input_ids"].size(0), len(self.candidates)
        scores = torch.empty(n, k, device=batch["input_ids"].device)
        for c in range(k):  # log P(label c | text), summed over its tokens
            target = self.candidates[c].repeat(n, 1)
            logits = self.model(encoder_outputs=encoder, attention_mask=batch["attention_mask"], labels=target).logits
            logp = torch.log_softmax(logits.float(), -1)
            valid = target != -100
            picked = logp.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
            scores[:, c] = (picked * valid).sum(-1)
        return scores

    def predict(self, batch: dict) -> torch.Tensor:
        return self.scores(batch).argmax(-1)


def make_classifier(paradigm: str, model_dir: Path, labels: list[str], tokenizer, *, init: str, seed: int,
                    aux_lm_weight: float = 0.0, aux_lm_fraction: float = 1.0):
    if paradigm == "t5":
        return TextToTextClassifier(model_dir, labels, tokenizer, init=init, seed=seed)
    return EncoderClassifier(paradigm, model_dir, labels, init=init, seed=seed, aux_lm_weight=aux_lm_weight,
                             aux_lm_fraction=aux_lm_fraction)
