"""Evaluation stage (``evaluate``): the paradigm x initialisation comparison, the data-efficiency curve,
GPT's in-context learning, intrinsic scores before and after DAPT, and the model quality gate.

    python -m stages.evaluate --params params.yaml --task data/ingested/task/documents.parquet \
        --finetuned data/models/finetune --pretrained data/models/pretrain --dapt data/models/dapt \
        --tokens data/tokens --metrics reports/metrics/evaluation.json --plots reports/plots/data-efficiency \
        --report reports/evaluation.md --figures reports/figures --gate reports/quality/model-gate.json

- Table: test accuracy and macro-F1 (mean ± std over the fine-tuning seeds) of every
  ``finetune@<paradigm>-<init>`` run (read from its ``finetune.json``), with the majority-class baseline,
  and per paradigm the gains of pre-training and of DAPT against the pooled seed noise.
- Data efficiency: for ``evaluate.curve.paradigms`` x ``inits``, fine-tune on ``sizes`` training examples,
  each over ``seeds`` (mean, standard deviation, range; ``workers`` runs at a time); the full-size point is
  the finetune stage's seeds. The practitioner baselines (:mod:`stages.evaluation.baselines`: TF-IDF + a
  linear classifier and fastText, each searched on validation) on the same samples are the series ``tfidf``
  and ``fasttext``; every neural series is compared with the best of them at each label count.
- Paradigms: parameters, pre-training tokens and FLOPs, training time and final losses next to the
  fine-tuned score, from each model's ``training.json``.
- In-context learning: the GPT models of ``evaluate.icl.inits`` scored with 0 / 1 / 5 demonstrations over
  several prompt orderings, with and without contextual calibration.
- Intrinsic: each pre-trained and DAPT model on the held-out blocks of the general and the domain corpus.
- Gate: :mod:`stages.evaluation.gate`; its verdict goes to ``--gate`` whichever way it falls (the package
  stage obeys it), so this stage does not fail on a weak model: it reports it.

Outputs: the metrics JSON (``dvc metrics diff``), one TSV per data-efficiency series (``dvc plots diff``),
``reports/evaluation.md`` with SVG figures and a verdict written from the numbers, and the gate verdict.
Results are reported as measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


from stages.common.cli import Folder, Stage, entry
from stages.common.inputs import check_folders, read_json
from stages.config import ConfigError, build, check, check_seed, load_params, section
from stages.evaluation.baselines import BaselineConfig
from stages.evaluation.curve import baselines, data_efficiency, source
from stages.evaluation.gate import ModelGateConfig
from stages.evaluation.icl import IclConfig
from stages.finetuning.core import INITS
from stages.tokenization.trainers import PARADIGMS


@dataclass(frozen=True, kw_only=True)
class CurveConfig:
    """The data-efficiency curve: each series fine-tuned on smaller samples of the task's training split; the
    finetune stage's runs on all of it are the last point.
    """

    paradigms: tuple[str, ...] = PARADIGMS
    """Paradigms of the series (`bert`, `gpt`, `t5`)."""
    inits: tuple[str, ...] = INITS
    """Initialisations of the series (`pretrained`, `dapt`, `random`)."""
    sizes: tuple[int, ...] = (100, 300, 1000)
    """Training examples per smaller point; sizes not below the full training split are skipped."""
    seeds: tuple[int, ...] = (0, 1, 2)
    """Seeds each smaller point is repeated over (sample, head initialisation, order)."""
    min_steps: int = 60
    """Fewest optimizer updates of a small-sample run, however small the sample."""
    workers: int = 2
    """Runs at a time for the curve, in-context learning and the baselines (processes of one torch thread; 1 = in
    this process)."""

    def __post_init__(self) -> None:
        check(all(p in PARADIGMS for p in self.paradigms), f"paradigms: each one of {', '.join(PARADIGMS)}")
        check(all(i in INITS for i in self.inits), f"inits: each one of {', '.join(INITS)}")
        check(all(n >= 1 for n in self.sizes), "sizes: each >= 1")
        check(len(self.seeds) >= 1, "seeds: need at least one")
        for s in self.seeds:
            check_seed("seeds", s)
        check(self.workers >= 1, "workers: must be >= 1")


@dataclass(frozen=True, kw_only=True)
class IntrinsicConfig:
    """Intrinsic scores: each pre-trained and DAPT model's loss on the held-out blocks of the general and domain
    corpora.
    """

    eval_blocks: int = 128
    """Held-out blocks scored per corpus and model, >= 1."""
    micro_batch: int = 16
    """Blocks per forward pass, >= 1."""

    def __post_init__(self) -> None:
        check(self.eval_blocks >= 1 and self.micro_batch >= 1, "eval_blocks: eval_blocks and micro_batch must be >= 1")


@dataclass(frozen=True, kw_only=True)
class EvaluateConfig:
    curve: CurveConfig = field(default_factory=CurveConfig)
    """The data-efficiency curve."""
    icl: IclConfig = field(default_factory=IclConfig)
    """In-context learning of the GPT models."""
    intrinsic: IntrinsicConfig = field(default_factory=IntrinsicConfig)
    """Held-out loss of the pre-trained and DAPT models."""
    gate: ModelGateConfig = field(default_factory=ModelGateConfig)
    """Which fine-tuned model is shipped, and the margins it must clear."""
    baseline: BaselineConfig = field(default_factory=BaselineConfig)
    """Models without pre-training, fitted on the same samples."""


def load_config(params_path: Path) -> EvaluateConfig:
    return build(EvaluateConfig, section(load_params(params_path), "evaluate"), "evaluate")


def read_runs(finetuned: Path) -> dict[str, dict]:
    """Every ``<paradigm>-<init>`` fine-tuning record under ``finetuned``."""
    runs = {}
    for p in PARADIGMS:
        for init in INITS:
            path = finetuned / f"{p}-{init}" / "finetune.json"
            if not path.is_file():
                raise FileNotFoundError(f"{path}: missing (run the finetune@{p}-{init} stage first)")
            runs[f"{p}-{init}"] = read_json(path)
    return runs


def icl_run(state: dict, job: dict) -> dict:
    """One GPT model's in-context scores (a job of :func:`in_context`; module level, so a worker can run it)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from stages.evaluation.icl import icl_accuracy

    path, init = Path(job["path"]), job["init"]
    torch.manual_seed(0)
    model = (AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(path)))
             if init == "random" else AutoModelForCausalLM.from_pretrained(str(path)))
    model.to("cuda" if torch.cuda.is_available() else "cpu")
    tok = AutoTokenizer.from_pretrained(str(path))
    return icl_accuracy(model, tok, state["labels"], state["train"], state["test"], state["cfg"],
                        context=state["context"])


def in_context(cfg: EvaluateConfig, runs: dict[str, dict], df, model_dirs: dict[str, Path], context: int,
               log) -> dict:
    """The GPT models of ``cfg.icl.inits`` scored in context, one model per worker (``curve.workers`` at a
    time, one torch thread each: batch-one prompts do not use a second thread well)."""
    from stages.common.pool import run_ordered

    labels = list(runs["gpt-pretrained"]["labels"])
    index = {lab: i for i, lab in enumerate(labels)}
    train = [(t, index[lab]) for t, lab in df.loc[df["split"] == "train", ["text", "label"]].itertuples(index=False)]
    test = [(t, index[lab]) for t, lab in df.loc[df["split"] == "test", ["text", "label"]].itertuples(index=False)]
    state = {"labels": labels, "train": train, "test": test, "cfg": cfg.icl, "context": context}
    inits = list(cfg.icl.inits)
    jobs = [{"init": init, "path": str(source(model_dirs, "gpt", init))} for init in inits]
    log(f"[evaluate] in-context learning: {len(jobs)} GPT models, {min(cfg.curve.workers, len(jobs))} at a time")
    out = {}
    for init, r in zip(inits, run_ordered(icl_run, state, jobs, workers=cfg.curve.workers)):
        out[f"gpt-{init}"] = r
        log(f"[evaluate] in-context gpt-{init}: " + ", ".join(
            f"{k}-shot accuracy {r[str(k)]['accuracy']:.3f} (calibrated {r[str(k)]['calibrated']['accuracy']:.3f})"
            for k in cfg.icl.shots))
    return out


def intrinsic(cfg: EvaluateConfig, model_dirs: dict[str, Path], tokens: Path, log) -> dict:
    from stages.evaluation.intrinsic import read_layout, score
    from stages.training.models import load_model

    out = {}
    for p in PARADIGMS:
        layout = read_layout(tokens / p)
        for stage in ("pretrain", "dapt"):
            model = load_model(model_dirs[f"{stage}-{p}"], p)
            for corpus in ("general", "domain"):
                r = score(model, layout, tokens / p, corpus, eval_blocks=cfg.intrinsic.eval_blocks,
                          micro_batch=cfg.intrinsic.micro_batch)
                out.setdefault(p, {}).setdefault(stage, {})[corpus] = r
        log(f"[evaluate] intrinsic {p}: " + "; ".join(
            f"{s} {c} loss {out[p][s][c]['eval_loss']:.3f}" for s in ("pretrain", "dapt") for c in ("general", "domain")))
    return out


def curve_tsv(points: list[dict]) -> str:
    rows = ["train_examples\tmacro_f1\tmacro_f1_std\tmacro_f1_min\tmacro_f1_max\taccuracy\truns"]
    for pt in points:
        f, a = pt["macro_f1"], pt["accuracy"]
        rows.append(f"{pt['train_examples']}\t{f['mean']}\t{f['std']}\t{f['min']}\t{f['max']}\t{a['mean']}\t{f['runs']}")
    return "\n".join(rows) + "\n"


def paradigms(runs: dict[str, dict], model_dirs: dict[str, Path], gains: dict) -> dict:
    from stages.evaluation.summary import paradigm_row, read_training

    return {p: paradigm_row(read_training(model_dirs[f"pretrain-{p}"]), read_training(model_dirs[f"dapt-{p}"]),
                            gains[p]) for p in PARADIGMS}


def evaluate_all(cfg: EvaluateConfig, *, df, finetuned: Path, pretrained: Path, dapt: Path, tokens: Path,
                 log=print) -> dict:
    from stages.evaluation.gate import decide
    from stages.evaluation.intrinsic import read_layout
    from stages.evaluation.summary import curve_gains, gains, run_row, versus_baselines

    runs = read_runs(finetuned)
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

    gate = decide({n: r["metrics"] for n, r in runs.items()}, cfg.gate)
    gain = gains(table, PARADIGMS)
    base = (timed("baselines", lambda: baselines(cfg, runs, gate["selected"], df, log))
            if cfg.baseline.series() else {})
    de = timed("data-efficiency curve", lambda: data_efficiency(cfg, runs, df, model_dirs, log))
    for name, b in base.items():
        de[name] = [{k: pt[k] for k in ("train_examples", "macro_f1", "accuracy", "val_macro_f1")}
                    for pt in b["points"]]
    neural_de = {name: pts for name, pts in de.items() if name not in base}
    result = {
        "finetune": table,
        "majority": majority,
        "gains": gain,
        "gate": gate,
        "full_n": runs[gate["selected"]]["metrics"]["train_examples"],
        "paradigms": paradigms(runs, model_dirs, gain),
        "baselines": base,
        "versus_baselines": versus_baselines(de, table, list(base)),
        "intrinsic": timed("intrinsic scores", lambda: intrinsic(cfg, model_dirs, tokens, log)),
        "icl": timed("in-context learning", lambda: in_context(cfg, runs, df, model_dirs,
                                                               read_layout(tokens / "gpt").seq_len, log)
                     if cfg.icl.inits else {}),
        "data_efficiency": de,
        "curve_gains": curve_gains(neural_de, {p: g["best_init"] for p, g in gain.items()}),
        "curves": {name: r["curve"] for name, r in runs.items()},
        "labels": list(next(iter(runs.values()))["labels"]),
        "config": dataclasses.asdict(cfg),
    }
    from stages.evaluation.verdict import verdict

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
        "baselines": {name: {str(pt["train_examples"]): {
            "test_macro_f1": pt["macro_f1"]["mean"], "test_macro_f1_std": pt["macro_f1"]["std"],
            "test_accuracy": pt["accuracy"]["mean"], "test_accuracy_std": pt["accuracy"]["std"],
            "val_macro_f1": pt["val_macro_f1"]["mean"], "runs": pt["macro_f1"]["runs"], "settings": pt["settings"],
            "at_bound": pt["at_bound"]} for pt in b["points"]} for name, b in result["baselines"].items()},
        "gate": {"passed": result["gate"]["passed"], "selected": result["gate"]["selected"],
                 **{c["check"]: c["value"] for c in result["gate"]["checks"]}}}


def _arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--task", type=Path, required=True)
    ap.add_argument("--finetuned", type=Path, required=True, help="folder of the <paradigm>-<init> fine-tuned models")
    ap.add_argument("--pretrained", type=Path, required=True, help="folder of the general pre-trained models")
    ap.add_argument("--dapt", type=Path, required=True, help="folder of the domain-adapted models")
    ap.add_argument("--tokens", type=Path, required=True, help="folder of the token datasets")
    ap.add_argument("--metrics", type=Path, required=True)
    ap.add_argument("--plots", type=Path, required=True, help="folder for the data-efficiency TSVs")
    ap.add_argument("--report", type=Path, required=True)
    ap.add_argument("--figures", type=Path, required=True)
    ap.add_argument("--gate", type=Path, required=True, help="the model quality gate's verdict (JSON)")
    ap.add_argument("--timings", type=Path, help="wall times and throughput of this workspace's runs (Markdown; "
                                                 "untracked: see stages.evaluation.timings)")
    ap.add_argument("--live", type=Path, default=Path("reports/live"), help="the runs' live logs (read)")


def _run(args: argparse.Namespace, log) -> dict:
    from stages.evaluation.report import figures, markdown
    from stages.finetuning.core import read_task

    cfg = load_config(args.params)
    check_folders(args.finetuned, args.pretrained, args.dapt)  # every saved model read below, checked first
    result = evaluate_all(cfg, df=read_task(args.task), finetuned=args.finetuned, pretrained=args.pretrained,
                          dapt=args.dapt, tokens=args.tokens, log=log)
    rel = Path(os.path.relpath(args.figures, args.report.parent or ".")).as_posix()
    timings_md = None
    if args.timings:
        from stages.evaluation import timings

        t = timings.collect(args.live, result["timings"]["sections"], result["timings"]["baseline_seconds"])
        timings_md = timings.markdown(t)
    verdict = "passed" if result["gate"]["passed"] else "FAILED (the package stage will not ship it)"
    log(f"[evaluate] model gate {verdict}: {result['gate']['selected']} (best validation macro-F1)")
    return {args.plots: Folder({f"{name}.tsv": curve_tsv(points) for name, points in result["data_efficiency"].items()}),
            args.figures: Folder(figures(result)),
            args.report: markdown(result, figures_dir=rel),
            args.metrics: metrics_json(result),
            args.gate: result["gate"],
            args.timings: timings_md}


STAGE = Stage("stages.evaluate", "Evaluate and compare the models.", _arguments, _run,
              inputs=("params", "task", "finetuned", "pretrained", "dapt", "tokens", "live"),
              outputs=("metrics", "plots", "report", "figures", "gate", "timings"),
              errors=(ConfigError, FileNotFoundError, ValueError))
main = STAGE.main


if __name__ == "__main__":
    sys.exit(entry(main))
