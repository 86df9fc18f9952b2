"""The model card a training stage writes into its model folder, from what that stage knows when it saves it.

Each folder under ``data/models/`` holds ``card.json`` (its record, made of the stage's declared inputs only, so
the same inputs give the same folder byte for byte) and ``README.md``, rendered from it by :func:`render`.
``python -m stages.lineage <folder> --verify`` checks both (:func:`check`); ``--card`` renders the card with the
model gate's verdict from the lineage record (``stages.provenance.card``, whose facts these sections render too),
as the package stage does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol

from stages import objectives
from stages.common.atomic import write_bytes_atomic
from stages.common.pin import describe as describe_pin

CARD_FILE = "README.md"
FACTS_FILE = "card.json"
SCHEMA = 1
UNKNOWN = "unknown (not in the lineage record)"

# What the lineage keeps of each raw source of an ingest manifest: its licence terms travel with the model.
SOURCE_KEYS = ("kind", "description", "licence", "pin", "packages", "records", "files")
# ... and what a folder's card keeps of it (the downloads' hashes stay in the ingest manifest and the record).
CARD_SOURCE_KEYS = ("kind", "description", "licence", "pin", "records")

ARCH_KEYS = ("arch", "layers", "d_model", "heads", "d_ff")  # what a card says of a model config section
WEIGHTS = {"pretrain": "pre-trained", "dapt": "pre-trained, then domain-adapted (DAPT)"}


# --------------------------------------------------------------------------------------------- formatting
def count(value) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return UNKNOWN
    return f"{int(value):,}"


def score(value, std=None, seeds=None) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return UNKNOWN
    text = f"{value:.3f}"
    if isinstance(std, (int, float)) and not isinstance(std, bool):
        text += f" ± {std:.3f}"
        text += f" (mean ± std over {seeds} seeds)" if seeds else " (mean ± std over the seeds)"
    return text


def cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(rows: list[tuple], head: tuple[str, ...]) -> list[str]:
    """A Markdown table of ``rows`` under ``head``, its cells escaped."""
    return [f"| {' | '.join(head)} |", "|" + "---|" * len(head)] + [f"| {' | '.join(map(cell, row))} |" for row in rows]


def render_sections(title: str, intro: list[str], sections: list[tuple[str, list[str]]]) -> str:
    lines = [f"# {title}", "", *intro]
    for heading, body in sections:
        lines += ["", f"## {heading}", "", *body]
    return "\n".join(lines).rstrip() + "\n"


def objective_text(paradigm: str, objective, select, generator_size=None) -> str:
    """What a pre-training run of ``paradigm`` predicts, from its ``train.objective`` and ``train.mlm_select``
    (and ``train.generator_size``): the objective's own card words (``stages.objectives``)."""
    try:
        text = objectives.get(paradigm, objective or "").card(select, generator_size)
    except ValueError:  # a paradigm or objective this version does not know
        return str(objective) if objective else UNKNOWN
    return text if objective or paradigm != "t5" else f"{text} (T5's own; the params name no other)"


def architecture_text(model: dict | None, where: str | None = None) -> str:
    """``deberta_v2, 2 layers, 128 d_model, ...`` from a model config section; ``where`` names its source."""
    model = {k: v for k, v in (model or {}).items() if v is not None}
    if not any(k in model for k in ARCH_KEYS):
        return UNKNOWN
    parts = [str(model["arch"])] if "arch" in model else []
    parts += [f"{model[k]} {k}" for k in ARCH_KEYS[1:] if k in model]
    return ", ".join(parts) + (f" ({where})" if where else "")


def task_name(source_kinds) -> str | None:
    return "Debian package section classification" if "debian_descriptions" in set(source_kinds) else None


# --------------------------------------------------------------------------------------------- the facts
# Tensors a state dict holds that are statistics, not parameters (BatchNorm's, in the pooled head).
BUFFER_SUFFIXES = (".running_mean", ".running_var", ".num_batches_tracked")


def count_parameters(folder: Path) -> int | None:
    """The parameters of a model folder: the sizes of the tensors in its ``*.safetensors`` files (BatchNorm
    statistics aside), read from their headers, no weights loaded. None when the folder has none, holds other
    weight formats too, or a header is not readable, so a record never states a partial count."""
    import math

    folder = Path(folder)
    files = sorted(folder.rglob("*.safetensors"))
    others = [p for pattern in ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.h5", "*.msgpack") for p in folder.rglob(pattern)]
    if not files or others:
        return None
    total = 0
    for path in files:
        try:
            with open(path, "rb") as f:
                size = int.from_bytes(f.read(8), "little")
                if not 0 < size <= min(path.stat().st_size - 8, 100 << 20):
                    return None
                header = json.loads(f.read(size))
            total += sum(math.prod(t["shape"]) for name, t in header.items()
                         if name != "__metadata__" and not name.endswith(BUFFER_SUFFIXES))
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return None
    return total


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def corpora(manifests: list[Path]) -> dict:
    """The raw sources of each corpus from its ingest ``manifest.json``: ``{corpus: {"documents", "sources"}}``.
    A missing or unreadable manifest (a task file made by hand) gives its folder's name with sources ``None``:
    the card then says the data's terms are unknown instead of leaving the corpus out."""
    out = {}
    for path in manifests:
        manifest = _read_json(Path(path))
        if not isinstance(manifest, dict) or "corpus" not in manifest:
            out[Path(path).parent.name] = {"documents": None, "sources": None}
            continue
        out[manifest["corpus"]] = {
            "documents": (manifest.get("counts") or {}).get("documents"),
            "sources": [{k: s.get(k) for k in CARD_SOURCE_KEYS if k in s} for s in manifest.get("sources") or []]}
    return out


def read_facts(folder: Path) -> dict | None:
    """A model folder's ``card.json`` (None when it has none: a folder written before cards)."""
    facts = _read_json(Path(folder) / FACTS_FILE)
    return facts if isinstance(facts, dict) else None


def pretrain_facts(*, kind: str, paradigm: str, corpus: str, config: dict, metrics: dict, sources: dict,
                   init: Path | None) -> dict:
    """The record of a ``pretrain`` or ``dapt`` folder. ``config``: the run's config (``asdict``), ``metrics``:
    the stage's, ``sources``: :func:`corpora` of the corpora it read, ``init``: the folder it continued."""
    train = config.get("train") or {}
    objective = objective_text(paradigm, train.get("objective"), train.get("mlm_select"), train.get("generator_size"))
    own = {"stage": kind, "corpus": corpus, "objective": objective, "tokens": metrics.get("tokens")}
    upstream = read_facts(init) if init is not None else {}
    return {
        "schema": SCHEMA, "kind": kind, "paradigm": paradigm, "corpus": corpus, "objective": objective,
        "model_config": config.get("model") or (upstream or {}).get("model_config"),
        "parameters": metrics.get("parameters"),
        "training": ([*upstream.get("training", [])] if upstream else
                     [] if init is None else [{"stage": f"{init} (no {FACTS_FILE})"}]) + [own],
        "corpora": {**(upstream or {}).get("corpora", {}), **sources},
        "scores": {k: metrics.get(k) for k in ("train_loss", "eval_loss", "eval_accuracy")},
    }


class Started(Protocol):
    """Where a fine-tuning run started (the fine-tuning stage's ``Body``): its paradigm, initialisation and the
    model folder it read."""

    paradigm: str
    init: str
    model_dir: Path


def finetune_facts(body: Started, *, labels: list[str], config: dict, metrics: dict, sources: dict,
                   parameters: int, adaptation: dict | None = None) -> dict:
    """The record of a ``finetune`` folder: ``body.model_dir`` the folder it started from (its ``card.json``: the
    pre-training behind it; for random init its architecture only), ``sources`` the task's corpus; ``adaptation``
    (method frozen or lora: the folder's ``adaptation.json``) the method, its trainable weights and the base it needs."""
    paradigm, init = body.paradigm, body.init
    upstream = read_facts(body.model_dir) or {}
    keys = ("train_examples", "steps", "lr", "test_macro_f1", "test_macro_f1_std", "test_accuracy",
            "test_accuracy_std", "best_val_macro_f1", "best_val_macro_f1_std", "val_examples", "test_examples",
            "majority_test_macro_f1", "majority_test_accuracy", "saved_seed")
    seeds = metrics.get("seeds")
    saved = next((s for s in seeds or [] if isinstance(s, dict) and s.get("seed") == metrics.get("saved_seed")), None)
    return {
        "schema": SCHEMA, "kind": "finetune", "paradigm": paradigm, "init": init, "labels": list(labels),
        "task": task_name(s.get("kind") for c in sources.values() for s in c.get("sources") or []),
        "model_config": upstream.get("model_config"), "parameters": parameters,
        "head": config.get("head"), "max_len": config.get("max_len"),
        "training": [] if init == "random" else upstream.get("training"),
        "corpora": {**upstream.get("corpora", {}), **sources},
        "scores": {**{k: metrics.get(k) for k in keys},
                   "seeds": len(seeds) if isinstance(seeds, list) else None,
                   "saved": {k: saved.get(k) for k in ("seed", "test_macro_f1", "test_accuracy")} if saved else None},
        **({"adaptation": {k: adaptation.get(k) for k in ("method", "trainable_parameters", "base", "base_digest")}}
           if adaptation else {}),  # a full run's record has no such key
    }


# --------------------------------------------------------------------------------------------- rendering
def corpora_lines(corpora_: dict) -> list[str]:
    """Each corpus's raw sources with their licence terms (and its ingest ``stage``, where given)."""
    lines = []
    for corpus, info in sorted((corpora_ or {}).items()):
        stage = f"{info['stage']}; " if "stage" in info else ""
        lines.append(f"- **{corpus}** ({stage}{count(info.get('documents'))} documents after ingest)")
        if info.get("sources") is None:
            lines.append("  - sources and licences: unknown (no ingest manifest beside the data: check its terms "
                         "before any use)")
        for src in info.get("sources") or []:
            lines.append(f"  - {src.get('kind') or UNKNOWN}: {src.get('description') or UNKNOWN}")
            licence = src.get("licence") or "unknown (not recorded for this source: check its terms before any use)"
            lines.append(f"    - licence: {licence}")
            if src.get("pin"):
                lines.append(f"    - pinned: {describe_pin(src['pin'])}")
            if src.get("records") is not None:
                lines.append(f"    - records: {count(src.get('records'))}")
    return lines or [f"- {UNKNOWN}"]


def tokens_table(training: list[dict] | None) -> tuple[list[str], object]:
    tokens = [t.get("tokens") for t in training or []]
    known = all(isinstance(n, (int, float)) and not isinstance(n, bool) for n in tokens)
    rows = [(t.get("stage") or UNKNOWN, t.get("corpus") or UNKNOWN, t.get("objective") or UNKNOWN, count(n))
            for t, n in zip(training or [], tokens)]
    total = sum(map(int, tokens)) if training and known else None
    return table(rows, ("stage", "corpus", "objective", "tokens")), total


def evaluation_lines(s: dict, baseline: str | None = None) -> list[str]:
    """A classifier card's Evaluation section from its scores (``baseline``: the best baseline's, where known)."""
    saved, seeds = s.get("saved"), s.get("seeds")
    rows = [
        ("test macro-F1", score(s.get("test_macro_f1"), s.get("test_macro_f1_std"), seeds)),
        ("test accuracy", score(s.get("test_accuracy"), s.get("test_accuracy_std"), seeds)),
        ("majority-class baseline, test macro-F1", score(s.get("majority_test_macro_f1"))),
        ("majority-class baseline, test accuracy", score(s.get("majority_test_accuracy"))),
        *([("best practitioner baseline (no pre-training), test macro-F1", baseline)] if baseline else []),
        ("best validation macro-F1", score(s.get("best_val_macro_f1"), s.get("best_val_macro_f1_std"), seeds)),
        ("test examples", count(s.get("test_examples"))),
        ("these weights (seed)", f"seed {saved.get('seed')}: test macro-F1 {score(saved.get('test_macro_f1'))}, "
                                 f"accuracy {score(saved.get('test_accuracy'))}" if saved else UNKNOWN),
    ]
    return ["Test-split scores of this fine-tuning run, mean ± std over its seeds, with the majority-class "
            "baseline:", "", *table(rows, ("metric", "value"))]


INTRO = ("Written by the stage that saved this folder, from `card.json` beside it: the folder's record, made of the "
         "stage's params and inputs (the ingest manifests with the data's licence terms, the card of the model it "
         "started from) and its own results. Every figure below is a value of that file; `unknown` marks one it "
         "does not hold. `python -m stages.lineage <this folder> --verify` checks this card against it and its "
         "licences against the ingest manifests; `--card` renders the card with the model gate's verdict from the "
         "workspace's lineage record.")
GATE_LATER = ("Not known when this folder was written: the evaluate stage's model gate chooses among the "
              "fine-tuned classifiers on the validation split afterwards (`reports/evaluation.md`, "
              "`reports/quality/model-gate.json`); `python -m stages.lineage <this folder> --card` shows its verdict.")
GENERATIVE_GATE = ("Not judged by the model gate, which chooses among fine-tuned classifiers; the classifiers "
                   "fine-tuned from this model are (`reports/evaluation.md`).")
GENERATIVE_USE = ("- The starting point of fine-tuning and domain adaptation in this pipeline; trying a pre-trained "
                  "model of this paradigm; comparing paradigms.")
TERMS = ("- The training data's terms (above) come with the model: read each source's before any use beyond "
         "research.")


def data_lines(f: dict, classifier: bool) -> list[str]:
    """A card's Training data section: the raw sources of every corpus behind the model, with their terms."""
    behind = ("its tokenizer's, its pre-training's and the task's" if classifier
              else "its tokenizer's and its training's")
    where = "upstream of this model" if f.get("lineage") else f"behind this model ({behind})"
    return [f"Raw sources of every corpus {where}{', as ingested' if classifier else ''}, with their licence terms:",
            "", *corpora_lines(f.get("corpora"))]


def adaptation_text(a: dict) -> str:
    """Method frozen or lora: what trained and the base folder the saved head (and adapter) needs."""
    return (f"method `{a.get('method')}`: {count(a.get('trainable_parameters'))} weights trained; needs the base "
            f"`{a.get('base')}` (SHA-256 folder digest {a.get('base_digest')})")


def classifier_sections(f: dict) -> list[tuple[str, list[str]]]:
    """A fine-tuned classifier's card sections from its facts: a folder's ``card.json``, or those
    ``stages.provenance.card`` takes from a lineage record (its ``lineage``: what only the record knows)."""
    labels, s, task, lineage = f.get("labels") or [], f.get("scores") or {}, f.get("task"), f.get("lineage") or {}
    rows, total = tokens_table(f.get("training"))
    random = f.get("init") == "random"
    about = [
        ("task", f"{task}: a package description in, one of its {len(labels)} sections out"
         if task and labels else f"text classification into {len(labels)} labels" if labels else UNKNOWN),
        ("labels", ", ".join(map(str, labels)) or UNKNOWN),
        ("paradigm", str(f.get("paradigm") or UNKNOWN)),
        ("initialisation", str(f.get("init") or UNKNOWN)),
        ("architecture", architecture_text(f.get("model_config"), lineage.get("where"))),
        ("parameters", count(f.get("parameters"))),
        ("fine-tuning objective", f"classification into the {len(labels)} labels (head `{f['head']}`)"
         if labels and f.get("head") else f"classification into the {len(labels)} labels" if labels else UNKNOWN),
        ("pre-training tokens", "none (random initialisation: no pre-trained weights)" if random else count(total)),
        ("fine-tuning examples", count(s.get("train_examples"))),
        *([("adaptation", adaptation_text(f["adaptation"]))] if f.get("adaptation") else []),
        *([("files", lineage["files"])] if lineage else []),
    ]
    if random:
        training = ["No pre-training: the weights were initialised at random, then fine-tuned."]
    elif f.get("training") or not lineage:
        training = ["Pre-training (tokens seen, per stage):", "", *rows, "", f"Total: {count(total)} tokens."]
    else:
        training = [f"Pre-training: {UNKNOWN}."]
    stage = f" ({lineage['stage']})" if lineage else ""
    training += ["", f"Fine-tuning{stage}: {count(s.get('train_examples'))} training examples, "
                     f"{count(s.get('steps'))} steps per seed, learning rate {s.get('lr', UNKNOWN)}, "
                     f"{count(s.get('seeds'))} seeds."]
    labelling = (f"- Labelling {'Debian package descriptions with their archive section' if task else 'texts'} among "
                 f"the {len(labels) or UNKNOWN} labels above")
    comparing = "paradigms and initialisations with the rest of the pipeline's evaluation."
    use = ([f"{labelling}, as the pipeline's demonstration of a gated, traceable model.", f"- Comparing {comparing}"]
           if lineage else [f"{labelling}; comparing {comparing}"])
    tokens = f", {count(total)} pre-training tokens" if lineage and f.get("training") else ""
    unlike = ("that is not " + ("a package description" if task else "like the training data")
              + "; its scores are not a confidence for such input." if lineage else "unlike the training data.")
    limits = [
        f"- A tiny model ({count(f.get('parameters'))} parameters{tokens}) from a pipeline built to train on CPU: far "
        "below general-purpose language models in knowledge and robustness.",
        f"- A closed label set: every input gets one of the labels, also text {unlike}",
        f"- Texts longer than {count(f.get('max_len'))} tokens are cut to that length"
        + (" (the response says `truncated`)." if lineage else "."),
        f"- Evaluated only on the held-out test split of its task data ({count(s.get('test_examples'))} examples)"
        + (". Any other use (other text, other labels, other languages, decisions about people) needs its own "
           "evaluation first." if lineage else "; any other use needs its own evaluation first."),
        TERMS,
    ]
    return [("Model", table(about, ("field", "value"))),
            ("Training data", data_lines(f, True)),
            ("Training", training),
            ("Evaluation", evaluation_lines(s, lineage.get("baseline"))),
            ("Model gate", lineage.get("gate") or [GATE_LATER]), ("Intended use", use), ("Limits", limits)]


def generative_sections(f: dict) -> list[tuple[str, list[str]]]:
    """A pre-trained (or DAPT) model's card sections from its facts (a folder's ``card.json`` or the record's)."""
    lineage, s = f.get("lineage") or {}, f.get("scores") or {}
    rows, total = tokens_table(f.get("training"))
    about = table([
        *([("source", lineage["source"])] if lineage else []),
        ("paradigm", str(f.get("paradigm") or UNKNOWN)),
        ("weights", WEIGHTS.get(f.get("kind"), UNKNOWN) + (f" (corpus: {f['corpus']})" if f.get("corpus") else "")),
        ("architecture", architecture_text(f.get("model_config"), lineage.get("where"))),
        ("parameters", count(f.get("parameters"))),
        ("objective", f.get("objective") or UNKNOWN),
        ("training tokens", count(total)),
        *([("served by", lineage["served"])] if lineage else []),
    ], ("field", "value"))
    limits = [f"- A tiny language model ({count(f.get('parameters'))} parameters, {count(total)} training tokens, "
              f"trained on a CPU-scale budget): not instruction-tuned{', not fine-tuned' if lineage else ''}; do not "
              "expect fluent text.",
              "- Pre-trained only: it predicts tokens like its training corpora; it answers no questions and states no "
              "facts. Do not show its output to anyone as information.",
              "- Evaluated only by its held-out loss; any other use needs its own evaluation first.", TERMS]
    held_out = [("final training loss", score(s.get("train_loss"))), ("held-out loss", score(s.get("eval_loss"))),
                ("held-out accuracy (predicted tokens)", score(s.get("eval_accuracy"))), *lineage.get("held_out", [])]
    return [("Model", about),
            ("Training data", data_lines(f, False)),
            ("Training", [*rows] if f.get("training") else [f"{UNKNOWN}."]),
            ("Evaluation", table(held_out, ("metric", "value"))),
            ("Model gate", [lineage.get("gate") or GENERATIVE_GATE]),
            ("Intended use", ["- Trying the pipeline's pre-trained model through its endpoint; comparing paradigms."
                              if lineage else GENERATIVE_USE]), ("Limits", limits)]


def render(f: dict) -> str:
    """A model folder's ``README.md`` from its ``card.json``."""
    paradigm = f.get("paradigm") or UNKNOWN
    if f.get("kind") == "finetune":
        return render_sections(f"Model card: {paradigm}-{f.get('init') or UNKNOWN} (lm-pipeline classifier, "
                               "fine-tuned)", [INTRO], classifier_sections(f))
    return render_sections(f"Model card: {paradigm}, {WEIGHTS.get(f.get('kind'), UNKNOWN)} (lm-pipeline)", [INTRO],
                           generative_sections(f))


def write_facts(folder: Path, facts: dict) -> None:
    """``card.json`` alone (a published base keeps its own ``README.md``)."""
    write_bytes_atomic(Path(folder) / FACTS_FILE,
                       (json.dumps(facts, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8"))


def write(folder: Path, facts: dict) -> None:
    """``card.json`` and the ``README.md`` rendered from it, into ``folder`` (a stage's temporary output folder,
    published atomically with the weights)."""
    folder = Path(folder)
    write_facts(folder, facts)
    write_bytes_atomic(folder / CARD_FILE, render(read_facts(folder)).encode("utf-8"))


def check(folder: Path, record_sources: dict | None = None) -> tuple[list[str], list[str]]:
    """(mismatches, what was verified) of a model folder's card: its ``README.md`` is the one its ``card.json``
    renders, and each corpus's sources in ``card.json`` are the ingest manifest's (``record_sources``: a lineage
    record's ``sources``) on the keys the card keeps."""
    folder = Path(folder)
    facts = read_facts(folder)
    if facts is None:
        return [], [f"{folder}: no {FACTS_FILE} (written before model cards): no folder card to check"]
    problems, verified = [], []
    readme = folder / CARD_FILE
    if not readme.is_file() or readme.read_text(encoding="utf-8") != render(facts):
        problems.append(f"{readme}: not the card its {FACTS_FILE} renders (edited, or rendered by another version "
                        "of stages.provenance.stagecard)")
    else:
        verified.append(f"{readme}: the card its {FACTS_FILE} renders")
    for corpus, info in sorted((facts.get("corpora") or {}).items()):
        recorded = (record_sources or {}).get(corpus)
        if recorded is None:
            problems.append(f"{folder / FACTS_FILE}: corpus {corpus!r} is not upstream of this folder in the "
                            "lineage record")
            continue
        expected = [{k: s.get(k) for k in CARD_SOURCE_KEYS if k in s} for s in recorded.get("sources") or []]
        if info.get("sources") != expected:
            problems.append(f"{folder / FACTS_FILE}: the sources of corpus {corpus!r} (licences included) differ "
                            "from its ingest manifest's")
    if facts.get("corpora"):
        verified.append(f"{folder / FACTS_FILE}: the sources and licences of {len(facts['corpora'])} corpora against "
                        "their ingest manifests")
    return problems, verified
