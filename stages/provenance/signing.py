"""Signatures in the field's standard formats: each packaged model folder signed with OpenSSF Model Signing
(``model_signing``: a Sigstore bundle holding an in-toto statement of every file's SHA-256, ``model.sig`` in the
folder), and the lineage record as an in-toto Statement v1 with a SLSA Provenance v1 predicate in a DSSE envelope
(``provenance/provenance.intoto.json`` in the Bento), both signed with one elliptic-curve key. Verifiable with
``model_signing verify key`` and any DSSE / in-toto verifier; ``stages.lineage --verify`` runs both checks."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from stages.provenance.record import LineageError

KEY_ENV = "LMPIPE_SIGNING_KEY"
MODEL_SIGNATURE = "model.sig"  # in each model folder, as `model_signing sign` names it by default
PROVENANCE_FILE = "provenance/provenance.intoto.json"
PROVENANCE_SUFFIX = ".intoto.json"  # beside the exported archive: <name>-<version>.intoto.json
PUBLIC_KEY_SUFFIX = ".pub.pem"  # beside the exported archive: the signing key's public half
PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
SLSA_PREDICATE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "urn:lm-pipeline:dvc-pipeline:v1"  # docs/auditing.md, "The provenance": what its fields mean
BUILDER_ID = "urn:lm-pipeline:package-stage"
CURVES = ("secp256r1", "secp384r1", "secp521r1")  # what model_signing's key signer takes
NEW_KEY_HINT = ("`openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt -out KEY.pem`, or "
                "unset it to use the default key")


def sidecar(archive: str, suffix: str) -> str:
    """The path or URL beside an exported archive (``.bento``, ``.tar.gz``, ``.tar``) with ``suffix`` instead."""
    for known in (".tar.gz", ".bento", ".tar"):
        if archive.endswith(known):
            return archive[: -len(known)] + suffix
    return archive + suffix


class SigningError(LineageError):
    """A key that cannot be made, read or used, or a signature that cannot be written."""


def default_key_path(env=os.environ) -> Path:
    """Where the package stage keeps its key when ``LMPIPE_SIGNING_KEY`` names none: the user's config folder."""
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "lm-pipeline" / "signing-key.pem"


def _ec():
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    return serialization, ec


def public_pem(public_key) -> bytes:
    serialization, _ = _ec()
    return public_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def key_fingerprint(public_key) -> str:
    """SHA-256 of the public key's DER (SubjectPublicKeyInfo): the ``hint`` model_signing writes in each
    ``model.sig``, and how package.json and the audit name the key."""
    serialization, _ = _ec()
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


@dataclass(frozen=True)
class SigningKey:
    path: Path
    private: object  # cryptography's EllipticCurvePrivateKey
    created: bool = False

    @property
    def public(self):
        return self.private.public_key()

    @property
    def fingerprint(self) -> str:
        return key_fingerprint(self.public)

    @property
    def algorithm(self) -> str:
        return f"ecdsa-{self.private.curve.name}"


def _create_key(path: Path) -> None:
    """A new P-256 key (PKCS#8 PEM, readable by its owner only), written whole or not at all."""
    serialization, ec = _ec()
    from stages.common.atomic import temp_sibling

    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    tmp = temp_sibling(path, suffix=".pem")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def load_signing_key(workspace: Path | None = None, env=os.environ) -> SigningKey:
    """The key that signs: ``LMPIPE_SIGNING_KEY``'s file, else the default one (made on first use). A missing,
    unreadable, encrypted or non-EC key, or one inside the workspace (where it could be committed), is refused in
    one line."""
    named = env.get(KEY_ENV)
    path = Path(named).expanduser() if named else default_key_path(env)
    where = KEY_ENV if named else f"the default signing key {path}"
    if workspace is not None:
        inside = Path(os.path.abspath(path)).is_relative_to(Path(os.path.abspath(workspace)))
        if inside:
            raise SigningError(f"{where}: {path} is inside the workspace {workspace}, where a private key can be "
                               "committed or shipped; keep it outside (the default is ~/.config/lm-pipeline/)")
    created = False
    if not path.exists() and not named:
        try:
            _create_key(path)
        except OSError as exc:
            raise SigningError(f"{where}: cannot create it ({exc.strerror}); set {KEY_ENV} to a key file, or "
                               "package.signing: none to package unsigned") from None
        created = True
    serialization, ec = _ec()
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except FileNotFoundError:
        raise SigningError(f"{where}: {path} does not exist; make one with {NEW_KEY_HINT}") from None
    except OSError as exc:
        raise SigningError(f"{where}: cannot read {path} ({exc.strerror})") from None
    except TypeError:
        raise SigningError(f"{where}: {path} is encrypted; the package stage signs unattended, so give it an "
                           "unencrypted key kept outside the repository") from None
    except ValueError as exc:
        raise SigningError(f"{where}: {path} is not a PEM private key ({exc})") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name not in CURVES:
        kind = (getattr(getattr(key, "curve", None), "name", None)
                or type(key).__name__.removeprefix("_").removesuffix("PrivateKey"))
        raise SigningError(f"{where}: {path} is not an elliptic-curve key on P-256, P-384 or P-521 ({kind}); make "
                           f"one with {NEW_KEY_HINT}")
    return SigningKey(path=path, private=key, created=created)


# --- OpenSSF Model Signing ------------------------------------------------------------------------------------

def _hashing():
    from model_signing import hashing

    return hashing.Config().set_ignored_paths(paths=[MODEL_SIGNATURE])


def sign_model_folder(folder: Path, key: SigningKey) -> None:
    """Sign every file of ``folder`` into ``folder/model.sig``, as ``model_signing sign key`` does."""
    import model_signing

    signer = model_signing.signing.Config().use_elliptic_key_signer(private_key=key.path)
    signer.set_hashing_config(_hashing())
    try:
        signer.sign(folder, folder / MODEL_SIGNATURE)
    except (OSError, ValueError) as exc:
        raise SigningError(f"{folder}: model signing failed ({exc})") from exc


def verify_model_folder(folder: Path, public_key_pem: Path) -> str | None:
    """None when ``model_signing``'s own verifier accepts ``folder`` against its ``model.sig``; else its reason."""
    import model_signing

    try:
        model_signing.verifying.Config().use_elliptic_key_verifier(public_key=public_key_pem).verify(
            folder, folder / MODEL_SIGNATURE)
    except Exception as exc:  # the verifier raises ValueError, or its bundle parser's own errors
        return f"{type(exc).__name__}: {exc}"[:400]
    return None


def folder_digest(files: dict[str, str]) -> str:
    """A folder's digest as model_signing computes its subject: SHA-256 over the raw SHA-256 of every file in name
    order (``files``: ``{relpath: sha256 hex}``; the signature file left out)."""
    h = hashlib.sha256()
    for rel in sorted(files):
        if rel != MODEL_SIGNATURE:
            h.update(bytes.fromhex(files[rel]))
    return h.hexdigest()


# What the model store adds to a folder copied into it byte for byte (a packaged base model): BentoML's
# ``model.yaml`` and, signed, ``model.sig``. The folder's own files are the rest.
STORE_FILES = frozenset({"model.yaml", MODEL_SIGNATURE})


def folder_files_digest(folder: Path, skip: frozenset[str] = frozenset()) -> str:
    """:func:`folder_digest` of the files under ``folder`` on disk (as DVC lists them, ``__pycache__`` skipped;
    ``skip``: top-level names left out, as :data:`STORE_FILES` for a folder in the model store)."""
    from stages.common.hashing import sha256_file
    from stages.provenance.hashing import walk_files

    return folder_digest({rel: sha256_file(Path(folder) / rel) for rel in walk_files(folder) if rel not in skip})


# --- SLSA provenance in a DSSE envelope -----------------------------------------------------------------------

def _descriptor(name: str, digest: dict[str, str], **annotations) -> dict:
    out = {"name": name, "digest": digest}
    kept = {k: v for k, v in annotations.items() if v not in (None, [], {})}
    if kept:
        out["annotations"] = kept
    return out


def _sri_hex(integrity: str) -> dict[str, str]:
    """An npm integrity string (``sha512-<base64>``) as an in-toto digest (``{"sha512": hex}``)."""
    algo, _, b64 = (integrity or "").partition("-")
    try:
        return {algo: base64.b64decode(b64, validate=True).hex()} if algo and b64 else {}
    except ValueError:
        return {}


def source_dependencies(record: dict) -> list[dict]:
    """Every raw source as ingest recorded it: each package (integrity), archive pin (Release and index
    hashes), download (SHA-256), and the documents ingest wrote from them."""
    out = []
    for corpus, info in sorted((record.get("sources") or {}).items()):
        for i, src in enumerate(info.get("sources") or []):
            pin = src.get("pin") or {}
            base = {"corpus": corpus, "kind": src.get("kind"), "description": src.get("description"),
                    "licence": src.get("licence"), "records": src.get("records")}
            for pkg in src.get("packages") or []:
                digest = _sri_hex(pkg.get("integrity", ""))
                if digest:
                    out.append(_descriptor(f"pkg:{pkg.get('registry', 'npm')}/{pkg['name']}@{pkg.get('version')}",
                                           digest, **base))
            if pin.get("release_sha256"):
                out.append(_descriptor(f"{corpus}[{i}]: {pin.get('origin', '')} {pin.get('suite', '')} "
                                       f"{pin.get('version', '')} Release".replace("  ", " "),
                                       {"sha256": pin["release_sha256"]}, **base,
                                       indices=pin.get("indices"), date=pin.get("date"),
                                       codename=pin.get("codename")))
            for f in src.get("files") or []:
                if f.get("sha256"):
                    out.append(_descriptor(f"{corpus}[{i}]: {Path(f['path']).name}", {"sha256": f["sha256"]},
                                           **base, role=f.get("role"), bytes=f.get("bytes")))
        for name, o in sorted((info.get("outputs") or {}).items()):
            if o.get("sha256"):
                out.append(_descriptor(f"{info.get('stage', corpus)}: {name}", {"sha256": o["sha256"]},
                                       rows=o.get("rows")))
    return out


@dataclass(frozen=True)
class Invocation:
    """The build a provenance statement describes: the Bento it made (its invocation id), when it finished, the
    builder's versions and the package stage's own settings (internal parameters)."""

    bento: str
    finished: str
    builder: dict[str, str]
    internal: dict


def build_statement(record: dict, *, subjects: list[dict], models: dict[str, str], reports: dict[str, str],
                    run: Invocation, roles: dict[str, dict] | None = None) -> dict:
    """The in-toto Statement v1 with the SLSA Provenance v1 predicate. ``subjects``: the Bento's model folders
    and files; ``models``: each upstream model folder's digest; ``reports``: each gate report's SHA-256;
    ``roles``: annotations of some of those folders (a frozen or lora classifier: its method and base by digest;
    its base: ``base_of`` the classifier, ``packaged_as`` the model that ships it)."""
    git = record.get("git") or {}
    deps = source_dependencies(record)
    if git.get("commit"):
        deps.append(_descriptor("code", {"gitCommit": git["commit"]}, dirty=bool(git.get("dirty")),
                                dirty_paths=git.get("dirty_paths")))
    files = record.get("files") or {}
    deps += [_descriptor(path, {"sha256": digest}, dvc_md5=(files.get(path) or {}).get("md5"),
                         **(roles or {}).get(path, {}))
             for path, digest in sorted(models.items())]
    stages = {name: {"cmd": e.get("cmd"), "params": e.get("params") or {}}
              for name, e in sorted((record.get("stages") or {}).items())}
    return {
        "_type": STATEMENT_TYPE,
        "subject": subjects,
        "predicateType": SLSA_PREDICATE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {"pipeline": "dvc.yaml", "stages": stages,
                                       "model": (record.get("model") or {}).get("name")},
                "internalParameters": run.internal,
                "resolvedDependencies": deps,
            },
            "runDetails": {
                "builder": {"id": BUILDER_ID, "version": run.builder},
                "metadata": {"invocationId": run.bento, "startedOn": record.get("created"),
                             "finishedOn": run.finished},
                "byproducts": [_descriptor(path, {"sha256": digest}, passed=_passed(record, path))
                               for path, digest in sorted(reports.items())],
            },
        },
    }


def _passed(record: dict, path: str):
    if path == record.get("model_gate_path"):
        return bool((record.get("model_gate") or {}).get("passed"))
    gate = (record.get("gates") or {}).get(path)
    return None if gate is None else bool(gate.get("success"))


def sign_statement(statement: dict, key: SigningKey | None) -> bytes:
    """The DSSE envelope (JSON) of ``statement``, signed with ``key`` (no signatures when None: unsigned)."""
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import CryptoSigner

    payload = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode("utf-8")
    envelope = Envelope(payload=payload, payload_type=PAYLOAD_TYPE, signatures={})
    if key is not None:
        envelope.sign(CryptoSigner(key.private))
    return (json.dumps(envelope.to_dict(), indent=2, sort_keys=True) + "\n").encode("utf-8")


def read_envelope(data: bytes, where: str) -> tuple[dict, dict]:
    """(the envelope, its statement) from DSSE JSON, without checking signatures."""
    try:
        envelope = json.loads(data)
        statement = json.loads(base64.b64decode(envelope["payload"], validate=True))
    except (ValueError, KeyError, TypeError) as exc:
        raise SigningError(f"{where}: not a DSSE envelope of an in-toto statement ({exc})") from None
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE:
        raise SigningError(f"{where}: its payload is not an in-toto Statement v1")
    return envelope, statement


def envelope_verified(data: bytes, public_key) -> bool:
    """True when the DSSE envelope carries a valid signature by ``public_key`` (securesystemslib's verifier)."""
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import SSlibKey

    try:
        Envelope.from_dict(json.loads(data)).verify([SSlibKey.from_crypto(public_key)], 1)
    except Exception:  # VerificationError, or a malformed envelope
        return False
    return True
