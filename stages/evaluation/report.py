"""``reports/evaluation.md`` and its SVG figures, from the evaluate stage's result."""

from __future__ import annotations

from stages.evaluation.svg import line_chart
from stages.finetune import INITS
from stages.tokenization.trainers import PARADIGMS

NAMES = {"bert": "BERT (masked LM)", "gpt": "GPT (causal LM)", "t5": "T5 (span corruption)"}


def figures(result: dict) -> dict[str, str]:
    out = {}
    curves = result["curves"]
    out["finetune-loss.svg"] = line_chart(
        {n: [(r["step"], r["loss"]) for r in c] for n, c in curves.items()},
        title="Fine-tuning: training loss", xlabel="step", ylabel="loss")
    out["finetune-val-f1.svg"] = line_chart(
        {n: [(r["step"], r["val_macro_f1"]) for r in c] for n, c in curves.items()},
        title="Fine-tuning: validation macro-F1", xlabel="step", ylabel="macro-F1")
    if result["data_efficiency"]:
        de = result["data_efficiency"]
        out["data-efficiency.svg"] = line_chart(
            {n: [(p["train_examples"], p["macro_f1"]["mean"]) for p in pts] for n, pts in de.items()},
            bands={n: [(p["train_examples"], p["macro_f1"]["min"], p["macro_f1"]["max"]) for p in pts]
                   for n, pts in de.items()},
            title="Data efficiency: test macro-F1 (mean; bars: range over seeds)", xlabel="training examples",
            ylabel="macro-F1", logx=True)
    return out


def _f(x: float) -> str:
    return f"{x:.3f}"


def markdown(result: dict, *, figures_dir: str) -> str:
    ft, maj, gate = result["finetune"], result["majority"], result["gate"]
    cfg = result["config"]
    lines = ["# Evaluation", "",
             "Written by the `evaluate` stage (`python -m stages.evaluate`, see `dvc.yaml`) from the fine-tuned, "
             "pre-trained and domain-adapted models of this workspace. Every number below is as measured by this "
             "run; compare runs with `dvc metrics diff` and `dvc plots diff`.", "",
             f"Task: {len(result['labels'])} labels ({', '.join(result['labels'])}); "
             f"{next(iter(ft.values()))['train_examples']} training examples per fine-tuning run.", "",
             "## Paradigm x initialisation (test split)", "",
             "`pretrained`: the general pre-trained model; `dapt`: the same after domain-adaptive pre-training; "
             "`random`: the same architecture with fresh weights and the same fine-tuning recipe.", "",
             "| paradigm | initialisation | test accuracy | test macro-F1 | best validation macro-F1 | steps |",
             "|---|---|---|---|---|---|"]
    for p in PARADIGMS:
        for init in INITS:
            r = ft[f"{p}-{init}"]
            lines.append(f"| {NAMES[p]} | {init} | {_f(r['test_accuracy'])} | {_f(r['test_macro_f1'])} | "
                         f"{_f(r['best_val_macro_f1'])} | {r['steps']}{' (early stop)' if r['stopped_early'] else ''} |")
    lines.append(f"| majority class | - | {_f(maj['test_accuracy'])} | {_f(maj['test_macro_f1'])} | - | - |")
    lines += ["", "Pre-training gain (test macro-F1, pre-trained minus random init; DAPT minus pre-trained):", ""]
    for p in PARADIGMS:
        gain = ft[f"{p}-pretrained"]["test_macro_f1"] - ft[f"{p}-random"]["test_macro_f1"]
        dapt = ft[f"{p}-dapt"]["test_macro_f1"] - ft[f"{p}-pretrained"]["test_macro_f1"]
        lines.append(f"- {NAMES[p]}: pre-training {gain:+.3f}, DAPT {dapt:+.3f}")
    lines += ["", f"![training loss]({figures_dir}/finetune-loss.svg)", "",
              f"![validation macro-F1]({figures_dir}/finetune-val-f1.svg)", "",
              "## Model quality gate", "",
              f"Selected for packaging: **{gate['selected']}** ({gate['selected_by']} among "
              f"{', '.join(gate['candidates'])}). Verdict: **{'passed' if gate['passed'] else 'FAILED'}**"
              f"{'' if gate['passed'] else ': the package stage will not ship it'}.", "",
              "| check | value | minimum | passed |", "|---|---|---|---|"]
    lines += [f"| {c['check']} | {c['value']:+.3f} | {c['minimum']:+.3f} | {'yes' if c['passed'] else 'no'} |"
              for c in gate["checks"]]
    de = result["data_efficiency"]
    lines += ["", "## Data efficiency", ""]
    if de:
        c = cfg["curve"]
        lines += [f"Series: {', '.join(de)}. Points below the full sample are repeated over seeds "
                  f"{', '.join(map(str, c['seeds']))} (sample, head initialisation and order; for random init also "
                  f"the body) with at least {c['min_steps']} updates; the full-sample point is the single "
                  "finetune stage run. Paradigms not listed were not run in this profile "
                  "(`evaluate.curve.paradigms`).", "",
                  "| series | training examples | test macro-F1 mean | std | range | runs |", "|---|---|---|---|---|---|"]
        for name, pts in de.items():
            for pt in pts:
                f = pt["macro_f1"]
                lines.append(f"| {name} | {pt['train_examples']} | {_f(f['mean'])} | {_f(f['std'])} | "
                             f"{_f(f['min'])}-{_f(f['max'])} | {f['runs']} |")
        lines += ["", f"![data efficiency]({figures_dir}/data-efficiency.svg)"]
    else:
        lines.append("Not run in this profile (`evaluate.curve.paradigms` is empty).")
    lines += ["", "## In-context learning (GPT, no weight updates)", ""]
    if result["icl"]:
        shots = cfg["icl"]["shots"]
        any_icl = next(iter(result["icl"].values()))
        lines += [f"{any_icl['examples']} test examples; the label is the one whose words are most likely after "
                  f"`<text>{cfg['icl']['separator']!r}`; each example in a k-shot prompt keeps "
                  f"{', '.join(f'{v} tokens ({k}-shot)' for k, v in any_icl['tokens_per_example'].items())} so "
                  "that the prompt fits the length GPT was trained on.", "",
                  "| model | " + " | ".join(f"{k}-shot accuracy / macro-F1" for k in shots) + " |",
                  "|---|" + "---|" * len(shots)]
        for name, r in result["icl"].items():
            lines.append(f"| {name} | " + " | ".join(f"{_f(r[str(k)]['accuracy'])} / {_f(r[str(k)]['macro_f1'])}"
                                                      for k in shots) + " |")
        lines.append(f"| majority class | {_f(maj['test_accuracy'])} (on the whole test split) |" + " |" * (len(shots) - 1))
    else:
        lines.append("Not run in this profile (`evaluate.icl.inits` is empty).")
    lines += ["", "## Intrinsic: held-out general and domain text, before and after DAPT", "",
              "BERT: masked-token accuracy; GPT: perplexity; T5: span (target-token) loss and accuracy. The same "
              "held-out blocks, masks and spans for both models.", "",
              "| paradigm | model | general loss | general score | domain loss | domain score |",
              "|---|---|---|---|---|---|"]
    for p, stages in result["intrinsic"].items():
        for stage, corpora in stages.items():
            cells = []
            for corpus in ("general", "domain"):
                r = corpora[corpus]
                score = (f"perplexity {r['eval_perplexity']:.1f}" if "eval_perplexity" in r
                         else f"accuracy {r['eval_accuracy']:.3f}")
                cells += [f"{r['eval_loss']:.3f}", score]
            lines.append(f"| {NAMES[p]} | {stage} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
