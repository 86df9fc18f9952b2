"""The base stage's core: fetch a published checkpoint into a folder, check it against its paradigm and pins.yaml,
and return its manifest; write the facts its downstream model cards carry (``card.json``)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from stages.provenance import stagecard
from stages.published.config import PublishedBase
from stages.published.family import inspect
from stages.published.fetch import check_pin, fetch, file_hashes, files_digest, licence_of, pin_key
from stages.sources import pins as pin_file
from stages.sources.base import SourceError

OWN_FILES = ("base.json", stagecard.FACTS_FILE)  # what the stage adds to the published files
# model_config keys of a card from the transformers config's names (BERT / GPT-2 / T5 spellings)
ARCH_NAMES = {"layers": ("num_hidden_layers", "n_layer", "num_layers"), "d_model": ("hidden_size", "n_embd", "d_model"),
              "heads": ("num_attention_heads", "n_head", "num_heads"), "d_ff": ("intermediate_size", "n_inner", "d_ff")}


def origin_text(origin: dict) -> str:
    """One phrase naming where a base came from."""
    if origin["kind"] == "wheel":
        return f"wheel {origin['package']} ({origin['folder']}/, wheel sha256 {origin['wheel_sha256'][:16]}...)"
    if origin["kind"] == "hub":
        return f"hub {origin['repo']} at commit {origin['revision']}"
    return f"folder {origin['path']}"


def model_config(folder: Path, model_type: str) -> dict:
    import json

    raw = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    out = {"arch": model_type}
    for key, names in ARCH_NAMES.items():
        out[key] = next((raw[n] for n in names if raw.get(n) is not None), None)
    return out


def facts(name: str, base: PublishedBase, manifest: dict) -> dict:
    """``card.json`` of a base folder: the published model as the first step of every model made from it."""
    f = manifest["facts"]
    head = "a fresh language-model head of its family (the checkpoint has none)" if f["fresh_head"] else "its own"
    source = {"kind": f"published checkpoint ({base.source.kind})", "description": f"{name}: " +
              origin_text(manifest["origin"]) + f"; {f['model_type']} with {head} language-model head",
              "licence": manifest["licence"], "pin": {"base": name, "files_sha256": manifest["files_sha256"]}}
    return {"schema": stagecard.SCHEMA, "kind": "published", "paradigm": base.paradigm,
            "model_config": manifest["model_config"], "parameters": f["parameters"],
            "base": {"name": name, "origin": manifest["origin"], "licence": manifest["licence"],
                     "files_sha256": manifest["files_sha256"], "fresh_head": f["fresh_head"]},
            "training": [{"stage": "published", "corpus": "its publisher's (see its own card)",
                          "objective": f"published {f['model_type']}" + ("; LM head fresh" if f["fresh_head"] else ""),
                          "tokens": None}],
            "corpora": {f"base {name}": {"stage": "base", "documents": None, "sources": [source]}},
            "scores": {}}


def fetch_base(base: PublishedBase, *, name: str, out: Path, cache: Path, pins: Path, repin: bool = False,
               log=print) -> dict:
    """Fill ``out`` with base ``name`` and its ``card.json``; returns its manifest (``base.json``). Refuses a base
    pins.yaml does not pin (or pins otherwise) unless ``repin``, which records it."""
    where = f"published.bases.{name}"
    origin = fetch(base.source, out, cache)
    for own in OWN_FILES:
        if (out / own).exists():
            raise SourceError(f"{where}: the checkpoint has a file {own}, a name this stage writes")
    files = file_hashes(out)
    found = inspect(out, base.paradigm, where)
    found["parameters"] = stagecard.count_parameters(out)
    key = pin_key(name)
    if repin:
        pin_file.write(key, [{"kind": base.source.kind, "origin": origin, "files": files}], path=pins)
        log(f"[base] {name}: pinned {len(files)} files in {pins} ({key})")
    else:
        entries = pin_file.load(pins).get(key)
        if not entries:
            raise SourceError(f"{where}: not pinned in {pins}; run `lm-pipeline pin {key}` to fetch it and record "
                              "every file's SHA-256")
        check_pin(entries[0], origin, files, where)
    manifest = {"name": name, "paradigm": base.paradigm, "source": asdict(base.source), "origin": origin,
                "licence": licence_of(out, base.source.licence), "files": files, "files_sha256": files_digest(files),
                "model_config": model_config(out, found["model_type"]), "facts": found}
    stagecard.write_facts(out, facts(name, base, manifest))
    log(f"[base] {name}: {found['model_type']} ({', '.join(found['architectures']) or 'no architectures'}), "
        f"{found['parameters']:,} parameters, licence {manifest['licence']}, {len(files)} files from "
        f"{origin_text(origin)}" + ("; its LM head will be fresh" if found["fresh_head"] else ""))
    return manifest
