"""Training throughput and MFU of the loop (``stages.training.loop.train``) at the seed papers' sizes.

GPT-2 124M (12 layers, 768 wide, 1024 tokens), BERT-base (12 x 768, 512 tokens) and T5-base (12 + 12 x 768,
d_ff 3072, 512 -> 568 raw tokens), bf16 autocast, fused AdamW, SDPA, optionally ``torch.compile``, on random
blocks (throughput does not depend on the text). MFU = tokens/s x FLOPs per token / the device's dense bf16
peak (989 TFLOP/s for H100/H200). Besides tokens/s and MFU it records the peak GPU memory and splits a step
into host time (the sampler and the objective building the batch, timed alone on the same blocks) and the
rest (launching and running the model, which the host overlaps with building the next batch only where the
device is the slower side). ``--tiny`` runs small sizes on a CPU to check the script itself.

    python benchmarks/train_gpu.py --out benchmarks/results/train_gpu_h100.json [--compile] [--steps 60]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rowlog import RowLog  # noqa: E402  (benchmarks/rowlog.py)
from stages.objectives import for_paradigm  # noqa: E402
from stages.objectives.span_corruption import input_and_target_lengths  # noqa: E402
from stages.tokenization.layout import BlockLayout  # noqa: E402
from stages.training.config import ModelConfig, TrainConfig  # noqa: E402
from stages.training.data import TRAIN_KEY, BlockSampler, generators, make_batch  # noqa: E402
from stages.training.distributed import Dist  # noqa: E402
from stages.training.loop import Blocks, RunIO, train  # noqa: E402
from stages.training.models import build_model, flops_per_token  # noqa: E402

SIZES = {  # paradigm: (model, seq_len, micro_batch) at the seed papers' base sizes
    "gpt": (ModelConfig(layers=12, d_model=768, heads=12, d_ff=3072), 1024, 16),
    "bert": (ModelConfig(layers=12, d_model=768, heads=12, d_ff=3072), 512, 32),
    "t5": (ModelConfig(layers=12, d_model=768, heads=12, d_ff=3072), 512, 32),
}
TINY = {p: (ModelConfig(layers=1, d_model=64, heads=2, d_ff=128), 64, 4) for p in SIZES}
VOCAB = {"gpt": 50304, "bert": 30528, "t5": 32128}  # the seeds' vocabularies, padded to multiples of 64


def layout_for(paradigm: str, seq_len: int) -> BlockLayout:
    v = VOCAB[paradigm]
    if paradigm == "gpt":
        return BlockLayout(paradigm="gpt", seq_len=seq_len, block_len=seq_len, vocab_size=v, eos_id=0)
    if paradigm == "bert":
        return BlockLayout(paradigm="bert", seq_len=seq_len, block_len=seq_len, vocab_size=v, pad_id=0, unk_id=1,
                           cls_id=2, sep_id=3, mask_id=4)
    raw, targets = input_and_target_lengths(seq_len)
    return BlockLayout(paradigm="t5", seq_len=seq_len, block_len=raw, vocab_size=v, pad_id=0, unk_id=2, eos_id=1,
                       sentinel_top=v - 1, sentinels=100, targets_len=targets, noise_density=0.15, mean_span=3.0)


def host_ms_per_step(objective, blocks: np.ndarray, micro: int, steps: int) -> float:
    """Milliseconds the host spends choosing and building one step's batch (what the loop does per step
    before the model runs), timed alone."""
    sampler = BlockSampler(rows=len(blocks), micro_batch=micro, grad_accum=1)
    ids, epochs = sampler.micro_batches(0)[0]
    make_batch(objective, blocks, ids, generators(0, TRAIN_KEY, epochs, ids))  # warm-up
    t = time.perf_counter()
    for step in range(steps):
        for ids, epochs in sampler.micro_batches(step):
            make_batch(objective, blocks, ids, generators(0, TRAIN_KEY, epochs, ids))
    return (time.perf_counter() - t) / steps * 1e3


def measure(paradigm: str, sizes, steps: int, compile_: bool, device: str, micro: int | None = None) -> dict:
    import torch

    model_cfg, seq_len, default_micro = sizes[paradigm]
    micro = micro or default_micro
    layout = layout_for(paradigm, seq_len)
    blocks = np.random.default_rng(0).integers(5, layout.vocab_size - 200, size=(4096, layout.block_len),
                                               dtype=np.int64).astype(np.uint32)
    if paradigm == "bert":
        blocks[:, 0], blocks[:, -1] = layout.cls_id, layout.sep_id
    model = build_model(layout, model_cfg, seed=0)
    objective = for_paradigm(layout)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    fpt = flops_per_token(model, layout, predicted_fraction=getattr(objective, "select", 1.0))
    cfg = TrainConfig(budget_tokens=steps * micro * seq_len, micro_batch=micro, lr=3e-4, compile=compile_,
                      eval_every=10**9, checkpoint_every=10**9, log_every=10, warmup_fraction=0.1)
    live = RowLog()
    res = train(model, objective, Blocks(blocks, None, seq_len), cfg, flops_per_token=fpt, dist=Dist(device=device),
                io=RunIO(fingerprint="bench", log=lambda m: None, progress=False, live=live))
    steady = live.train_rows[1:] or live.train_rows  # the first log row carries compilation and warm-up
    tps = float(np.median([r["train/tokens_per_second"] for r in steady]))
    step_ms = micro * seq_len / tps * 1e3
    host_ms = host_ms_per_step(objective, blocks, micro, min(steps, 20))
    peak_gib = torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else None
    return {"parameters": sum(p.numel() for p in model.parameters()), "seq_len": seq_len, "micro_batch": micro,
            "flops_per_token": fpt, "tokens_per_second": round(tps, 1), "step_ms": round(step_ms, 2),
            "host_ms_per_step": round(host_ms, 2), "peak_memory_gib": None if peak_gib is None else round(peak_gib, 2),
            "mfu": None if steady[-1]["train/mfu"] is None else round(float(np.median([r["train/mfu"] for r in steady])), 4),
            "final_loss": res.history[-1]["loss"], "kernels": res.kernels}  # None: stock (LMPIPE_KERNELS=stock)


def main() -> int:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--paradigm", action="append", choices=list(SIZES))
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--micro-batch", type=int, help="blocks per step instead of each size's default")
    ap.add_argument("--tiny", action="store_true", help="small sizes, CPU allowed (checks the script)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    device = "cuda:0" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not args.tiny:
        print("no GPU: use --tiny to check the script on a CPU", file=sys.stderr)
        return 1
    sizes = TINY if args.tiny else SIZES
    results = {}
    for p in args.paradigm or list(SIZES):
        results[p] = measure(p, sizes, args.steps, args.compile, device, args.micro_batch)
        r = results[p]
        print(f"{p}: {r['parameters'] / 1e6:.1f} M parameters, seq {r['seq_len']}, micro-batch {r['micro_batch']}: "
              f"{r['tokens_per_second']:,.0f} tokens/s, MFU {r['mfu']}, step {r['step_ms']} ms (host "
              f"{r['host_ms_per_step']} ms), peak memory {r['peak_memory_gib']} GiB", flush=True)
        record = {"date": date.today().isoformat(), "device": torch.cuda.get_device_name(0) if device != "cpu" else
                  platform.processor(), "torch": torch.__version__, "compile": args.compile, "steps": args.steps,
                  "results": results}
        if args.out:  # written after each paradigm, so a run cut short keeps what it measured
            args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
