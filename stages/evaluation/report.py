"""``reports/evaluation.md`` and its SVG figures (no plotting dependency), from the evaluate stage's result."""

from __future__ import annotations

import math
from html import escape

from stages.evaluation import adaptation
from stages.evaluation.baselines import module, settings_words
from stages.evaluation.summary import point_at
from stages.finetuning.core import INITS
from stages.tokenization.trainers import PARADIGMS

NAMES = {"bert": "BERT (masked LM)", "gpt": "GPT (causal LM)", "t5": "T5 (span corruption)"}
COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf",
           "#bcbd22", "#000000"]


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=10 * mag)
    first = math.ceil(lo / step) * step
    return [round(first + i * step, 10) for i in range(int((hi - first) / step + 1e-9) + 1)]


def line_chart(series: dict[str, list[tuple[float, float]]], *, title: str, xlabel: str, ylabel: str,
               logx: bool = False, bands: dict[str, list[tuple[float, float, float]]] | None = None,
               width: int = 640, height: int = 360) -> str:
    """A line chart as SVG text for the report (``dvc plots`` stay the interactive view): ``series``: name ->
    [(x, y)]; ``bands``: name -> [(x, low, high)] drawn as error bars."""
    bands = bands or {}
    pts = [p for s in series.values() for p in s] + [(x, v) for b in bands.values() for x, lo, hi in b for v in (lo, hi)]
    if not pts:
        raise ValueError(f"{title}: nothing to plot")
    fx = (lambda x: math.log10(x)) if logx else (lambda x: x)
    xs, ys = [fx(x) for x, _ in pts], [y for _, y in pts]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(0.0, min(ys)), max(ys) * 1.05 or 1.0
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    left, right, top, bottom = 60, 150, 30, 45
    pw, ph = width - left - right, height - top - bottom

    def px(x: float) -> float:
        return left + (fx(x) - x0) / (x1 - x0) * pw

    def py(y: float) -> float:
        return top + ph - (y - y0) / (y1 - y0) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
           f'font-size="11"><rect width="100%" height="100%" fill="white"/>',
           f'<text x="{left}" y="18" font-size="13">{escape(title)}</text>',
           f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="black"/>']
    for t in _ticks(y0, y1):
        out.append(f'<line x1="{left - 4}" y1="{py(t):.1f}" x2="{left + pw}" y2="{py(t):.1f}" stroke="#ddd"/>'
                   f'<text x="{left - 6}" y="{py(t) + 4:.1f}" text-anchor="end">{t:g}</text>')
    xticks = sorted({x for x, _ in pts}) if logx else _ticks(x0, x1)
    if not logx and len(xticks) > 8:
        xticks = xticks[:: math.ceil(len(xticks) / 8)]
    for t in xticks:
        out.append(f'<text x="{px(t):.1f}" y="{top + ph + 15}" text-anchor="middle">{t:g}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 8}" text-anchor="middle">{escape(xlabel)}</text>')
    out.append(f'<text x="14" y="{top + ph / 2}" text-anchor="middle" '
               f'transform="rotate(-90 14 {top + ph / 2})">{escape(ylabel)}</text>')
    for i, (name, points) in enumerate(series.items()):
        colour = COLOURS[i % len(COLOURS)]
        points = sorted(points)
        if points:
            path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in points)
            out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{path}"/>')
            out += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}"/>' for x, y in points]
        for x, lo, hi in bands.get(name, []):
            out.append(f'<line x1="{px(x):.1f}" y1="{py(lo):.1f}" x2="{px(x):.1f}" y2="{py(hi):.1f}" '
                       f'stroke="{colour}" stroke-width="1.5"/>')
        ly = top + 12 + 16 * i
        out.append(f'<line x1="{left + pw + 12}" y1="{ly - 4}" x2="{left + pw + 30}" y2="{ly - 4}" stroke="{colour}" '
                   f'stroke-width="2"/><text x="{left + pw + 34}" y="{ly}">{escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def figures(result: dict) -> dict[str, str]:
    curves = result["curves"]
    out = {f"finetune-{name}.svg": line_chart({n: [(r["step"], r[key]) for r in c] for n, c in curves.items()},
                                              title=f"Fine-tuning: {what} (seed 0)", xlabel="step", ylabel=ylabel)
           for name, key, what, ylabel in (("loss", "loss", "training loss", "loss"),
                                           ("val-f1", "val_macro_f1", "validation macro-F1", "macro-F1"))}
    if de := result["data_efficiency"]:
        out["data-efficiency.svg"] = line_chart(
            {n: [(p["train_examples"], p["macro_f1"]["mean"]) for p in pts] for n, pts in de.items()},
            bands={n: [(p["train_examples"], p["macro_f1"]["min"], p["macro_f1"]["max"]) for p in pts]
                   for n, pts in de.items()},
            title="Data efficiency: test macro-F1 (mean; bars: range over seeds)", xlabel="training examples",
            ylabel="macro-F1", logx=True)
    versus = result.get("versus_baselines") or {}
    if versus.get("series"):
        zero = [(int(n), 0.0) for n in versus["best"]]
        out["versus-baseline.svg"] = line_chart(
            {"best baseline": zero} | {name: [(int(n), d["difference"]) for n, d in pts.items()]
                                       for name, pts in versus["series"].items()},
            title="Test macro-F1 minus the best baseline's (chosen on validation at each label count)",
            xlabel="training examples", ylabel="difference in macro-F1", logx=True)
    return out


def f3(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def pm(d: dict, key: str | None = None) -> str:
    """``mean ± std`` of a seed summary ``d``, or of ``d[key]`` and ``d[key + "_std"]``."""
    mean, std = (d["mean"], d["std"]) if key is None else (d[key], d[f"{key}_std"])
    return f"{mean:.3f} ± {std:.3f}"


def pms(d: dict, *keys: str) -> str:
    """Table cells ``mean ± std`` of ``d``'s ``keys`` (each with its ``<key>_std``)."""
    return " | ".join(pm(d, k) for k in keys)


def si(x: float | None, prefixes: str = "PTGMk") -> str:
    """``x`` to 3 significant digits with the largest of ``prefixes`` (SI, k to P) it reaches; None: ``-``."""
    if x is None:
        return "-"
    for prefix in prefixes:
        scale = 1000.0 ** ("kMGTP".index(prefix) + 1)
        if abs(x) >= scale:
            return f"{x / scale:.3g} {prefix}"
    return f"{x:.3g}"


def _noise(d: dict) -> str:
    if d.get("seeds", 2) < 2:
        return "one seed: no spread to judge it against"
    return f"pooled seed std {d['pooled_std']:.3f}, {'beyond' if d['resolved'] else 'within'} 2x"


def finetune_section(result: dict) -> list[str]:
    ft, maj = result["finetune"], result["majority"]
    lines = ["## Paradigm x initialisation (test split)", "",
             "`pretrained`: the general pre-trained model; `dapt`: the same after domain-adaptive pre-training; "
             "`random`: the same architecture with fresh weights and the same fine-tuning recipe. Each run is "
             "repeated over seeds (sample, head initialisation, data order) at the learning rate the finetune "
             "stage chose on validation; cells are mean ± sample std over the seeds. Validation macro-F1 is that "
             "of each run's best checkpoint (early stopping watches `finetune.max_eval_examples` validation "
             "examples), rescored on the whole validation split when `finetune.val_select` is `full` (the "
             "default); the rate, the saved seed and the model gate choose on it.", "",
             "| paradigm | initialisation | test accuracy | test macro-F1 | best validation macro-F1 | seeds | lr "
             "| steps |",
             "|---|---|---|---|---|---|---|---|"]
    for p in PARADIGMS:
        for init in INITS:
            r = ft[f"{p}-{init}"]
            lr = "-" if r["lr"] is None else f"{r['lr']:g}"
            lines.append(f"| {NAMES[p]} | {init} | {pms(r, 'test_accuracy', 'test_macro_f1', 'best_val_macro_f1')} | "
                         f"{r['seeds']} | {lr} | {r['steps']}{' (early stop)' if r['stopped_early'] else ''} |")
    lines.append(f"| majority class | - | {f3(maj['test_accuracy'])} | {f3(maj['test_macro_f1'])} | - | - | - | - |")
    lines += ["", "Gains in test macro-F1. Pre-training: the better of `pretrained` / `dapt` (chosen on mean "
              "validation macro-F1, as the gate chooses) minus `random`; it counts when it is >= 0.03 and more "
              "than twice the pooled seed std sqrt((s_a^2 + s_b^2) / 2), over at least two seeds on each side. "
              "DAPT: `dapt` minus `pretrained`.", ""]
    for p, g in result["gains"].items():
        pre, dapt = g["pretraining"], g["dapt"]
        lines.append(f"- {NAMES[p]}: pre-training ({g['best_init']}) {pre['difference']:+.3f} ({_noise(pre)}; "
                     f"{'counts' if pre['counts'] else 'does not count'}); DAPT {dapt['difference']:+.3f} "
                     f"({_noise(dapt)})")
    return lines


def paradigm_section(result: dict) -> list[str]:
    rows, base = result["paradigms"], result.get("baselines")
    lines = ["## Paradigms: cost and result", "",
             "Parameters, pre-training tokens (general + DAPT), training FLOPs per token "
             "`6N + 12 * layers * d_model * seq_len` (Kaplan et al. 2020; T5's decoder terms scaled by "
             "targets_len / seq_len, BERT's output layer by the masked share; "
             "`stages.training.models.flops_per_token`), total pre-training FLOPs (FLOPs per token x tokens, "
             "both runs), the final held-out loss of each run (each paradigm's own objective, so "
             "losses are not comparable across paradigms) and the fine-tuned test macro-F1 of the best "
             "pre-trained initialisation. Wall times, tokens/s and MFU are facts of the machine, not of the inputs: "
             "they are in `reports/timings.md` (written by this stage from the runs' live logs under "
             "`reports/live/`; untracked, so that a re-run of the same inputs leaves `git status` clean).", "",
             "| paradigm | parameters | pre-training tokens | FLOPs / token | pre-training FLOPs | "
             "final loss (general / DAPT) | fine-tuned test macro-F1 |", "|---|---|---|---|---|---|---|"]
    for p, r in rows.items():
        lines.append(f"| {NAMES[p]} | {si(r['parameters'])} | {si(r['tokens'])} ({si(r['pretrain_tokens'])} + "
                     f"{si(r['dapt_tokens'])}) | {si(r['flops_per_token'])} | {si(r['flops'])} | "
                     f"{f3(r['pretrain_eval_loss'])} / {f3(r['dapt_eval_loss'])} | {pm(r, 'test_macro_f1')} "
                     f"({r['best_init']}) |")
    for name, b in (base or {}).items():
        full = point_at(b["points"], result["full_n"]) or b["points"][-1]  # else its largest sample
        lines.append(f"| baseline: {module(name).TITLE} | {si(full['parameters'])} | 0 | - | 0 | - | "
                     f"{pm(full['macro_f1'])} ({full['train_examples']} examples) |")
    lines += ["", "Equal compute instead of equal data: by default each paradigm trains on `budget_tokens` tokens "
              "(equal data, unequal FLOPs). Setting `pretrain.<paradigm>.train.budget_flops` (and "
              "`dapt.<paradigm>.train.budget_flops`; `TrainConfig.budget_flops`, 0 = off) to the same value for "
              "all three replaces the token budget: each run then trains on budget_flops / FLOPs-per-token "
              "tokens, so the paradigms get equal FLOPs."]
    return lines


def curve_section(result: dict, figures_dir: str) -> list[str]:
    de, cfg = result["data_efficiency"], result["config"]
    lines = ["", "## Data efficiency", ""]
    if not de:
        return lines + ["Not run in this profile (`evaluate.curve.paradigms` is empty and the baseline is off)."]
    c = cfg["curve"]
    lines += [f"Series: {', '.join(de)}. Points below the full sample are repeated over seeds "
              f"{', '.join(map(str, c['seeds']))} (sample, head initialisation and order; for random init also the "
              f"body) with at least {c['min_steps']} updates; the full-sample point is the finetune stage's seeds. "
              "The baselines (next section) are fitted on the same training samples (their last point, when "
              "larger, is the whole training split). Paradigms and initialisations not listed were not run in "
              "this profile (`evaluate.curve`).", "",
              "| series | training examples | test macro-F1 mean | std | range | runs |", "|---|---|---|---|---|---|"]
    for name, pts in de.items():
        for pt in pts:
            f = pt["macro_f1"]
            lines.append(f"| {name} | {pt['train_examples']} | {f3(f['mean'])} | {f3(f['std'])} | "
                         f"{f3(f['min'])}-{f3(f['max'])} | {f['runs']} |")
    if result["curve_gains"]:
        lines += ["", "Pre-training gain along the curve: at each label count, the better pre-trained initialisation "
                  "(chosen on mean validation macro-F1 at that count) minus random, in test macro-F1; pooled seed "
                  "std in brackets:", ""]
        for p, g in result["curve_gains"].items():
            lines.append(f"- {NAMES[p]}: " + ", ".join(
                f"{pt['train_examples']}: {pt['gain']:+.3f} ({pt['init']}, ± {pt['pooled_std']:.3f})"
                for pt in g["points"]))
    return lines + ["", f"![data efficiency]({figures_dir}/data-efficiency.svg)"] + baseline_section(result, figures_dir)


def baseline_section(result: dict, figures_dir: str) -> list[str]:
    base, versus, cfg = result.get("baselines") or {}, result.get("versus_baselines") or {}, result["config"]
    lines = ["", "## Against the practitioner baselines", ""]
    if not base:
        return lines + ["Not run in this profile (`evaluate.baseline`)."]
    lines += ["Models that need no pre-training, each searched the way a careful practitioner would, on the "
              "validation split only (the test split scores the chosen settings once), on the very training "
              "samples and seeds of the neural runs:", ""]
    lines += [f"- `{name}`: {module(name).search_words(cfg['baseline'][name])}" for name in base]
    lines += ["", "What each search chose, with its scores (mean ± std over the seeds):", "",
              "| baseline | training examples | test macro-F1 | validation macro-F1 | chosen on validation (per seed) | fits, all seeds |",
              "|---|---|---|---|---|---|"]
    for name, b in base.items():
        for pt in b["points"]:
            bound = " (at the edge of its search for some seed)" if pt["at_bound"] else ""
            lines.append(f"| {name} | {pt['train_examples']} | {pm(pt['macro_f1'])} | {pm(pt['val_macro_f1'])} | "
                         f"{'; '.join(settings_words(name, x) for x in pt['settings'])}{bound} | {pt['fits']} |")
    if not versus.get("best"):
        return lines
    sizes = list(versus["best"])
    lines += ["", "Every neural model against the **best baseline at each label count** (the baseline with the best "
              "mean validation macro-F1 there): test macro-F1 difference, neural minus baseline; **bold** when it "
              "is beyond twice the pooled seed std (the baseline's single whole-split fit counts as noise-free).", "",
              "| series | " + " | ".join(sizes) + " |", "|---|" + "---|" * len(sizes),
              "| best baseline | " + " | ".join(f"{versus['best'][n]['series']} {versus['best'][n]['test_macro_f1']:.3f}"
                                                  for n in sizes) + " |"]
    for name, pts in versus["series"].items():
        cells = []
        for n in sizes:
            d = pts.get(n)
            cell = "-" if d is None else f"{d['difference']:+.3f} (± {d['pooled_std']:.3f})"
            cells.append(f"**{cell}**" if d and d["resolved"] else cell)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines + ["", f"![against the best baseline]({figures_dir}/versus-baseline.svg)"]


def icl_section(result: dict) -> list[str]:
    cfg, maj = result["config"]["icl"], result["majority"]
    lines = ["", "## In-context learning (GPT, no weight updates)", ""]
    if not result["icl"]:
        return lines + ["Not run in this profile (`evaluate.icl.inits` is empty)."]
    any_icl, n = next(iter(result["icl"].values())), cfg["orderings"]
    drawn = (f"{n} demonstration lists, each drawn and ordered at random and shared by every query (Zhao et al. "
             "2021's protocol)" if cfg["demonstrations"] == "shared" else
             f"{n} prompt orderings per query (demonstrations drawn and ordered anew for each query)")
    lines += [f"{any_icl['examples']} test examples; the label is the one whose words are most likely after "
              f"`<text>{cfg['separator']!r}`; each example in a k-shot prompt keeps "
              f"{', '.join(f'{v} tokens ({k}-shot)' for k, v in any_icl['tokens_per_example'].items())} so that "
              f"the prompt fits the length GPT was trained on. For k > 0, {drawn} (mean ± std over "
              "orderings). Calibrated: contextual "
              "calibration (Zhao et al. 2021): label probabilities divided by those of the content-free inputs "
              f"{', '.join(repr(x) for x in cfg['content_free'])} in the same prompt.", "",
              "| model | shots | accuracy | macro-F1 | calibrated accuracy | calibrated macro-F1 |",
              "|---|---|---|---|---|---|"]
    for name, r in result["icl"].items():
        for k in cfg["shots"]:
            x = r[str(k)]
            lines.append(f"| {name} | {k} | {pms(x, 'accuracy', 'macro_f1')} | "
                         f"{pms(x['calibrated'], 'accuracy', 'macro_f1')} |")
    lines.append(f"| majority class | - | {f3(maj['test_accuracy'])} | {f3(maj['test_macro_f1'])} | - | - |")
    return lines + ["", "(The majority class is scored on the whole test split.)"]


def published_section(result: dict) -> list[str]:
    """The published checkpoints' runs with all labels (their curves and the baselines: the sections below)."""
    published = result.get("published") or {}
    if not published:
        return []
    lines = ["", "## Published checkpoints (test split)", "",
             "Published checkpoints (params `published.bases`) fine-tuned as published (`published`) and after "
             "domain-adaptive pre-training on the domain corpus (`published-dapt`), with their own tokenizer and "
             "architecture (method `full`: every weight trained; `probe`: the body fixed, a logistic-regression head "
             "chosen on validation; `frozen`, `lora`: as in the adaptation table); mean ± std over the seeds:", "",
             "| run | base | paradigm | init | method | test macro-F1 | test accuracy | validation macro-F1 | seeds |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, r in published.items():
        lines.append(f"| {name} | {r['base']} | {r['paradigm']} | {r['init']} | {r['method']} | "
                     f"{pm(r, 'test_macro_f1')} | {pm(r, 'test_accuracy')} | {pm(r, 'best_val_macro_f1')} | "
                     f"{r['seeds']} |")
    return lines


def shipped_vs_baseline(result: dict) -> list[str]:
    """How the model the gate ships compares with the best baseline on the same training sample."""
    versus, won = result.get("versus_baselines") or {}, result["gate"]["selected"]
    row = (result["finetune"] | result.get("adapted", {}) | result.get("published", {}))[won]
    key = str(row["train_examples"])
    best, d = versus.get("best", {}).get(key), versus.get("series", {}).get(won, {}).get(key)
    if best is None or d is None:
        return []
    rel = "above" if d["difference"] > 0 else "below" if d["difference"] < 0 else "level with"
    return ["", f"Against the best baseline on the same {key} labels ({best['series']}, chosen on validation: test "
            f"macro-F1 {pms(best, 'test_macro_f1')}), the shipped model ({pms(row, 'test_macro_f1')}) is "
            f"{abs(d['difference']):.3f} {rel} it, {'beyond' if d['resolved'] else 'within'} twice the pooled seed std "
            f"({d['pooled_std']:.3f}). The gate chooses among the language models only: the Bento ships a language "
            "model."]


def markdown(result: dict, *, figures_dir: str) -> str:
    ft, gate = result["finetune"], result["gate"]
    lines = ["# Evaluation", "",
             "Written by the `evaluate` stage (`python -m stages.evaluate`, see `dvc.yaml`) from the fine-tuned, "
             "pre-trained and domain-adapted models of this workspace. Every number below is as measured by this "
             "run; compare runs with `dvc metrics diff` and `dvc plots diff`.", "",
             f"Task: {len(result['labels'])} labels ({', '.join(result['labels'])}); "
             f"{next(iter(ft.values()))['train_examples']} training examples per fine-tuning run.", ""]
    lines += finetune_section(result)
    lines += ["", f"![training loss]({figures_dir}/finetune-loss.svg)", "",
              f"![validation macro-F1]({figures_dir}/finetune-val-f1.svg)", ""]
    lines += paradigm_section(result)
    lines += published_section(result)
    won = gate["selected"]
    published = result.get("published", {})
    how = (f"method `{result['adapted'][won]['method']}` on initialisation `{result['adapted'][won]['init']}`"
           if won in result.get("adapted", {}) else
           f"published checkpoint `{published[won]['base']}`, initialisation `{published[won]['init']}`"
           if won in published else f"initialisation `{won.split('-', 1)[1]}`")
    lines += ["", "## Model quality gate", "",
              f"Selected for packaging: **{won}** ({how}), chosen on the "
              f"validation split ({gate['selected_by']} among {', '.join(gate['candidates'])}); the test split "
              f"only measures it. Verdict: **{'passed' if gate['passed'] else 'FAILED'}**"
              f"{'' if gate['passed'] else ': the package stage will not ship it'}.", "",
              "| check | value | minimum | passed |", "|---|---|---|---|"]
    lines += [f"| {c['check']} | {c['value']:+.3f} | {c['minimum']:+.3f} | {'yes' if c['passed'] else 'no'} |"
              for c in gate["checks"]]
    lines += shipped_vs_baseline(result)
    lines += curve_section(result, figures_dir)
    lines += icl_section(result)
    lines += adaptation.section(result, figures_dir)
    lines += ["", "## Intrinsic: held-out general and domain text, before and after DAPT", "",
              "BERT: masked-token accuracy; GPT: perplexity; T5: span (target-token) loss and accuracy. The same "
              "held-out blocks, masks and spans for both models.", "",
              "| paradigm | model | general loss | general score | domain loss | domain score |",
              "|---|---|---|---|---|---|"]
    for p, stages in result["intrinsic"].items():
        for stage, corpora in stages.items():
            cells = [f"{r['eval_loss']:.3f} | " + (f"perplexity {r['eval_perplexity']:.1f}" if "eval_perplexity" in r
                                                   else f"accuracy {r['eval_accuracy']:.3f}")
                     for r in (corpora["general"], corpora["domain"])]
            lines.append(f"| {NAMES[p]} | {stage} | " + " | ".join(cells) + " |")
    lines += ["", "## Verdict", "", "Written from the numbers above by `stages.evaluation.verdict`.", ""]
    lines += [f"- {s}" for s in result["verdict"]]
    return "\n".join(lines) + "\n"
