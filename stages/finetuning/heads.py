"""A classifier per paradigm and ``head`` over a pre-trained (``init`` random: freshly initialised) model, with
one interface: ``loss(batch)`` for training, ``scores(batch)`` (one per label) and ``predict(batch)`` (their argmax).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch


def _load(cls, model_dir: Path, init: str, **kwargs):
    """``cls`` with the weights of ``model_dir`` (the new head's "newly initialized" warnings muted), or, for
    ``init`` random, fresh from its config."""
    from transformers import AutoConfig
    from transformers.utils import logging

    if init == "random":
        config = AutoConfig.from_pretrained(str(model_dir), **kwargs)
        return cls.from_config(config) if hasattr(cls, "from_config") else cls(config)
    verbosity = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        return cls.from_pretrained(str(model_dir), **kwargs)
    finally:
        logging.set_verbosity(verbosity)


@dataclass(frozen=True)
class HeadSpec:
    """How a classifier sits on its body: ``head`` (:func:`make_classifier`), GPT's auxiliary LM loss
    (``aux_lm_weight``, on a random ``aux_lm_fraction`` of the positions), ``adapt`` (method frozen or lora and its
    options, :func:`stages.finetuning.core.head_spec`; None: every weight trains) and ``base`` (a frozen or lora
    folder's packaged base, checked against the digest it records; None: the path it names)."""

    head: str = "stock"
    aux_lm_weight: float = 0.0
    aux_lm_fraction: float = 1.0
    adapt: dict | None = None
    base: Path | None = None


class _Classifier:
    """What every head shares: one constructor (the new head, and for random init everything, starts from
    ``seed``; ``build`` makes the model), the device it runs on, GPT's auxiliary LM loss, and ``predict`` as the
    argmax of ``scores``."""

    model: torch.nn.Module
    device = "cpu"
    tensors: tuple[str, ...] = ()  # the attributes that hold tensors to move with the model

    def __init__(self, paradigm: str, model_dir: Path, labels: list[str], tokenizer=None, *, init: str, seed: int,
                 spec: HeadSpec | None = None) -> None:
        spec = spec or HeadSpec()
        torch.manual_seed(seed)
        self.aux_lm_weight = spec.aux_lm_weight if paradigm == "gpt" else 0.0
        self.aux_lm_fraction = spec.aux_lm_fraction
        self.adapt = spec.adapt  # frozen or lora (stages.finetuning.adapt); None: every weight trains
        self.base = spec.base  # a frozen or lora folder's packaged base (the store's copy); None: the path it names
        self.model = self.build(paradigm, Path(model_dir), labels, tokenizer, init)

    def to(self, device: str) -> None:
        self.model.to(device)
        for name in self.tensors:
            setattr(self, name, getattr(self, name).to(device))
        self.device = device

    def predict(self, batch: dict) -> torch.Tensor:
        return self.scores(batch).argmax(-1)

    def plus_aux_lm(self, loss, hidden, batch: dict, embedding) -> torch.Tensor:
        """``loss`` plus ``aux_lm_weight`` x GPT-1's auxiliary LM loss (Radford et al. 2018, 3.2) over ``hidden``
        (after the final layer norm): position t predicts t + 1, estimated without bias on a random
        ``aux_lm_fraction`` of the positions, drawn afresh each step."""
        hidden = hidden[:, :-1]
        target = batch["input_ids"][:, 1:].masked_fill(batch["attention_mask"][:, 1:] == 0, -100)
        if self.aux_lm_fraction < 1:
            keep = torch.rand(target.shape, device=target.device) < self.aux_lm_fraction
            target = target.masked_fill(~keep, -100)
        picked = target != -100
        logits = hidden[picked] @ embedding.T  # the tied LM head, at the picked positions
        lm = torch.nn.functional.cross_entropy(logits.float(), target[picked], reduction="sum") / max(
            int(picked.sum()), 1)
        return loss + self.aux_lm_weight * lm


class EncoderClassifier(_Classifier):
    """BERT and GPT: a sequence-classification model; GPT optionally with the auxiliary LM loss."""

    def build(self, paradigm, model_dir, labels, tokenizer, init):
        from transformers import AutoModelForSequenceClassification, GPT2ForSequenceClassification

        # BERT paradigm: BertForSequenceClassification or DebertaV2ForSequenceClassification, by the config
        cls = AutoModelForSequenceClassification if paradigm == "bert" else GPT2ForSequenceClassification
        model = _load(cls, model_dir, init, num_labels=len(labels), id2label=dict(enumerate(labels)),
                      label2id={lab: i for i, lab in enumerate(labels)})
        if paradigm == "gpt":
            model.config.pad_token_id = model.config.eos_token_id
        return model

    def loss(self, batch: dict) -> torch.Tensor:
        aux = self.aux_lm_weight > 0
        out = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                         labels=batch["labels"], output_hidden_states=aux)
        return self.plus_aux_lm(out.loss, out.hidden_states[-1], batch, self.model.transformer.wte.weight) if aux \
            else out.loss

    @torch.no_grad()
    def scores(self, batch: dict) -> torch.Tensor:
        """One logit per label, ``[batch, labels]``."""
        return self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()


class TextToTextClassifier(_Classifier):
    """T5: the label word as the target; prediction by scoring each label string."""

    tensors = ("candidates",)

    def build(self, paradigm, model_dir, labels, tokenizer, init):
        from transformers import T5ForConditionalGeneration

        model = _load(T5ForConditionalGeneration, model_dir, init)
        enc = tokenizer(labels, add_special_tokens=True)["input_ids"]  # each label word + </s>
        self.candidates = torch.nn.utils.rnn.pad_sequence([torch.tensor(ids, dtype=torch.long) for ids in enc],
                                                          batch_first=True, padding_value=-100)
        return model

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


class PromptClassifier(_Classifier):
    """BERT: the text with a [MASK] before its final [SEP], scored by the masked-LM head at that position over
    one word per label (a cloze, as PET and LM-BFF). A label's word is its first word piece; labels must
    differ in it."""

    tensors = ("words",)

    def build(self, paradigm, model_dir, labels, tokenizer, init):
        from transformers import AutoModelForMaskedLM

        model = _load(AutoModelForMaskedLM, model_dir, init)
        if tokenizer.mask_token_id is None or tokenizer.sep_token_id is None:
            raise ValueError(f"{model_dir}: head prompt needs a tokenizer with [MASK] and [SEP]")
        first = [tokenizer(lab, add_special_tokens=False)["input_ids"][:1] for lab in labels]
        words = [w[0] if w else -1 for w in first]
        clash = [lab for lab, w in zip(labels, words) if w < 0 or words.count(w) > 1]
        if clash:
            raise ValueError(f"head prompt: labels {', '.join(clash)} share a first word piece (or have none)")
        self.words = torch.tensor(words)
        self.mask_id, self.sep_id = tokenizer.mask_token_id, tokenizer.sep_token_id
        self.body_name = next(n for n in ("deberta", "bert") if hasattr(model, n))
        return model

    def logits(self, batch: dict) -> torch.Tensor:
        ids, attn = batch["input_ids"], batch["attention_mask"]
        n = attn.sum(1)  # the final [SEP] of each text is at n - 1
        rows = torch.arange(ids.size(0), device=ids.device)
        ids = torch.cat([ids, torch.zeros_like(ids[:, :1])], 1)
        attn = torch.cat([attn, torch.zeros_like(attn[:, :1])], 1)
        ids[rows, n - 1], ids[rows, n], attn[rows, n] = self.mask_id, self.sep_id, 1
        hidden = getattr(self.model, self.body_name)(input_ids=ids, attention_mask=attn)[0]
        return self.model.cls(hidden[rows, n - 1])[:, self.words]

    def loss(self, batch: dict) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.logits(batch).float(), batch["labels"])

    @torch.no_grad()
    def scores(self, batch: dict) -> torch.Tensor:
        return self.logits(batch).float()


HEAD_FILE = "head.safetensors"


class _Pooled(torch.nn.Module):
    """body -> masked mean over positions -> BatchNorm -> linear. The BatchNorm removes the direction that a
    pre-trained body's pooled states share, which a LayerNorm would keep (benchmarks/transfer.md, "Fine-tuning
    a pre-trained body")."""

    frozen = False  # method frozen: the body stays in eval mode (no dropout) while the head trains
    adaptation: dict | None = None  # method frozen or lora: what adaptation.json records (the base folder)

    def __init__(self, body, d_model: int, n_labels: int) -> None:
        super().__init__()
        self.body = body
        self.norm = torch.nn.BatchNorm1d(d_model)
        self.out = torch.nn.Linear(d_model, n_labels)

    def train(self, mode: bool = True):
        super().train(mode)
        if self.frozen:
            self.body.eval()
        return self

    def hidden(self, input_ids, attention_mask):
        """The states the loss may reuse (GPT's auxiliary LM): the body's last hidden states."""
        return self.body(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    def pool(self, input_ids, attention_mask):
        """(the masked mean of the body's last hidden states ``[batch, d_model]``, those states)."""
        hidden = self.hidden(input_ids, attention_mask)
        m = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * m).sum(1) / m.sum(1).clamp(min=1), hidden

    def head(self, pooled):
        norm = self.norm
        if self.training and pooled.size(0) == 1:
            # one example has no batch statistics: use the running ones (a last batch of one)
            return self.out(torch.nn.functional.batch_norm(pooled, norm.running_mean, norm.running_var,
                                                           norm.weight, norm.bias, False, 0.0, norm.eps))
        return self.out(norm(pooled))

    def forward(self, input_ids, attention_mask):
        return self.head(self.pool(input_ids, attention_mask)[0])

    def save_pretrained(self, path: str) -> None:
        """The body as a stock model (``AutoModel`` loads it), the head beside it in safetensors. Adapted (frozen,
        lora): the head (and the LoRA adapter) only, with ``adaptation.json`` naming the base and its digest."""
        from safetensors.torch import save_file

        if self.adaptation is None or self.adaptation["method"] == "lora":
            self.body.save_pretrained(path)  # a PeftModel writes its adapter only
            if self.adaptation is not None:
                from stages.finetuning.adapt import sort_adapter_config

                sort_adapter_config(Path(path))
        else:
            Path(path).mkdir(parents=True, exist_ok=True)  # frozen: no body to write
        save_file({k: v.contiguous() for k, v in self.state_dict().items() if not k.startswith("body.")},
                  str(Path(path) / HEAD_FILE))
        if self.adaptation is not None:
            import json

            from stages.finetuning.adapt import ADAPTATION_FILE, base_digest, parameter_counts

            record = {**self.adaptation, **parameter_counts(self)}
            record.setdefault("base_digest", base_digest(Path(record["base"])))
            (Path(path) / ADAPTATION_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n",
                                                      encoding="utf-8")


class PooledClassifier(_Classifier):
    """Any paradigm's body with the pooled head; GPT optionally with the auxiliary LM loss. T5 pools its
    encoder (``T5EncoderModel``)."""

    def build(self, paradigm, model_dir, labels, tokenizer, init):
        from transformers import AutoModel, T5EncoderModel

        from stages.finetuning import adapt

        # a frozen or lora folder holds the head (and adapter) only: the body comes from the base it names
        saved = adapt.read_adaptation(model_dir) if init != "random" else None
        options = saved or (self.adapt if self.adapt and adapt.effective_method(self.adapt["method"], init) != "full"
                            else None)
        if self.base is not None and not saved:
            raise ValueError(f"{model_dir}: a base model ({self.base}) was given, but the folder has no "
                             f"{adapt.ADAPTATION_FILE} (it was trained in full and holds the whole model)")
        body_dir = adapt.resolve_base(model_dir, saved, self.base) if saved else model_dir
        body = _load(AutoModel if paradigm != "t5" else T5EncoderModel, body_dir, init)
        cfg = body.config
        d_model = getattr(cfg, "hidden_size", None) or getattr(cfg, "n_embd", None) or cfg.d_model
        if options is not None:
            body = (adapt.load_adapter(body, model_dir) if saved and options["method"] == "lora"
                    else adapt.adapt_body(body, paradigm, options))
        model = _Pooled(body, d_model, len(labels))
        if options is not None:
            model.frozen = options["method"] in adapt.FIXED_BODY
            model.adaptation = saved or {"method": options["method"], "base": str(model_dir),
                                         **({"lora": {k: options[k] for k in ("r", "alpha", "dropout", "targets")}}
                                            if options["method"] == "lora" else {})}
            if model.frozen:
                self.aux_lm_weight = 0.0  # nothing the auxiliary LM loss could train
        head = model_dir / HEAD_FILE
        if init != "random" and head.is_file():  # a fine-tuned folder: its trained head
            from safetensors.torch import load_file

            missing, unexpected = model.load_state_dict(load_file(str(head)), strict=False)
            if unexpected or any(not k.startswith("body.") for k in missing):
                raise ValueError(f"{head}: does not match the pooled head ({(unexpected or missing)[0]})")
        return model

    def loss(self, batch: dict) -> torch.Tensor:
        pooled, hidden = self.model.pool(batch["input_ids"], batch["attention_mask"])
        loss = torch.nn.functional.cross_entropy(self.model.head(pooled).float(), batch["labels"])
        return self.plus_aux_lm(loss, hidden, batch, self.model.body.wte.weight) if self.aux_lm_weight > 0 else loss

    @torch.no_grad()
    def scores(self, batch: dict) -> torch.Tensor:
        return self.model(batch["input_ids"], batch["attention_mask"]).float()


HEADS = ("stock", "pooled", "prompt")


def make_classifier(paradigm: str, model_dir: Path, labels: list[str], tokenizer, *, init: str, seed: int,
                    spec: HeadSpec | None = None):
    """``spec.head``: ``stock`` ([CLS] for BERT, last token for GPT, text to text for T5), ``pooled`` (masked mean,
    BatchNorm, linear) or ``prompt`` (BERT: a cloze). ``spec.adapt``: method frozen or lora for the pooled head;
    a folder with ``adaptation.json`` loads its base and adapter (``spec.base``: from that folder, a packaged copy
    checked against the recorded digest, instead of the path named)."""
    spec = spec or HeadSpec()
    head, adapt, base = spec.head, spec.adapt, spec.base
    if head not in HEADS:
        raise ValueError(f"head: {head!r} is not one of {', '.join(HEADS)}")
    if adapt is not None and head != "pooled":
        raise ValueError(f"method: {adapt['method']} needs head pooled, not {head}")
    if head == "prompt" and paradigm != "bert":
        raise ValueError(f"head: prompt is for the bert paradigm (a masked LM), not {paradigm}")
    if base is not None and head != "pooled":
        raise ValueError(f"{model_dir}: a base model ({base}) is for a frozen or lora folder (head pooled), "
                         f"not head {head}")
    stock = TextToTextClassifier if paradigm == "t5" else EncoderClassifier
    cls = {"pooled": PooledClassifier, "prompt": PromptClassifier}.get(head, stock)
    return cls(paradigm, model_dir, labels, tokenizer, init=init, seed=seed, spec=spec)


def rescale_embeddings(module, rms: float) -> float:
    """Scale a BERT-style body's embedding tables by one factor (returned) so the word embeddings' RMS becomes
    ``rms``: the LayerNorm over their sum keeps the function; Adam's steps then turn the vectors at another pace."""
    emb = next((m for m in module.modules() if hasattr(m, "word_embeddings") and hasattr(m, "LayerNorm")), None)
    if emb is None:
        raise ValueError("embedding_rms: needs a BERT-style body (embeddings summed into a LayerNorm)")
    word = emb.word_embeddings.weight
    factor = rms / float(word.detach().float().pow(2).mean().sqrt())
    with torch.no_grad():
        for child in emb.children():
            if isinstance(child, torch.nn.Embedding):
                child.weight.mul_(factor)
    return factor


def reinit_top_layers(module, n: int, seed: int = 0) -> None:
    """Draw the top ``n`` transformer layers of a BERT-style body anew from ``seed``, as Zhang et al. 2021
    (benchmarks/transfer.md); written out, as transformers 5's ``_init_weights`` skips loaded weights."""
    body = getattr(module, "body", module)
    layers = getattr(getattr(body, "encoder", None), "layer", None)
    if layers is None:
        raise ValueError("reinit_layers: needs a BERT-style body (encoder.layer)")
    if not 0 < n <= len(layers):
        raise ValueError(f"reinit_layers: {n} is not between 1 and the body's {len(layers)} layers")
    std = getattr(body.config, "initializer_range", 0.02)
    gen = torch.Generator().manual_seed(10_000 + seed)
    with torch.no_grad():
        for layer in list(layers)[len(layers) - n:]:
            for m in layer.modules():
                if isinstance(m, torch.nn.Linear):
                    m.weight.copy_(torch.randn(m.weight.shape, generator=gen) * std)
                    if m.bias is not None:
                        m.bias.zero_()
                elif isinstance(m, torch.nn.LayerNorm):
                    m.weight.fill_(1.0)
                    m.bias.zero_()
