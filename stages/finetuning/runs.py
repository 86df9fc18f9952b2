"""Adaptation runs (params ``adapt.runs``): a paradigm's pre-trained body adapted with another method than the
finetune stage's, each a stage of its own (``adapt@<name>``) writing ``data/models/finetune/<name>`` beside the
full fine-tuning runs, so the evaluate stage's report, curve and model gate take it like any other run.

An entry names its paradigm and method (``frozen`` or ``lora``), the initialisation it starts from (``best``: the
pre-trained init, ``pretrained`` or ``dapt``, whose full fine-tuning scored best on validation) and settings over
``finetune.<paradigm>`` (its own learning-rate grid: rates are chosen on validation per method)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stages.config import ConfigError, build, check, deep_merge, load_params, section
from stages.finetuning.core import INITS, FinetuneConfig, load_config
from stages.tokenization.trainers import PARADIGMS

PRETRAINED_INITS = ("pretrained", "dapt")
ADAPT_METHODS = ("full", "frozen", "lora", "probe")


@dataclass(frozen=True, kw_only=True)
class AdaptRun:
    """One adaptation run: a method on a paradigm's pre-trained body."""

    paradigm: str
    """The paradigm whose pre-trained body is adapted (`bert`, `gpt`, `t5`)."""
    method: str
    """``frozen`` (the body fixed, the pooled head trained), ``probe`` (the body fixed, the head a logistic regression
    chosen on validation), ``lora`` (low-rank adapters and the head) or ``full``."""
    init: str = "best"
    """The body it starts from: ``best`` (of ``pretrained`` and ``dapt``, the one whose full fine-tuning scored best
    on validation), ``pretrained`` or ``dapt``."""
    finetune: dict[str, Any] = field(default_factory=dict)
    """Fine-tuning settings over ``finetune.defaults`` and ``finetune.<paradigm>`` (e.g. ``lr_grid``: rates are
    chosen on validation per method)."""

    def __post_init__(self) -> None:
        check(self.paradigm in PARADIGMS, f"paradigm: one of {', '.join(PARADIGMS)}")
        check(self.method in ADAPT_METHODS, f"method: one of {', '.join(ADAPT_METHODS)}")
        check(self.init in ("best", *PRETRAINED_INITS), f"init: one of best, {', '.join(PRETRAINED_INITS)}")
        check("method" not in self.finetune, "finetune.method: set the run's method with its own key, method")


@dataclass(frozen=True, kw_only=True)
class AdaptConfig:
    """Adaptation runs beside the finetune stage's, each a stage (``adapt@<name>``) and a candidate of the model
    gate; the evaluation report compares them with full fine-tuning at every label count."""

    runs: dict[str, AdaptRun] = field(default_factory=dict)
    """``<name>: {paradigm, method[, init, finetune]}``; {} = none. A name holds letters, digits, ``-`` and ``_``
    (it names a stage and a folder) and is not one of the finetune stage's ``<paradigm>-<init>``."""

    def __post_init__(self) -> None:
        for name in self.runs:
            check_name(name)


def check_name(name: str) -> None:
    check(name[:1].isalpha() and all(c.isalnum() or c in "-_" for c in name),
          f"runs.{name}: a name starts with a letter and holds letters, digits, '-' and '_' only")
    check(name not in {f"{p}-{i}" for p in PARADIGMS for i in INITS},
          f"runs.{name}: the finetune stage's run of that name exists; choose another")


def load_adapt_config(params_path: Path) -> AdaptConfig:
    """``adapt`` of the params file (absent: no runs)."""
    params = load_params(params_path)
    return build(AdaptConfig, section(params, "adapt") if "adapt" in params else {}, "adapt")


def run_config(params_path: Path, name: str) -> tuple[AdaptRun, FinetuneConfig]:
    """Run ``name`` of ``adapt.runs`` and its fine-tuning config (``finetune.defaults``, ``finetune.<paradigm>``,
    the run's ``finetune``, its method); an invalid setting is a ConfigError naming ``adapt.runs.<name>``. Reads
    that run's entry only (its stage depends on no other)."""
    params = load_params(params_path)
    runs = (params.get("adapt") or {}).get("runs") or {}
    if name not in runs:
        raise ConfigError(f"adapt.runs.{name}: no such run (have: {', '.join(map(str, runs)) or 'none'})")
    try:
        check_name(name)
    except ValueError as exc:
        raise ConfigError(f"adapt.{exc}") from None
    run = build(AdaptRun, section(params, f"adapt.runs.{name}"), f"adapt.runs.{name}")
    load_config(params_path, run.paradigm)  # the paradigm's own section checked first, naming its key
    merged = deep_merge(deep_merge(section(params, "finetune.defaults"),
                                   section(params, f"finetune.{run.paradigm}") or {}), run.finetune)
    merged["method"] = run.method
    return run, build(FinetuneConfig, merged, f"adapt.runs.{name}.finetune")


def choose_init(run: AdaptRun, records: dict[str, dict]) -> str:
    """The init ``run`` starts from: its own, or for ``best`` the one of ``records`` (init -> the finetune stage's
    ``finetune.json``) with the best mean validation macro-F1 (ties: the later name, as the report's gains)."""
    if run.init != "best":
        if run.init not in records:
            raise FileNotFoundError(f"no full fine-tuning run of init {run.init} given (--choose-from)")
        return run.init
    have = [i for i in PRETRAINED_INITS if i in records]
    if not have:
        raise FileNotFoundError("no full fine-tuning run of init pretrained or dapt given (--choose-from)")
    return max(have, key=lambda i: (records[i]["metrics"]["best_val_macro_f1"], f"{run.paradigm}-{i}"))


def published_run_config(params_path: Path, name: str):
    """Run ``name`` of ``published.runs``, its paradigm and its fine-tuning config (``finetune.defaults``, the base's
    ``finetune``, the run's ``finetune``, its method); an invalid setting names ``published.runs.<name>``."""
    from stages.finetuning.core import load_base_config
    from stages.published.config import load_run

    run, paradigm = load_run(params_path, name)
    base = load_base_config(params_path, run.base)
    merged = deep_merge(config_dict(base), run.finetune)
    merged["method"] = run.method
    return run, paradigm, build(FinetuneConfig, merged, f"published.runs.{name}.finetune")


def config_dict(cfg: FinetuneConfig) -> dict:
    """``cfg`` as params data (tuples as lists)."""
    import json
    from dataclasses import asdict

    return json.loads(json.dumps(asdict(cfg)))


def choose_published_init(init: str, records: dict[str, dict], base: str) -> str:
    """The init a published run starts from (``published`` or ``published-dapt``), checked against ``records``
    (init -> the base's full fine-tuning ``finetune.json``)."""
    if init not in records:
        raise FileNotFoundError(f"no full fine-tuning run of init {init} of base {base} given (--choose-from)")
    return init
