"""Model cards (``README.md``) rendered from a lineage record alone (a figure it lacks is ``unknown``): the
selected classifier's, a pre-trained model's shipped beside it, and the Bento's; ``verify`` renders them again."""

from __future__ import annotations

from stages.provenance.chain import render as render_chain
from stages.provenance.record import Lock

from stages.provenance.stagecard import (ARCH_KEYS, CARD_FILE, UNKNOWN, cell, classifier_sections, count,
                                         generative_sections, objective_text, render_sections, score, table,
                                         task_name, tokens_table)

ENDPOINT = {"bert": "fill_mask", "gpt": "generate", "t5": "text2text"}


# --------------------------------------------------------------------------------------------- the record
def _stages(record: dict) -> dict:
    return record.get("stages") or {}


def _upstream(record: dict, stage: str | None) -> list[str]:
    """``stage`` and every stage of the record it depends on (producers first); [] when it is not there."""
    if not stage or stage not in _stages(record):
        return []
    return Lock(stages=_stages(record)).upstream([stage])


def _stage_metrics(record: dict, stage: str) -> dict:
    """The metrics file a stage wrote (``reports/metrics/*.json``), as the record holds it; {} if none."""
    for out in _stages(record).get(stage, {}).get("outs", []):
        path = out.get("path", "")
        if path.startswith("reports/metrics/") and path.endswith(".json"):
            return (record.get("metrics") or {}).get(path) or {}
    return {}


def _evaluation(record: dict) -> dict:
    return (record.get("metrics") or {}).get("reports/metrics/evaluation.json") or {}


def _stage_setting(record: dict, stage: str, *keys: str):
    """A setting of ``stage`` from its ``dvc.lock`` params, ``<kind>.<name>`` over ``<kind>.defaults``; or None."""
    params: dict = {}
    for values in (_stages(record).get(stage, {}).get("params") or {}).values():
        params.update(values or {})
    kind, _, name = stage.partition("@")
    for section in (f"{kind}.{name}", f"{kind}.defaults"):
        value = params.get(section)
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None:
            return value
    return None


def _objective(record: dict, stage: str) -> str:
    return objective_text(stage.partition("@")[2], _stage_setting(record, stage, "train", "objective"),
                          _stage_setting(record, stage, "train", "mlm_select"),
                          _stage_setting(record, stage, "train", "generator_size"))


def _upstream_facts(record: dict, stage: str | None, pretrained: bool = True) -> dict:
    """The card facts of what is upstream of ``stage``, as a folder's ``card.json`` holds them: the architecture
    (from the first pre-training stage's params), each pre-training and DAPT stage's corpus, objective and tokens
    (none when not ``pretrained``), and the raw sources of every corpus."""
    upstream = _upstream(record, stage)
    training = [s for s in upstream if s.split("@", 1)[0] in ("pretrain", "dapt")]
    backbone = training[0] if training else None  # the config a random-init model was built from, too
    return {"model_config": {k: _stage_setting(record, backbone, "model", k) for k in ARCH_KEYS} if backbone else None,
            "training": [{"stage": s, "corpus": _stage_metrics(record, s).get("corpus"),
                          "objective": _objective(record, s), "tokens": _stage_metrics(record, s).get("tokens")}
                         for s in (training if pretrained else [])],
            "corpora": {corpus: {"stage": info["stage"], "documents": (info.get("counts") or {}).get("documents"),
                                 "sources": info.get("sources") or []}
                        for corpus, info in (record.get("sources") or {}).items() if info.get("stage") in upstream},
            "lineage": {"stage": stage or UNKNOWN, "where": f"params of {backbone}"}}


def _task_name(record: dict, stage: str | None) -> str | None:
    """The task of the corpora the fine-tuning stage reads directly (its labelled task data)."""
    deps = {d.get("path") for d in _stages(record).get(stage or "", {}).get("deps", [])}
    direct = {Lock(stages=_stages(record)).writer(p) for p in deps}
    return task_name(s.get("kind") for info in (record.get("sources") or {}).values() if info.get("stage") in direct
                     for s in info.get("sources") or [])


def _gate_lines(record: dict, name: str | None = None) -> list[str]:
    gate = record.get("model_gate")
    if not isinstance(gate, dict) or "passed" not in gate:
        return [f"Verdict: {UNKNOWN}."]
    verdict = "PASSED" if gate.get("passed") else "FAILED"
    lines = [f"Verdict: **{verdict}**; selected `{gate.get('selected') or 'none'}` by "
             f"{gate.get('selected_by') or UNKNOWN} (`{record.get('model_gate_path') or 'model gate'}`)."]
    if name is not None and gate.get("selected") not in (None, name):
        lines.append(f"Note: the gate selected `{gate.get('selected')}`, not this model (`{name}`).")
    checks = [(c.get("check") or UNKNOWN, score(c.get("value")), score(c.get("minimum")),
               "passed" if c.get("passed") else "FAILED") for c in gate.get("checks") or []]
    return lines + (["", *table(checks, ("check", "value", "minimum", "result"))] if checks else [])


PACKAGE = "the package stage"


def _provenance_lines(record: dict, whose: str = "this model's", by: str = PACKAGE) -> list[str]:
    git = record.get("git") or {}
    dirty = git.get("dirty")
    state = (f", uncommitted changes in {git.get('dirty_count', len(git.get('dirty_paths') or []))} paths"
             if dirty else ", clean tree" if dirty is False else "")
    return [f"Generated by {by} from {whose} lineage record (`lineage.json`, schema "
            f"{record.get('schema', UNKNOWN)}, made {record.get('created') or UNKNOWN}; code at git "
            f"{git.get('commit') or UNKNOWN}{state}). Every figure below is a value of that record; "
            "`unknown` marks one the record does not hold. `python -m stages.lineage <Bento or model> --verify` "
            "checks the record, and this card, against the packaged files."]


# --------------------------------------------------------------------------------------------- classifier
def _classifier_scores(record: dict) -> dict:
    """The selected model's test figures: fine-tuning metrics, then the evaluation's, then the gate's, each
    filling only what the one before lacks."""
    model = record.get("model") or {}
    name = model.get("name")
    evaluation = _evaluation(record)
    gate = record.get("model_gate") if isinstance(record.get("model_gate"), dict) else {}
    merged: dict = {}
    sources = [_stage_metrics(record, model.get("stage") or ""), (evaluation.get("finetune") or {}).get(name) or {},
               {f"majority_{k}": v for k, v in (evaluation.get("majority") or {}).items()},
               (gate.get("metrics") or {}) if gate.get("selected") == name else {}]
    for source in sources:
        for key, value in source.items():
            if value is not None:
                merged.setdefault(key, value)
    seeds = merged.get("seeds")
    if isinstance(seeds, list):
        merged["saved"] = next((s for s in seeds if isinstance(s, dict) and s.get("seed") == merged.get("saved_seed")),
                               None)
    merged["seeds"] = len(seeds) if isinstance(seeds, list) else seeds if isinstance(seeds, int) else None
    return merged


def _baseline(record: dict, scores: dict) -> str:
    """The best baseline on the same training labels (chosen on validation by the evaluate stage), if any."""
    best = ((_evaluation(record).get("versus_baselines") or {}).get("best") or {}).get(str(scores.get("train_examples")))
    if not isinstance(best, dict):
        return UNKNOWN
    return f"{score(best.get('test_macro_f1'), best.get('test_macro_f1_std'))} ({cell(str(best.get('series')))})"


def _classifier_facts(record: dict) -> dict:
    """The selected classifier's card facts (as a folder's ``card.json`` holds them) and what only the record
    knows (``lineage``: its stage, files, gate and baseline)."""
    model = record.get("model") or {}
    stage, init = model.get("stage"), model.get("init")
    f = _upstream_facts(record, stage, init != "random")  # random init: the architecture only, none of the weights
    scores = _classifier_scores(record)
    f["lineage"].update(gate=_gate_lines(record, model.get("name")), baseline=_baseline(record, scores),
                        files=f"{len(model.get('files') or {})}, md5 {model.get('md5') or UNKNOWN}")
    return {**f, "kind": "finetune", "labels": model.get("labels") or [], "task": _task_name(record, stage),
            "paradigm": model.get("paradigm"), "init": init, "scores": scores, "parameters": model.get("parameters"),
            "head": _stage_setting(record, stage, "head") if stage else None,
            "max_len": (_stage_setting(record, stage, "max_len") if stage else None) or None,
            **({"adaptation": model["adaptation"]} if model.get("adaptation") else {})}  # frozen or lora only


def classifier_card(record: dict, by: str = PACKAGE) -> str:
    """The card of the fine-tuned model a lineage record describes (``by``: what rendered it)."""
    model = record.get("model") or {}
    return render_sections(f"Model card: {model.get('name') or UNKNOWN} (lm-pipeline classifier)",
                           _provenance_lines(record, by=by), classifier_sections(_classifier_facts(record)))


# --------------------------------------------------------------------------------------------- generative
def _generative_facts(record: dict, source: str, packaged: bool = True) -> dict:
    """The card facts of the pre-trained model from ``source`` (``packaged``: shipped beside the classifier)."""
    stage = Lock(stages=_stages(record)).writer(source)
    kind, _, paradigm = (stage or "").partition("@")
    paradigm = paradigm or None
    metrics = _stage_metrics(record, stage) if stage else {}
    intrinsic = ((_evaluation(record).get("intrinsic") or {}).get(paradigm) or {}).get(kind) or {}
    gate = record.get("model_gate") if isinstance(record.get("model_gate"), dict) else {}
    f = _upstream_facts(record, stage)
    f["lineage"].update(
        source=f"`{source}`, written by {stage or UNKNOWN}",
        served=(f"the Bento's `{ENDPOINT[paradigm]}` endpoint" + ("" if packaged else ", where the package stage "
                "ships it (`package.generative`)")) if paradigm in ENDPOINT else UNKNOWN,
        held_out=[(f"evaluation on held-out {corpus} blocks",
                   ", ".join(f"{k} {score(v)}" for k, v in sorted(values.items()) if k != "blocks") or UNKNOWN)
                  for corpus, values in sorted(intrinsic.items()) if isinstance(values, dict)],
        gate=f"Not judged by the model gate, which chooses among fine-tuned classifiers; this model "
             f"{'ships beside' if packaged else 'is upstream of'} the classifier "
             f"`{(record.get('model') or {}).get('name') or UNKNOWN}`, whose verdict was "
             f"**{'PASSED' if gate.get('passed') else 'FAILED' if 'passed' in gate else UNKNOWN}**.")
    return {**f, "kind": kind, "paradigm": paradigm, "corpus": metrics.get("corpus"),
            "parameters": metrics.get("parameters"), "objective": _objective(record, stage) if stage else UNKNOWN,
            "scores": metrics}


def generative_card(record: dict, source: str, by: str = PACKAGE) -> str:
    """The card of the pre-trained model from ``source`` (a folder the record holds), shipped beside the classifier."""
    f = _generative_facts(record, source, by == PACKAGE)
    whose = f"the classifier `{(record.get('model') or {}).get('name') or UNKNOWN}`'s"  # it travels with that model
    return render_sections(f"Model card: {f['paradigm'] or UNKNOWN} from {source} (lm-pipeline, pre-trained)",
                           _provenance_lines(record, whose, by), generative_sections(f))


# --------------------------------------------------------------------------------------------- Bento
def bento_card(record: dict, served: dict) -> str:
    """The Bento's README. ``served``: what the package stage put in it (name, classifier tag, generative
    models, image, resources)."""
    model = record.get("model") or {}
    generative = served.get("generative") or {}
    image = served.get("image") or {}
    resources = served.get("resources") or {}
    endpoints = [("classify", f"the classifier `{served.get('classifier') or UNKNOWN}`" + (
        f" (method `{served['base'].get('method')}`, on its base `{served['base'].get('tag')}`)"
        if served.get("base") else ""))]
    endpoints += [(ENDPOINT.get(p, p), f"the pre-trained {p} `{g.get('tag') or UNKNOWN}`")
                  for p, g in sorted(generative.items())]
    endpoints.append(("lineage", "which model this is, its commit and the model gate's verdict"))
    runtime = table([
        ("python", str(image.get("python_version") or UNKNOWN)),
        ("base distribution", str(image.get("distro") or UNKNOWN)),
        ("system packages", ", ".join(image.get("system_packages") or [])
         or "none beyond the base image's (every Python dependency is a wheel)"),
        ("python packages", ", ".join(image.get("python_packages") or []) or UNKNOWN),
        ("extra package index", ", ".join(image.get("extra_index_url") or []) or "none"),
        ("resources", ", ".join(f"{k} {v}" for k, v in resources.items()) or UNKNOWN),
    ], ("declared", "value"))
    sections = [("Endpoints", table(endpoints, ("endpoint", "model"))),
                ("Runtime", ["As declared in the Bento (`bento.yaml`: `image`, and the service's `resources`):", "",
                             *runtime])]
    sections += [(f"Classifier: {heading}", body) for heading, body in classifier_sections(_classifier_facts(record))]
    for paradigm, g in sorted(generative.items()):
        f = _generative_facts(record, g.get("source") or "")
        sections.append((f"Pre-trained {paradigm} ({g.get('tag') or UNKNOWN})", [
            f"From `{g.get('source') or UNKNOWN}` ({f['lineage']['stage']}): {count(f['parameters'])} parameters, "
            f"{count(tokens_table(f['training'])[1])} training tokens, objective {f['objective']}, held-out loss "
            f"{score(f['scores'].get('eval_loss'))}. Not judged by the model gate; its own card is the model's "
            f"`{CARD_FILE}`."]))
    if served.get("base"):  # a frozen or lora classifier: its base ships as its own model
        b = served["base"]
        sections.append((f"Base model ({b.get('tag') or UNKNOWN})", [
            f"The classifier was fine-tuned with method `{b.get('method') or UNKNOWN}`: its model holds the head "
            f"(and, for lora, the PEFT adapter) only. The base it was fine-tuned on, `{b.get('base') or UNKNOWN}`, "
            f"ships byte for byte as `{b.get('tag') or UNKNOWN}` (its own card included); the service loads it "
            f"from there and refuses it unless its folder digest is `{b.get('base_digest') or UNKNOWN}`, as the "
            "classifier's `adaptation.json` records (`python -m stages.lineage --verify` checks the same)."]))
    sections.append(("Lineage", ["The chain from raw sources to this Bento (`python -m stages.lineage` prints it "
                                 "and `--verify` checks it):", "", "```", render_chain(record), "```"]))
    if "signing" in served:
        key = served["signing"]
        sections.append(("Signatures", [
            f"Each model folder carries an OpenSSF Model Signing signature (`model.sig`) and the Bento an in-toto "
            f"SLSA Provenance v1 statement (`provenance/provenance.intoto.json`, DSSE), both signed with the "
            f"{key['algorithm']} key whose public half (SHA-256 of its DER: `{key['public_key_sha256']}`) is "
            "exported beside the Bento as `<bento>.pub.pem`." if key else
            "**Unsigned** (packaged with `package.signing: none`): the models carry no `model.sig` and the "
            "provenance statement (`provenance/provenance.intoto.json`) no signature."]))
    intro = [*_provenance_lines(record, "the served classifier's"), "",
             "Endpoints and Runtime are what the package stage declared when it built this Bento; every other "
             "section comes from the record."]
    return render_sections(f"{served.get('name') or 'lm-pipeline'}: {model.get('name') or UNKNOWN}, gated and traced",
                   intro, sections)


def expected_card(record: dict, item: dict) -> str | None:
    """The card a packaged model (``verify.verify_packaged``'s item) should carry; None for one without a card."""
    if item.get("role") == "classifier":
        return classifier_card(record)
    if item.get("source"):
        return generative_card(record, item["source"])
    return None
