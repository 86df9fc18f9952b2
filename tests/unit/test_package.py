"""The package stage's own logic: obeying the model gate, its params, the metadata it writes. Building,
exporting, importing and serving a Bento is tests/integration/test_package.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stages.config import ConfigError, build
from stages.package import PackageConfig, PackageRefused, main, model_metadata, read_gate
from stages.provenance.record import collect
from tests.unit.provenance.workspace import make_workspace


def test_a_failed_model_gate_packages_nothing_and_keeps_the_previous_outputs(tmp_path, capsys, monkeypatch):
    root = make_workspace(tmp_path, gate_passed=False)
    metrics = tmp_path / "package.json"
    metrics.write_text('{"bento": "previous:v0"}')
    monkeypatch.chdir(root)
    (root / "params.yaml").write_text("package:\n  registry: dist\n")
    assert main(["--metrics", str(metrics)]) == 1
    err = capsys.readouterr().err
    assert "model-gate.json: the model gate did not pass (test macro-F1 - majority macro-F1 = 0.01 " in err
    assert metrics.read_text() == '{"bento": "previous:v0"}'


def test_read_gate_needs_a_verdict_and_a_selection(tmp_path):
    with pytest.raises(FileNotFoundError, match="run the evaluate stage"):
        read_gate(tmp_path / "missing.json")
    (tmp_path / "g.json").write_text(json.dumps({"passed": True, "selected": None}))
    with pytest.raises(PackageRefused, match="selected no model"):
        read_gate(tmp_path / "g.json")


def test_params_are_validated_with_the_key_named():
    cfg = build(PackageConfig, {}, "package")
    assert cfg.generative == ("bert", "gpt", "t5") and cfg.registry == "dist" and cfg.batching.enabled
    with pytest.raises(ConfigError, match="generative: unknown paradigm"):
        build(PackageConfig, {"generative": ["bert", "xlnet"]}, "package")
    with pytest.raises(ConfigError, match="name: 'Bad Name' is not a valid BentoML name"):
        build(PackageConfig, {"name": "Bad Name"}, "package")
    with pytest.raises(ConfigError, match="limits"):
        build(PackageConfig, {"limits": {"max_texts": 0}}, "package")


def test_labels_and_metadata_carry_the_audit_summary(tmp_path):
    root = make_workspace(tmp_path)
    record = collect(root, model_name="m1", model_dir=Path("data/models/finetune/m1"),
                     gate_report=Path("reports/quality/model-gate.json"))
    labels, metadata = model_metadata(record)
    assert all(isinstance(v, str) for v in labels.values())
    assert labels["selected"] == "m1" and labels["model_gate"] == "passed"
    assert metadata["dvc_lock"]["finetune@m1"]["outs"]["data/models/finetune/m1"] == record["model"]["md5"]
    assert set(metadata["dvc_lock"]) == {"ingest@task", "finetune@m1", "finetune@m2", "evaluate"}
    assert metadata["gates"]["reports/quality/ingest-task.json"]["success"] is True
    assert metadata["params"]["evaluate"]["gate"]["min_macro_f1_margin"] == 0.05
    assert metadata["evaluation"] == {"finetune": {"m1": {"test_macro_f1": 0.9}}}
    json.dumps(metadata)  # BentoML stores it as YAML: plain data only
