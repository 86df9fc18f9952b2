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


def relock(root: Path) -> None:
    """Every hash in ``root``'s dvc.lock recomputed from the files (after a test put other files in place)."""
    lock = yaml.safe_load((root / "dvc.lock").read_text())
    for stage in lock["stages"].values():
        for kind in ("deps", "outs"):
            stage[kind] = entry(root, [e["path"] for e in stage.get(kind, [])])
    (root / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False))


def write_ec_key(path: Path, curve: str = "SECP256R1"):
    """An unencrypted EC private key (PKCS#8 PEM) at ``path`` and its public half at ``<stem>.pub.pem``."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(getattr(ec, curve)())
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.with_suffix(".pub.pem").write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return key


def package_run(tmp_path: Path, *, env: dict | None = None, package: dict | None = None, before=None):
    """The package stage, in a child process (BentoML reads BENTOML_HOME once), on ``make_workspace`` plus a
    pre-trained BERT (config and tokenizer) shipped beside the classifier, into an empty store under ``tmp_path``
    and the registry ``tmp_path/dist``; ``before(root)`` runs on the finished workspace first. Returns (the process, its environment, package.json or None)."""
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[3]
    root = make_workspace(tmp_path / "ws")
    write(root / "data/models/pretrain/bert/config.json", "{}")
    write(root / "data/models/pretrain/bert/tokenizer.json", '{"model": {"vocab": {"[PAD]": 0}}}')
    write(root / "reports/metrics/pretrain-bert.json", json.dumps({"parameters": 4321, "tokens": 98765}))
    lock = yaml.safe_load((root / "dvc.lock").read_text())
    lock["stages"]["pretrain@bert"] = {"cmd": "python -m stages.pretrain", "deps": entry(root, ["stages/ingest.py"]),
                                       "outs": entry(root, ["data/models/pretrain/bert",
                                                            "reports/metrics/pretrain-bert.json"])}
    lock["stages"]["evaluate"]["deps"] += entry(root, ["data/models/pretrain"])
    (root / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False))
    (root / "params.yaml").write_text(yaml.safe_dump({"package": {
        "generative": ["bert"], "registry": str(tmp_path / "dist"), "resources": {"cpu": 1.5, "memory": "3Gi"},
        **(package or {})}}))
    if before is not None:
        before(root)
    env = {**os.environ, "BENTOML_HOME": str(tmp_path / "store"), "BENTOML_DO_NOT_TRACK": "True",
           "PYTHONPATH": str(repo), **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "stages.package", "--service", str(repo / "infra/service.py"),
                           "--metrics", str(tmp_path / "package.json"), "--exported",
                           str(root / "data/package/exported.json")], cwd=root, env=env, capture_output=True,
                          text=True, timeout=300)
    made = json.loads((tmp_path / "package.json").read_text()) if proc.returncode == 0 else None
    return proc, env, made
