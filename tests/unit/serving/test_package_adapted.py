"""A frozen or lora selection packaged (issue 53): the classifier's model holds the head (and PEFT adapter), its
base ships byte for byte as its own model; the service loads both from the Bento's models and answers as the
workspace's classifier does; the lineage check and the service's load both bind the adapter to its base by
digest, and name a changed byte of either."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.unit.finetuning.conftest import write_params
from tests.unit.provenance.workspace import package_run, relock, write_ec_key

BASE = "data/models/pretrain/bert"
TEXTS = ["The old farmer visited the castle near the museum.", "A market by the station.",
         "The harbour and the bridge on the river.", "word " * 60]

# The packaged service in a child process (BentoML reads BENTOML_HOME once), its code from the Bento's src/:
# the classifier's predictions and the lineage endpoint's answer, or the error its load raised.
SERVE = """
import json, sys
sys.path.insert(0, ".")
try:
    import service
    svc = service.LMPipeline.inner()
except Exception as exc:
    print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
else:
    print(json.dumps({"summary": svc.summary, "predictions": svc.classifier.classify(json.loads(sys.argv[1]))}))
"""


@pytest.fixture(scope="module")
def trained(models, tmp_path_factory):
    """A frozen and a lora BERT fine-tuned by the stage on a base at the workspace path ``BASE``."""
    from stages.finetune import main

    root = tmp_path_factory.mktemp("adapted")
    shutil.copytree(models.models["bert"], root / BASE)
    out = {}
    cwd = os.getcwd()
    os.chdir(root)  # adaptation.json names the base as the stage was given it: relative to the workspace
    try:
        for method in ("frozen", "lora"):
            params = write_params(root / f"{method}.yaml", epochs=1, head="pooled", method=method)
            assert main(["--paradigm", "bert", "--init", "pretrained", "--params", str(params), "--task",
                         str(models.task), "--model", BASE, "--output", str(root / method), "--metrics",
                         str(root / f"{method}.json"), "--report", str(root / f"{method}-gate.json"),
                         "--no-progress"]) == 0
            out[method] = root / method
    finally:
        os.chdir(cwd)
    out["base"] = root / BASE
    return out


def _install(trained: dict, method: str):
    """``package_run``'s ``before``: the workspace's selected m1 is the adapted folder, its base at ``BASE``."""
    def before(root: Path) -> None:
        shutil.rmtree(root / BASE)
        shutil.copytree(trained["base"], root / BASE)
        shutil.rmtree(root / "data/models/finetune/m1")
        shutil.copytree(trained[method], root / "data/models/finetune/m1")
        relock(root)

    return before


def _serve(bento: Path, env: dict) -> dict:
    proc = subprocess.run([sys.executable, "-c", SERVE, json.dumps(TEXTS)], cwd=bento / "src",
                          env={**env, "PYTHONPATH": str(bento / "src")}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _lineage(env: dict, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stages.lineage", *args, "--verify", "--details"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def _flip(path: Path) -> bytes:
    """Change the last byte of ``path``; returns the original bytes."""
    data = path.read_bytes()
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    return data


@pytest.mark.parametrize("method", ["lora", "frozen"])
def test_an_adapted_selection_ships_its_base_and_serves_the_workspace_predictions(trained, tmp_path, method,
                                                                                  monkeypatch):
    from stages.finetuning.adapt import base_digest
    from stages.provenance.signing import PROVENANCE_FILE, read_envelope
    from stages.serving.inference import TextClassifier

    write_ec_key(tmp_path / "signing.pem")
    proc, env, made = package_run(tmp_path, env={"LMPIPE_SIGNING_KEY": str(tmp_path / "signing.pem")},
                                  before=_install(trained, method))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "(the base of its " + method + " head)" in proc.stderr
    root, store = tmp_path / "ws", tmp_path / "store"
    adaptation = json.loads((root / "data/models/finetune/m1/adaptation.json").read_text())
    assert adaptation["base"] == BASE and adaptation["base_digest"] == base_digest(root / BASE)

    def folder(tag: str) -> Path:
        name, version = tag.split(":")
        return store / "models" / name / version

    clf, base = folder(made["models"]["classifier"]), folder(made["models"]["base"])
    # the classifier: the head (and adapter) only, labelled with its method and base; the base: byte for byte
    assert (clf / "head.safetensors").is_file() and not (clf / "model.safetensors").exists()
    assert (clf / "adapter_model.safetensors").is_file() == (method == "lora")
    clf_yaml, base_yaml = (yaml.safe_load((f / "model.yaml").read_text()) for f in (clf, base))
    assert clf_yaml["labels"]["method"] == method and clf_yaml["labels"]["base"] == made["models"]["base"]
    assert clf_yaml["metadata"]["adaptation"] == {"method": method, "base": {
        "tag": made["models"]["base"], "source": BASE, "digest": adaptation["base_digest"]}}
    assert base_yaml["labels"]["role"] == "base" and base_yaml["metadata"]["digest"] == adaptation["base_digest"]
    for f in sorted((root / BASE).iterdir()):  # its own card too: the digest is the one fine-tuning recorded
        assert (base / f.name).read_bytes() == f.read_bytes(), f.name
    assert base_digest(base, stored=True) == adaptation["base_digest"] and (base / "model.sig").is_file()
    record = json.loads((clf / "lineage.json").read_text())
    assert record["model"]["adaptation"]["base_digest"] == adaptation["base_digest"]
    name, version = made["bento"].split(":")
    bento = store / "bentos" / name / version
    assert json.loads((bento / "src/bento_config.json").read_text())["base"] == made["models"]["base"]
    assert f"Base model ({made['models']['base']})" in (bento / "README.md").read_text()
    _, statement = read_envelope((bento / PROVENANCE_FILE).read_bytes(), "provenance")
    deps = {d["name"]: d for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"]}
    assert deps[BASE]["digest"] == {"sha256": adaptation["base_digest"]}
    assert deps[BASE]["annotations"]["base_of"] == "data/models/finetune/m1"
    assert deps[BASE]["annotations"]["packaged_as"] == made["models"]["base"]
    assert deps["data/models/finetune/m1"]["annotations"]["base_digest"] == adaptation["base_digest"]
    assert made["models"]["base"] in made["signing"]["models"]

    # the same answers from the Bento's models as from the workspace folder (which finds its base by path)
    monkeypatch.chdir(root)
    expected = TextClassifier(root / "data/models/finetune/m1", device="cpu").classify(TEXTS)
    assert TextClassifier(clf, device="cpu", base=base).classify(TEXTS) == expected
    served = _serve(bento, env)
    assert served.get("predictions") == expected, served
    assert served["summary"]["adaptation"] == {"method": method, "base": made["models"]["base"],
                                               "base_digest": adaptation["base_digest"]}

    key = ["--public-key", str(tmp_path / "signing.pub.pem")]
    check = _lineage(env, tmp_path, made["exported"], "--workspace", str(root), *key)
    assert check.returncode == 0 and "every file of the Bento bound" in check.stdout, check.stdout[-3000:]
    assert f"base binding: {made['models']['base']} (from {BASE}) has the folder digest" in check.stdout

    # a changed byte of the base, then of the head or adapter: named by the lineage check and by the service
    weights = base / "model.safetensors"
    original = _flip(weights)
    check = _lineage(env, tmp_path, made["bento"], "--pin", made["manifest_sha256"])
    base_folder = f"models/{made['models']['base'].replace(':', '/')}"
    assert check.returncode == 1 and f"MISMATCH {base_folder}: base binding: the base of the {method} " \
        f"classifier {made['models']['classifier']} has folder digest" in check.stdout, check.stdout[-3000:]
    assert f"MISMATCH {made['models']['base']} (packaged)/model.safetensors: md5" in check.stdout
    served = _serve(bento, env)
    assert "error" in served and f"its base model {base} (packaged from {BASE}) has digest" in served["error"]
    assert f"not {adaptation['base_digest']} as recorded in adaptation.json" in served["error"]
    weights.write_bytes(original)
    trained_file = "adapter_model.safetensors" if method == "lora" else "head.safetensors"
    _flip(clf / trained_file)
    check = _lineage(env, tmp_path, made["bento"], "--pin", made["manifest_sha256"])
    assert check.returncode == 1 and f"MISMATCH {made['models']['classifier']} (packaged)/{trained_file}: md5" \
        in check.stdout, check.stdout[-3000:]
    served = _serve(bento, env)
    assert "error" in served and "differs from its lineage record" in served["error"]
    assert f"{clf}/{trained_file}: md5" in served["error"]


def test_a_base_that_changed_since_fine_tuning_is_refused_before_anything_is_made(trained, tmp_path):
    def changed(root: Path) -> None:
        _install(trained, "lora")(root)
        (root / BASE / "extra.txt").write_text("changed")
        relock(root)

    proc, _, made = package_run(tmp_path, before=changed)
    assert proc.returncode == 1 and made is None
    assert (f"error: data/models/finetune/m1: fine-tuned with method lora on the base {BASE} (adaptation.json): "
            f"{BASE} has digest ") in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "store").exists() or not list((tmp_path / "store").rglob("model.yaml"))
