"""In-context learning for a causal LM (Brown et al. 2020, section 2): k labeled demonstrations, then the
query; the prediction is the label whose words are most likely after the prompt. No weight changes.

Each demonstration is ``{text}{separator}{label}\\n\\n`` and the query ``{text}{separator}``; a label is
scored as the sum of the log-probabilities of its tokens (with a leading space) after the prompt. The prompt
must fit the length the model was trained on (``context``): every example (demonstrations and query)
gets ``context // (shots + 1)`` tokens, its text cut to fit. The prompt runs once; its key/value cache is
repeated for the label candidates, so scoring 16 labels costs one prompt, not 16.

Demonstrations are drawn from the training split at random for each query, with a generator keyed by
(seed, query index), so a run is reproducible and does not depend on the order of other queries."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, kw_only=True)
class IclConfig:
    """shots: the k values to score. max_examples: test examples scored (a seeded sample; 0 = all).
    separator: what follows each text (the label comes after it). inits: which GPT models to score."""

    shots: tuple[int, ...] = (0, 1, 5)
    max_examples: int = 300
    separator: str = "\nSection:"
    inits: tuple[str, ...] = ("pretrained", "dapt")
    seed: int = 0

    def __post_init__(self) -> None:
        from stages.config import check

        check(len(self.shots) >= 1 and all(k >= 0 for k in self.shots), "shots: need one or more k >= 0")
        check(self.max_examples >= 0, "max_examples: must be >= 0")
        check(bool(self.separator), "separator: must not be empty")


class PromptBuilder:
    """Token ids of prompts for one tokenizer, label set and context length."""

    def __init__(self, tokenizer, labels: list[str], *, separator: str, context: int) -> None:
        self.tok, self.labels, self.context = tokenizer, labels, context
        self.sep = self._ids(separator)
        self.label_ids = [self._ids(" " + lab) for lab in labels]
        self.end = self._ids("\n\n")
        self.widest = max(map(len, self.label_ids))

    def _ids(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False, verbose=False)["input_ids"]  # long texts are cut here

    def budget(self, shots: int) -> int:
        """Text tokens each example may keep so that the prompt and the longest label fit in ``context``."""
        per = self.context // (shots + 1)
        room = per - len(self.sep) - self.widest - len(self.end)
        if room < 1:
            raise ValueError(f"icl: {shots} shots do not fit a context of {self.context} tokens "
                             f"(each example would get {per}); use fewer shots")
        return room

    def prompt(self, query: str, demos: list[tuple[str, int]]) -> list[int]:
        room = self.budget(len(demos))
        ids: list[int] = []
        for text, label in demos:
            ids += self._ids(text)[:room] + self.sep + self.label_ids[label] + self.end
        ids += self._ids(query)[:room] + self.sep
        assert len(ids) + self.widest <= self.context
        return ids


def label_scores(model, prompt: list[int], label_ids: list[list[int]]) -> np.ndarray:
    """log P(label | prompt) for each label: the prompt once, its cache repeated for the candidates."""
    import torch

    k = len(label_ids)
    width = max(map(len, label_ids))
    with torch.no_grad():
        out = model(input_ids=torch.tensor([prompt]), use_cache=True)
        first = torch.log_softmax(out.logits[0, -1].double(), -1)  # the distribution of each label's first token
        scores = first[torch.tensor([ids[0] for ids in label_ids])]
        if width > 1:
            cont = torch.zeros((k, width - 1), dtype=torch.long)
            target = torch.full((k, width - 1), -1, dtype=torch.long)
            for i, ids in enumerate(label_ids):  # right-padded: causal attention never looks at what follows
                cont[i, : len(ids) - 1] = torch.tensor(ids[:-1])
                target[i, : len(ids) - 1] = torch.tensor(ids[1:])
            cache = out.past_key_values
            cache.batch_repeat_interleave(k)
            logp = torch.log_softmax(model(input_ids=cont, past_key_values=cache, use_cache=True).logits.double(), -1)
            picked = logp.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
            scores = scores + (picked * (target >= 0)).sum(-1)
    return scores.numpy()


def icl_accuracy(model, tokenizer, labels: list[str], train: list[tuple[str, int]], test: list[tuple[str, int]],
                 cfg: IclConfig, *, context: int, progress=None) -> dict:
    """Accuracy and macro-F1 for each k in ``cfg.shots`` on ``test`` (text, label index) pairs."""
    from stages.finetuning.metrics import scores

    model.eval()
    builder = PromptBuilder(tokenizer, labels, separator=cfg.separator, context=context)
    if cfg.max_examples and cfg.max_examples < len(test):
        pick = np.random.default_rng([cfg.seed, 1]).choice(len(test), cfg.max_examples, replace=False)
        test = [test[i] for i in sorted(pick)]
    gold = np.array([y for _, y in test])
    out = {}
    for k in cfg.shots:
        builder.budget(k)  # fails before any work if k shots cannot fit
        pred = np.empty(len(test), dtype=np.int64)
        for i, (text, _) in enumerate(test):
            rng = np.random.default_rng([cfg.seed, 2, i])
            demos = [train[j] for j in rng.choice(len(train), k, replace=False)] if k else []
            pred[i] = int(label_scores(model, builder.prompt(text, demos), builder.label_ids).argmax())
            if progress is not None:
                progress(1)
        s = scores(gold, pred, len(labels))
        out[str(k)] = {"accuracy": s["accuracy"], "macro_f1": s["macro_f1"],
                       "predicted_labels": int(len(np.unique(pred)))}
    out["examples"] = len(test)
    out["tokens_per_example"] = {str(k): builder.context // (k + 1) for k in cfg.shots}
    return out
