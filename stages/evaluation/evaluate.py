"""The evaluate stage's core: the fine-tuned runs side by side, the data-efficiency curve and baselines, GPT's
in-context learning, intrinsic scores (held-out loss) and the model quality gate."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

from stages.common.inputs import load_npy, read_json
from stages.common.pool import Plan, run_plans
from stages.evaluation import adaptation
from stages.evaluation.config import EvaluateConfig
from stages.evaluation.curve import baselines_plan, data_efficiency_plan, source
from stages.evaluation.gate import decide
from stages.evaluation.icl import icl_accuracy
from stages.evaluation.summary import (curve_gains, gains, paradigm_row, read_record, read_training, run_row,
                                      versus_baselines)
from stages.evaluation.verdict import verdict
from stages.finetuning.core import INITS, PUBLISHED_INITS
from stages.objectives import for_paradigm
from stages.tokenization.layout import BlockLayout
from stages.tokenization.trainers import PARADIGMS
from stages.training.config import TrainConfig
from stages.training.models import load_model


def icl_run(state: dict, job: dict) -> dict:
    """One GPT model's in-context scores (a job of :func:`in_context_plan`; module level, so a worker can run it)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    path, init = Path(job["path"]), job["init"]
    torch.manual_seed(0)
    model = (AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(path)))
             if init == "random" else AutoModelForCausalLM.from_pretrained(str(path)))
    model.to("cuda" if torch.cuda.is_available() else "cpu")
    tok = AutoTokenizer.from_pretrained(str(path))
    return icl_accuracy(model, tok, state["labels"], state["train"], state["test"], state["cfg"],
                        context=state["context"])


def in_context_plan(cfg: EvaluateConfig, runs: dict[str, dict], df, model_dirs: dict[str, Path], context: int,
                    log) -> Plan:
    """The GPT models of ``cfg.icl.inits`` scored in context, one model per job (one torch thread each in a
    worker: batch-one prompts do not use a second thread well); finished: ``gpt-<init>`` -> scores."""
    labels = list(runs["gpt-pretrained"]["labels"])
    index = {lab: i for i, lab in enumerate(labels)}
    state = {"labels": labels, "cfg": cfg.icl, "context": context} | {
        s: [(t, index[lab]) for t, lab in df.loc[df["split"] == s, ["text", "label"]].itertuples(index=False)]
        for s in ("train", "test")}
    jobs = [{"init": init, "path": str(source(model_dirs, "gpt", init))} for init in cfg.icl.inits]
    log(f"[evaluate] in-context learning: {len(jobs)} GPT models")

    def finish(results: list[dict]) -> dict:
        out = {}
        for init, r in zip(cfg.icl.inits, results):
            out[f"gpt-{init}"] = r
            log(f"[evaluate] in-context gpt-{init}: " + ", ".join(
                f"{k}-shot accuracy {r[str(k)]['accuracy']:.3f} (calibrated {r[str(k)]['calibrated']['accuracy']:.3f})"
                for k in cfg.icl.shots))
        return out

    return Plan(icl_run, state, jobs, finish)


def read_layout(tokens_dir: Path) -> BlockLayout:
    """The block layout of a token dataset (its ``manifest.json``)."""
    manifest = tokens_dir / "manifest.json"
    if not manifest.is_file():
        raise FileNotFoundError(f"{manifest}: no token dataset (run the tokens stage first)")
    return BlockLayout(**read_json(manifest)["layout"])


def intrinsic(cfg: EvaluateConfig, model_dirs: dict[str, Path], tokens: Path, log) -> dict:
    """Each pre-trained and DAPT model's own objective on the held-out blocks of both corpora (masks and spans fixed per
    block: both models of a paradigm see the same inputs); on a GPU under bf16 autocast, else on the CPU in fp32."""
    import torch

    from stages.training.device import native_bf16
    from stages.training.heldout import evaluate

    device = "cuda" if torch.cuda.is_available() else "cpu"
    bf16, n = device == "cuda" and native_bf16(device), cfg.intrinsic.eval_blocks
    train_cfg = TrainConfig(eval_blocks=n, micro_batch=cfg.intrinsic.micro_batch, seed=0)
    out = {}
    for p in PARADIGMS:
        layout = read_layout(tokens / p)
        for stage in ("pretrain", "dapt"):
            model = load_model(model_dirs[f"{stage}-{p}"], p)
            model.to(device)
            for corpus in ("general", "domain"):
                path = tokens / p / corpus / "heldout.npy"
                if not path.is_file():
                    raise FileNotFoundError(f"{path}: no held-out blocks for corpus {corpus!r}")
                blocks = load_npy(path)
                r = evaluate(model, for_paradigm(layout), blocks, train_cfg, device, bf16)
                out.setdefault(p, {}).setdefault(stage, {})[corpus] = r | {"blocks": int(min(n, len(blocks)))}
        log(f"[evaluate] intrinsic {p}: " + "; ".join(
            f"{s} {c} loss {out[p][s][c]['eval_loss']:.3f}" for s in ("pretrain", "dapt") for c in ("general", "domain")))
    return out


def curve_tsv(points: list[dict]) -> str:
    rows = ["train_examples\tmacro_f1\tmacro_f1_std\tmacro_f1_min\tmacro_f1_max\taccuracy\truns"]
    for pt in points:
        f, a = pt["macro_f1"], pt["accuracy"]
        rows.append(f"{pt['train_examples']}\t{f['mean']}\t{f['std']}\t{f['min']}\t{f['max']}\t{a['mean']}\t{f['runs']}")
    return "\n".join(rows) + "\n"


def published_runs(bases, runs=()) -> dict[str, str]:
    """The runs of the published bases (names of params ``published.bases``, then of ``published.runs``): folder
    name -> stage."""
    return {f"{b}-{i}": f"finetune-{i}@{b}" for b in bases for i in PUBLISHED_INITS} | {
        name: f"adapt-published@{name}" for name in runs}


@dataclass(frozen=True)
class Folders:
    """What the evaluation reads: the fine-tuned runs' folders, the pre-trained and DAPT models, the token datasets."""

    finetuned: Path
    pretrained: Path
    dapt: Path
    tokens: Path


@dataclass(frozen=True)
class RunNames:
    """The runs beside the ``<paradigm>-<init>`` ones (their folders under ``Folders.finetuned``): the names of
    params ``adapt.runs`` (``adapt_runs``), ``published.bases`` (``bases``) and ``published.runs`` (``base_runs``)."""

    adapt_runs: tuple[str, ...] = ()
    bases: tuple[str, ...] = ()
    base_runs: tuple[str, ...] = ()


def evaluate_all(cfg: EvaluateConfig, *, df, folders: Folders, names: RunNames = RunNames(), log=print) -> dict:
    """Every part of the evaluation (curve, baselines, in-context learning, intrinsic scores, the gate) of the
    runs ``names`` adds to the ``<paradigm>-<init>`` ones."""
    finetuned, pretrained, dapt, tokens = folders.finetuned, folders.pretrained, folders.dapt, folders.tokens
    adapt_runs, bases, base_runs = names.adapt_runs, names.bases, names.base_runs
    runs = {f"{p}-{i}": read_record(finetuned / f"{p}-{i}", f"finetune@{p}-{i}") for p in PARADIGMS for i in INITS}
    adapted = {name: read_record(finetuned / name, f"adapt@{name}") for name in adapt_runs}
    published = {name: read_record(finetuned / name, stage) for name, stage in published_runs(bases, base_runs).items()}
    every = runs | adapted | published  # the model gate's candidates
    model_dirs = {f"{stage}-{p}": root / p for stage, root in (("pretrain", pretrained), ("dapt", dapt))
                  for p in PARADIGMS}
    for key, path in model_dirs.items():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path / 'config.json'}: no model (run the {key.replace('-', '@')} stage first)")
    table = {name: run_row(r) for name, r in runs.items()}
    any_run = next(iter(runs.values()))["metrics"]
    majority = {"test_accuracy": any_run["majority_test_accuracy"], "test_macro_f1": any_run["majority_test_macro_f1"]}

    sections: dict[str, float] = {}

    def timed(name, fn):
        start = time.perf_counter()
        out = fn()
        sections[name] = time.perf_counter() - start
        log(f"[evaluate] {name}: {sections[name]:.0f} s")
        return out

    gate = decide({n: r["metrics"] for n, r in every.items()}, cfg.gate)
    gain = gains(table, PARADIGMS)
    # The baselines (one long search on all labels), GPT's in-context scores and the curve's many short runs share
    # one pool, longest jobs first, so no worker waits for another part to finish.
    plans = {}
    if cfg.baseline.series():
        plans["baselines"] = baselines_plan(cfg, every, gate["selected"], df, log)
    if cfg.icl.inits:
        plans["in-context learning"] = in_context_plan(cfg, runs, df, model_dirs, read_layout(tokens / "gpt").seq_len,
                                                       log)
    plans["data-efficiency curve"] = data_efficiency_plan(cfg, runs, df, model_dirs, log, adapted=adapted,
                                                          published=published)
    workers = min(cfg.curve.workers, sum(len(plan.jobs) for plan in plans.values()) or 1)
    done, job_seconds = timed(f"{', '.join(plans)} ({workers} at a time, one pool)",
                              lambda: run_plans(plans, workers=cfg.curve.workers))
    sections |= {f"{name} (time summed over its jobs)": seconds for name, seconds in job_seconds.items()}
    base, de = done.get("baselines", {}), done["data-efficiency curve"]
    for name, b in base.items():
        de[name] = [{k: pt[k] for k in ("train_examples", "macro_f1", "accuracy", "val_macro_f1")}
                    for pt in b["points"]]
    neural_de = {name: pts for name, pts in de.items() if name not in base}
    result = {
        "finetune": table,
        "adapted": {name: adaptation.adapted_row(r, finetuned / name) for name, r in adapted.items()},
        "published": {name: run_row(r) | {"paradigm": r["metrics"]["paradigm"], "init": r["init"], "base": r["base"],
                                          "method": r["config"].get("method", "full")} for name, r in published.items()},
        "majority": majority,
        "gains": gain,
        "gate": gate,
        "full_n": every[gate["selected"]]["metrics"]["train_examples"],
        "paradigms": {p: paradigm_row(read_training(model_dirs[f"pretrain-{p}"]),
                                      read_training(model_dirs[f"dapt-{p}"]), gain[p]) for p in PARADIGMS},
        "baselines": base,
        "versus_baselines": versus_baselines(de, table, list(base)),
        "intrinsic": timed("intrinsic scores", lambda: intrinsic(cfg, model_dirs, tokens, log)),
        "icl": done.get("in-context learning", {}),
        "data_efficiency": de,
        "curve_gains": curve_gains({n: pts for n, pts in neural_de.items() if n not in adapted and n not in published},
                                   {p: g["best_init"] for p, g in gain.items()}),
        "curves": {name: r["curve"] for name, r in every.items()},
        "labels": list(next(iter(runs.values()))["labels"]),
        "config": dataclasses.asdict(cfg),
    }

    result["adaptation"] = adaptation.tables(result, finetuned)
    result["verdict"] = verdict(result)
    # wall times: beside the result, never in the tracked report or metrics (stages.evaluation.timings)
    result["timings"] = {"sections": sections, "baseline_seconds": {
        name: next(pt["seconds"] for pt in b["points"] if pt["train_examples"] == result["full_n"])
        for name, b in base.items()}}
    return result


def metrics_json(result: dict) -> dict:
    """The numbers ``dvc metrics diff`` compares (no curves, no config, no per-run lists)."""
    return {k: result[k] for k in ("finetune", "majority", "gains", "paradigms", "intrinsic", "icl",
                                   "data_efficiency", "curve_gains", "versus_baselines")} | {
        **({"adapted": result["adapted"], "adaptation": {p: {"init": t["init"], "use": {
            str(v["train_examples"]): v["use"] for v in t["verdict"]}} for p, t in result["adaptation"].items()}}
           if result["adapted"] else {}),
        **({"published": result["published"]} if result.get("published") else {}),
        "baselines": {name: {str(pt["train_examples"]): {
            "test_macro_f1": pt["macro_f1"]["mean"], "test_macro_f1_std": pt["macro_f1"]["std"],
            "test_accuracy": pt["accuracy"]["mean"], "test_accuracy_std": pt["accuracy"]["std"],
            "val_macro_f1": pt["val_macro_f1"]["mean"], "runs": pt["macro_f1"]["runs"], "settings": pt["settings"],
            "at_bound": pt["at_bound"]} for pt in b["points"]} for name, b in result["baselines"].items()},
        "gate": {"passed": result["gate"]["passed"], "selected": result["gate"]["selected"],
                 **{c["check"]: c["value"] for c in result["gate"]["checks"]}}}
