"""This CPU's dense matmul throughput in bf16 and fp32 (torch's threads as set): the peak a CPU run's model
TFLOP/s is read against (benchmarks/transfer.md, "Published checkpoints"). Best of ``--repeats`` timings of
``--iters`` square products of ``--size``.

    .venv/bin/python benchmarks/cpu_matmul_peak.py --out benchmarks/results/cpu_matmul_peak.json
"""
import argparse
import json
import time
from pathlib import Path


def main() -> None:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=2048)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    out = {"size": args.size, "threads": torch.get_num_threads(), "torch": torch.__version__}
    for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        a = torch.randn(args.size, args.size).to(dtype)
        b = torch.randn(args.size, args.size).to(dtype)
        a @ b  # warm-up
        best = float("inf")
        for _ in range(args.repeats):
            start = time.perf_counter()
            for _ in range(args.iters):
                a @ b
            best = min(best, (time.perf_counter() - start) / args.iters)
        out[f"{name}_tflops"] = round(2 * args.size ** 3 / best / 1e12, 4)
        print(f"{name}: {out[f'{name}_tflops'] * 1000:.0f} GFLOP/s ({args.size}^2, {out['threads']} threads)")
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
