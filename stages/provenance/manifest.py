"""The Bento's manifest (``provenance/manifest.json``, canonical JSON): the SHA-256 of every file of a built Bento,
models included, as the exported archive lays them out; signed (ed25519, base64) with ``LMPIPE_SIGNING_KEY``.
``python -m stages.lineage --verify`` checks every file against it, bound by ``--pin`` or ``--public-key``."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

from stages.provenance.hashing import CHUNK
from stages.provenance.record import LineageError

MANIFEST_FILE = "provenance/manifest.json"
SIGNATURE_FILE = "provenance/manifest.json.sig"
SEAL_FILES = frozenset({MANIFEST_FILE, SIGNATURE_FILE})  # what the manifest cannot list: itself, its signature
SCHEMA = 1
SIGNING_KEY_ENV = "LMPIPE_SIGNING_KEY"


class ManifestError(LineageError):
    """A manifest, key or signature that cannot be read or used."""


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_stream(f) -> str:
    h = hashlib.sha256()
    while chunk := f.read(CHUNK):
        h.update(chunk)
    return h.hexdigest()


def sha256_path(path: Path) -> str:
    with open(path, "rb") as f:
        return sha256_stream(f)


def model_tags(bento_yaml: dict) -> list[str]:
    """The BentoML models a Bento's ``bento.yaml`` names (what export puts under ``models/``), sorted."""
    tags = [m["tag"] for s in bento_yaml.get("services", []) or [] for m in s.get("models", []) or []
            if isinstance(m, dict) and m.get("tag")]
    tags += [m["tag"] for m in bento_yaml.get("models", []) or [] if isinstance(m, dict) and m.get("tag")]
    return sorted(set(tags))


def folder_files(folder: Path) -> tuple[dict[str, Path], list[str]]:
    """``{relpath: path}`` of every regular file under ``folder`` (byte-code caches included), and the
    relative paths of anything else (links, devices), which no manifest vouches for."""
    files, irregular = {}, []
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        if p.is_symlink() or not (p.is_file() or p.is_dir()):
            irregular.append(rel)
        elif p.is_file():
            files[rel] = p
    return files, irregular


def bento_layout(bento_dir: Path, models: dict[str, Path]) -> tuple[dict[str, Path], list[str]]:
    """Every file of the Bento as the exported archive lays it out: the Bento folder's own files and each
    model's (``models`` maps its tag to its folder) under ``models/<name>/<version>/``."""
    files, irregular = folder_files(bento_dir)
    for tag, folder in sorted(models.items()):
        name, version = tag.split(":")
        prefix = f"models/{name}/{version}/"
        if any(rel.startswith(prefix) for rel in files):  # the model is inside the Bento folder already
            continue
        inner, odd = folder_files(folder)
        files.update({prefix + rel: path for rel, path in inner.items()})
        irregular += [prefix + rel for rel in odd]
    return files, sorted(irregular)


def render_manifest(tag: str, files: dict[str, str]) -> bytes:
    """The canonical bytes of a manifest of ``files`` (``{relpath: sha256}``), the seal files left out."""
    body = {"schema": SCHEMA, "bento": tag, "algorithm": "sha256",
            "files": {rel: files[rel] for rel in sorted(files) if rel not in SEAL_FILES}}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def parse_manifest(data: bytes, where: str) -> dict:
    try:
        body = json.loads(data)
    except ValueError as exc:
        raise ManifestError(f"{where}: not JSON ({exc})") from None
    if (not isinstance(body, dict) or body.get("schema") != SCHEMA or body.get("algorithm") != "sha256"
            or not isinstance(body.get("files"), dict)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in body["files"].items())):
        raise ManifestError(f"{where}: not a schema-{SCHEMA} SHA-256 manifest")
    return body


# --- ed25519 signing (the ``cryptography`` package) ---------------------------------------------------------

def _crypto():
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError as exc:  # pragma: no cover - a dependency of the project's environment
        raise ManifestError(f"signing needs the 'cryptography' package ({exc})") from None
    return serialization, ed25519, InvalidSignature


def load_key(path: str | Path, private: bool):
    """An ed25519 key from a PEM file: a private one (PKCS#8, unencrypted, as ``openssl genpkey -algorithm ed25519``
    writes it) or a public one (``openssl pkey -in key.pem -pubout``)."""
    serialization, ed25519, _ = _crypto()
    where, kind = ((SIGNING_KEY_ENV, "an unencrypted PEM private key") if private
                   else ("--public-key", "a PEM public key"))
    try:
        data = Path(path).read_bytes()
        key = (serialization.load_pem_private_key(data, password=None) if private
               else serialization.load_pem_public_key(data))
    except OSError as exc:
        raise ManifestError(f"{where}: cannot read {path} ({exc.strerror})") from None
    except (ValueError, TypeError) as exc:
        raise ManifestError(f"{where}: {path} is not {kind} ({exc})") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey if private else ed25519.Ed25519PublicKey):
        raise ManifestError(f"{where}: {path} is not an ed25519 {'key' if private else 'public key'}")
    return key


def key_fingerprint(public_key) -> str:
    """SHA-256 of the raw 32-byte public key: names the key in package.json and in the audit's output."""
    serialization, _, _ = _crypto()
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return sha256_bytes(raw)


def sign(manifest: bytes, private_key) -> bytes:
    return base64.b64encode(private_key.sign(manifest)) + b"\n"


def signature_valid(manifest: bytes, signature: bytes, public_key) -> bool:
    _, _, invalid = _crypto()
    try:
        public_key.verify(base64.b64decode(signature.strip(), validate=True), manifest)
    except (invalid, ValueError):
        return False
    return True


def write_manifest(bento_dir: Path, tag: str, models: dict[str, Path], private_key=None) -> dict:
    """Hash every file of the built Bento (``bento_dir``, its models from ``models``: tag -> folder), write
    the manifest (and its signature with ``private_key``) into it; returns what package.json records."""
    files, irregular = bento_layout(bento_dir, models)
    if irregular:
        raise ManifestError(f"{bento_dir}: not regular files, which no manifest can vouch for: "
                            + ", ".join(irregular))
    manifest = render_manifest(tag, {rel: sha256_path(path) for rel, path in files.items()})
    (bento_dir / MANIFEST_FILE).parent.mkdir(parents=True, exist_ok=True)
    (bento_dir / MANIFEST_FILE).write_bytes(manifest)
    (bento_dir / SIGNATURE_FILE).unlink(missing_ok=True)
    out = {"manifest_sha256": sha256_bytes(manifest), "manifest_files": len(json.loads(manifest)["files"]),
           "signature": None}
    if private_key is not None:
        (bento_dir / SIGNATURE_FILE).write_bytes(sign(manifest, private_key))
        out["signature"] = {"algorithm": "ed25519", "file": SIGNATURE_FILE,
                            "public_key_sha256": key_fingerprint(private_key.public_key())}
    return out
