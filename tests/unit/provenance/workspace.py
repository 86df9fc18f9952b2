"""A tiny workspace made in code: a dvc.lock over four stages (ingest -> two fine-tunes -> evaluate) whose
hashes are computed the way DVC computes them (tests/unit/provenance/test_hashing.py checks that)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml
from safetensors.numpy import save

from stages.provenance.hashing import path_hashes

LABELS = ["river", "market"]


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def entry(root: Path, paths: list[str]) -> list[dict]:
    out = []
    for p in paths:
        digest, manifest = path_hashes(root / p)
        e = {"path": p, "hash": "md5", "md5": digest}
        if (root / p).is_dir():
            e["nfiles"] = len(manifest)
        out.append(e)
    return out


def make_workspace(root: Path, *, gate_passed: bool = True) -> Path:
    write(root / "stages/ingest.py", "# ingest code\n")
    write(root / "stages/finetune.py", "# finetune code\n")
    write(root / "stages/evaluate.py", "# evaluate code\n")
    write(root / "data/ingested/task/documents.parquet", "rows\n")
    write(root / "data/ingested/task/manifest.json", json.dumps({
        "corpus": "task", "counts": {"documents": 2},
        "sources": [{"kind": "debian_descriptions", "description": "package descriptions",
                     "licence": "each package's own licence", "records": 2,
                     "packages": [{"name": "corpus-x", "version": "1.2.3", "integrity": "sha512-xyz"}],
                     "files": [{"path": ".cache/Packages.lz4", "sha256": "ab" * 32, "bytes": 123}]},
                    {"kind": "npm_brown", "description": "no licence given"}]}))
    write(root / "reports/quality/ingest-task.json", json.dumps({
        "gate": "ingest-task", "success": True, "summary": {"checks": 3, "failed": 0}, "failed": [], "stats": {},
        "checks": [{"name": "x", "success": True}]}))
    write(root / "reports/metrics/ingest-task.json", json.dumps({"documents": 2, "characters": 10}))
    for name, f1 in (("m1", 0.9), ("m2", 0.4)):
        folder = root / "data/models/finetune" / name
        write(folder / "config.json", json.dumps({"name": name}))
        folder.mkdir(parents=True, exist_ok=True)  # a real (tiny) safetensors file: the package stage reads its header
        (folder / "model.safetensors").write_bytes(save({"weights": np.full((2, 2), f1, dtype=np.float32)}))
        write(folder / "finetune.json", json.dumps({"labels": LABELS, "init": "random",
                                                    "metrics": {"paradigm": "bert", "test_macro_f1": f1}}))
        write(root / f"reports/metrics/finetune-{name}.json", json.dumps({"test_macro_f1": f1, "steps": 10}))
    write(root / "reports/quality/model-gate.json", json.dumps({
        "passed": gate_passed, "selected": "m1" if gate_passed else None, "selected_by": "best validation macro-F1",
        "checks": [{"check": "test macro-F1 - majority macro-F1", "minimum": 0.05, "passed": gate_passed,
                    "value": 0.4 if gate_passed else 0.01}]}))
    write(root / "reports/metrics/evaluation.json", json.dumps({"finetune": {"m1": {"test_macro_f1": 0.9}}}))
    stages = {
        "ingest@task": {"cmd": "python -m stages.ingest", "deps": entry(root, ["stages/ingest.py"]),
                        "params": {"params.yaml": {"ingest.task": {"labeled": True}}},
                        "outs": entry(root, ["data/ingested/task", "reports/quality/ingest-task.json",
                                             "reports/metrics/ingest-task.json"])},
        "evaluate": {"cmd": "python -m stages.evaluate",
                     "deps": entry(root, ["data/models/finetune", "stages/evaluate.py"]),
                     "params": {"params.yaml": {"evaluate": {"gate": {"min_macro_f1_margin": 0.05}}}},
                     "outs": entry(root, ["reports/quality/model-gate.json", "reports/metrics/evaluation.json"])},
    }
    for name in ("m1", "m2"):
        stages[f"finetune@{name}"] = {
            "cmd": f"python -m stages.finetune {name}",
            "deps": entry(root, ["data/ingested/task", "stages/finetune.py"]),
            "params": {"params.yaml": {"finetune.defaults": {"epochs": 3}}},
            "outs": entry(root, [f"data/models/finetune/{name}", f"reports/metrics/finetune-{name}.json"])}
    write(root / "dvc.lock", yaml.safe_dump({"schema": "2.0", "stages": stages}, sort_keys=False))
    return root
