"""The packaged models' inference. ``TextClassifier`` classifies with a fine-tuned model folder, pre-processing and
scoring exactly as fine-tuning did (``stages.finetuning.core.encode``, the head's scores), so the service answers
what the evaluation measured. The pre-trained models' own tasks: BERT fills ``[MASK]``s, GPT continues a prompt, T5
fills its sentinel spans; a bad request raises ``ValueError`` (the service answers 400)."""

from __future__ import annotations

import json
from pathlib import Path

from stages.config import build


def _device(device: str | None) -> str:
    import torch

    return device or ("cuda" if torch.cuda.is_available() else "cpu")


class _Base:
    model_class = ""

    def __init__(self, model_dir: str | Path, *, device: str | None = None) -> None:
        import transformers

        self.tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir))
        self.model = getattr(transformers, self.model_class).from_pretrained(str(model_dir))
        self.device = _device(device)
        self.model.to(self.device).eval()
        self.max_positions = int(getattr(self.model.config, "n_positions", 0)
                                 or getattr(self.model.config, "max_position_embeddings", 0) or 512)

    def _ids(self, text: str, **kwargs):
        ids = self.tokenizer(text, return_tensors="pt", **kwargs)["input_ids"]
        if ids.size(1) > self.max_positions:
            raise ValueError(f"the text is {ids.size(1)} tokens; this model reads at most {self.max_positions}")
        return ids.to(self.device)


class FillMask(_Base):
    model_class = "AutoModelForMaskedLM"  # BertForMaskedLM or DebertaV2ForMaskedLM, by the config

    def fill(self, text: str, top_k: int = 5) -> list[dict]:
        """For each mask token in ``text``, its ``top_k`` replacements with probabilities."""
        import torch

        mask = self.tokenizer.mask_token
        if mask not in text:
            raise ValueError(f"the text has no {mask} token to fill")
        ids = self._ids(text)
        with torch.inference_mode():
            logits = self.model(input_ids=ids).logits[0]
        where = (ids[0] == self.tokenizer.mask_token_id).nonzero().flatten().tolist()
        out = []
        for pos in where:
            probs = torch.softmax(logits[pos].float(), -1)
            p, idx = probs.topk(top_k)
            out.append({"position": pos, "candidates": [
                {"token": self.tokenizer.convert_ids_to_tokens(i), "score": round(float(s), 6)}
                for s, i in zip(p.tolist(), idx.tolist())]})
        return out


class Generator(_Base):
    model_class = "GPT2LMHeadModel"

    MIN_TEMPERATURE = 0.01  # below it, logits / t overflow float32 and sampling fails: greedy instead

    def generate(self, prompt: str, max_new_tokens: int = 32, temperature: float = 0.0, seed: int = 0) -> str:
        """The continuation of ``prompt``: greedy at temperatures below 0.01 (0 included), else sampled with
        ``seed``."""
        import torch

        ids = self._ids(prompt, add_special_tokens=False)
        if ids.size(1) == 0:
            ids = torch.tensor([[self.tokenizer.bos_token_id]], device=self.device)
        max_new_tokens = min(max_new_tokens, self.max_positions - ids.size(1))
        if max_new_tokens <= 0:
            raise ValueError(f"the prompt fills the model's {self.max_positions} positions")
        sample = temperature >= self.MIN_TEMPERATURE
        torch.manual_seed(seed)
        with torch.inference_mode():
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                      do_sample=sample, temperature=temperature if sample else None, top_k=None,
                                      pad_token_id=self.tokenizer.eos_token_id)
        return self.tokenizer.decode(out[0, ids.size(1):], skip_special_tokens=True)


class Text2Text(_Base):
    model_class = "T5ForConditionalGeneration"

    def generate(self, text: str, max_new_tokens: int = 32) -> str:
        """The decoder's output for ``text`` (greedy), sentinels kept, padding and end token dropped."""
        import torch

        ids = self._ids(text)
        with torch.inference_mode():
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                      do_sample=False)
        drop = {self.tokenizer.pad_token_id, self.tokenizer.eos_token_id}
        return self.tokenizer.decode([t for t in out[0].tolist() if t not in drop], skip_special_tokens=False)


def check_packaged(model_dir: str | Path) -> dict:
    """A packaged classifier folder (the model store's copy, holding ``lineage.json``): every file of it (weights,
    or the head and LoRA adapter; tokenizer; ``adaptation.json``) has the MD5 its lineage record holds, none
    missing or added (the files packaging adds aside); returns the record. A ValueError names each difference."""
    from stages.provenance.card import CARD_FILE
    from stages.provenance.hashing import folder_manifest
    from stages.provenance.verify import PACKAGING_FILES, diff_manifests

    model_dir = Path(model_dir)
    record = json.loads((model_dir / "lineage.json").read_text(encoding="utf-8"))
    recorded = {rel: md5 for rel, md5 in record["model"]["files"].items() if rel != CARD_FILE}
    held = {rel: md5 for rel, md5 in folder_manifest(model_dir).items() if rel not in PACKAGING_FILES}
    diffs = diff_manifests(str(model_dir), recorded, held)
    if diffs:
        raise ValueError(f"{model_dir}: the packaged classifier {record['model'].get('name')} differs from its "
                         f"lineage record ({len(diffs)} file(s)): " + "; ".join(diffs[:5]))
    return record


class TextClassifier:
    """``base``: for a frozen or lora folder, its base model's packaged copy (checked against the digest its
    ``adaptation.json`` records) instead of the workspace path that file names."""

    def __init__(self, model_dir: str | Path, *, device: str | None = None, batch_size: int = 64,
                 base: str | Path | None = None) -> None:
        from transformers import AutoTokenizer

        from stages.finetuning.core import FinetuneConfig, head_spec
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
                                    spec=head_spec(self.cfg, base=None if base is None else Path(base)))
        self.head.to(_device(device))
        self.head.model.eval()
        self.batch_size = batch_size

    def scores(self, texts: list[str]):
        """``[len(texts), labels]`` probabilities."""
        import torch

        from stages.finetuning.core import encode
        from stages.training.device import to_device

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
