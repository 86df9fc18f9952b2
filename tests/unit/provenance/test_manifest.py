"""Every file of a Bento against its manifest, and the manifest bound by a pin or an ed25519 signature: for an
exported archive, a Bento folder and a Bento in the store (read as a folder, its models from the store)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from stages.lineage import main
from stages.provenance.hashing import dir_md5
from stages.provenance.manifest import MANIFEST_FILE, SIGNATURE_FILE, render_manifest, write_manifest
from tests.unit.provenance.test_record_and_verify import record_of
from tests.unit.provenance.workspace import make_workspace

BENTO_YAML = b"name: lm\nversion: v1\nmodels:\n- tag: lm-classifier:v1\n"
SO = "src/stages/serving/classifier.cpython-311-x86_64-linux-gnu.so"


def bento_files(root: Path) -> dict[str, bytes]:
    """A Bento's files as the exported archive lays them out: config, code, requirements, env scripts, the
    model with its lineage and BentoML's model.yaml."""
    record = record_of(root)
    record["served_code"] = {"service.py": hashlib.md5(b"# service\n").hexdigest()}
    files = {"bento.yaml": BENTO_YAML, "README.md": b"# lm\n", "src/service.py": b"# service\n",
             "src/bento_config.json": b'{"classifier": "lm-classifier:v1"}',
             "env/python/requirements.txt": b"torch==2.0\n", "env/docker/entrypoint.sh": b"#!/bin/sh\nexec \"$@\"\n",
             "env/docker/Dockerfile": b"FROM python:3.11-slim\n",
             "models/lm-classifier/v1/model.yaml": b"name: lm-classifier\nversion: v1\n",
             "models/lm-classifier/v1/lineage.json": json.dumps(record).encode()}
    for f in (root / "data/models/finetune/m1").iterdir():
        files[f"models/lm-classifier/v1/{f.name}"] = f.read_bytes()
    return files


def manifest_of(files: dict[str, bytes], tag: str = "lm:v1") -> bytes:
    return render_manifest(tag, {rel: hashlib.sha256(data).hexdigest() for rel, data in files.items()})


def archive(path: Path, files: dict[str, bytes], *, manifest: bytes | None = None, signature: bytes | None = None,
            latest: bool = True) -> Path:
    def add(tar, name, data):
        info = tarfile.TarInfo(f"./{name}")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))

    with tarfile.open(path, "w:xz") as tar:
        for rel, data in files.items():
            add(tar, rel, data)
        if latest:  # BentoML's export adds it beside each model
            add(tar, "models/lm-classifier/latest", b"v1")
        if manifest is not None:
            add(tar, MANIFEST_FILE, manifest)
        if signature is not None:
            add(tar, SIGNATURE_FILE, signature)
    return path


def run(capsys, *args) -> tuple[int, str]:
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.fixture
def ws(tmp_path, monkeypatch):
    root = make_workspace(tmp_path / "ws")
    monkeypatch.chdir(tmp_path)  # no dvc.lock here or above: no workspace to lean on
    return root


def test_a_sealed_bento_passes_pinned_by_its_manifest_or_archive_digest(ws, tmp_path, capsys):
    files = bento_files(ws)
    manifest = manifest_of(files)
    bento = archive(tmp_path / "lm-v1.bento", files, manifest=manifest)
    code, out = run(capsys, bento, "--verify", "--details")
    assert code == 0 and "verify: OK, UNPINNED" in out and "consistency, not origin" in out
    assert f"agree with its own {MANIFEST_FILE} (SHA-256 {hashlib.sha256(manifest).hexdigest()})" in out
    assert "  UNVERIFIED bento.yaml" in out and "  UNVERIFIED env/docker/entrypoint.sh" in out
    for pin in (hashlib.sha256(manifest).hexdigest(), hashlib.sha256(bento.read_bytes()).hexdigest()):
        code, out = run(capsys, bento, "--verify", "--details", "--pin", pin)
        assert code == 0 and "every file of the Bento bound" in out and "UNVERIFIED" not in out, out
    code, out = run(capsys, bento, "--verify", "--details", "--pin", "0" * 64)
    assert code == 1 and f"pinned {'0' * 64}, but the manifest's SHA-256 is" in out
    # --strict also asks for the standard signatures and provenance, which a Bento of this format lacks
    code, out = run(capsys, bento, "--verify", "--details", "--strict", "--pin", hashlib.sha256(manifest).hexdigest())
    assert code == 1 and "every file of the Bento bound" not in out
    assert "MISMATCH no provenance/provenance.intoto.json in this Bento (packaged before the standard formats)" in out


@pytest.mark.parametrize("rel", ["bento.yaml", "src/bento_config.json", "env/python/requirements.txt",
                                 "env/docker/entrypoint.sh", "models/lm-classifier/v1/model.yaml", "README.md"])
def test_any_tampered_file_is_a_mismatch_naming_it(ws, tmp_path, capsys, rel):
    files = bento_files(ws)
    manifest = manifest_of(files)
    files[rel] = files[rel] + b"\n# tampered\n"
    code, out = run(capsys, archive(tmp_path / "t.bento", files, manifest=manifest), "--verify", "--details")
    assert code == 1 and f"MISMATCH Bento {rel}: sha256 " in out and "the manifest lists" in out


def forge(root: Path, files: dict[str, bytes]) -> dict[str, bytes]:
    """A changed weight file with lineage.json rewritten to match it (a record consistent with itself)."""
    rel = "models/lm-classifier/v1/model.safetensors"
    files = {**files, rel: files[rel] + b"tampered"}
    record = json.loads(files["models/lm-classifier/v1/lineage.json"])
    new = hashlib.md5(files[rel]).hexdigest()
    record["model"]["files"]["model.safetensors"] = new
    record["model"]["md5"] = dir_md5(record["model"]["files"])
    for path, info in record["files"].items():
        full = f"{record['model']['path']}/model.safetensors"
        if full.startswith(path.rstrip("/") + "/"):
            info["files"][full[len(path.rstrip("/")) + 1:]] = new
            info["md5"] = dir_md5(info["files"])
            for entry in record["stages"].values():
                for e in entry.get("deps", []) + entry.get("outs", []):
                    if e["path"] == path:
                        e["md5"] = info["md5"]
    files["models/lm-classifier/v1/lineage.json"] = json.dumps(record).encode()
    return files


def test_a_forged_weight_file_lineage_and_manifest_fail_against_the_pin(ws, tmp_path, capsys):
    good = bento_files(ws)
    pin = hashlib.sha256(manifest_of(good)).hexdigest()
    forged = forge(ws, good)
    # the old manifest left in place: the weight file and lineage.json are named
    code, out = run(capsys, archive(tmp_path / "f1.bento", forged, manifest=manifest_of(good)), "--verify", "--details")
    assert code == 1 and "MISMATCH Bento models/lm-classifier/v1/model.safetensors: sha256" in out
    assert "MISMATCH Bento models/lm-classifier/v1/lineage.json: sha256" in out
    # the manifest rewritten too: consistent, and the audit says that this is all it can say
    bento = archive(tmp_path / "f2.bento", forged, manifest=manifest_of(forged))
    code, out = run(capsys, bento, "--verify", "--details")
    assert code == 0 and "verify: OK, UNPINNED" in out and "consistency, not origin" in out
    code, out = run(capsys, bento, "--verify", "--details", "--pin", pin)
    assert code == 1 and f"pinned {pin}, but the manifest's SHA-256 is" in out


def test_unlisted_files_byte_code_native_extensions_and_links_are_mismatches(ws, tmp_path, capsys):
    files = bento_files(ws)
    extra = {**files, "src/stages/sitecustomize.py": b"import os\n", SO: b"\x7fELF",
             "src/__pycache__/service.cpython-311.pyc": b"\x00"}
    # even listed in a (rewritten) manifest, byte-code and native code are mismatches
    bento = archive(tmp_path / "x.bento", extra, manifest=manifest_of({**files, SO: b"\x7fELF"}))
    code, out = run(capsys, bento, "--verify", "--details")
    assert code == 1
    assert f"MISMATCH Bento {SO}: a native extension module in the Bento" in out
    assert "MISMATCH Bento src/__pycache__/service.cpython-311.pyc: byte-code in the Bento" in out
    assert "MISMATCH Bento src/stages/sitecustomize.py: not in the manifest" in out
    missing = dict(files)
    del missing["env/docker/Dockerfile"]
    code, out = run(capsys, archive(tmp_path / "m.bento", missing, manifest=manifest_of(files)), "--verify", "--details")
    assert code == 1 and "MISMATCH Bento env/docker/Dockerfile: missing" in out
    code, out = run(capsys, archive(tmp_path / "l.bento", files, manifest=manifest_of(files), latest=False),
                    "--verify", "--details")
    assert code == 0  # BentoML's models/<name>/latest pointer is not needed; a wrong one is a mismatch:
    bad = archive(tmp_path / "b.bento", files, manifest=manifest_of(files), latest=False)
    with tarfile.open(bad, "w:xz") as tar:
        for rel, data in {**files, MANIFEST_FILE: manifest_of(files), "models/lm-classifier/latest": b"v0"}.items():
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("src/stages/evil.py")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    code, out = run(capsys, bad, "--verify", "--details")
    assert code == 1 and "MISMATCH Bento models/lm-classifier/latest: not in the manifest" in out
    assert "MISMATCH Bento src/stages/evil.py: not a regular file" in out


def folder_bento(path: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_bytes(data)
    return path


def test_a_bento_folder_is_checked_and_pinned_like_an_archive(ws, tmp_path, capsys):
    files = bento_files(ws)
    manifest = manifest_of(files)
    folder = folder_bento(tmp_path / "bento", {**files, MANIFEST_FILE: manifest})
    pin = hashlib.sha256(manifest).hexdigest()
    code, out = run(capsys, folder, "--verify", "--details", "--pin", pin)
    assert code == 0 and "every file of the Bento bound" in out, out
    folder_bento(folder, {SO: b"\x7fELF", "src/bento_config.json": b'{"classifier": "other:v9"}'})
    code, out = run(capsys, folder, "--verify", "--details", "--pin", pin)
    assert code == 1 and f"MISMATCH Bento {SO}: a native extension module" in out
    assert "MISMATCH Bento src/bento_config.json: sha256" in out


def test_a_bento_in_the_store_reads_its_models_from_the_model_store(ws, tmp_path, capsys, monkeypatch):
    """``lm:v1`` as ``bentoml serve`` runs it: the Bento's folder in the store, its model in the model store."""
    from bentoml.exceptions import NotFound

    files = bento_files(ws)
    manifest = manifest_of(files)
    bento_dir = folder_bento(tmp_path / "store/bentos/lm/v1",
                             {rel: d for rel, d in {**files, MANIFEST_FILE: manifest}.items()
                              if not rel.startswith("models/")})
    model_dir = folder_bento(tmp_path / "store/models/lm-classifier/v1",
                             {rel.split("/", 3)[3]: d for rel, d in files.items() if rel.startswith("models/")})

    class Stored:
        def __init__(self, path, tag):
            self.path, self.tag = str(path), tag

    def bento_get(tag):
        if str(tag) != "lm:v1":
            raise NotFound(tag)
        return Stored(bento_dir, "lm:v1")

    import importlib

    monkeypatch.setattr(importlib.import_module("bentoml.bentos"), "get", bento_get)
    monkeypatch.setattr(importlib.import_module("bentoml.models"), "get", lambda tag: Stored(model_dir, str(tag)))
    pin = hashlib.sha256(manifest).hexdigest()
    code, out = run(capsys, "lm:v1", "--verify", "--details", "--pin", pin)
    assert code == 0 and "every file of the Bento bound" in out, out
    (model_dir / "model.safetensors").write_bytes(b"other weights")
    code, out = run(capsys, "lm:v1", "--verify", "--details", "--pin", pin)
    assert code == 1 and "MISMATCH Bento models/lm-classifier/v1/model.safetensors: sha256" in out


def test_write_manifest_lists_every_file_of_the_built_bento(ws, tmp_path):
    files = bento_files(ws)
    bento_dir = folder_bento(tmp_path / "b", {r: d for r, d in files.items() if not r.startswith("models/")})
    model_dir = folder_bento(tmp_path / "m", {r.split("/", 3)[3]: d for r, d in files.items()
                                              if r.startswith("models/")})
    made, hashes = write_manifest(bento_dir, "lm:v1", {"lm-classifier:v1": model_dir})
    assert (bento_dir / MANIFEST_FILE).read_bytes() == manifest_of(files)
    assert made == {"manifest_sha256": hashlib.sha256(manifest_of(files)).hexdigest(), "manifest_files": len(files)}
    assert hashes == json.loads(manifest_of(files))["files"]


def sign(manifest: bytes, private_key) -> bytes:
    """The ed25519 signature of a manifest as Bentos packaged before the standard formats carry it."""
    import base64

    return base64.b64encode(private_key.sign(manifest)) + b"\n"


def keys(tmp_path: Path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    out = []
    for name in ("operator", "other"):
        key = Ed25519PrivateKey.generate()
        (tmp_path / f"{name}.pem").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        (tmp_path / f"{name}.pub.pem").write_bytes(key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        out.append(key)
    return out


def test_a_signed_manifest_binds_the_bento_to_the_operators_key(ws, tmp_path, capsys):
    operator, _ = keys(tmp_path)
    files = bento_files(ws)
    manifest = manifest_of(files)
    signed = archive(tmp_path / "s.bento", files, manifest=manifest, signature=sign(manifest, operator))
    code, out = run(capsys, signed, "--verify", "--details")
    assert code == 0 and "UNPINNED" in out and "give --public-key PEM to check it" in out
    code, out = run(capsys, signed, "--verify", "--details", "--public-key", tmp_path / "operator.pub.pem")
    assert code == 0 and "bound: signature:" in out and "every file of the Bento bound" in out, out
    code, out = run(capsys, signed, "--verify", "--details", "--public-key", tmp_path / "other.pub.pem")
    assert code == 1 and f"{SIGNATURE_FILE} is not a signature of this manifest" in out
    forged = forge(ws, files)  # re-signing needs the operator's private key
    code, out = run(capsys, archive(tmp_path / "f.bento", forged, manifest=manifest_of(forged),
                                    signature=sign(manifest, operator)),
                    "--verify", "--details", "--public-key", tmp_path / "operator.pub.pem")
    assert code == 1 and "is not a signature of this manifest" in out
    code, out = run(capsys, archive(tmp_path / "u.bento", files, manifest=manifest),
                    "--verify", "--details", "--public-key", tmp_path / "operator.pub.pem")
    assert code == 1 and f"{SIGNATURE_FILE} is missing" in out
    code, out = run(capsys, signed, "--verify", "--details", "--public-key", tmp_path / "operator.pem")
    assert code == 2 and "not a PEM public key" in out
