"""How a pre-trained body is adapted to the task (``method``): ``full`` trains every weight; ``frozen`` keeps the body
fixed and trains the pooled head only; ``probe`` keeps it fixed and fits the head as a logistic regression
(:mod:`stages.finetuning.probe`); ``lora`` trains low-rank adapters on the body's attention and feed-forward
projections (PEFT) and the head. A ``frozen`` or ``lora`` folder holds the head (and adapter) only, with
``adaptation.json`` naming the base folder and its digest, checked when the folder is loaded."""

from __future__ import annotations

import json
from pathlib import Path

METHODS = ("full", "frozen", "lora", "probe")  # probe: frozen, its head a logistic regression (stages.finetuning.probe)
FIXED_BODY = ("frozen", "probe")  # the methods whose body no weight of trains
ADAPTATION_FILE = "adaptation.json"
# LoRA's targets by the last part of a module's name: each paradigm's attention and feed-forward projections
LORA_TARGETS = {
    "bert": ("query", "key", "value", "dense", "query_proj", "key_proj", "value_proj"),  # BERT and DeBERTa-v2
    "gpt": ("c_attn", "c_proj", "c_fc"),
    "t5": ("q", "k", "v", "o", "wi", "wo", "wi_0", "wi_1"),  # wi_0, wi_1: a gated feed-forward
}


def effective_method(method: str, init: str) -> str:
    """The method a run uses: a random initialisation has no base to adapt and trains in full."""
    return "full" if init == "random" else method


def base_digest(folder: Path, stored: bool = False) -> str:
    """The base folder's digest: SHA-256 over the SHA-256 of each file in sorted relative-path order (as model
    signing's subject, :func:`stages.provenance.signing.folder_files_digest`). ``stored``: a copy in the model
    store (a packaged base), whose ``model.yaml`` and ``model.sig`` the store added and are left out."""
    from stages.provenance.signing import STORE_FILES, folder_files_digest

    return folder_files_digest(folder, STORE_FILES if stored else frozenset())


def read_adaptation(folder: Path) -> dict | None:
    """A fine-tuned folder's ``adaptation.json`` (None: a folder trained in full, the whole model in it)."""
    path = Path(folder) / ADAPTATION_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def resolve_base(folder: Path, record: dict, base: Path | None = None) -> Path:
    """The base folder ``record`` names (or ``base``: its packaged copy in the model store, which a Bento's
    service loads instead of the workspace path), its digest checked (a ValueError naming both folders on a
    mismatch)."""
    stored = base is not None
    base = Path(base) if stored else Path(record["base"])
    if not (base / "config.json").is_file():
        raise FileNotFoundError(f"{folder}: its base model {base} " + (
            "(the packaged base) holds no config.json" if stored else
            f"(from {ADAPTATION_FILE}) is not there; run from the workspace that holds it"))
    got = base_digest(base, stored)
    if got != record["base_digest"]:
        raise ValueError(f"{folder}: its base model {base}" + (f" (packaged from {record['base']})" if stored else "")
                         + f" has digest {got}, not {record['base_digest']} as recorded in {ADAPTATION_FILE} ("
                         + ("the packaged base is not the one it was fine-tuned on)" if stored
                            else "the base changed since fine-tuning)"))
    return base


def adapt_body(body, paradigm: str, options: dict):
    """``body`` for ``options['method']``: ``frozen``: no weight trains; ``lora``: a PeftModel with adapters on
    ``options['targets']`` (empty: the paradigm's projections present in the body), the base weights frozen."""
    if options["method"] in FIXED_BODY:
        return body.requires_grad_(False)
    from peft import LoraConfig, get_peft_model

    names = {n.rsplit(".", 1)[-1] for n, _ in body.named_modules()}
    targets = list(options.get("targets") or [t for t in LORA_TARGETS[paradigm] if t in names])
    missing = [t for t in targets if t not in names]
    if missing:
        raise ValueError(f"lora.targets: {', '.join(missing)} is not a module of this {paradigm} model")
    config = LoraConfig(r=options["r"], lora_alpha=options["alpha"], lora_dropout=options["dropout"],
                        target_modules=targets, fan_in_fan_out=paradigm == "gpt",  # GPT-2's Conv1D stores W^T
                        exclude_modules=["pooler.dense"] if paradigm == "bert" else None)  # BERT's unused pooler
    return get_peft_model(body, config)


def sort_adapter_config(folder: Path) -> None:
    """Rewrite ``adapter_config.json`` with its module lists sorted: PEFT keeps them as sets and writes them in
    the interpreter's hash order, so the same run would otherwise give other bytes under another hash seed."""
    import json

    path = folder / "adapter_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    for key in ("target_modules", "exclude_modules"):
        if isinstance(config.get(key), list):
            config[key] = sorted(config[key])
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(config, indent=2, sort_keys=True), encoding="utf-8")
    tmp.replace(path)


def load_adapter(body, folder: Path):
    """``body`` with the LoRA adapter saved in ``folder``."""
    from peft import PeftModel

    return PeftModel.from_pretrained(body, str(folder))


def parameter_counts(module) -> dict:
    return {"trainable_parameters": sum(p.numel() for p in module.parameters() if p.requires_grad),
            "total_parameters": sum(p.numel() for p in module.parameters())}
