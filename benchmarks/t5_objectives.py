"""Which encoder-decoder objective gets a small T5 off the unigram plateau on 2 CPU cores, and transfers.

Pre-trains the pipeline's T5 (``stages.training.models.build_model``, the pipeline's training loop) from
scratch on the domain blocks of ``data/tokens/t5`` with one objective, then fine-tunes it and a random-init
twin with the pipeline's fine-tuning recipe (``finetune`` in params.yaml) on a sample of the task's
training split. Needs a workspace where ``dvc repro tokens@t5`` ran.

    python benchmarks/t5_objectives.py --objective span_corruption --tokens 2000000 --out /tmp/t5obj
    python benchmarks/t5_objectives.py --objective ul2 --tokens 2000000 --out /tmp/t5obj
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--objective", default="span")
    ap.add_argument("--tokens", type=int, default=2_000_000)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--rms", action="store_true", help="TrainConfig.scale_lr_by_rms")
    ap.add_argument("--density", type=float, default=0.15, help="span corruption's noise density")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--sizes", default="300")
    ap.add_argument("--ftlr", default="0.003,0.001")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--random", action="store_true", help="also fine-tune a random-init twin")
    ap.add_argument("--local-bias", type=float, default=0.0, help="ModelConfig.local_bias")
    ap.add_argument("--cross-match", type=float, default=0.0, help="ModelConfig.cross_match")
    ap.add_argument("--seed", type=int, default=0, help="initialisation, data order and masks of the pre-training")
    ap.add_argument("--ft-rms", action="store_true", help="FinetuneConfig.scale_lr_by_rms")
    ap.add_argument("--skip-pretrain", action="store_true", help="fine-tune the model saved by an earlier run")
    ap.add_argument("--init", default="", help="continue this saved T5 instead of a fresh one")
    ap.add_argument("--out", default="/tmp/t5obj")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from stages.config import build, deep_merge, load_params, section
    from stages.finetuning.core import Body, FinetuneConfig, finetune, read_task
    from stages.objectives import for_paradigm
    from stages.tokenization.layout import load_layout
    from stages.training import distributed
    from stages.training.config import ModelConfig, TrainConfig
    from stages.training.heldout import evaluate
    from stages.training.loop import Blocks, RunIO, train
    from stages.training.models import build_model, load_model

    tok_dir = ROOT / "data/tokenizers/t5"
    layout, _ = load_layout(tok_dir, "t5", seq_len=128)
    blocks = np.load(ROOT / "data/tokens/t5/domain/train.npy", mmap_mode="r")
    held = np.load(ROOT / "data/tokens/t5/domain/heldout.npy", mmap_mode="r")
    span_layout = layout
    if args.density != layout.noise_density:  # the packed stream cut into the raw blocks this density needs
        layout, _ = load_layout(tok_dir, "t5", seq_len=128, noise_density=args.density)

        def recut(b):
            flat = np.asarray(b).reshape(-1)
            return flat[: len(flat) // layout.block_len * layout.block_len].reshape(-1, layout.block_len)

        blocks, held = recut(blocks), recut(held)
    out = Path(args.out) / (f"{args.objective}-{args.tokens // 1000}k{'-cont' if args.init else ''}"
                            f"{f'-d{args.density:g}' if args.density != 0.15 else ''}{f'-local{args.local_bias:g}' if args.local_bias else ''}{'-rms' if args.rms else ''}"
                            f"{f'-xm{args.cross_match:g}' if args.cross_match else ''}"
                            f"{f'-s{args.seed}' if args.seed else ''}-lr{args.lr:g}")
    out.mkdir(parents=True, exist_ok=True)
    span_eval = own_eval = None
    if not args.skip_pretrain:
        model = load_model(args.init, "t5") if args.init else build_model(
            layout, ModelConfig(local_bias=args.local_bias, cross_match=args.cross_match), seed=args.seed)
        objective = for_paradigm(layout, objective=args.objective)
        span = for_paradigm(span_layout)
        cfg = TrainConfig(budget_tokens=args.tokens, micro_batch=16, lr=args.lr, warmup_fraction=0.05,
                          min_lr_ratio=0.05, eval_every=10**9, checkpoint_every=10**9, log_every=50, eval_blocks=128,
                          threads=args.threads, scale_lr_by_rms=args.rms, seed=args.seed)
        t0 = time.time()
        res = train(model, objective, Blocks(blocks, held, 128), cfg, flops_per_token=1.0, dist=distributed.init(),
                    io=RunIO(fingerprint="t5-objectives", log=lambda m: None, progress=False))
        secs = time.time() - t0
        span_eval = evaluate(model, span, np.load(ROOT / "data/tokens/t5/domain/heldout.npy", mmap_mode="r"), cfg,
                             "cpu", False)
        own_eval = evaluate(model, objective, held, cfg, "cpu", False)
        curve = [(h["tokens"], h["loss"]) for h in res.history[:: max(1, len(res.history) // 8)]]
        print(json.dumps({"curve": curve}), flush=True)
        print(json.dumps({"objective": args.objective, "density": args.density, "local_bias": args.local_bias,
                          "cross_match": args.cross_match, "seed": args.seed, "rms": args.rms, "lr": args.lr, "tokens": res.tokens, "seconds": round(secs),
                          "span_eval": span_eval, "own_eval": own_eval}), flush=True)
        model.save_pretrained(str(out / "model"))
        for f in tok_dir.iterdir():
            if f.is_file():
                shutil.copy2(f, out / "model" / f.name)

    params = load_params(ROOT / "params.yaml")
    ft_raw = deep_merge(section(params, "finetune.defaults"), section(params, "finetune.t5") or {})
    ft = build(FinetuneConfig, ft_raw, "finetune")
    df = read_task(ROOT / "data/ingested/task/documents.parquet")
    results = []
    inits = ["pretrained"] + (["random"] if args.random else [])
    for n in [int(s) for s in args.sizes.split(",") if s]:  # --sizes "": pre-train only
        for init in inits:
            for lr in [float(x) for x in args.ftlr.split(",")]:
                for seed in [int(s) for s in args.seeds.split(",")]:
                    c = dataclasses.replace(ft, lr=lr, seed=seed, min_steps=60, threads=args.threads,
                                            scale_lr_by_rms=args.ft_rms)
                    r = finetune(c, Body("t5", init, out / "model"), df=df, train_examples=n or None,
                                 log=lambda m: None)["metrics"]
                    row = {"objective": args.objective, "ft_rms": args.ft_rms, "init": init, "n": n, "lr": lr, "seed": seed,
                           "val": round(r["best_val_macro_f1"], 4), "test": round(r["test_macro_f1"], 4)}
                    results.append(row)
                    print(json.dumps(row), flush=True)
    (out / f"result{'-ftrms' if args.ft_rms else ''}.json").write_text(json.dumps({"args": vars(args), "span_eval": span_eval, "own_eval": own_eval,
                                                 "history": None if args.skip_pretrain else res.history, "results": results}, indent=1))


if __name__ == "__main__":
    main()
