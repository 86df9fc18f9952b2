"""Print a lineage record as the chain an auditor reads: raw sources -> ingest -> cleaning -> tokenizer ->
tokens -> pre-training -> DAPT -> fine-tuning -> gates -> evaluation -> Bento."""

from __future__ import annotations

from stages.provenance.record import Lock

# The figures worth a line per kind of stage (any other stage shows its scalar metrics).
KEY_METRICS = {
    "ingest": ("documents", "characters"),
    "clean": ("documents_in", "documents_out", "characters_in", "characters_out"),
    "tokenizer": ("kind", "vocab_size"),
    "tokens": ("seq_len", "block_len"),
    "pretrain": ("parameters", "tokens", "steps", "train_loss", "eval_loss", "eval_accuracy"),
    "dapt": ("parameters", "tokens", "steps", "train_loss", "eval_loss", "eval_accuracy"),
    "finetune": ("train_examples", "steps", "best_val_macro_f1", "test_macro_f1", "test_accuracy"),
}
# The chain's steps after the raw sources: each kind of stage, in order, and its heading.
STEPS = {"ingest": "Ingest", "clean": "Cleaning", "tokenizer": "Tokenizer", "tokens": "Token datasets",
         "pretrain": "Pre-training", "dapt": "DAPT", "finetune": "Fine-tuning",
         "evaluate": "Evaluation and the model gate"}


def _fmt(value) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:.4g}"


def _metrics_line(kind: str, metrics: dict) -> str:
    keys = KEY_METRICS.get(kind) or [k for k, v in metrics.items() if isinstance(v, (int, float, str))][:8]
    return ", ".join(f"{k} {_fmt(metrics[k])}" for k in keys if k in metrics)


def _stage_lines(name: str, entry: dict, record: dict) -> list[str]:
    kind = name.split("@", 1)[0]
    lines = [f"  {name}"]
    for out in entry.get("outs", []):
        path = out["path"]
        if path.startswith("reports/metrics/"):
            metrics = record["metrics"].get(path) or {}
            line = _metrics_line(kind, metrics)
            if line:
                lines.append(f"      metrics  {line}")
        elif path.startswith("reports/quality/"):
            gate = record["gates"].get(path) or {}
            if "gate" in gate:
                summary = gate.get("summary") or {}
                verdict = "passed" if gate.get("success") else "FAILED"
                lines.append(f"      gate     {gate['gate']}: {verdict} ({summary.get('checks', '?')} checks, "
                             f"{summary.get('failed', '?')} failed)  {path}")
        else:
            lines.append(f"      out      {path}  md5 {out.get('md5')}")
    code = [d["path"] for d in entry.get("deps", []) if d["path"].startswith("stages")]
    if code:
        lines.append(f"      code     {', '.join(code)}")
    params = entry.get("params") or {}
    keys = [k for values in params.values() for k in values]
    if keys:
        lines.append(f"      params   {', '.join(keys)}")
    return lines


def render(record: dict, bento: dict | None = None) -> str:
    """The chain as text. ``bento``: the Bento's tag, model tag and, for an exported file, its path and SHA-256."""
    model, git = record["model"], record.get("git") or {}
    lines = []
    if bento:
        lines.append(f"Bento {bento.get('tag', '?')}" + (f"  ({bento['file']}, sha256 {bento['sha256']})"
                                                         if bento.get("file") else ""))
        if bento.get("model_tag"):
            lines.append(f"  model {bento['model_tag']}")
    lines.append(f"Model {model['name']}: {model.get('paradigm')}, {model.get('init')} initialisation, "
                 f"{len(model.get('labels') or [])} labels, {len(model['files'])} files, md5 {model['md5']}")
    dirty = git.get("dirty")
    lines.append(f"Code  git {git.get('commit') or 'unknown'}"
                 + (f" (dirty: {git.get('dirty_count', len(git.get('dirty_paths', [])))} paths)" if dirty else
                    " (clean)" if dirty is False else ""))
    lines.append(f"Packaged {record.get('created')}")
    lines.append("")
    lines.append("1. Raw sources")
    for corpus, info in record.get("sources", {}).items():
        lines.append(f"  {corpus} ({info.get('stage')})")
        for src in info.get("sources", []):
            lines.append(f"    {src.get('kind')}: {src.get('description') or ''}")
            lines.append(f"      licence: {src.get('licence') or 'NOT RECORDED (check the source before use)'}")
            for pkg in src.get("packages") or []:
                if isinstance(pkg, dict) and pkg.get("name"):
                    lines.append(f"      package {pkg['name']}@{pkg.get('version', '?')}  {pkg.get('integrity', '')}")
            for f in src.get("files") or []:
                lines.append(f"      {f.get('path')}  sha256 {f.get('sha256')}  {_fmt(f.get('bytes', 0))} bytes")
    model_path = set(Lock(stages=record["stages"]).upstream([model["stage"]]))
    step = 2
    for kind, title in STEPS.items():
        names = [n for n in record["stages"] if n.split("@", 1)[0] == kind]
        if not names:
            continue
        lines.append(f"{step}. {title}")
        step += 1
        for name in sorted(names, key=lambda n: (n not in model_path, n)):
            if name in model_path or kind == "evaluate":
                lines += _stage_lines(name, record["stages"][name], record)
            else:  # hashed and verified all the same; the chain names it only
                lines.append(f"  {name}   (compared by the evaluation, not upstream of this model)")
    gate = record.get("model_gate") or {}
    if gate:
        lines.append(f"  model gate: {'PASSED' if gate.get('passed') else 'FAILED'}, selected {gate.get('selected')} "
                     f"by {gate.get('selected_by')}")
        for check in gate.get("checks", []):
            lines.append(f"    {check.get('check')}: {_fmt(check.get('value'))} (minimum {_fmt(check.get('minimum'))})"
                         f" {'ok' if check.get('passed') else 'FAILED'}")
    lines.append(f"{step}. Bento" if bento else f"{step}. Packaged model")
    lines.append(f"  {bento.get('tag') if bento else model['name']}: the fine-tuned model {model['name']} "
                 f"(md5 {model['md5']})")
    if model.get("adaptation"):  # frozen or lora: the head (and adapter) need the base they were fine-tuned on
        a = model["adaptation"]
        lora = " and LoRA adapter" if a.get("method") == "lora" else ""
        lines.append(f"  method {a.get('method')}: its head{lora}"
                     + f" on the base {a.get('base')} (folder digest {a.get('base_digest')}), "
                     + ("packaged beside it" if bento else "which it needs"))
    return "\n".join(lines)
