"""Host time per optimizer step: choosing the step's blocks (``BlockSampler``) and building the batch
(``make_batch`` with the paradigm's objective), at the seed papers' sizes, for corpora of 2 M and 20 M blocks.

This is the work the host does per step before the model runs; on a GPU it must stay well under a step's
device time, whatever the corpus size. Steady state: the first step of an epoch (drawing its permutation)
is timed apart from the following ones. The blocks are random ids (the objectives' cost does not depend on
the text); a corpus of 20 M blocks is served by indexing 4,096 stored rows modulo their count, so only the
order, not the memory, is at that scale.

    python benchmarks/host_batch.py --out benchmarks/results/host_batch.json [--root OTHER_CHECKOUT]

``--root`` imports ``stages`` from another checkout, to time code from before a change the same way.
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

SIZES = {"gpt": (1024, 16), "bert": (512, 32), "t5": (512, 32)}  # paradigm: (seq_len, micro-batch)


class Rows:
    """``rows`` blocks backed by ``base``: block ``i`` is ``base[i % len(base)]``."""

    def __init__(self, base: np.ndarray, rows: int) -> None:
        self.base, self.rows = base, rows

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.base[np.arange(index.start, index.stop) % len(self.base)]
        return self.base[np.asarray(index) % len(self.base)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    sys.path.insert(0, str(args.root.resolve()))
    sys.path.insert(1, str(Path(__file__).resolve().parent))
    import torch  # noqa: F401  (imported before timing)

    from stages.objectives import for_paradigm
    from stages.training import data
    from stages.training.data import TRAIN_KEY, BlockSampler, generators, make_batch
    from train_gpu import layout_for  # after stages: it would put this checkout first on the path

    results = {}
    for paradigm, (seq_len, micro) in SIZES.items():
        layout = layout_for(paradigm, seq_len)
        base = np.random.default_rng(0).integers(5, layout.vocab_size - 200, size=(4096, layout.block_len))
        base = base.astype(np.uint32)
        if paradigm == "bert":
            base[:, 0], base[:, -1] = layout.cls_id, layout.sep_id
        objective = for_paradigm(layout)
        for rows in (2_000_000, 20_000_000):
            blocks = Rows(base, rows)
            sampler = BlockSampler(rows=rows, micro_batch=micro, grad_accum=1, seed=0)
            if hasattr(data, "_permutation"):
                data._permutation.cache_clear()  # each measurement draws its first epoch itself

            def step(s: int) -> None:
                for ids, epochs in sampler.micro_batches(s):
                    make_batch(objective, blocks, ids, generators(0, TRAIN_KEY, epochs, ids))

            t = time.perf_counter()
            step(0)
            first = time.perf_counter() - t
            t = time.perf_counter()
            for s in range(1, args.steps + 1):
                step(s)
            per_step = (time.perf_counter() - t) / args.steps
            t = time.perf_counter()
            for s in range(1, args.steps + 1):
                sampler.micro_batches(s)
            order = (time.perf_counter() - t) / args.steps
            key = f"{paradigm}_{rows // 1_000_000}M"
            results[key] = {"micro_batch": micro, "seq_len": seq_len, "first_step_ms": round(first * 1e3, 2),
                            "ms_per_step": round(per_step * 1e3, 3), "order_ms_per_step": round(order * 1e3, 3)}
            print(f"{key}: first step {first * 1e3:.1f} ms, then {per_step * 1e3:.2f} ms per step "
                  f"(order {order * 1e3:.3f} ms)", flush=True)
    record = {"date": date.today().isoformat(), "machine": platform.processor() or platform.machine(),
              "root": str(args.root), "steps": args.steps, "results": results}
    if args.out:
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
