"""The package stage's own logic: obeying the model gate, its params, the metadata it writes. Building,
exporting, importing and serving a Bento is tests/integration/test_package.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stages.config import ConfigError, build
from stages.serving.config import PackageConfig
from stages.serving.package import PackageRefused, model_metadata, read_gate
from stages.package import main
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
    assert cfg.export_format == "bento" and build(PackageConfig, {"export_format": "gz"}, "package").export_format
    with pytest.raises(ConfigError, match=r"export_format: 'zstd' is not one of \['bento', 'gz', 'tar'\]"):
        build(PackageConfig, {"export_format": "zstd"}, "package")


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


def test_resources_are_validated_and_declared_as_bentoml_takes_them():
    from stages.serving.config import ResourcesConfig

    assert build(PackageConfig, {}, "package").resources.as_service() == {"cpu": "2", "memory": "2Gi"}
    assert build(ResourcesConfig, {"cpu": 0.5, "memory": "512Mi"}, "r").as_service() == {"cpu": "0.5",
                                                                                          "memory": "512Mi"}
    with pytest.raises(ConfigError, match="resources.memory: '2GB' is not a quantity"):
        build(PackageConfig, {"resources": {"memory": "2GB"}}, "package")
    with pytest.raises(ConfigError, match="resources.cpu: must be > 0"):
        build(PackageConfig, {"resources": {"cpu": 0}}, "package")


def test_the_image_declares_this_python_and_installable_pins():
    import sys
    from importlib.metadata import version

    from stages.serving.package import SYSTEM_PACKAGES
    from stages.serving.package import image_options

    image = image_options()
    assert image["docker"] == {"distro": "debian", "python_version": f"{sys.version_info[0]}.{sys.version_info[1]}",
                               "system_packages": list(SYSTEM_PACKAGES)}
    pins = image["python"]["packages"]
    assert f"torch=={version('torch').split('+')[0]}" in pins and not image["python"]["lock_packages"]
    assert f"transformers=={version('transformers')}" in pins
    assert not any("+" in pin for pin in pins)  # a local build label (torch 2.13.0+cpu) is on no default index


def test_a_package_run_writes_model_cards_and_declares_the_image_and_resources(tmp_path):
    """The stage on the tiny workspace (fake weights; the classifier and a pre-trained BERT) into an empty store,
    in a child process (BentoML reads BENTOML_HOME once): the Bento's bento.yaml and READMEs, and the lineage
    check of the export, which compares each model's card with the one its record renders."""
    import subprocess
    import sys

    import yaml

    from stages.serving.package import python_version
    from stages.provenance.card import classifier_card, generative_card
    from tests.unit.provenance.workspace import package_run, write_ec_key

    key = write_ec_key(tmp_path / "signing.pem", "SECP384R1")
    proc, env, made = package_run(tmp_path, env={"LMPIPE_SIGNING_KEY": str(tmp_path / "signing.pem")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    root = tmp_path / "ws"
    exported = json.loads((root / "data/package/exported.json").read_text())  # this machine's Bento, untracked
    assert exported == {k: made[k] for k in ("bento", "exported", "bytes", "sha256", "manifest_sha256", "beside")}
    assert Path(exported["exported"]).is_file() and Path(exported["exported"]).stat().st_size == exported["bytes"]
    name, version = made["bento"].split(":")
    bento = tmp_path / "store/bentos" / name / version
    info = yaml.safe_load((bento / "bento.yaml").read_text())
    assert info["image"]["python_version"] == python_version()
    assert info["image"]["base_image"] == f"python:{python_version()}-slim"
    assert "torch==" in info["image"]["python_requirements"]
    assert info["services"][0]["config"]["resources"] == {"cpu": "1.5", "memory": "3Gi"}
    readme = (bento / "README.md").read_text()
    for part in ("# lm-pipeline: m1, gated and traced", f"| python | {python_version()} |",
                 "| resources | cpu 1.5, memory 3Gi |", "| test macro-F1 | 0.900 |", "Verdict: **PASSED**",
                 "1. Raw sources"):
        assert part in readme, part
    model_name, model_version = made["models"]["classifier"].split(":")
    model = tmp_path / "store/models" / model_name / model_version
    record = json.loads((model / "lineage.json").read_text())
    assert (model / "README.md").read_text() == classifier_card(record)
    bert_name, bert_version = made["models"]["generative"]["bert"].split(":")
    bert_card = (tmp_path / "store/models" / bert_name / bert_version / "README.md").read_text()
    assert bert_card == generative_card(record, "data/models/pretrain/bert")
    assert "| parameters | 4,321 |" in bert_card and "| training tokens | 98,765 |" in bert_card
    check = subprocess.run([sys.executable, "-m", "stages.lineage", made["exported"], "--verify", "--details", "--workspace",
                            str(root)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert check.returncode == 0 and "verify: OK" in check.stdout, check.stdout[-3000:] + check.stderr[-2000:]

    # the manifest (every file of the Bento, models included), its digest in the metrics, signed with the key
    import hashlib

    from stages.provenance.manifest import MANIFEST_FILE
    from stages.provenance.signing import key_fingerprint

    manifest = (bento / MANIFEST_FILE).read_bytes()
    listed = json.loads(manifest)["files"]
    assert made["manifest_sha256"] == hashlib.sha256(manifest).hexdigest() and made["manifest_files"] == len(listed)
    assert made["signing"]["public_key_sha256"] == key_fingerprint(key.public_key())
    assert made["signing"]["algorithm"] == "ecdsa-secp384r1" and made["provenance"]["signed"]
    assert f"models/{model_name}/{model_version}/model.sig" in listed
    assert Path(made["beside"]["public_key"]).read_bytes() == (tmp_path / "signing.pub.pem").read_bytes()
    assert info["labels"]["signed"] == "true" and "OpenSSF Model Signing signature" in readme
    assert {"bento.yaml", "src/bento_config.json", "env/python/requirements.txt", "env/docker/entrypoint.sh",
            "src/stages/serving/guard.py", f"models/{model_name}/{model_version}/model.yaml",
            f"models/{model_name}/{model_version}/model.safetensors",
            f"models/{bert_name}/{bert_version}/config.json"} <= set(listed)

    def lineage(*args):
        return subprocess.run([sys.executable, "-m", "stages.lineage", *args, "--verify", "--details"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)

    for target, args in ((made["exported"], ["--pin", made["sha256"]]),
                         (made["exported"], ["--pin", made["manifest_sha256"]]),
                         (made["exported"], ["--public-key", str(tmp_path / "signing.pub.pem")]),
                         (made["bento"], ["--pin", made["manifest_sha256"]]),  # the store tag bentoml serve runs
                         (str(bento), ["--public-key", str(tmp_path / "signing.pub.pem")])):
        check = lineage(target, *args)
        assert check.returncode == 0 and "every file of the Bento bound" in check.stdout, (
            target, args, check.stdout[-3000:] + check.stderr[-2000:])
    (bento / "src/bento_config.json").write_text("{}")
    check = lineage(made["bento"], "--pin", made["manifest_sha256"])
    assert check.returncode == 1 and "MISMATCH Bento src/bento_config.json: sha256" in check.stdout, check.stdout


def test_a_registry_urls_credentials_are_redacted():
    from stages.common.redact import redact_text, redact_url

    assert redact_url("s3://user:secret@host/bucket/x.bento") == "s3://host/bucket/x.bento"
    assert redact_url("https://user:token@host:8443/x?y=1") == "https://host:8443/x?y=1"
    assert redact_url("s3://bucket/bentos/x.bento") == "s3://bucket/bentos/x.bento"
    assert redact_url("/srv/dist/x.bento") == "/srv/dist/x.bento"
    assert redact_text("cannot write s3://user:secret@host/b (denied); https://t@h/x") == \
        "cannot write s3://host/b (denied); https://h/x"


def _fake_stage(monkeypatch, exported: str, fail: BaseException | None = None):
    """The package stage with the store, the build and the export replaced (they have their own test below):
    what it writes and logs about the export."""
    import types

    import stages.serving.package as pkg

    monkeypatch.setattr(pkg, "save_models", lambda record, cfg, **kw: {"classifier": "lm-classifier:v1",
                                                                       "generative": {}})
    monkeypatch.setattr(pkg, "build_bento", lambda *a, **kw: types.SimpleNamespace(tag="lm-pipeline:v1", path="."))
    monkeypatch.setattr(pkg, "seal", lambda bento: pkg.Sealed({"manifest_sha256": "c" * 64, "manifest_files": 3}, {}, {}))
    monkeypatch.setattr(pkg, "attest", lambda *a, **kw: b"{}")
    monkeypatch.setattr(pkg, "write_beside", lambda target, suffix, data: pkg.signing.sidecar(target, suffix))

    def export(bento, registry, fmt="bento"):
        if fail is not None:
            raise fail
        return exported

    monkeypatch.setattr(pkg, "export", export)
    monkeypatch.setattr(pkg, "archive_digest", lambda target: (10, "a" * 64))
    monkeypatch.setattr(pkg, "lineage_md5", lambda tag: "b" * 32)


def test_credentials_in_the_registry_url_reach_neither_the_metrics_nor_the_log(tmp_path, capsys, monkeypatch):
    root = make_workspace(tmp_path / "ws")
    monkeypatch.chdir(root)
    url = "s3://user:secret@host/bucket"
    (root / "params.yaml").write_text(f"package:\n  generative: []\n  registry: {url}\n")
    _fake_stage(monkeypatch, f"{url}/lm-pipeline-v1.bento")
    service = ["--service", str(Path(__file__).resolve().parents[2] / "infra/service.py")]
    assert main(["--metrics", str(tmp_path / "package.json"), *service]) == 0
    made = json.loads((tmp_path / "package.json").read_text())
    err = capsys.readouterr().err
    assert made["exported"] == "s3://host/bucket/lm-pipeline-v1.bento"
    assert made["sha256"] == "a" * 64 and made["bytes"] == 10 and made["manifest_sha256"] == "c" * 64
    assert "[package] exported: s3://host/bucket/lm-pipeline-v1.bento" in err
    assert "secret" not in err and "secret" not in json.dumps(made) and "user:" not in err
    _fake_stage(monkeypatch, "", fail=PermissionError(f"{url}/lm-pipeline-v1.bento: access denied"))
    assert main(["--metrics", str(tmp_path / "other.json"), *service]) == 1
    err = capsys.readouterr().err
    assert "error: s3://host/bucket/lm-pipeline-v1.bento: access denied" in err and "secret" not in err
    _fake_stage(monkeypatch, "", fail=ValueError(f"bad bucket in {url}"))
    with pytest.raises(RuntimeError) as raised:
        main(["--metrics", str(tmp_path / "other.json"), *service])
    assert "secret" not in str(raised.value) and "s3://host/bucket" in str(raised.value)


def test_a_remote_exports_digest_is_read_back_through_fsspec():
    import hashlib

    import fsspec

    from stages.serving.package import archive_digest

    fs = fsspec.filesystem("memory")
    fs.makedirs("/registry", exist_ok=True)
    with fs.open("/registry/lm-v1.bento", "wb") as f:
        f.write(b"an archive")
    assert archive_digest("memory://registry/lm-v1.bento") == (10, hashlib.sha256(b"an archive").hexdigest())


def test_a_frozen_or_lora_selection_whose_base_differs_is_refused_before_anything_is_made(tmp_path):
    """A folder holding a head (and adapter) ships with the base its adaptation.json names, which must be the one
    it was fine-tuned on (tests/unit/serving/test_package_adapted.py packages real ones)."""
    from tests.unit.provenance.workspace import package_run, relock

    def adapted(root: Path) -> None:
        (root / "data/models/finetune/m1/adaptation.json").write_text(json.dumps(
            {"method": "lora", "base": "data/models/pretrain/bert", "base_digest": "0" * 64}))
        relock(root)

    proc, _, made = package_run(tmp_path, before=adapted)
    assert proc.returncode == 1 and made is None
    assert ("error: data/models/finetune/m1: fine-tuned with method lora on the base data/models/pretrain/bert "
            "(adaptation.json): data/models/pretrain/bert has digest ") in proc.stderr, proc.stderr[-2000:]
    assert f"not {'0' * 64} as recorded (the base changed since fine-tuning)" in proc.stderr
    assert not (tmp_path / "store").exists() or not list((tmp_path / "store").rglob("model.yaml"))
