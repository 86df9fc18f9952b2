"""The standard formats a packaged Bento carries: OpenSSF Model Signing signatures of every model folder, checked
with the stock `model_signing` command, and the in-toto SLSA provenance in a DSSE envelope, checked with a DSSE
verification written here from the spec and with the in-toto libraries; then `stages.lineage --verify` on both,
and the signing key's life cycle. One package run on the tiny workspace (fake weights) serves the module."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from stages.provenance.signing import (MODEL_SIGNATURE, PROVENANCE_FILE, SigningError, default_key_path,
                                       load_signing_key)
from tests.unit.provenance.workspace import package_run, write_ec_key

CLI = str(Path(sys.executable).parent / "model_signing")


@pytest.fixture(scope="module")
def signed(tmp_path_factory):
    """A package run with no key named: the default key is made under $XDG_CONFIG_HOME on first use. The
    workspace is a git repository, so the provenance names a code revision."""
    tmp = tmp_path_factory.mktemp("signed")
    config = tmp / "config"
    git_env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
               "GIT_COMMITTER_EMAIL": "t@example.org"}

    def commit(root: Path) -> None:
        for command in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "x"]):
            subprocess.run(command, cwd=root, check=True, capture_output=True, env={**os.environ, **git_env})

    proc, env, made = package_run(tmp, env={"XDG_CONFIG_HOME": str(config), **git_env}, before=commit)
    assert proc.returncode == 0, proc.stderr[-3000:]
    store = tmp / "store"
    models = {tag: store / "models" / tag.split(":")[0] / tag.split(":")[1]
              for tag in [made["models"]["classifier"], *made["models"]["generative"].values()]}
    name, version = made["bento"].split(":")
    return {"tmp": tmp, "env": env, "made": made, "log": proc.stderr, "models": models, "config": config,
            "bento": store / "bentos" / name / version, "pub": Path(made["beside"]["public_key"])}


def cli_verify(folder: Path, pub: Path) -> subprocess.CompletedProcess:
    """`model_signing verify key` as a user runs it (its signature is the folder's model.sig)."""
    return subprocess.run([CLI, "verify", "key", str(folder), "--signature", str(folder / MODEL_SIGNATURE),
                           "--public_key", str(pub)], capture_output=True, text=True, timeout=120)


def test_the_key_is_made_on_first_use_outside_the_workspace_and_its_public_half_exported(signed):
    key = signed["config"] / "lm-pipeline" / "signing-key.pem"
    assert key.is_file() and stat.S_IMODE(key.stat().st_mode) == 0o600
    assert f"created the signing key {key}" in signed["log"]
    from cryptography.hazmat.primitives import serialization

    private = serialization.load_pem_private_key(key.read_bytes(), password=None)
    assert signed["pub"].read_bytes() == private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert signed["pub"].name.endswith(".pub.pem") and signed["pub"].parent == signed["tmp"] / "dist"
    assert not any(p.name == "signing-key.pem" for p in signed["tmp"].joinpath("dist").rglob("*"))
    made = signed["made"]
    assert made["signing"]["algorithm"] == "ecdsa-secp256r1" and made["provenance"]["signed"]
    # the second run reuses it
    again = load_signing_key(env={"XDG_CONFIG_HOME": str(signed["config"])})
    assert not again.created and again.fingerprint == made["signing"]["public_key_sha256"]


def test_the_stock_verifier_accepts_each_model_folder_as_packaged_and_after_export_and_import(signed, tmp_path):
    for folder in signed["models"].values():
        proc = cli_verify(folder, signed["pub"])
        assert proc.returncode == 0 and "Verification succeeded" in proc.stdout + proc.stderr, proc.stderr
    home = tmp_path / "imported"
    env = {**signed["env"], "BENTOML_HOME": str(home)}
    proc = subprocess.run([str(Path(sys.executable).parent / "bentoml"), "import", signed["made"]["exported"]],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for tag in signed["models"]:
        folder = home / "models" / tag.split(":")[0] / tag.split(":")[1]
        assert (folder / MODEL_SIGNATURE).is_file()
        proc = cli_verify(folder, signed["pub"])
        assert proc.returncode == 0, proc.stderr


def _tamper(folder: Path, how: str) -> None:
    if how == "weights byte":
        data = bytearray((folder / "model.safetensors").read_bytes())
        data[-1] ^= 1
        (folder / "model.safetensors").write_bytes(bytes(data))
    elif how == "renamed file":
        (folder / "finetune.json").rename(folder / "finetune.json.bak")
    elif how == "added file":
        (folder / "extra.bin").write_bytes(b"\0")
    elif how == "removed file":
        (folder / "finetune.json").unlink()
    elif how == "config":
        (folder / "config.json").write_text('{"name": "m2"}')
    elif how == "tokenizer":
        (folder / "tokenizer.json").write_text('{"model": {"vocab": {"[PAD]": 1}}}')
    elif how == "model card":
        (folder / "README.md").write_text((folder / "README.md").read_text() + "\nbetter than it is\n")


@pytest.mark.parametrize("how", ["weights byte", "renamed file", "added file", "removed file", "config",
                                 "tokenizer", "model card"])
def test_the_stock_verifier_rejects_a_folder_after_any_one_change(signed, tmp_path, how):
    tag = next(t for t in signed["models"] if ("bert" in t) == (how == "tokenizer"))
    folder = tmp_path / "copy"
    shutil.copytree(signed["models"][tag], folder)
    assert cli_verify(folder, signed["pub"]).returncode == 0
    _tamper(folder, how)
    proc = cli_verify(folder, signed["pub"])
    assert proc.returncode != 0 and "Verification failed" in proc.stdout + proc.stderr, how


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding, from the spec."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 " + str(len(t)).encode() + b" " + t + b" " + str(len(payload)).encode() + b" " + payload


def dsse_valid(envelope: dict, pub_pem: bytes) -> bool:
    """A DSSE check written from the spec with `cryptography` alone: some signature over PAE(type, payload)
    verifies with the key (ECDSA with the curve's hash)."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = serialization.load_pem_public_key(pub_pem)
    digest = {256: hashes.SHA256, 384: hashes.SHA384, 521: hashes.SHA512}[key.curve.key_size]()
    message = pae(envelope["payloadType"], base64.b64decode(envelope["payload"]))
    for sig in envelope["signatures"]:
        try:
            key.verify(base64.b64decode(sig["sig"]), message, ec.ECDSA(digest))
            return True
        except InvalidSignature:
            continue
    return False


def _reenvelope(envelope: dict, statement: dict) -> dict:
    return {**envelope, "payload": base64.b64encode(json.dumps(statement).encode()).decode()}


def test_the_provenance_is_slsa_v1_and_verifies_with_code_that_is_not_the_projects(signed):
    from google.protobuf import json_format
    from in_toto_attestation.v1 import statement_pb2
    from in_toto_attestation.v1.statement import Statement
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import SSlibKey
    from cryptography.hazmat.primitives import serialization

    raw = (signed["bento"] / PROVENANCE_FILE).read_bytes()
    assert Path(signed["made"]["beside"]["provenance"]).read_bytes() == raw
    envelope = json.loads(raw)
    pub = signed["pub"].read_bytes()
    assert envelope["payloadType"] == "application/vnd.in-toto+json" and dsse_valid(envelope, pub)
    key = SSlibKey.from_crypto(serialization.load_pem_public_key(pub))
    Envelope.from_dict(json.loads(raw)).verify([key], 1)  # the in-toto project's verifier; raises if invalid

    statement = json.loads(base64.b64decode(envelope["payload"]))
    Statement.copy_from_pb(json_format.ParseDict(statement, statement_pb2.Statement())).validate()
    assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
    subjects = {s["name"]: s["digest"]["sha256"] for s in statement["subject"]}
    bento = signed["bento"]
    for rel in ("bento.yaml", "src/service.py", "src/stages/serving/guard.py", "provenance/manifest.json"):
        assert subjects[rel] == hashlib.sha256((bento / rel).read_bytes()).hexdigest(), rel
    for tag, folder in signed["models"].items():  # a model folder by the digest its own model.sig signs
        name, version = tag.split(":")
        bundle = json.loads((folder / MODEL_SIGNATURE).read_bytes())
        inner = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
        assert subjects[f"models/{name}/{version}"] == inner["subject"][0]["digest"]["sha256"]
    build = statement["predicate"]["buildDefinition"]
    assert build["externalParameters"]["stages"]["finetune@m1"]["cmd"] == "python -m stages.finetune m1"
    assert build["externalParameters"]["stages"]["ingest@task"]["params"] == {
        "params.yaml": {"ingest.task": {"labeled": True}}}
    deps = {d["name"]: d for d in build["resolvedDependencies"]}
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=signed["tmp"] / "ws", capture_output=True,
                          text=True).stdout.strip()
    assert deps["code"]["digest"] == {"gitCommit": head}
    assert deps["task[0]: Packages.lz4"]["digest"] == {"sha256": "ab" * 32}
    assert deps["task[0]: Packages.lz4"]["annotations"]["licence"] == "each package's own licence"
    assert {"data/models/finetune/m1", "data/models/finetune/m2", "data/models/pretrain/bert"} <= set(deps)
    byproducts = {b["name"]: b for b in statement["predicate"]["runDetails"]["byproducts"]}
    assert byproducts["reports/quality/model-gate.json"]["annotations"]["passed"] is True
    assert statement["predicate"]["runDetails"]["metadata"]["invocationId"] == signed["made"]["bento"]

    # a changed subject digest or dependency no longer verifies
    changed = json.loads(json.dumps(statement))
    changed["subject"][0]["digest"]["sha256"] = "0" * 64
    assert not dsse_valid(_reenvelope(envelope, changed), pub)
    changed = json.loads(json.dumps(statement))
    changed["predicate"]["buildDefinition"]["resolvedDependencies"][0]["digest"] = {"sha256": "1" * 64}
    forged = _reenvelope(envelope, changed)
    assert not dsse_valid(forged, pub)
    from securesystemslib.exceptions import VerificationError

    with pytest.raises(VerificationError):
        Envelope.from_dict(forged).verify([key], 1)


def lineage(signed, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stages.lineage", *map(str, args), "--verify", "--details", "--workspace",
                           signed["tmp"] / "ws"], cwd=signed["tmp"], env=signed["env"], capture_output=True,
                          text=True, timeout=300)


def test_lineage_verify_reports_both_standard_checks_and_is_bound_by_the_key(signed, tmp_path):
    exported = signed["made"]["exported"]
    for target in (exported, signed["made"]["bento"]):
        proc = lineage(signed, target, "--public-key", signed["pub"], "--strict")
        out = proc.stdout
        assert proc.returncode == 0 and "every file of the Bento bound" in out, out[-3000:] + proc.stderr
        assert "checked: standard: in-toto SLSA Provenance v1, its DSSE signature by the key sha256" in out
        assert out.count("checked: standard: OpenSSF model signature of models/") == 2
        assert "bound: signature: the SLSA provenance signed by the key sha256" in out
    # without --public-key: the key beside the archive checks the signatures but binds nothing
    proc = lineage(signed, exported)
    assert proc.returncode == 0 and "found beside the archive" in proc.stdout and "UNPINNED" in proc.stdout
    other = tmp_path / "other.pem"
    write_ec_key(other)
    proc = lineage(signed, exported, "--public-key", other.with_suffix(".pub.pem"))
    assert proc.returncode == 1 and f"MISMATCH {PROVENANCE_FILE}: no valid DSSE signature" in proc.stdout
    assert "model_signing rejects it" in proc.stdout


def test_lineage_names_a_model_file_changed_in_a_store_bento(signed, tmp_path):
    """A signed Bento whose model folder changed after signing: both the manifest and model_signing say so."""
    store = tmp_path / "store"
    shutil.copytree(signed["tmp"] / "store", store)
    env = {**signed["env"], "BENTOML_HOME": str(store)}
    tag = signed["made"]["models"]["classifier"]
    folder = store / "models" / tag.split(":")[0] / tag.split(":")[1]
    (folder / "config.json").write_text('{"name": "m2"}')
    proc = subprocess.run([sys.executable, "-m", "stages.lineage", signed["made"]["bento"], "--verify", "--details",
                           "--public-key", str(signed["pub"])], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    name, version = tag.split(":")
    assert proc.returncode == 1
    assert f"MISMATCH models/{name}/{version}: model_signing rejects it" in proc.stdout
    assert f"MISMATCH provenance: subject models/{name}/{version} has sha256" in proc.stdout


def test_an_unsigned_package_says_so_and_strict_refuses_it(tmp_path):
    proc, env, made = package_run(tmp_path, package={"signing": "none"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert made["signing"] is None and not made["provenance"]["signed"] and "public_key" not in made["beside"]
    assert "unsigned: package.signing is none" in proc.stderr
    assert not list((tmp_path / "store/models").rglob(MODEL_SIGNATURE))
    name, version = made["bento"].split(":")
    bento = tmp_path / "store/bentos" / name / version
    assert "**Unsigned**" in (bento / "README.md").read_text()
    assert not list((tmp_path / "config").rglob("*.pem")) if (tmp_path / "config").exists() else True
    run = [sys.executable, "-m", "stages.lineage", made["exported"], "--verify", "--details", "--pin", made["manifest_sha256"]]
    proc = subprocess.run(run, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "note: unsigned:" in proc.stdout, proc.stdout[-2000:]
    proc = subprocess.run([*run, "--strict"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "MISMATCH unsigned:" in proc.stdout


def test_a_key_that_cannot_sign_packages_nothing(tmp_path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    (tmp_path / "ed.pem").write_bytes(Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    proc, _, made = package_run(tmp_path, env={"LMPIPE_SIGNING_KEY": str(tmp_path / "ed.pem")})
    assert proc.returncode == 1 and made is None
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert lines == [f"error: LMPIPE_SIGNING_KEY: {tmp_path / 'ed.pem'} is not an elliptic-curve key on P-256, "
                     "P-384 or P-521 (Ed25519); make one with `openssl ecparam -name prime256v1 -genkey -noout | "
                     "openssl pkcs8 -topk8 -nocrypt -out KEY.pem`, or unset it to use the default key"], \
        proc.stderr[-2000:]
    assert not (tmp_path / "store").exists() or not list((tmp_path / "store").rglob("model.yaml"))
    assert not (tmp_path / "dist").exists() or not list((tmp_path / "dist").iterdir())


def test_key_errors_are_one_line_naming_the_file(tmp_path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    with pytest.raises(SigningError, match=r"LMPIPE_SIGNING_KEY: .*missing.pem does not exist; make one with `openssl"):
        load_signing_key(env={"LMPIPE_SIGNING_KEY": str(tmp_path / "missing.pem")})
    (tmp_path / "text.pem").write_text("not a key\n")
    with pytest.raises(SigningError, match="text.pem is not a PEM private key"):
        load_signing_key(env={"LMPIPE_SIGNING_KEY": str(tmp_path / "text.pem")})
    (tmp_path / "locked.pem").write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"pw")))
    with pytest.raises(SigningError, match="locked.pem is encrypted"):
        load_signing_key(env={"LMPIPE_SIGNING_KEY": str(tmp_path / "locked.pem")})
    (tmp_path / "k1.pem").write_bytes(ec.generate_private_key(ec.SECP256K1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    with pytest.raises(SigningError, match=r"k1.pem is not an elliptic-curve key on P-256, P-384 or P-521 "
                                           r"\(secp256k1\)"):
        load_signing_key(env={"LMPIPE_SIGNING_KEY": str(tmp_path / "k1.pem")})
    ws = tmp_path / "ws"
    ws.mkdir()
    write_ec_key(ws / "key.pem")
    with pytest.raises(SigningError, match="is inside the workspace"):
        load_signing_key(ws, env={"LMPIPE_SIGNING_KEY": str(ws / "key.pem")})
    with pytest.raises(SigningError, match="is inside the workspace"):  # the default place, too, if it were there
        load_signing_key(ws, env={"XDG_CONFIG_HOME": str(ws / ".config")})
    assert not (ws / ".config").exists()
    assert default_key_path({"XDG_CONFIG_HOME": "/x"}) == Path("/x/lm-pipeline/signing-key.pem")
    blocked = tmp_path / "file"
    blocked.write_text("")
    with pytest.raises(SigningError, match="cannot create it"):
        load_signing_key(env={"XDG_CONFIG_HOME": str(blocked)})
