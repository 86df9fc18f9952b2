"""In-context learning for a causal LM (Brown et al. 2020): k demonstrations ``{text}{separator}{label}\n\n``, then
the query ``{text}{separator}``; the prediction is the label whose tokens (with a leading space) are most likely. Every
example gets ``context // (k + 1)`` tokens. The prompt runs once, its key/value cache repeated for the labels. For
k > 0 the demonstrations are drawn ``orderings`` times (Zhao et al. 2021; Lu et al. 2022), ``shared`` by every query
or drawn ``per_query``; reproducible either way. Contextual calibration (Zhao et al. 2021, section 5): the label
probabilities are divided by those of content-free inputs in the same prompt."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stages.config import check, check_seed
from stages.evaluation.summary import summarise
from stages.finetuning.metrics import scores


@dataclass(frozen=True, kw_only=True)
class IclConfig:
    """In-context learning (Brown et al. 2020): the GPT models classify test texts from k demonstrations in the
    prompt, without weight changes; reported uncalibrated and calibrated (Zhao et al. 2021)."""

    shots: tuple[int, ...] = (0, 1, 5)
    """The k values scored (demonstrations per prompt), each >= 0."""
    max_examples: int = 300
    """Test examples scored, a seeded sample; 0 = all."""
    separator: str = "\nSection:"
    """Text between an example's text and its label (the query ends with it); not empty."""
    inits: tuple[str, ...] = ("pretrained", "dapt")
    """GPT models scored in context (`pretrained`, `dapt`, `random`); [] = skip."""
    seed: int = 0
    """Seed of the test sample and the demonstrations."""
    orderings: int = 3
    """Demonstration lists per k > 0, each drawn and ordered anew; the mean and spread over them are reported."""
    demonstrations: str = "shared"
    """`shared`: one list per ordering for every query (Zhao et al. 2021); `per_query`: a new list for each query."""
    content_free: tuple[str, ...] = ("N/A", "", "[MASK]")
    """Inputs put in place of the query to estimate the prompt's label bias (contextual calibration)."""

    def __post_init__(self) -> None:
        check_seed("seed", self.seed)
        check(len(self.shots) >= 1 and all(k >= 0 for k in self.shots), "shots: need one or more k >= 0")
        check(self.max_examples >= 0, "max_examples: must be >= 0")
        check(bool(self.separator), "separator: must not be empty")
        check(self.orderings >= 1, "orderings: must be >= 1")
        check(self.demonstrations in ("shared", "per_query"), "demonstrations: one of shared, per_query")
        check(len(self.content_free) >= 1, "content_free: need at least one input")


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
    device = model.device  # a GPU scores under bf16 autocast; the CPU in fp32, as before
    with torch.no_grad(), torch.autocast(device_type=device.type, dtype=torch.bfloat16,
                                         enabled=device.type == "cuda"):
        out = model(input_ids=torch.tensor([prompt], device=device), use_cache=True)
        first = torch.log_softmax(out.logits[0, -1].double(), -1)  # the distribution of each label's first token
        scores = first[torch.tensor([ids[0] for ids in label_ids], device=device)]
        if width > 1:
            cont = torch.zeros((k, width - 1), dtype=torch.long)
            target = torch.full((k, width - 1), -1, dtype=torch.long)
            for i, ids in enumerate(label_ids):  # right-padded: causal attention never looks at what follows
                cont[i, : len(ids) - 1] = torch.tensor(ids[:-1])
                target[i, : len(ids) - 1] = torch.tensor(ids[1:])
            cont, target = cont.to(device), target.to(device)
            cache = out.past_key_values
            cache.batch_repeat_interleave(k)
            logp = torch.log_softmax(model(input_ids=cont, past_key_values=cache, use_cache=True).logits.double(), -1)
            picked = logp.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
            scores = scores + (picked * (target >= 0)).sum(-1)
    return scores.cpu().numpy()


def normalised(log_scores: np.ndarray) -> np.ndarray:
    """Probabilities over the label set from label log-likelihoods (a softmax restricted to the labels)."""
    z = np.exp(log_scores - log_scores.max())
    return z / z.sum()


def calibrate(p: np.ndarray, p_cf: np.ndarray) -> np.ndarray:
    """Zhao et al. (2021), eq. in section 5: ``W p + b`` with ``W = diag(p_cf)^-1``, ``b = 0``, renormalised."""
    q = p / np.maximum(p_cf, 1e-300)
    return q / q.sum()


def icl_accuracy(model, tokenizer, labels: list[str], train: list[tuple[str, int]], test: list[tuple[str, int]],
                 cfg: IclConfig, *, context: int, score=None) -> dict:
    """For each k in ``cfg.shots``, on ``test`` (text, label index) pairs: accuracy and macro-F1, mean and std
    over the prompt orderings, uncalibrated (top level) and calibrated (``calibrated``). ``score(ids)`` gives
    the label log-likelihoods after a prompt (default: :func:`label_scores` with ``model``)."""
    builder = PromptBuilder(tokenizer, labels, separator=cfg.separator, context=context)
    if score is None:
        model.eval()
        score = (lambda ids: label_scores(model, ids, builder.label_ids))
    if cfg.max_examples and cfg.max_examples < len(test):
        pick = np.random.default_rng([cfg.seed, 1]).choice(len(test), cfg.max_examples, replace=False)
        test = [test[i] for i in sorted(pick)]
    gold = np.array([y for _, y in test])
    bias: dict[tuple, np.ndarray] = {}  # p_cf per demonstration list (0-shot: one for the whole run)

    def p_cf(demos: list[tuple[str, int]], key: tuple) -> np.ndarray:
        if key not in bias:
            bias[key] = np.mean([normalised(score(builder.prompt(t, demos))) for t in cfg.content_free], axis=0)
        return bias[key]

    out = {}
    for k in cfg.shots:
        builder.budget(k)  # fails before any work if k shots cannot fit
        runs = []
        for o in range(cfg.orderings if k else 1):
            raw, cal = np.empty(len(test), dtype=np.int64), np.empty(len(test), dtype=np.int64)
            for i, (text, _) in enumerate(test):
                rng = np.random.default_rng([cfg.seed, 2, o, i] if cfg.demonstrations == "per_query" else
                                            [cfg.seed, 2, o])
                pick = [int(j) for j in rng.choice(len(train), k, replace=False)] if k else []
                demos = [train[j] for j in pick]
                p = normalised(score(builder.prompt(text, demos)))
                raw[i], cal[i] = int(p.argmax()), int(calibrate(p, p_cf(demos, tuple(pick))).argmax())
            runs.append((scores(gold, raw, len(labels)), scores(gold, cal, len(labels)),
                         len(np.unique(raw)), len(np.unique(cal))))
            if k:
                bias.clear()  # the demonstrations of one ordering never recur in another
        out[str(k)] = {**_spread([r[0] for r in runs]), "predicted_labels": max(r[2] for r in runs),
                       "orderings": len(runs),
                       "calibrated": {**_spread([r[1] for r in runs]), "predicted_labels": max(r[3] for r in runs)}}
    out["examples"] = len(test)
    out["tokens_per_example"] = {str(k): builder.context // (k + 1) for k in cfg.shots}
    return out


def _spread(runs: list[dict]) -> dict:
    stats = {key: summarise([r[key] for r in runs]) for key in ("accuracy", "macro_f1")}
    return {k: v for key, s in stats.items() for k, v in ((key, s["mean"]), (f"{key}_std", s["std"]))}
