"""The pre-trained models' own tasks: BERT fills ``[MASK]``s, GPT continues a prompt, T5 fills its sentinel
spans. A bad request raises ``ValueError`` (the service answers 400).
"""

from __future__ import annotations

from pathlib import Path


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


KINDS = {"bert": ("fill_mask", FillMask), "gpt": ("generate", Generator), "t5": ("text2text", Text2Text)}
