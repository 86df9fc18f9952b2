"""Bentos packaged before the standard formats: their manifest carries an ed25519 signature
(``provenance/manifest.json.sig``, base64), which ``lineage --verify --public-key`` checks with an ed25519 key.
Nothing writes these any more (the package stage signs with model_signing and a signed SLSA provenance:
``stages.provenance.signing``); this module is the one place that reads them."""

from __future__ import annotations

import base64
import hashlib


def is_ed25519(key) -> bool:
    from cryptography.hazmat.primitives.asymmetric import ed25519

    return isinstance(key, ed25519.Ed25519PublicKey)


def fingerprint(public_key) -> str:
    """SHA-256 of the raw 32-byte public key (how the audit's output names an ed25519 key)."""
    from cryptography.hazmat.primitives import serialization

    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def signature_valid(manifest: bytes, signature: bytes, public_key) -> bool:
    from cryptography.exceptions import InvalidSignature

    try:
        public_key.verify(base64.b64decode(signature.strip(), validate=True), manifest)
    except (InvalidSignature, ValueError):
        return False
    return True


def check(manifest: bytes, signature: bytes | None, public_key, where: str, signature_file: str) -> tuple[bool, str]:
    """Whether ``signature`` is the manifest's ed25519 signature by ``public_key``, and the line that says so."""
    whose = f"the key whose SHA-256 is {fingerprint(public_key)}"
    if signature is None:
        return False, f"{where}: {signature_file} is missing: the manifest is not signed"
    if signature_valid(manifest, signature, public_key):
        return True, f"signature: {signature_file} is the manifest's ed25519 signature by {whose}"
    return False, f"{where}: {signature_file} is not a signature of this manifest by {whose}"
