"""The Bento's manifest (``provenance/manifest.json``, canonical JSON): the SHA-256 of every file of a built Bento,
models included, as the exported archive lays them out. ``python -m stages.lineage --verify`` checks every file
against it, bound by ``--pin`` or by the signed provenance that lists its digest (``stages.provenance.signing``).
Bentos packaged before that carry an ed25519 signature of the manifest (``manifest.json.sig``), still verified."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from stages.provenance.hashing import CHUNK
from stages.provenance.record import LineageError
from stages.provenance.signing import PROVENANCE_FILE

MANIFEST_FILE = "provenance/manifest.json"
SIGNATURE_FILE = "provenance/manifest.json.sig"
# what the manifest cannot list: itself, the (legacy) signature of it, the provenance that names its digest
SEAL_FILES = frozenset({MANIFEST_FILE, SIGNATURE_FILE, PROVENANCE_FILE})
SCHEMA = 1


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


def load_key(path: str | Path):
    """``--public-key``: an elliptic-curve public key (model signatures and signed provenance) or an ed25519 one
    (the manifest signature of Bentos packaged before those: ``stages.provenance.legacy``), from a PEM file."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    try:
        key = serialization.load_pem_public_key(Path(path).read_bytes())
    except OSError as exc:
        raise ManifestError(f"--public-key: cannot read {path} ({exc.strerror})") from None
    except (ValueError, TypeError) as exc:
        raise ManifestError(f"--public-key: {path} is not a PEM public key ({exc})") from None
    if not isinstance(key, (ed25519.Ed25519PublicKey, ec.EllipticCurvePublicKey)):
        raise ManifestError(f"--public-key: {path} is neither an elliptic-curve nor an ed25519 public key")
    return key


def write_manifest(bento_dir: Path, tag: str, models: dict[str, Path]) -> tuple[dict, dict[str, str]]:
    """Hash every file of the built Bento (``bento_dir``, its models from ``models``: tag -> folder), write
    the manifest into it; returns what package.json records and the files' SHA-256 (``{relpath: sha256}``)."""
    files, irregular = bento_layout(bento_dir, models)
    if irregular:
        raise ManifestError(f"{bento_dir}: not regular files, which no manifest can vouch for: "
                            + ", ".join(irregular))
    hashes = {rel: sha256_path(path) for rel, path in files.items() if rel not in SEAL_FILES}
    manifest = render_manifest(tag, hashes)
    (bento_dir / MANIFEST_FILE).parent.mkdir(parents=True, exist_ok=True)
    (bento_dir / MANIFEST_FILE).write_bytes(manifest)
    (bento_dir / SIGNATURE_FILE).unlink(missing_ok=True)
    return {"manifest_sha256": sha256_bytes(manifest), "manifest_files": len(hashes)}, hashes
