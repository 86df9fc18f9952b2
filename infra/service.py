"""The BentoML service of a packaged model, configured by the package stage's ``bento_config.json``: ``classify``
(adaptive batching unless ``LMPIPE_ADAPTIVE_BATCHING=0``), ``lineage`` (changed paths only with
``LMPIPE_LINEAGE_PATHS=1``) and, for each shipped pre-trained model, ``fill_mask`` / ``generate`` / ``text2text``.
Pre/post-processing lives in ``stages.serving``; requests are guarded before parsing; it binds 127.0.0.1. A frozen
or lora classifier's base comes from the Bento's base model (``base``), its digest checked before PEFT loads."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import sys
from pathlib import Path
from typing import Annotated

# `lineage --verify` checks the Bento's code file by file, and byte-code beside it is code that would run instead of
# the checked source: nothing the service imports writes any into the store, and this module's own, written as it
# was imported, goes.
sys.dont_write_bytecode = True
with contextlib.suppress(OSError):
    Path(importlib.util.cache_from_source(__file__)).unlink(missing_ok=True)

import bentoml
from bentoml.exceptions import InvalidArgument
from pydantic import BaseModel, BeforeValidator, Field

CONFIG = json.loads((Path(__file__).parent / "bento_config.json").read_text(encoding="utf-8"))
LIMITS = CONFIG["limits"]
BATCHING = CONFIG["batching"]
BATCHABLE = BATCHING["enabled"] and os.environ.get("LMPIPE_ADAPTIVE_BATCHING", "1") != "0"
GENERATIVE = CONFIG.get("generative", {})
BASE = CONFIG.get("base")  # a frozen or lora classifier's base model (the classifier holds its head and adapter)

Text = Annotated[str, Field(min_length=1, max_length=LIMITS["max_chars"])]
MASK = "[MASK]"  # the BERT tokenizer's mask token (stages.tokenization.trainers)
MaskedText = Annotated[str, Field(min_length=1, max_length=LIMITS["max_chars"], pattern=re.escape(MASK),
                                  description=f"a text with one or more {MASK} tokens to fill")]
Texts = Annotated[list[Text], Field(min_length=1, max_length=LIMITS["max_texts"])]


def _not_a_bool(value):
    """JSON ``true`` / ``false`` is not a number (pydantic would read it as 1 / 0)."""
    if isinstance(value, bool):
        raise ValueError("expected an integer, not true/false")
    return value


Int = Annotated[int, BeforeValidator(_not_a_bool)]
Float = Annotated[float, BeforeValidator(_not_a_bool)]
NewTokens = Annotated[Int, Field(ge=1, le=LIMITS["max_new_tokens"])]


def public_git(git: dict) -> dict:
    """The lineage's git entry as ``/lineage`` shows it: the workspace's changed paths only when
    ``LMPIPE_LINEAGE_PATHS=1`` (the count always)."""
    if os.environ.get("LMPIPE_LINEAGE_PATHS") == "1":
        return git
    shown = {k: v for k, v in git.items() if k != "dirty_paths"}
    if "dirty_paths" in git:
        shown.setdefault("dirty_count", len(git["dirty_paths"]))
    return shown


class Prediction(BaseModel):
    label: str
    scores: dict[str, float]
    tokens: int = Field(description="tokens of the text the model read (after truncation)")
    truncated: bool = Field(description="the text was longer than the model's max_len tokens and was cut; "
                                        "only its first `tokens` tokens were classified")


class Candidate(BaseModel):
    token: str
    score: float


class MaskFill(BaseModel):
    position: int
    candidates: list[Candidate]


@bentoml.service(name=CONFIG["name"], traffic={"timeout": LIMITS["timeout_s"]}, http={"host": "127.0.0.1"},
                  resources=CONFIG["resources"])
class LMPipeline:
    classifier_model = bentoml.models.BentoModel(CONFIG["classifier"])
    if BASE:
        base_model = bentoml.models.BentoModel(BASE)
    if "bert" in GENERATIVE:
        bert_model = bentoml.models.BentoModel(GENERATIVE["bert"])
    if "gpt" in GENERATIVE:
        gpt_model = bentoml.models.BentoModel(GENERATIVE["gpt"])
    if "t5" in GENERATIVE:
        t5_model = bentoml.models.BentoModel(GENERATIVE["t5"])

    def __init__(self) -> None:
        from stages.serving.inference import FillMask, Generator, Text2Text, TextClassifier, check_packaged

        lineage = check_packaged(self.classifier_model.path)  # its files (head, adapter) are the recorded ones
        # frozen or lora: the base from its own model in the Bento, its digest checked against adaptation.json
        self.classifier = TextClassifier(self.classifier_model.path, batch_size=BATCHING["max_batch_size"],
                                         base=self.base_model.path if BASE else None)
        self.fill_masker = FillMask(self.bert_model.path) if "bert" in GENERATIVE else None
        self.generator = Generator(self.gpt_model.path) if "gpt" in GENERATIVE else None
        self.text2texter = Text2Text(self.t5_model.path) if "t5" in GENERATIVE else None
        self.summary = {"model": str(self.classifier_model.tag), "name": lineage["model"]["name"],
                        "paradigm": lineage["model"]["paradigm"], "init": lineage["model"]["init"],
                        "labels": lineage["model"]["labels"], "git": public_git(lineage["git"]),
                        "model_gate": lineage.get("model_gate"),
                        "generative": {k: str(v) for k, v in GENERATIVE.items()}}
        if BASE:
            adaptation = lineage["model"].get("adaptation") or {}
            self.summary["adaptation"] = {"method": adaptation.get("method"), "base": str(self.base_model.tag),
                                          "base_digest": adaptation.get("base_digest")}

    @bentoml.api(batchable=BATCHABLE, max_batch_size=BATCHING["max_batch_size"],
                 max_latency_ms=BATCHING["max_latency_ms"])
    def classify(self, texts: Texts) -> list[Prediction]:
        """Label each text; ``scores`` are probabilities over all labels. A text over ``max_len`` tokens is
        cut, as in training, and says so (``truncated``)."""
        return [Prediction(**p) for p in self.classifier.classify(texts)]

    @bentoml.api
    def lineage(self) -> dict:
        """The served model, the commit it was packaged from and the model gate's verdict
        (``python -m stages.lineage`` on the Bento prints the whole chain)."""
        return self.summary

    if "bert" in GENERATIVE:

        @bentoml.api
        def fill_mask(self, text: MaskedText, top_k: Annotated[Int, Field(ge=1, le=LIMITS["max_top_k"])] = 5
                      ) -> list[MaskFill]:
            """The pre-trained BERT's guesses for each [MASK] in ``text``."""
            try:
                return [MaskFill(**m) for m in self.fill_masker.fill(text, top_k)]
            except ValueError as exc:
                raise InvalidArgument(str(exc)) from exc

    if "gpt" in GENERATIVE:

        @bentoml.api
        def generate(self, prompt: Text, max_new_tokens: NewTokens = 32,
                     temperature: Annotated[Float, Field(ge=0, le=2)] = 0.0,
                     seed: Annotated[Int, Field(ge=0, le=2**32 - 1)] = 0) -> str:
            """The pre-trained GPT's continuation of ``prompt`` (greedy at temperatures below 0.01)."""
            try:
                return self.generator.generate(prompt, max_new_tokens, temperature, seed)
            except ValueError as exc:
                raise InvalidArgument(str(exc)) from exc

    if "t5" in GENERATIVE:

        @bentoml.api
        def text2text(self, text: Text, max_new_tokens: NewTokens = 32) -> str:
            """The pre-trained T5's output for ``text``; it was pre-trained to fill ``<extra_id_N>`` spans."""
            try:
                return self.text2texter.generate(text, max_new_tokens)
            except ValueError as exc:
                raise InvalidArgument(str(exc)) from exc


# Invalid or unauthorised requests are refused before any parsing (stages.serving.guard).
from stages.serving.guard import RequestGuard, api_token, body_limit, install_log_filter  # noqa: E402

LMPipeline.add_asgi_middleware(RequestGuard, max_bytes=body_limit(LIMITS), token=api_token(),
                               retry_after_s=max(1, -(-BATCHING["max_latency_ms"] // 1000)),  # the batch latency
                               api_paths=frozenset(api.route for api in LMPipeline.apis.values()))
install_log_filter()  # a rejected request is one log line, without its content
