"""CPU training throughput: our loop (``stages.training.loop.train``) vs the Hugging Face ``Trainer``.

    python benchmarks/train_throughput.py [--steps 60] [--repeats 3] [--paradigm gpt ...] \
        [--out benchmarks/results/train_throughput_cpu.json]

Per paradigm, in one process: the same fresh model (``build_model(..., seed=0)``, ModelConfig() defaults),
the same blocks (``data/tokens/<p>/general/train.npy``), the same objective (``for_paradigm``, applied
block by block with a generator per block, as ``make_batch`` does), micro-batch 16, fp32, AdamW
(lr 1e-3, weight decay 0.01, betas 0.9/0.98), 5% warmup then cosine to 0.1 x lr, clipping at 1.0, loss
read every 10 steps, no evaluation, no checkpoints, no progress bar. The Trainer gets a torch Dataset whose
item i is the objective applied to block i, and ``default_data_collator`` stacks them. Runs alternate (ours,
HF, ours, HF, ...) after one short warm-up run of each; per run:
- ``tokens_per_s``: steps x 16 x 128 / time of the whole call (ours: ``train``'s own ``tokens_per_second``,
  which spans all steps; HF: ``train_runtime`` from ``trainer.train()``'s metrics);
- ``wall_tokens_per_s``: the same over our own clock around ``train(...)`` / ``trainer.train()``;
- ``steady_tokens_per_s``: steps after the first ``--warm`` only (ours: from its 10-step log windows; HF:
  a callback's clock at the end of step ``warm`` and of the last step).
Ratios are ours / HF of the medians.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MB, SEQ, LR = 16, 128, 1e-3


def setup(paradigm: str):
    import numpy as np

    from stages.objectives import for_paradigm
    from stages.tokenization.layout import load_layout

    layout, _ = load_layout(ROOT / "data/tokenizers" / paradigm, paradigm, seq_len=SEQ)
    blocks = np.load(ROOT / "data/tokens" / paradigm / "general/train.npy", mmap_mode="r")
    assert blocks.shape[1] == layout.block_len, (blocks.shape, layout.block_len)
    return layout, np.ascontiguousarray(blocks), for_paradigm(layout)


def fresh_model(layout):
    from stages.training.config import ModelConfig
    from stages.training.models import build_model

    return build_model(layout, ModelConfig(), seed=0)


def run_ours(layout, blocks, objective, steps: int, warm: int) -> dict:
    from rowlog import RowLog  # benchmarks/rowlog.py
    from stages.training.config import TrainConfig
    from stages.training.distributed import Dist
    from stages.training.loop import Blocks, RunIO, train
    from stages.training.models import flops_per_token

    model = fresh_model(layout)
    cfg = TrainConfig(budget_tokens=steps * MB * SEQ, micro_batch=MB, grad_accum=1, lr=LR, precision="fp32",
                      eval_every=10**9, checkpoint_every=10**9, log_every=10, seed=0)
    live = RowLog()
    t0 = time.perf_counter()
    res = train(model, objective, Blocks(blocks, None, SEQ), cfg,
                flops_per_token=flops_per_token(model, layout, predicted_fraction=getattr(objective, "select", 1.0)),
                dist=Dist(), io=RunIO(fingerprint="bench", log=lambda m: None, progress=False, live=live))
    wall = time.perf_counter() - t0
    assert res.steps == steps
    rows = live.train_rows
    prev = [0] + [h["step"] for h in rows]  # log windows after the warm-up steps: tokens, seconds
    late = [((h["step"] - s) * MB * SEQ, h["train/tokens_per_second"]) for s, h in zip(prev, rows) if s >= warm]
    steady = sum(t for t, _ in late) / sum(t / v for t, v in late) if late else None
    return {"tokens_per_s": res.tokens_per_second, "wall_tokens_per_s": steps * MB * SEQ / wall,
            "steady_tokens_per_s": steady, "wall_s": wall, "final_loss": res.history[-1]["loss"]}


def run_hf(layout, blocks, objective, steps: int, warm: int) -> dict:
    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments, default_data_collator

    from stages.training.data import TRAIN_KEY, generators

    class Blocks(torch.utils.data.Dataset):
        def __len__(self):
            return len(blocks)

        def __getitem__(self, i):  # the objective on one block, its own generator, as make_batch does
            g = generators(0, TRAIN_KEY, [0], [i])[0]
            return {k: v[0] for k, v in objective(blocks[i: i + 1], g).items()}

    class Clock(TrainerCallback):
        def __init__(self):
            self.marks = {}

        def on_step_end(self, args, state, control, **kw):
            if state.global_step in (warm, steps):
                self.marks[state.global_step] = time.perf_counter()

    model = fresh_model(layout)
    clock = Clock()
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out, per_device_train_batch_size=MB, gradient_accumulation_steps=1, max_steps=steps,
            learning_rate=LR, weight_decay=0.01, adam_beta1=0.9, adam_beta2=0.98, warmup_steps=0.05,
            lr_scheduler_type="cosine_with_min_lr", lr_scheduler_kwargs={"min_lr_rate": 0.1}, max_grad_norm=1.0,
            logging_steps=10, save_strategy="no", eval_strategy="no", report_to=[], dataloader_num_workers=0,
            use_cpu=True, disable_tqdm=True, seed=0)
        trainer = Trainer(model=model, args=args, train_dataset=Blocks(), data_collator=default_data_collator,
                          callbacks=[clock])
        t0 = time.perf_counter()
        out_ = trainer.train()
        wall = time.perf_counter() - t0
    assert out_.global_step == steps
    m = clock.marks
    steady = (steps - warm) * MB * SEQ / (m[steps] - m[warm]) if warm in m and steps > warm else None
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return {"tokens_per_s": steps * MB * SEQ / out_.metrics["train_runtime"],
            "wall_tokens_per_s": steps * MB * SEQ / wall, "steady_tokens_per_s": steady, "wall_s": wall,
            "train_runtime": out_.metrics["train_runtime"], "final_loss": losses[-1] if losses else None,
            "optim": args.optim}


def cpu_seconds() -> tuple[float, float]:
    """(busy CPU seconds of the whole machine, of this process) so far, from /proc."""
    hz = os.sysconf("SC_CLK_TCK")
    f = open("/proc/stat").readline().split()[1:]
    me = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
    return (sum(map(int, f[:3] + f[5:8])) / hz, (int(me[11]) + int(me[12])) / hz)


def timed(fn, *args) -> dict:
    """fn's result plus ``other_cores_busy``: other processes' mean busy cores during the run (contention)."""
    (m0, s0), t0 = cpu_seconds(), time.perf_counter()
    out = fn(*args)
    (m1, s1), dt = cpu_seconds(), time.perf_counter() - t0
    return {**out, "other_cores_busy": round(((m1 - m0) - (s1 - s0)) / dt, 2)}


def med(runs: list[dict], key: str):
    vals = [r[key] for r in runs if r.get(key) is not None]
    return round(statistics.median(vals), 1) if vals else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warm", type=int, default=10, help="steps left out of steady_tokens_per_s")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--paradigm", action="append", choices=("gpt", "bert", "t5"))
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    import torch
    import transformers

    paradigms = a.paradigm or ["gpt", "bert", "t5"]
    report = {"command": "python benchmarks/train_throughput.py " + " ".join(sys.argv[1:]),
              "machine": {"cpu_count": os.cpu_count(), "cpus_usable": len(os.sched_getaffinity(0)),
                          "cpu": platform.machine(), "python": platform.python_version(),
                          "torch": torch.__version__, "transformers": transformers.__version__,
                          "accelerate": metadata.version("accelerate"), "torch_threads": torch.get_num_threads(),
                          "loadavg_start": os.getloadavg(), "date": datetime.date.today().isoformat()},
              "setup": {"steps": a.steps, "warm_steps": a.warm, "repeats": a.repeats, "micro_batch": MB,
                        "seq_len": SEQ, "tokens_per_run": a.steps * MB * SEQ, "lr": LR, "precision": "fp32",
                        "model": "ModelConfig() defaults: layers 2, d_model 128, heads 2, d_ff 512"},
              "results": {}}
    for p in paradigms:
        layout, blocks, objective = setup(p)
        run_ours(layout, blocks, objective, 10, 0), run_hf(layout, blocks, objective, 10, 0)  # warm-up
        ours, hf = [], []
        for r in range(a.repeats):
            ours.append(timed(run_ours, layout, blocks, objective, a.steps, a.warm))
            hf.append(timed(run_hf, layout, blocks, objective, a.steps, a.warm))
            o, h = ours[-1], hf[-1]
            print(f"{p} #{r}: ours {o['tokens_per_s']:,.0f} tok/s (steady {o['steady_tokens_per_s']:,.0f}), HF "
                  f"{h['tokens_per_s']:,.0f} (steady {h['steady_tokens_per_s']:,.0f}); other cores busy "
                  f"{o['other_cores_busy']} / {h['other_cores_busy']}", flush=True)
        row = {"ours": {k: med(ours, k) for k in ("tokens_per_s", "wall_tokens_per_s", "steady_tokens_per_s")},
               "hf": {k: med(hf, k) for k in ("tokens_per_s", "wall_tokens_per_s", "steady_tokens_per_s")},
               "max_other_cores_busy": max(r["other_cores_busy"] for r in ours + hf), "runs": {"ours": ours, "hf": hf}}
        row["ratio"] = {k: round(row["ours"][k] / row["hf"][k], 3) for k in row["ours"] if row["hf"][k]}
        report["results"][p] = row
        print(p, json.dumps({k: row[k] for k in ("ours", "hf", "ratio")}), flush=True)
    report["machine"]["loadavg_end"] = os.getloadavg()
    report["machine"]["torch_threads_end"] = torch.get_num_threads()
    if a.out:
        a.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
