"""The adaptation methods side by side (params ``adapt.runs``): per paradigm with such runs, full fine-tuning of its
best pre-trained initialisation, each other method, GPT's in-context learning and the practitioner baselines, in
test macro-F1 at every label count of the curve, with the weights each trains and the bytes each stores; and a
verdict per label count: the method to use, judged against twice the pooled seed std."""

from __future__ import annotations

from pathlib import Path

from stages.evaluation.summary import judge, neural_points, point_at, run_row
from stages.finetuning.adapt import read_adaptation

ICL_SHOTS_NOTE = "need only their k demonstrations: the same score at every label count"


def folder_stats(folder: Path) -> dict:
    """Bytes a fine-tuned folder stores (every file) and the parameters its weight files hold."""
    from safetensors import safe_open

    files = [f for f in sorted(folder.rglob("*")) if f.is_file()]
    params = 0
    for f in files:
        if f.suffix == ".safetensors":
            with safe_open(str(f), framework="np") as st:
                for key in st.keys():
                    n = 1
                    for d in st.get_slice(key).get_shape():
                        n *= d
                    params += n
    return {"stored_bytes": sum(f.stat().st_size for f in files), "stored_parameters": params}


def adapted_row(record: dict, folder: Path) -> dict:
    """The table row of an adaptation run (:func:`run_row` with its method, init and sizes)."""
    adaptation = read_adaptation(folder) or {}
    stats = folder_stats(folder)
    method = record["config"].get("method", "full")
    return run_row(record) | {"paradigm": record["metrics"]["paradigm"], "init": record["init"], "method": method,
                              "trainable_parameters": adaptation.get("trainable_parameters",
                                                                     stats["stored_parameters"]),
                              "stored_bytes": stats["stored_bytes"]}


def _cell(pt: dict | None) -> dict | None:
    if pt is None:
        return None
    f = pt["macro_f1"]
    return {"mean": f["mean"], "std": f["std"], "runs": f.get("runs", 1)}


def tables(result: dict, finetuned: Path) -> dict:
    """Per paradigm with adaptation runs: its label counts and rows (full fine-tuning of the best pre-trained init,
    each method, in-context learning for GPT, the baselines), and the verdict per label count."""
    adapted, gains = result["adapted"], result["gains"]
    de = neural_points(result["data_efficiency"], result["finetune"] | adapted)  # all labels: each run's own seeds
    out = {}
    for p in sorted({r["paradigm"] for r in adapted.values()}):
        init = gains[p]["best_init"]
        full_name = f"{p}-{init}"
        full_stats = folder_stats(finetuned / full_name)
        sizes = sorted({pt["train_examples"] for name in [full_name, *adapted] if name in de for pt in de[name]})
        rows = [{"kind": "method", "series": full_name, "method": "full", "init": init,
                 "trainable_parameters": full_stats["stored_parameters"], "stored_bytes": full_stats["stored_bytes"],
                 "points": {str(n): _cell(point_at(de.get(full_name, []), n)) for n in sizes}}]
        for name, r in adapted.items():
            if r["paradigm"] == p:
                rows.append({"kind": "method", "series": name, "method": r["method"], "init": r["init"],
                             "trainable_parameters": r["trainable_parameters"], "stored_bytes": r["stored_bytes"],
                             "points": {str(n): _cell(point_at(de.get(name, []), n)) for n in sizes}})
        if p == "gpt":
            for model, by_shots in (result.get("icl") or {}).items():
                for k, x in by_shots.items():
                    if not k.isdigit():
                        continue
                    cal = x["calibrated"]
                    cell = {"mean": cal["macro_f1"], "std": cal.get("macro_f1_std", 0.0), "runs": 1}
                    rows.append({"kind": "icl", "series": f"{model} {k}-shot", "method": "in context",
                                 "init": model.split("-", 1)[1], "trainable_parameters": 0, "stored_bytes": 0,
                                 "points": {str(n): cell for n in sizes}})
        for name, b in (result.get("baselines") or {}).items():
            rows.append({"kind": "baseline", "series": name, "method": "baseline", "init": "-",
                         "trainable_parameters": max(pt["parameters"] for pt in b["points"]), "stored_bytes": None,
                         "points": {str(n): _cell(point_at(b["points"], n)) for n in sizes}})
        out[p] = {"init": init, "sizes": sizes, "rows": rows, "verdict": verdict(rows, sizes)}
    return out


def verdict(rows: list[dict], sizes: list[int]) -> list[dict]:
    """At each label count, among the trained methods: the best mean test macro-F1, each other method's shortfall
    judged against twice the pooled seed std, and the method to use: the one training the fewest weights among
    those the seeds do not separate from the best."""
    methods = [r for r in rows if r["kind"] == "method"]
    out = []
    for n in map(str, sizes):
        have = [r for r in methods if r["points"].get(n)]
        if not have:
            continue
        best = max(have, key=lambda r: (r["points"][n]["mean"], -r["trainable_parameters"]))
        b = best["points"][n]
        judged = {}
        for r in have:
            c = r["points"][n]
            judged[r["series"]] = judge(c["mean"] - b["mean"], c["std"], b["std"], min(c["runs"], b["runs"]))
        level = [r for r in have if not judged[r["series"]]["resolved"]]
        use = min(level, key=lambda r: (r["trainable_parameters"], -r["points"][n]["mean"]))
        out.append({"train_examples": int(n), "best": best["series"], "use": use["series"], "use_method": use["method"],
                    "short": {s: j for s, j in judged.items() if j["resolved"]}, "judged": judged})
    return out


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


def _count(n: int) -> str:
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return str(n)


def sentences(p: str, table: dict) -> list[str]:
    """The verdict of one paradigm's table in words."""
    rows = {r["series"]: r for r in table["rows"]}
    out = []
    for v in table["verdict"]:
        n, use = str(v["train_examples"]), rows[v["use"]]
        c = use["points"][n]
        text = (f"{p.upper()} at {n} labels: use **{use['method']}** ({c['mean']:.3f} ± {c['std']:.3f}, "
                f"{_count(use['trainable_parameters'])} weights trained)")
        if v["use"] != v["best"]:
            j = v["judged"][v["use"]]
            text += (f"; {rows[v['best']]['method']} scores {-j['difference']:.3f} more, within twice the pooled "
                     f"seed std ({j['pooled_std']:.3f}), and trains "
                     f"{rows[v['best']]['trainable_parameters'] / max(use['trainable_parameters'], 1):.3g}x the weights")
        short = [f"{rows[s]['method']} {j['difference']:+.3f} (pooled std {j['pooled_std']:.3f})"
                 for s, j in v["short"].items()]
        if short:
            text += "; short of the best beyond twice the pooled seed std: " + ", ".join(short)
        out.append(text + ".")
    return out


def section(result: dict, figures_dir: str) -> list[str]:
    """The report's adaptation section (none without adaptation runs)."""
    tabs = result.get("adaptation") or {}
    lines = ["", "## Adaptation methods", ""]
    if not tabs:
        return lines + ["No adaptation runs in this profile (`adapt.runs` is empty)."]
    lines += ["Each paradigm's best pre-trained initialisation (chosen on validation) adapted to the task by full "
              "fine-tuning (the finetune stage's run), with the body frozen and only the pooled head trained "
              "(`frozen`), and with LoRA adapters on its projections and the head trained (`lora`): test macro-F1, "
              "mean ± std over seeds, at each label count of the data-efficiency curve and with all labels. Each "
              "method's learning rate is chosen on validation from its own grid (`adapt.runs.<name>.finetune."
              "lr_grid`). Weights trained: the parameters updated (full: all); stored: the bytes of the fine-tuned "
              "folder (frozen and LoRA folders hold the head and adapter, and need their base model beside them). "
              f"In-context rows (GPT, calibrated, no weight updates) {ICL_SHOTS_NOTE}; the baselines are the "
              "practitioner baselines below. Training time per run and peak memory are machine facts: "
              "`reports/timings.md`.", ""]
    for p, t in tabs.items():
        sizes = [str(n) for n in t["sizes"]]
        lines += [f"### {p.upper()} ({t['init']})", "",
                  "| method | series | weights trained | stored | " + " | ".join(f"{n} labels" for n in sizes) + " |",
                  "|---|---|---|---|" + "---|" * len(sizes)]
        for r in t["rows"]:
            cells = ["-" if r["points"].get(n) is None else
                     f"{r['points'][n]['mean']:.3f} ± {r['points'][n]['std']:.3f}" for n in sizes]
            lines.append(f"| {r['method']} | {r['series']} | {_count(r['trainable_parameters'])} | "
                         f"{_size(r['stored_bytes'])} | " + " | ".join(cells) + " |")
        lines += [""] + [f"- {s}" for s in sentences(p, t)] + [""]
    return lines + [f"The methods are also drawn in the data-efficiency figure: ![data efficiency]"
                    f"({figures_dir}/data-efficiency.svg)"]
