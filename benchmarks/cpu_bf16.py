"""bf16 autocast on a CPU: fine-tuning and pre-training steps of the pipeline's own models, fp32 against bf16.

    python benchmarks/cpu_bf16.py [--steps 20] [--repeats 3] [--out benchmarks/results/cpu_bf16.json]

`precision: auto` turns bf16 autocast on where the CPU multiplies bf16 natively (AMX or AVX512-BF16,
``stages.training.device.native_bf16``). This measures what that buys, on one torch thread (as the fine-tuning
workers run) and on all cores (as the pre-training stages run):
- fine-tuning: the classifier of each paradigm (``make_classifier`` with ``finetune``'s head options from
  ``--params``, over a fresh model of ``pretrain``'s size and architecture) on micro-batches of task-like
  texts of 100 tokens, loss + backward + fused AdamW, as ``stages.finetuning.core.finetune`` does;
- pre-training: ``build_model`` + the paradigm's objective (``pretrain``'s settings) on random blocks of
  ``micro_batch`` x 128 (T5: 141 raw tokens), through ``training_view`` as the loop trains.
The layouts (vocabulary, special ids, T5's lengths) come from the workspace's token datasets (``--tokens``).
The two precisions alternate after a warm-up; medians of ``--repeats`` runs of ``--steps`` steps each.
Synthetic token ids: the step's cost does not depend on which ids they are. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _layout(paradigm: str, tokens: Path):
    """The paradigm's block layout from the workspace's token dataset (``dvc repro tokens@<paradigm>``)."""
    from stages.evaluation.evaluate import read_layout

    return read_layout(tokens / paradigm)


def _pretrain_config(paradigm: str, params: Path):
    """``pretrain.<paradigm>`` as the stage reads it (model size and architecture, objective, micro-batch)."""
    from stages.training.config import load_config

    return load_config(params, "pretrain", paradigm)


def timed(step, steps: int) -> float:
    t = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - t) / steps


def finetune_step(paradigm: str, folder: Path, tokens: Path, params: Path):
    """A step of the classifier, as the fine-tuning stage takes it."""
    import torch

    from stages.finetuning.core import head_spec, load_config
    from stages.finetuning.heads import make_classifier
    from stages.training.models import build_model

    ft = load_config(params, paradigm)
    build_model(_layout(paradigm, tokens), _pretrain_config(paradigm, params).model, seed=0).save_pretrained(str(folder))
    clf = make_classifier(paradigm, folder, list(ft.labels), None, init="pretrained", seed=0, spec=head_spec(ft))
    opt = torch.optim.AdamW(clf.model.parameters(), lr=1e-3, fused=True)
    gen = torch.Generator().manual_seed(0)
    batch = {"input_ids": torch.randint(5, 8000, (ft.micro_batch, 100), generator=gen),
             "attention_mask": torch.ones(ft.micro_batch, 100, dtype=torch.long),
             "labels": torch.randint(0, len(ft.labels), (ft.micro_batch,), generator=gen)}

    def run(bf16: bool):
        def step():
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = clf.loss(batch)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return step
    return run


def pretrain_step(paradigm: str, tokens: Path, params: Path):
    """A pre-training step through the loop's training view (BERT's output layer at masked positions only)."""
    import numpy as np
    import torch

    from stages.objectives import get, training_view
    from stages.training.data import generators, make_batch
    from stages.training.models import build_model

    cfg = _pretrain_config(paradigm, params)
    layout = _layout(paradigm, tokens)
    model = build_model(layout, cfg.model, seed=0)
    objective = get(paradigm, cfg.train.objective).make(layout, **get(paradigm, cfg.train.objective).settings(cfg.train))
    n = cfg.train.micro_batch
    blocks = np.random.default_rng(0).integers(5, 8000, (n, layout.block_len)).astype(np.int32)
    ids = np.arange(n)
    view, prepare = training_view(model, objective)
    batch = prepare(make_batch(objective, blocks, ids, generators(0, 0, [0] * n, ids)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)

    def run(bf16: bool):
        def step():
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = view(**batch).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return step
    return run


def main() -> int:
    import torch

    from stages.training.device import native_bf16

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tokens", type=Path, default=ROOT / "data" / "tokens")
    ap.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    cores = torch.get_num_threads()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind, threads in (("finetune", 1), ("pretrain", cores)):
            torch.set_num_threads(threads)
            for paradigm in ("bert", "gpt", "t5"):
                if kind == "finetune":
                    make = finetune_step(paradigm, Path(tmp) / paradigm, args.tokens, args.params)
                else:
                    make = pretrain_step(paradigm, args.tokens, args.params)
                steps = {"fp32": make(False), "bf16": make(True)}
                for s in steps.values():
                    timed(s, 3)  # warm-up (oneDNN picks its kernels on first use)
                times: dict[str, list[float]] = {"fp32": [], "bf16": []}
                for _ in range(args.repeats):
                    for name, s in steps.items():
                        times[name].append(timed(s, args.steps))
                fp32, bf16 = statistics.median(times["fp32"]), statistics.median(times["bf16"])
                row = {"kind": kind, "paradigm": paradigm, "threads": threads, "fp32_ms": round(fp32 * 1e3, 1),
                       "bf16_ms": round(bf16 * 1e3, 1), "speedup": round(fp32 / bf16, 2)}
                results.append(row)
                print(json.dumps(row), flush=True)
    record = {"date": datetime.date.today().isoformat(), "machine": platform.processor() or platform.machine(),
              "torch": torch.__version__, "native_bf16": native_bf16("cpu"), "steps": args.steps,
              "repeats": args.repeats, "results": results}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
