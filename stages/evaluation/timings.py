"""``reports/timings.md`` (untracked: wall times differ between runs of the same inputs): how long this workspace's
runs took and how fast they trained, from the live logs and the evaluate stage's clock."""

from __future__ import annotations

from pathlib import Path

from stages.common.live import read_summary
from stages.tokenization.trainers import PARADIGMS


def collect(live_root: Path, sections: dict[str, float], baseline_seconds: dict[str, float]) -> dict:
    """Pre-training and DAPT runs' summaries, fine-tuning stages' run times, the evaluate stage's sections."""
    training = {f"{stage}-{p}": read_summary(live_root / f"{stage}-{p}")
                for stage in ("pretrain", "dapt") for p in PARADIGMS}
    finetune = {}
    for folder in sorted(live_root.glob("finetune-*")):
        summaries = [read_summary(run) for run in sorted(folder.iterdir()) if run.is_dir()]
        runs = [r["seconds"] for r in summaries if r.get("seconds") is not None]
        peaks = [r["peak_rss_mib"] for r in summaries if r.get("peak_rss_mib") is not None]
        added = [r["peak_rss_mib"] - r["loaded_rss_mib"] for r in summaries
                 if r.get("peak_rss_mib") is not None and r.get("loaded_rss_mib") is not None]
        if runs:
            finetune[folder.name] = {"runs": len(runs), "seconds": round(sum(runs), 1),
                                     "peak_rss_mib": max(peaks) if peaks else None,
                                     "training_mib": round(max(added), 1) if added else None}
    return {"training": {k: v for k, v in training.items() if v}, "finetune": finetune,
            "evaluate": {k: round(v, 1) for k, v in sections.items()}, "baseline_seconds": baseline_seconds}


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} MiB"


def markdown(t: dict) -> str:
    lines = ["# Timings", "",
             "Written by the `evaluate` stage from the live logs under `reports/live/` (DVCLive; `dvc plots show` "
             "draws their curves) and its own clock. Machine facts, not results: untracked, rewritten by every "
             "run. Training time counts the optimizer steps only (evaluation and checkpoint pauses excluded); a "
             "resumed run counts the part this process trained. MFU is shown where the device's bf16 peak is "
             "known (GPUs).", "",
             "## Pre-training and DAPT", "",
             "| run | training time | tokens/s | model FLOP/s | MFU |", "|---|---|---|---|---|"]
    for name, s in t["training"].items():
        mfu = s.get("mfu")
        lines.append(f"| {name} | {_duration(s.get('train_seconds'))} | {s.get('tokens_per_second', 0):,.0f} | "
                     f"{s.get('flops_per_second', 0) / 1e12:.3g} T | {'-' if mfu is None else f'{mfu:.1%}'} |")
    lines += ["", "## Fine-tuning", "",
              "Peak memory: the largest resident set of a run's process (model loading to test scores, the data "
              "and libraries included), and what training added to it: that peak minus the resident set once the "
              "model and data were loaded (gradients, optimizer state, activations); the largest over the runs.", "",
              "| stage | runs | time (sum over runs) | time per run (mean) | peak memory | added by training |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {name} | {f['runs']} | {_duration(f['seconds'])} | {_duration(f['seconds'] / f['runs'])} | "
              f"{_mib(f.get('peak_rss_mib'))} | {_mib(f.get('training_mib'))} |"
              for name, f in t["finetune"].items()]
    lines += ["", "## Evaluation", "", "| part | time |", "|---|---|"]
    lines += [f"| {name} | {_duration(s)} |" for name, s in t["evaluate"].items()]
    for name, seconds in (t.get("baseline_seconds") or {}).items():
        lines.append(f"| baseline {name}: its whole search on the fine-tuning sample (one seed) | "
                     f"{_duration(seconds)} |")
    return "\n".join(lines) + "\n"
