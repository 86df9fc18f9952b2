"""The pre-training stage's core (pretrain and DAPT): read the token dataset, build or continue the model with its
objective (``stages.objectives``), train, and save the model, its tokenizer, ``training.json`` and its model card."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from stages import objectives
from stages.common.atomic import write_json_atomic
from stages.common.inputs import check_folder, load_npy, read_json
from stages.common.live import LiveLog
from stages.objectives.denoisers import sentence_end_ids
from stages.provenance import stagecard
from stages.sources.base import sha256_file
from stages.tokenization.layout import load_layout
from stages.training import distributed
from stages.training.config import BaseDaptConfig
from stages.training.loop import Blocks, RunIO, train
from stages.training.models import build_model, flops_per_token, load_model, save_model


def fingerprint(*parts) -> str:
    """What makes two runs the same run (a checkpoint of another run is not resumed)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _file_sha(path: Path) -> str:
    return sha256_file(path) if path.exists() else "missing"


def plot_tsv(history: list[dict], evals: list[dict]) -> str:
    """One row per logged step (training loss, lr) with the evaluation where there was one. Timings are not
    here (they differ between runs of the same inputs): the live log has them (stages.common.live)."""
    by_step = {e["step"]: e for e in evals}
    buf = io.StringIO()
    w = csv.writer(buf, delimiter="\t", lineterminator="\n")
    w.writerow(["step", "tokens", "loss", "lr", "eval_loss"])
    w.writerows([r["step"], r["tokens"], r["loss"], f"{r['lr']:.3g}", by_step.get(r["step"], {}).get("eval_loss", "")]
                for r in history)
    return buf.getvalue()


# The files of a tokenizer inside a published model's folder (AutoTokenizer's; the rest is the model's)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.txt", "vocab.json", "merges.txt", "spiece.model", "sentencepiece.bpe.model")


def tokenizer_files(tokenizer_dir: Path) -> list[Path]:
    """The files to copy beside the model: all of a tokenizer stage's folder, a model folder's tokenizer files."""
    files = sorted(f for f in tokenizer_dir.iterdir() if f.is_file())
    if (tokenizer_dir / "config.json").is_file():  # a published checkpoint's folder (stages.base)
        files = [f for f in files if f.name in TOKENIZER_FILES]
    return files


def read_inputs(tokens_dir: Path, tokenizer_dir: Path, paradigm: str, corpus: str):
    """The token dataset's manifest, the block layout (checked against the tokenizer) and the corpus's train and
    held-out blocks."""
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
    fresh: list[str] = []
    if init is not None:
        model = load_model(check_folder(init), paradigm, fresh=fresh)
        if model.config.vocab_size < layout.vocab_size:  # a published model's rows may exceed its tokenizer's (T5)
            raise ValueError(f"{init}: vocabulary {model.config.vocab_size} != the tokenizer's {layout.vocab_size} "
                             "(the model has fewer rows than the tokenizer has ids)")
        positions = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", None)
        if positions and layout.seq_len > positions:
            raise ValueError(f"{init}: tokens.*.seq_len {layout.seq_len} is longer than the model's {positions} "
                             "positions")
    else:
        model = build_model(layout, cfg.model, seed=cfg.train.seed)
    objective = objectives.get(paradigm, cfg.train.objective)
    settings = objective.settings(cfg.train)
    if objective.sentence_ends:  # it cuts after the tokenizer's full stops
        settings["sentence_ends"] = sentence_end_ids((tokenizer_dir / "tokenizer.json").read_text(encoding="utf-8"))
    builder = objective.make(layout, **settings)
    if objective.setup is not None:
        return model, builder, objective.setup(model, layout, builder, cfg.train, init), fresh
    return model, builder, flops_per_token(model, layout, predicted_fraction=builder.select,
                                           targets_len=builder.targets_len), fresh


def with_replay(train_blocks, tokens_dir: Path, manifest: dict, cfg, log=None):
    """``train_blocks`` with blocks of ``cfg.replay_corpus`` mixed in to make ``cfg.replay_fraction`` of the whole,
    drawn without replacement (with, when the corpus is smaller) by ``cfg.train.seed``; rows of both kept in order
    (the sampler shuffles)."""
    import numpy as np

    if cfg.replay_corpus not in manifest["corpora"]:
        raise ValueError(f"replay_corpus: {cfg.replay_corpus!r} is not a corpus of {tokens_dir} "
                         f"(has: {', '.join(manifest['corpora'])})")
    other = load_npy(tokens_dir / cfg.replay_corpus / "train.npy")
    n = round(len(train_blocks) * cfg.replay_fraction / (1 - cfg.replay_fraction))
    rng = np.random.default_rng(cfg.train.seed)
    rows = np.sort(rng.choice(len(other), size=n, replace=n > len(other)))
    if log is not None:
        log(f"[replay] {n:,} blocks of {cfg.replay_corpus} beside {len(train_blocks):,} ({cfg.replay_fraction:.0%})")
    return np.concatenate([np.asarray(train_blocks), np.asarray(other)[rows]])


def head_warmup(model, objective, blocks: Blocks, cfg, fresh: list[str], *, fpt: float, dist, log):
    """Train the ``fresh`` weights alone (the rest fixed) on ``blocks.train`` for ``cfg.head_warmup_tokens`` at a
    constant ``cfg.head_warmup_lr`` (no checkpoints: a resumed run repeats it, the same steps); returns the tokens."""
    from dataclasses import replace

    names = set(fresh)
    trainable = [p for n, p in model.named_parameters() if n in names]
    if not trainable:
        return 0
    for n, p in model.named_parameters():
        p.requires_grad_(n in names)
    warm = replace(cfg.train, budget_tokens=cfg.head_warmup_tokens, budget_flops=0.0, lr=cfg.head_warmup_lr,
                   warmup_fraction=0.0, min_lr_ratio=1.0, eval_every=10**9, checkpoint_every=10**9)
    log(f"[head warm-up] {len(trainable)} fresh tensors ({sum(p.numel() for p in trainable):,} weights) alone")
    try:
        result = train(model, objective, Blocks(blocks.train, None, blocks.seq_len), warm, flops_per_token=fpt,
                       dist=dist, io=RunIO(log=log, progress=False))
    finally:
        for p in model.parameters():
            p.requires_grad_(True)
    return result.tokens


@dataclass(frozen=True)
class PretrainJob:
    """What a pre-training or DAPT run reads: its paradigm and stage (``pretrain``, ``dapt``), the token blocks'
    folder and the corpus in it, the tokenizer, the model it starts from (None: a fresh one) and the ingest
    manifests whose licences go into the model card."""

    paradigm: str
    stage: str
    tokens_dir: Path
    corpus: str
    tokenizer_dir: Path
    init: Path | None = None
    sources: tuple[Path, ...] = ()


def run(cfg, job: PretrainJob, *, out: Callable[[], Path], checkpoint_dir: Path | None, log=print,
        progress: bool = True, live_dir: Path | None = None) -> tuple[dict, str] | None:
    """Train and save into ``out()`` (asked for by the saving process only); the metrics and the curve's TSV on
    the main process, None on the others."""
    paradigm, stage, tokens_dir, corpus, tokenizer_dir, init = (job.paradigm, job.stage, job.tokens_dir, job.corpus,
                                                                job.tokenizer_dir, job.init)
    manifest, layout, train_blocks, eval_blocks = read_inputs(tokens_dir, tokenizer_dir, paradigm, corpus)
    corpora = stagecard.corpora(list(job.sources))
    dist = distributed.init()
    if isinstance(cfg, BaseDaptConfig) and cfg.replay_fraction:
        train_blocks = with_replay(train_blocks, tokens_dir, manifest, cfg, log=log if dist.main else None)
    model, objective, fpt, fresh = model_and_objective(cfg, layout, paradigm, init, tokenizer_dir)
    warm_tokens = 0
    if isinstance(cfg, BaseDaptConfig) and cfg.head_warmup_tokens and fresh:
        warm_tokens = head_warmup(model, objective, Blocks(train_blocks, None, layout.seq_len), cfg, fresh, fpt=fpt,
                                  dist=dist, log=log if dist.main else (lambda m: None))
    init_sha = _file_sha(init / "model.safetensors") if init else None
    run_id = fingerprint(stage, paradigm, corpus, asdict(cfg), dist.world, manifest["corpora"][corpus],
                         manifest["tokenizer"]["sha256"], init_sha)
    with LiveLog(live_dir if dist.main else None) as live:  # the loop starts it where the run starts
        result = train(model, objective, Blocks(train_blocks, eval_blocks, layout.seq_len), cfg.train,
                       flops_per_token=fpt, dist=dist,
                       io=RunIO(checkpoint_dir, run_id, log if dist.main else (lambda m: None), progress, live))
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
                   **({"fresh_weights": fresh, "head_warmup_tokens": warm_tokens} if fresh else {}),
                   "train_loss": result.history[-1]["loss"] if result.history else None,
                   **{k: v for k, v in final_eval.items() if k.startswith("eval_")}}
        tmp = out()  # the model, its tokenizer, ``training.json`` and the model card
        save_model(model, tmp)
        for f in tokenizer_files(tokenizer_dir):
            shutil.copy2(f, tmp / ("tokenizer_provenance.json" if f.name == "provenance.json" else f.name))
        write_json_atomic(tmp / "training.json", {
            "stage": stage, "paradigm": paradigm, "corpus": corpus, "fingerprint": run_id,
            "config": asdict(cfg), "layout": layout.to_json(),
            "inputs": {"tokens": {"path": str(tokens_dir), "manifest_sha256": _file_sha(tokens_dir / "manifest.json"),
                                  "corpus": manifest["corpora"][corpus]},
                       "tokenizer": {"path": str(tokenizer_dir), "sha256": manifest["tokenizer"]["sha256"]},
                       "init": None if init is None else {"path": str(init), "sha256": init_sha}},
            **({"kernels": result.kernels} if result.kernels else {}),  # absent: the stock kernels (CPU)
            "metrics": metrics, "history": result.history, "evals": result.evals})
        stagecard.write(tmp, stagecard.pretrain_facts(kind=stage, paradigm=paradigm, corpus=corpus,
                                                      config=asdict(cfg), metrics=metrics, sources=corpora, init=init))
        log(f"[{stage}] {paradigm} on {corpus}: {result.steps} steps, {result.tokens:,} tokens, train loss "
            f"{metrics['train_loss']}, eval " + ", ".join(f"{k} {v}" for k, v in final_eval.items() if k.startswith("eval"))
            + f"; {result.tokens_per_second:,.0f} tokens/s, {result.flops_per_second / 1e12:.3g} model TFLOP/s"
            + (f", MFU {result.mfu:.1%}" if result.mfu else ""))
        outcome = metrics, plot_tsv(result.history, result.evals)
        if checkpoint_dir is not None and checkpoint_dir.exists():
            shutil.rmtree(checkpoint_dir)  # the run finished: its model is the output, nothing to resume
    distributed.shutdown(dist)
    return outcome
