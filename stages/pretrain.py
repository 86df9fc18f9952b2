"""Pre-training stage (``pretrain@<paradigm>``) and domain-adaptive pre-training (``dapt@<paradigm>``).

    python -m stages.pretrain --paradigm gpt --params params.yaml --section pretrain \
        --tokens data/tokens/gpt --corpus general --tokenizer data/tokenizers/gpt \
        --output models/pretrain/gpt --checkpoints checkpoints/pretrain/gpt \
        --metrics reports/metrics/pretrain-gpt.json --plot reports/plots/pretrain-gpt.tsv

``--section dapt --corpus domain --init models/pretrain/gpt`` continues a general model on the domain
corpus with the same objective and tokenizer ("Don't Stop Pretraining", Gururangan et al. 2020), on its
own budget (``dapt.<paradigm>.train``). The same command runs data-parallel under
``torchrun --nproc_per_node N -m stages.pretrain ...`` or ``accelerate launch --multi_gpu --num_processes N -m
stages.pretrain ...``; the plain command relaunches itself that way when ``LMPIPE_TRAIN_PROCESSES`` is above 1
(``stages.training.launch``; the Prefect flow's ``train_processes``).

The output folder holds the model (``save_pretrained``, safetensors) and its tokenizer, so stock
``AutoModelFor...`` / ``AutoTokenizer`` / ``pipeline`` load it, plus ``training.json`` (config, inputs'
hashes, results) and its model card (``README.md``, rendered from ``card.json``: data and licences from the
``--sources`` manifests, objective, size, tokens, held-out scores; ``stages.provenance.stagecard``). A killed
run resumes from ``--checkpoints`` when rerun with the same params and inputs.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from stages import objectives
from stages.common.atomic import write_json_atomic
from stages.common.inputs import check_folder, load_npy, read_json
from stages.common.cli import Stage, entry
from stages.training.checkpoint import CheckpointError
from stages.training.loop import TrainingDiverged
from stages.config import ConfigError, build, deep_merge, load_params, section
from stages.objectives.denoisers import sentence_end_ids
from stages.provenance import stagecard
from stages.tokenization.trainers import PARADIGMS
from stages.training.config import PretrainConfig, TrainConfig


@dataclass(frozen=True, kw_only=True)
class DaptConfig:
    """A ``dapt.<paradigm>`` section: only the run; the model is the general checkpoint's."""

    train: TrainConfig = field(default_factory=TrainConfig)
    """The run."""


def load_config(params_path: Path, section_name: str, paradigm: str, variant: str | None = None):
    """The section's config; with ``variant``, that ``compare.objectives`` entry's objective and ``train``
    settings over it (the objective comparison's runs: the same model and budget, another objective)."""
    params = load_params(params_path)
    merged = deep_merge(section(params, f"{section_name}.defaults"), section(params, f"{section_name}.{paradigm}") or {})
    where = f"{section_name}.{paradigm}"
    if variant is not None:
        entry = compare_entry({variant: section(params, f"compare.objectives.{variant}")}, variant, paradigm)
        merged = deep_merge(merged, {"train": {**(entry.get("train") or {}), "objective": entry["objective"]}})
        where = f"{where} with compare.objectives.{variant}"
    cls = PretrainConfig if section_name == "pretrain" else DaptConfig
    return build(cls, merged, where)


COMPARE_KEYS = ("paradigm", "objective", "train")


def compare_entries(entries) -> list[dict]:
    """``compare.objectives`` checked and listed: a mapping of names to ``{paradigm, objective[, train]}``, each
    objective one of its paradigm's (``stages.objectives``), ``train`` the run's own settings; each entry comes
    back as a dict with its ``name``."""
    own = {paradigm: objectives.names(paradigm) for paradigm in objectives.OWN}
    if entries is None:
        return []
    if not isinstance(entries, dict):
        raise ConfigError(f"compare.objectives: expected a mapping of names to {{paradigm, objective}}, got {entries!r}")
    out = []
    for name, e in entries.items():
        where = f"compare.objectives.{name}"
        name = str(name)
        if not name[:1].isalpha() or not all(c.isalnum() or c in "-_" for c in name):
            raise ConfigError(f"{where}: a name starts with a letter and holds letters, digits, '-' and '_' only "
                              "(it names stages and folders)")
        if not isinstance(e, dict):
            raise ConfigError(f"{where}: expected a mapping with paradigm and objective, got {e!r}")
        unknown = sorted(set(e) - set(COMPARE_KEYS))
        missing = [k for k in COMPARE_KEYS[:2] if not e.get(k)]
        if unknown or missing:
            raise ConfigError(f"{where}: " + "; ".join(
                ([f"unknown key(s) {', '.join(map(str, unknown))}"] if unknown else [])
                + ([f"missing {', '.join(missing)}"] if missing else [])))
        if e["paradigm"] not in own:
            raise ConfigError(f"{where}.paradigm: {e['paradigm']!r} is not one of {', '.join(own)}")
        if e["objective"] not in own[e["paradigm"]]:
            raise ConfigError(f"{where}.objective: {e['objective']!r} is not one of {e['paradigm']}'s objectives "
                              f"({', '.join(own[e['paradigm']])})")
        if e.get("train") is not None and not isinstance(e["train"], dict):
            raise ConfigError(f"{where}.train: expected a mapping of train settings, got {e['train']!r}")
        out.append({"name": name, **e})
    return out


def compare_entry(entries, name: str, paradigm: str) -> dict:
    """The ``compare.objectives`` entry called ``name`` (a ConfigError when there is none or its paradigm differs)."""
    listed = compare_entries(entries)
    entry = next((e for e in listed if e["name"] == name), None)
    if entry is None:
        known = ", ".join(e["name"] for e in listed) or "none"
        raise ConfigError(f"compare.objectives: no entry named {name!r} (entries: {known})")
    if entry["paradigm"] != paradigm:
        raise ConfigError(f"compare.objectives.{name}.paradigm: {entry['paradigm']!r}, not --paradigm {paradigm}")
    return entry


def match_flops(cfg, reference: Path):
    """``cfg`` with ``train.budget_flops`` set to the FLOPs of the run saved in ``reference`` (its tokens x its
    FLOPs per token, from its ``training.json``): equal compute with that run, whatever this run's objective."""
    import dataclasses

    record = read_json(check_folder(reference) / "training.json")
    m = record.get("metrics") or {}
    if not m.get("tokens") or not m.get("flops_per_token"):
        raise ValueError(f"{reference / 'training.json'}: no metrics.tokens / metrics.flops_per_token to match")
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, budget_flops=float(m["tokens"]) * float(m["flops_per_token"])))


def fingerprint(*parts) -> str:
    """What makes two runs the same run (a checkpoint of another run is not resumed)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _file_sha(path: Path) -> str:
    from stages.sources.base import sha256_file

    return sha256_file(path) if path.exists() else "missing"


def plot_tsv(history: list[dict], evals: list[dict]) -> str:
    """One row per logged step (training loss, lr) with the evaluation where there was one. Timings are not
    here (they differ between runs of the same inputs): the live log has them (stages.common.live)."""
    by_step = {e["step"]: e for e in evals}
    buf = io.StringIO()
    w = csv.writer(buf, delimiter="\t", lineterminator="\n")
    w.writerow(["step", "tokens", "loss", "lr", "eval_loss"])
    for row in history:
        ev = by_step.get(row["step"], {})
        w.writerow([row["step"], row["tokens"], row["loss"], f"{row['lr']:.3g}", ev.get("eval_loss", "")])
    return buf.getvalue()


def read_inputs(tokens_dir: Path, tokenizer_dir: Path, paradigm: str, corpus: str):
    """The token dataset's manifest, the block layout (checked against the tokenizer) and the corpus's train and
    held-out blocks."""
    from stages.tokenization.layout import load_layout

    manifest_path = tokens_dir / "manifest.json"
    if not manifest_path.is_file():
        raise FileNotFoundError(f"{manifest_path}: no token dataset (run the tokens stage first)")
    manifest = read_json(manifest_path)
    check_folder(tokenizer_dir)
    if manifest["paradigm"] != paradigm:
        raise ValueError(f"{manifest_path}: blocks for {manifest['paradigm']}, not {paradigm}")
    lay = manifest["layout"]
    layout, _ = load_layout(tokenizer_dir, paradigm, seq_len=lay["seq_len"],
                            noise_density=lay.get("noise_density") or 0.15, mean_span=lay.get("mean_span") or 3.0)
    if layout.block_len != lay["block_len"] or layout.vocab_size != lay["vocab_size"]:
        raise ValueError(f"{tokenizer_dir}: does not match the tokenizer the blocks in {tokens_dir} were made with")
    if corpus not in manifest["corpora"]:
        raise ValueError(f"{manifest_path}: no corpus {corpus!r} (has: {', '.join(manifest['corpora'])})")
    return manifest, layout, load_npy(tokens_dir / corpus / "train.npy"), load_npy(tokens_dir / corpus / "heldout.npy")


def model_and_objective(cfg, layout, paradigm: str, init: Path | None, tokenizer_dir: Path):
    """The model (fresh, or ``init`` continued), the objective's batch builder, and the FLOPs per token once the
    objective's own heads are attached (``stages.objectives``)."""
    from stages.training.models import build_model, flops_per_token, load_model

    if init is not None:
        model = load_model(check_folder(init), paradigm)
        if model.config.vocab_size != layout.vocab_size:
            raise ValueError(f"{init}: vocabulary {model.config.vocab_size} != the tokenizer's {layout.vocab_size}")
    else:
        model = build_model(layout, cfg.model, seed=cfg.train.seed)
    objective = objectives.get(paradigm, cfg.train.objective)
    settings = objective.settings(cfg.train)
    if objective.sentence_ends:  # it cuts after the tokenizer's full stops
        settings["sentence_ends"] = sentence_end_ids((tokenizer_dir / "tokenizer.json").read_text(encoding="utf-8"))
    builder = objective.make(layout, **settings)
    if objective.setup is not None:
        return model, builder, objective.setup(model, layout, builder, cfg.train, init)
    return model, builder, flops_per_token(model, layout, predicted_fraction=getattr(builder, "select", 1.0),
                                           targets_len=getattr(builder, "targets_len", None))


def run(cfg, *, paradigm: str, stage: str, tokens_dir: Path, corpus: str, tokenizer_dir: Path, init: Path | None,
        out: Callable[[], Path], checkpoint_dir: Path | None, log=print, progress: bool = True,
        live_dir: Path | None = None, sources: list[Path] = ()) -> tuple[dict, str] | None:
    """Train and save into the folder ``out()`` (asked for only by the process that saves); returns the metrics
    and the curve's TSV (on the main process; None on the others).
    ``live_dir``: the run's live log (:mod:`stages.common.live`). ``sources``: the ingest manifests of the
    corpora behind the model; their sources and licences go into the folder's model card."""
    from stages.common.live import LiveLog
    from stages.training import distributed
    from stages.training.loop import train

    manifest, layout, train_blocks, eval_blocks = read_inputs(tokens_dir, tokenizer_dir, paradigm, corpus)
    corpora = stagecard.corpora(list(sources))
    dist = distributed.init()
    model, objective, fpt = model_and_objective(cfg, layout, paradigm, init, tokenizer_dir)
    run_id = fingerprint(stage, paradigm, corpus, asdict(cfg), dist.world, manifest["corpora"][corpus],
                         manifest["tokenizer"]["sha256"], _file_sha(init / "model.safetensors") if init else None)
    with LiveLog(live_dir if dist.main else None) as live:  # the loop starts it where the run starts
        result = train(model, objective, train_blocks, eval_blocks, cfg.train, flops_per_token=fpt,
                       seq_len=layout.seq_len, dist=dist, checkpoint_dir=checkpoint_dir, fingerprint=run_id,
                       log=log if dist.main else (lambda m: None), progress=progress, live=live)
        live.summary({"tokens": result.tokens, "steps": result.steps, "resumed_from": result.resumed_from,
                      "tokens_per_second": round(result.tokens_per_second, 1),
                      "flops_per_second": float(f"{result.flops_per_second:.4g}"),
                      "mfu": None if result.mfu is None else round(result.mfu, 4),
                      "train_seconds": round(result.train_seconds, 1)})
    outcome = None
    if dist.main:
        final_eval = result.evals[-1] if result.evals else {}
        metrics = {"paradigm": paradigm, "stage": stage, "corpus": corpus, "steps": result.steps,
                   "tokens": result.tokens, "parameters": sum(p.numel() for p in model.parameters()),
                   "flops_per_token": fpt, "devices": dist.world,
                   "train_loss": result.history[-1]["loss"] if result.history else None,
                   **{k: v for k, v in final_eval.items() if k.startswith("eval_")}}
        save(out(), model, cfg, result, metrics, stage=stage, paradigm=paradigm, corpus=corpus, run_id=run_id,
             layout=layout, manifest=manifest, tokens_dir=tokens_dir, tokenizer_dir=tokenizer_dir, init=init,
             corpora=corpora)
        log(f"[{stage}] {paradigm} on {corpus}: {result.steps} steps, {result.tokens:,} tokens, train loss "
            f"{metrics['train_loss']}, eval " + ", ".join(f"{k} {v}" for k, v in final_eval.items() if k.startswith("eval"))
            + f"; {result.tokens_per_second:,.0f} tokens/s, {result.flops_per_second / 1e12:.3g} model TFLOP/s"
            + (f", MFU {result.mfu:.1%}" if result.mfu else ""))
        outcome = metrics, plot_tsv(result.history, result.evals)
        if checkpoint_dir is not None and checkpoint_dir.exists():
            shutil.rmtree(checkpoint_dir)  # the run finished: its model is the output, nothing to resume
    distributed.barrier(dist)
    distributed.shutdown(dist)
    return outcome


def save(tmp: Path, model, cfg, result, metrics: dict, *, stage: str, paradigm: str, corpus: str, run_id: str, layout,
         manifest: dict, tokens_dir: Path, tokenizer_dir: Path, init: Path | None, corpora) -> None:
    """The output folder: the model, its tokenizer, ``training.json`` and the model card."""
    from stages.training.models import save_model

    save_model(model, tmp)
    for f in sorted(tokenizer_dir.iterdir()):
        if f.is_file():
            shutil.copy2(f, tmp / ("tokenizer_provenance.json" if f.name == "provenance.json" else f.name))
    write_json_atomic(tmp / "training.json", {
        "stage": stage, "paradigm": paradigm, "corpus": corpus, "fingerprint": run_id,
        "config": asdict(cfg), "layout": layout.to_json(),
        "inputs": {"tokens": {"path": str(tokens_dir), "manifest_sha256": _file_sha(tokens_dir / "manifest.json"),
                              "corpus": manifest["corpora"][corpus]},
                   "tokenizer": {"path": str(tokenizer_dir), "sha256": manifest["tokenizer"]["sha256"]},
                   "init": None if init is None else {"path": str(init),
                                                      "sha256": _file_sha(init / "model.safetensors")}},
        "metrics": metrics, "history": result.history, "evals": result.evals})
    stagecard.write(tmp, stagecard.pretrain_facts(kind=stage, paradigm=paradigm, corpus=corpus, config=asdict(cfg),
                                                  metrics=metrics, sources=corpora, init=init))


def _arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--paradigm", choices=PARADIGMS, required=True)
    ap.add_argument("--section", choices=("pretrain", "dapt"), default="pretrain", help="params section to read")
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--tokens", type=Path, required=True, help="token-dataset folder of this paradigm")
    ap.add_argument("--corpus", default="general", help="corpus inside the token dataset")
    ap.add_argument("--tokenizer", type=Path, required=True)
    ap.add_argument("--init", type=Path, help="continue this saved model (DAPT) instead of a fresh one")
    ap.add_argument("--output", type=Path, required=True, help="model folder (replaced atomically)")
    ap.add_argument("--checkpoints", type=Path, help="checkpoint folder (resumed when the run matches)")
    ap.add_argument("--metrics", type=Path)
    ap.add_argument("--plot", type=Path, help="TSV of the training curve for DVC plots")
    ap.add_argument("--live", type=Path, help="live log folder (DVCLive: the curve while it trains, tokens/s, "
                                              "MFU; untracked, see stages.common.live)")
    ap.add_argument("--sources", type=Path, nargs="*", default=[],
                    help="ingest manifests (data/ingested/<corpus>/manifest.json) of the corpora behind the model: "
                         "their sources and licences go into its model card (README.md)")
    ap.add_argument("--variant", help="a compare.objectives entry's name: train with its objective and settings "
                                       "(the objective comparison; see params.yaml's compare section)")
    ap.add_argument("--match-flops", type=Path, help="a saved model folder: train on its run's FLOPs "
                                                     "(its tokens x FLOPs per token) instead of the token budget")
    ap.add_argument("--no-progress", action="store_true")


class _OutOfMemory(RuntimeError):
    """A GPU out-of-memory error, worded with the setting to lower."""


def _run(args: argparse.Namespace, log) -> dict | int:
    from stages.training.launch import relaunch

    code = relaunch("stages.pretrain", args.argv)  # LMPIPE_TRAIN_PROCESSES > 1: N processes under torchrun
    if code is not None:
        return code
    cfg = load_config(args.params, args.section, args.paradigm, args.variant)
    if args.match_flops is not None:
        cfg = match_flops(cfg, args.match_flops)
    try:
        outcome = run(cfg, paradigm=args.paradigm, stage=args.section, tokens_dir=args.tokens, corpus=args.corpus,
                      tokenizer_dir=args.tokenizer, init=args.init, out=lambda: args.staged.path,
                      checkpoint_dir=args.checkpoints, log=log, progress=not args.no_progress,
                      live_dir=args.live, sources=args.sources)
    except Exception as exc:  # GPU out of memory: say which setting to lower
        if type(exc).__name__ == "OutOfMemoryError":
            raise _OutOfMemory(f"out of GPU memory ({str(exc).splitlines()[0]}); lower {args.section}."
                               f"{args.paradigm}.train.micro_batch and raise grad_accum to keep the global batch"
                               ) from None
        raise
    if outcome is None:  # a process other than the first of a multi-process run: the first one publishes
        return {}
    metrics, plot = outcome
    return {args.metrics: metrics, args.plot: plot}


STAGE = Stage("stages.pretrain", "Pre-train (or DAPT) one paradigm.", _arguments, _run,
              inputs=("params", "tokens", "tokenizer", "init", "sources", "match_flops"),
              folder="output", outputs=("checkpoints", "metrics", "plot", "live"),
              errors=(ConfigError, CheckpointError, TrainingDiverged, _OutOfMemory, FileNotFoundError, ValueError))
main = STAGE.main


if __name__ == "__main__":
    sys.exit(entry(main))
