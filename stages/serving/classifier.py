"""Classify texts with a fine-tuned model folder, pre-processing and scoring exactly as fine-tuning did
(``stages.finetuning.core.encode``, the head's scores), so the service answers what the evaluation measured."""

from __future__ import annotations

import json
from pathlib import Path

from stages.config import build


class TextClassifier:
    def __init__(self, model_dir: str | Path, *, device: str | None = None, batch_size: int = 64) -> None:
        import torch
        from transformers import AutoTokenizer

        from stages.finetuning.core import FinetuneConfig, head_options
        from stages.finetuning.heads import make_classifier

        model_dir = Path(model_dir)
        info_path = model_dir / "finetune.json"
        if not info_path.is_file():
            raise FileNotFoundError(f"{info_path}: not a fine-tuned model folder (no finetune.json)")
        info = json.loads(info_path.read_text(encoding="utf-8"))
        self.cfg = build(FinetuneConfig, info["config"], str(info_path))
        self.paradigm = info["metrics"]["paradigm"]
        self.labels = list(info["labels"])
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        self.head = make_classifier(self.paradigm, model_dir, self.labels, self.tokenizer, init="pretrained", seed=0,
                                    **head_options(self.cfg))
        self.head.to(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.head.model.eval()
        self.batch_size = batch_size

    def scores(self, texts: list[str]):
        """``[len(texts), labels]`` probabilities."""
        import torch

        from stages.finetuning.core import encode
        from stages.training.loop import to_device

        out = []
        with torch.inference_mode():
            for lo in range(0, len(texts), self.batch_size):
                batch = to_device(encode(self.tokenizer, texts[lo: lo + self.batch_size], self.cfg, self.paradigm),
                                  self.head.device)
                out.append(torch.softmax(self.head.scores(batch), -1).cpu())
        return torch.cat(out) if out else torch.empty(0, len(self.labels))

    def lengths(self, texts: list[str]) -> list[int]:
        """Each text's length in tokens as the model would see it without truncation (prefix and special
        tokens included)."""
        if not texts:
            return []
        if self.paradigm == "t5":
            texts = [self.cfg.t5_prefix + t for t in texts]
        ids = self.tokenizer(list(texts), add_special_tokens=self.paradigm != "gpt", verbose=False)["input_ids"]
        return [len(x) for x in ids]

    def classify(self, texts: list[str]) -> list[dict]:
        """For each text: ``{"label": best label, "scores": {label: probability}, "tokens": tokens read,
        "truncated": whether the text was cut to the trained max_len}``."""
        texts = list(texts)
        probs = self.scores(texts).tolist()
        full = self.lengths(texts)
        return [{"label": self.labels[max(range(len(row)), key=row.__getitem__)],
                 "scores": {lab: round(p, 6) for lab, p in zip(self.labels, row)},
                 "tokens": min(n, self.cfg.max_len), "truncated": n > self.cfg.max_len}
                for row, n in zip(probs, full)]
