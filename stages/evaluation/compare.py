"""The compare stage's core: the objective comparison's rows, their label-count runs, verdict and report."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stages import objectives
from stages.common.inputs import check_folder, read_json
from stages.config import ConfigError
from stages.evaluation.config import CompareConfig
from stages.evaluation.curve import small_runs, summarised
from stages.evaluation.report import f3, pm, si
from stages.evaluation.summary import judge, paradigm_row, read_record, read_training, run_row, table_point


@dataclass(frozen=True)
class Row:
    """One initialisation of the comparison: its label, paradigm, objective, the folders it comes from."""

    name: str
    paradigm: str
    objective: str
    finetuned: Path  # the finetune stage's folder (finetune.json)
    source: Path  # the model the label-count runs start from (random init: the general model's config)
    pretrain: Path | None = None  # the general and DAPT runs behind it (None for random init)
    dapt: Path | None = None
    init: str = "dapt"
    own: bool = False  # the paradigm's own objective (the default run's DAPT model)


def rows_for(cfg: CompareConfig, *, compare: Path, finetuned: Path, pretrained: Path, dapt: Path) -> list[Row]:
    """Per paradigm of the entries: its own objective (the default run's DAPT model), each entry, random init."""
    out = []
    entries = cfg.entries()
    for p in dict.fromkeys(e["paradigm"] for e in entries):
        own = (read_json(check_folder(dapt / p) / "training.json").get("config", {}).get("train", {})
               .get("objective") or objectives.OWN[p])
        out.append(Row(f"{p}-{own}", p, own, finetuned / f"{p}-dapt", dapt / p, pretrained / p, dapt / p, own=True))
        for e in (e for e in entries if e["paradigm"] == p):
            name = e["name"]
            if name in (f"{p}-{own}", f"{p}-random"):
                raise ConfigError(f"compare.objectives.{name}: the name of a row of the default run")
            out.append(Row(name, p, e["objective"], compare / "finetune" / name, compare / "dapt" / name,
                           compare / "pretrain" / name, compare / "dapt" / name))
        out.append(Row(f"{p}-random", p, "none", finetuned / f"{p}-random", pretrained / p, init="random"))
    return out


def compare_all(cfg: CompareConfig, *, df, compare: Path, finetuned: Path, pretrained: Path, dapt: Path,
                log=print) -> dict:
    rows = rows_for(cfg, compare=compare, finetuned=finetuned, pretrained=pretrained, dapt=dapt)
    records = {row.name: read_record(row.finetuned, f"finetune@{row.paradigm}-{row.init}"
                                     if row.finetuned.parent == finetuned else f"compare-finetune@{row.name}")
               for row in rows}
    sizes = ", ".join(map(str, sorted(set(cfg.sizes))))
    done = small_runs(cfg, {row.name: (row.paradigm, row.init, records[row.name], row.source) for row in rows}, df, log,
                      f"[compare] {{jobs}} fine-tuning runs at {sizes} labels, {{workers}} at a time")
    out = {}
    for row in rows:
        full = run_row(records[row.name])
        pre = read_training(row.pretrain) if row.pretrain else None
        ada = read_training(row.dapt) if row.dapt else None
        cost = paradigm_row(pre, ada, {"best_init": row.init, **full}) if pre or ada else {}
        label_points = {str(n): summarised(n, rs) for n, rs in done.get(row.name, {}).items()}
        label_points[str(full["train_examples"])] = table_point(full)
        out[row.name] = {"paradigm": row.paradigm, "objective": row.objective, "init": row.init, "own": row.own,
                         "lr": full["lr"], "points": dict(sorted(label_points.items(), key=lambda kv: int(kv[0])))}
        out[row.name] |= {k: cost.get(k) for k in ("tokens", "flops_per_token", "flops", "pretrain_eval_loss",
                                                   "dapt_eval_loss")}
    return {"rows": out, "verdict": verdict(out)}


def verdict(rows: dict) -> list[dict]:
    """Per paradigm and label count: the objective best on mean *validation* macro-F1, its test score judged against
    the paradigm's own objective and against random init."""
    out = []
    for p in dict.fromkeys(r["paradigm"] for r in rows.values()):
        mine = {n: r for n, r in rows.items() if r["paradigm"] == p}
        own = next(n for n, r in mine.items() if r["own"])
        random = next((n for n, r in mine.items() if r["init"] == "random"), None)
        trained = [n for n, r in mine.items() if r["init"] != "random"]
        for n in sorted({int(k) for r in mine.values() for k in r["points"]}):
            have = [t for t in trained if str(n) in mine[t]["points"]]
            if not have:
                continue
            best = max(have, key=lambda t: (mine[t]["points"][str(n)]["val_macro_f1"]["mean"], t == own, t))
            b = mine[best]["points"][str(n)]["macro_f1"]
            item = {"paradigm": p, "train_examples": n, "best": best, "test_macro_f1": b["mean"],
                    "test_macro_f1_std": b["std"]}
            for key, other in (("vs_own", own), ("vs_random", random)):
                pt = mine[other]["points"].get(str(n)) if other else None
                if other is None or other == best or pt is None:
                    continue
                o = pt["macro_f1"]
                item[key] = {"other": other, **judge(b["mean"] - o["mean"], b["std"], o["std"],
                                                     min(b.get("runs", 1), o.get("runs", 1)))}
            out.append(item)
    return out


def markdown(result: dict) -> str:
    rows = result["rows"]
    sizes = sorted({int(k) for r in rows.values() for k in r["points"]})
    lines = ["# Pre-training objectives at equal FLOPs", "",
             "Written by `python -m stages.compare` (the `compare-report@objectives` stage) from this workspace's "
             "models. Each objective of `compare.objectives` pre-trains the paradigm's model on the FLOPs of the "
             "paradigm's own general and DAPT runs (tokens x FLOPs per token; `stages.training.models`), and its "
             "domain-adapted model is fine-tuned with the same recipe, head and seeds as the default run's. "
             "Test macro-F1, mean ± sample std over the seeds (validation macro-F1 in brackets); the largest "
             "label count is the finetune stage's sample, the others are fine-tuned again here. Held-out losses "
             "are each objective's own and are not comparable across objectives.", ""]
    for p in dict.fromkeys(r["paradigm"] for r in rows.values()):
        lines += [f"## {p.upper()}", "",
                  "| model | objective | pre-training tokens | FLOPs / token | FLOPs | held-out loss (general / DAPT) | "
                  + " | ".join(f"{n} labels" for n in sizes) + " |",
                  "|---|---|---|---|---|---|" + "---|" * len(sizes)]
        for name, r in rows.items():
            if r["paradigm"] != p:
                continue
            cells = ["-" if (pt := r["points"].get(str(n))) is None else
                     f"{pm(pt['macro_f1'])} ({pt['val_macro_f1']['mean']:.3f})" for n in sizes]
            label = r["objective"] + (" (the paradigm's own)" if r["own"] else "")
            lines.append(f"| {name} | {label if r['init'] != 'random' else 'random init'} | "
                         f"{si(r['tokens'], 'TGMk')} | {si(r['flops_per_token'], 'TGMk')} | {si(r['flops'], 'TGMk')} | "
                         f"{f3(r['pretrain_eval_loss'])} / {f3(r['dapt_eval_loss'])} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["## Verdict", "",
              "Per paradigm and label count, the objective that a user would choose (best mean validation "
              "macro-F1), its test macro-F1, and its difference to the paradigm's own objective and to random "
              "init; a difference is resolved when it exceeds twice the pooled seed std.", ""]
    for v in result["verdict"]:
        text = f"- {v['paradigm'].upper()}, {v['train_examples']} labels: **{v['best']}** ({pm(v, 'test_macro_f1')})"
        parts = []
        for key, what in (("vs_own", "the paradigm's own objective"), ("vs_random", "random init")):
            d = v.get(key)
            if d:
                judged = ("one seed: no spread to judge it by" if d.get("seeds", 2) < 2 else
                          f"pooled seed std {d['pooled_std']:.3f}, "
                          + ("resolved" if d["resolved"] else "within 2x: not resolved"))
                parts.append(f"{d['difference']:+.3f} against {what} ({d['other']}; {judged})")
            elif key == "vs_own":
                parts.append("it is the paradigm's own objective")
        lines.append(text + ": " + "; ".join(parts) + ".")
    return "\n".join(lines) + "\n"


def metrics_json(result: dict) -> dict:
    return {"rows": {n: {k: r[k] for k in ("paradigm", "objective", "tokens", "flops", "dapt_eval_loss")}
                     | {"test_macro_f1": {k: pt["macro_f1"]["mean"] for k, pt in r["points"].items()},
                        "test_macro_f1_std": {k: pt["macro_f1"]["std"] for k, pt in r["points"].items()}}
                     for n, r in result["rows"].items()},
            "verdict": result["verdict"]}
