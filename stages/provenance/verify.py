"""Verify a lineage record: against the packaged model's own files (anywhere) and against a workspace
(its ``dvc.lock`` and the files on disk), and every file of a Bento against its manifest
(``stages.provenance.manifest``), bound by a pinned digest or a signature; naming every mismatch."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from stages.provenance.card import CARD_FILE, expected_card
from stages.provenance.hashing import IrregularFile, dir_md5, path_hashes
from stages.provenance import legacy
from stages.provenance.manifest import MANIFEST_FILE, SEAL_FILES, SIGNATURE_FILE, ManifestError, parse_manifest, sha256_bytes
from stages.provenance.record import LineageError, Lock, dvc_cache, git_state, sources
from stages.provenance.signing import (MODEL_SIGNATURE, PROVENANCE_FILE, SLSA_PREDICATE, STORE_FILES, SigningError,
                                       envelope_verified, folder_digest, read_envelope, verify_model_folder)
from stages.provenance.signing import key_fingerprint
from stages.provenance.targets import Target

# Files BentoML or packaging add to the model folder (README.md is checked against the rendered card; model.sig
# by model_signing's verifier).
PACKAGING_FILES = frozenset({"lineage.json", "model.yaml", CARD_FILE, MODEL_SIGNATURE})


@dataclass
class Verdict:
    checked: int = 0
    mismatches: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    verified: list[str] = field(default_factory=list)  # what was checked, one line each
    bound_by: list[str] = field(default_factory=list)  # what binds every file of the Bento (a pin, a signature)
    unverified: list[str] | None = None  # the Bento's files nothing outside the Bento vouches for (None: no Bento)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    @property
    def pinned(self) -> bool:
        return bool(self.bound_by)

    def as_dict(self) -> dict:
        return {"ok": self.ok, "pinned": self.pinned, **asdict(self)}


def diff_manifests(path: str, recorded: dict[str, str], current: dict[str, str]) -> list[str]:
    """One line per file that changed, disappeared or appeared under ``path``."""
    out = []
    for rel in sorted(set(recorded) | set(current)):
        name = f"{path}/{rel}" if rel else path
        if rel not in current:
            out.append(f"{name}: missing (recorded md5 {recorded[rel]})")
        elif rel not in recorded:
            out.append(f"{name}: not in the record (md5 {current[rel]})")
        elif recorded[rel] != current[rel]:
            out.append(f"{name}: md5 {current[rel]}, recorded {recorded[rel]}")
    return out


def verify_packaged(record: dict, packaged: list[dict], verdict: Verdict) -> None:
    """Each packaged model's files (``{"name", "role", "source", "files": {relpath: md5}}``) are the record's. A
    base (the base of a frozen or lora classifier) is stored byte for byte: its own card is checked with the rest."""
    for item in packaged:
        base = item["role"] == "base"
        added = STORE_FILES if base else PACKAGING_FILES  # what the store and packaging add to the folder
        files = {rel: md5 for rel, md5 in item["files"].items() if rel not in added}
        classifier = item["role"] == "classifier"
        expected = record["model"]["files"] if classifier else (
            record["files"].get(item.get("source") or "") or {}).get("files")
        if not classifier and expected is None:
            verdict.mismatches.append(f"{item['name']}: its source {item.get('source')!r} is not in the record")
            continue
        if not base:  # the folder's own card (its stage's) stays behind: the card its record renders replaces it
            expected = {rel: md5 for rel, md5 in expected.items() if rel != CARD_FILE}
        verdict.checked += len(expected)
        verdict.mismatches += diff_manifests(f"{item['name']} (packaged)", expected, files)
        verdict.verified.append(f"{item['name']}: its {len(files)} files against the record's hashes"
                                + (f" (the base from {item.get('source')}, its own card included)" if base else
                                   " and its model card against the card the record renders"
                                   if CARD_FILE in item["files"] else ""))
        if base or CARD_FILE not in item["files"]:  # a packaged card must be the one its lineage record renders
            continue
        verdict.checked += 1
        card = expected_card(record, item)
        if card is None or hashlib.md5(card.encode("utf-8")).hexdigest() != item["files"][CARD_FILE]:
            verdict.mismatches.append(f"{item['name']} (packaged)/{CARD_FILE}: not the model card its lineage "
                                      "record renders (edited after packaging, or rendered by another version of "
                                      "stages.provenance.card)")


def verify_base(record: dict, packaged: list[dict], files: dict[str, str] | None, verdict: Verdict) -> None:
    """A frozen or lora classifier's binding to its base: the Bento ships a base model whose files (BentoML's
    ``model.yaml`` and ``model.sig`` aside; ``files``: the Bento's SHA-256s) have the folder digest the
    classifier's ``adaptation.json`` records, the one the service checks before it loads the base. A model
    folder on its own (no ``files``) cannot show its base: a note."""
    classifier = next((i for i in packaged if i["role"] == "classifier"), None)
    if classifier is None or "adaptation" not in classifier:
        return  # a full model: the whole model is in its folder
    verdict.checked += 1
    adaptation = classifier["adaptation"]
    if not isinstance(adaptation, dict) or not adaptation.get("base_digest"):
        verdict.mismatches.append(f"{classifier['name']}: its adaptation.json is unreadable or names no base digest")
        return
    method, want = adaptation.get("method"), adaptation["base_digest"]
    recorded = (record.get("model") or {}).get("adaptation")
    if recorded is not None and recorded.get("base_digest") != want:
        verdict.mismatches.append(f"{classifier['name']}: its adaptation.json records the base digest {want}, its "
                                  f"lineage record {recorded.get('base_digest')}")
    bases = [i for i in packaged if i["role"] == "base"]
    if files is None:
        verdict.notes.append(f"{classifier['name']}: a {method} classifier, whose base {adaptation.get('base')} "
                             f"(digest {want}) ships beside it in the Bento: verify the Bento to check that binding")
        return
    if not bases:
        verdict.mismatches.append(f"{classifier['name']}: fine-tuned with method {method} on the base "
                                  f"{adaptation.get('base')} (digest {want}), but the Bento ships no base model")
        return
    for item in bases:
        name, _, version = item["name"].partition(":")
        prefix = f"models/{name}/{version}/"
        got = folder_digest({rel[len(prefix):]: d for rel, d in files.items()
                             if rel.startswith(prefix) and rel[len(prefix):] not in STORE_FILES})
        if got != want:
            verdict.mismatches.append(f"{prefix.rstrip('/')}: base binding: the base of the {method} classifier "
                                      f"{classifier['name']} has folder digest {got}, not {want} as its "
                                      "adaptation.json records (the service refuses to load it)")
        else:
            verdict.verified.append(f"base binding: {item['name']} (from {item.get('source')}) has the folder digest "
                                    f"{want} that the {method} classifier's adaptation.json records")


def verify_src(record: dict, src: dict[str, str], verdict: Verdict) -> None:
    """The Bento's ``src/`` holds the service and ``stages`` code recorded at packaging: every Python file,
    no more, no fewer (the generated ``bento_config.json`` and BentoML's ``bentofile.yaml`` aside)."""
    recorded = record.get("served_code")
    if recorded is None:
        verdict.notes.append("the record has no served_code (packaged by an older version): the Bento's code is "
                             "not checked")
        return
    current = {rel: md5 for rel, md5 in src.items() if rel.endswith(".py")}
    verdict.checked += len(recorded)
    verdict.mismatches += diff_manifests("Bento src", recorded, current)
    verdict.verified.append(f"the Bento's code: {len(current)} Python files under src/ against the "
                            f"{len(recorded)} recorded at packaging")


# Files under src/ that Python would run in place of, or beside, the checked source: packaging ships none.
CODE_SUFFIXES = (".pyc", ".pyo", ".so", ".pyd", ".dylib")


def executable_extras(all_files: list[str]) -> list[str]:
    """Byte-code and native extension modules under ``src/`` (Python imports them before the ``.py``)."""
    return [rel for rel in all_files
            if rel.startswith("src/") and (rel.endswith(CODE_SUFFIXES) or "/__pycache__/" in rel)]


def verify_coverage(record: dict, packaged: list[dict], all_files: list[str], verdict: Verdict) -> list[str]:
    """What of the Bento the record vouches for; returns the files it does not cover (only a bound manifest
    covers those). Byte-code or a native extension under ``src/`` is a mismatch: Python would run it instead."""
    covered = {f"src/{rel}" for rel in record.get("served_code") or {}}
    for item in packaged:
        name, _, version = item["name"].partition(":")
        covered |= {f"models/{name}/{version}/{rel}" for rel in item["files"]
                    if rel not in PACKAGING_FILES or rel == CARD_FILE}  # the card is checked against the record
    verdict.checked += 1
    extras = executable_extras(all_files)
    for rel in extras:
        kind = "a native extension module" if rel.endswith((".so", ".pyd", ".dylib")) else "byte-code"
        verdict.mismatches.append(f"Bento {rel}: {kind} in the Bento (packaging ships none; Python would run it "
                                  "instead of the checked source)")
    return [rel for rel in all_files if rel not in covered and rel not in extras]


ARCHIVE_PINNED = "pin: the archive's SHA-256 is the pinned one: every byte of it is the one published"


def _latest_pointer(rel: str, digest: str, listed: dict[str, str]) -> bool:
    """``models/<name>/latest`` (BentoML's export adds it) naming a version of that model the manifest lists."""
    parts = rel.split("/")
    if len(parts) != 3 or parts[0] != "models" or parts[2] != "latest":
        return False
    versions = {p.split("/")[2] for p in listed if p.startswith(f"models/{parts[1]}/") and p.count("/") >= 3}
    return digest in {sha256_bytes(v.encode("utf-8")) for v in versions}


def verify_seal(target: Target, audit: Audit, skip: list[str], verdict: Verdict) -> None:
    """Every file of the Bento (``target.files``: ``{relpath: sha256}``) is the one its manifest lists, no more,
    no fewer; the manifest is bound by ``audit.pin`` (its or the archive's SHA-256) or, for a Bento packaged
    before the standard formats, its ed25519 signature (``audit.legacy_key``)."""
    files, manifest, bento, pin = target.files, target.manifest, target.bento, audit.pin
    where = bento.get("file") or bento.get("folder") or bento.get("tag") or "the Bento"
    verdict.mismatches += [f"Bento {rel}: not a regular file (a link or special file; no manifest vouches for it)"
                           for rel in target.irregular]
    archive = bento.get("sha256")
    wanted = pin.strip().lower() if pin else None
    if manifest is None:
        verdict.checked += 1
        if wanted and archive == wanted:
            verdict.bound_by.append(ARCHIVE_PINNED)
        elif wanted:
            verdict.mismatches.append(f"{where}: no {MANIFEST_FILE} for the pin to bind"
                                      + (f"; the archive's SHA-256 is {archive}" if archive else "")
                                      + f", pinned {pin}")
        if audit.legacy_key is not None:
            verdict.mismatches.append(f"{where}: no {MANIFEST_FILE} for a signature to cover")
        verdict.notes.append(f"no {MANIFEST_FILE} in this Bento (packaged before manifests, or removed): its files "
                             "are checked against the lineage record only")
        return
    digest = sha256_bytes(manifest)
    verdict.checked += 1
    try:
        body = parse_manifest(manifest, f"{where}: {MANIFEST_FILE}")
    except ManifestError as exc:
        verdict.mismatches.append(str(exc))
        body = None
    if wanted:
        verdict.checked += 1
        if wanted == digest:
            verdict.bound_by.append(f"pin: the manifest's SHA-256 {digest} is the pinned one")
        elif archive and wanted == archive:
            verdict.bound_by.append(ARCHIVE_PINNED)
        else:
            verdict.mismatches.append(f"{where}: pinned {pin}, but the manifest's SHA-256 is {digest}"
                                      + (f" and the archive's {archive}" if archive else ""))
    if audit.legacy_key is not None:
        verdict.checked += 1
        ok, line = legacy.check(manifest, target.signature, audit.legacy_key, where, SIGNATURE_FILE)
        (verdict.bound_by if ok else verdict.mismatches).append(line)
    elif target.signature is not None:
        verdict.notes.append(f"the manifest is signed ({SIGNATURE_FILE}); give --public-key PEM to check it")
    if body is None:
        return
    listed = body["files"]
    if bento.get("tag") and body.get("bento") != bento["tag"]:
        verdict.mismatches.append(f"{MANIFEST_FILE}: made for the Bento {body.get('bento')}, not {bento['tag']}")
    verdict.checked += len(listed)
    verdict.verified.append(f"all {len(files)} files of the Bento against its manifest (SHA-256 {digest}; "
                            f"{len(listed)} listed: all but the manifest, the provenance that lists it, a "
                            "legacy signature of it and BentoML's models/<name>/latest pointers)")
    for rel in sorted(set(listed) | set(files)):
        if rel in SEAL_FILES or rel in skip:
            continue
        if rel not in files:
            verdict.mismatches.append(f"Bento {rel}: missing (the manifest lists sha256 {listed[rel]})")
        elif rel not in listed:
            if not _latest_pointer(rel, files[rel], listed):
                verdict.mismatches.append(f"Bento {rel}: not in the manifest (sha256 {files[rel]})")
        elif files[rel] != listed[rel]:
            verdict.mismatches.append(f"Bento {rel}: sha256 {files[rel]}, the manifest lists {listed[rel]}")
    if not verdict.bound_by:
        verdict.notes.append(f"manifest: the Bento's files agree with its own {MANIFEST_FILE} (SHA-256 {digest}), "
                             "but nothing outside the Bento vouches for it: --pin that digest from the package "
                             "stage's reports/metrics/package.json (manifest_sha256) in git, or --public-key PEM "
                             "for a signed Bento")


@dataclass
class Standard:
    """What the standard checks need: the Bento's provenance envelope, a factory of its model folders on disk
    (a context manager yielding ``{tag: folder}``) and the EC public key (its PEM file, and whether the auditor
    gave it, or it was found beside the archive)."""
    provenance: bytes | None
    model_dirs: object
    key_path: Path | None = None
    key: object = None
    explicit: bool = False


@dataclass(frozen=True)
class Audit:
    """What the auditor brings to a Bento: ``pin`` (the SHA-256 of its manifest or of the exported archive), the
    standard checks' inputs (``standard``), an ed25519 ``legacy_key`` for a manifest signed before those
    (``stages.provenance.legacy``), and ``strict`` (unsigned standard provenance is a mismatch, not a note)."""
    pin: str | None = None
    standard: Standard | None = None
    legacy_key: object = None
    strict: bool = False


def _subjects_match(statement: dict, files: dict[str, str], verdict: Verdict) -> list[str]:
    """Each subject's digest against the Bento's files (a model folder by its model_signing root digest);
    returns the model folders it names."""
    folders, named = [], set()
    for subject in statement.get("subject") or []:
        name, digest = subject.get("name", ""), (subject.get("digest") or {}).get("sha256")
        verdict.checked += 1
        prefix = name + "/"
        inner = {rel[len(prefix):]: d for rel, d in files.items() if rel.startswith(prefix)}
        if name.startswith("models/") and inner:
            folders.append(name)
            named |= {prefix + rel for rel in inner}
            actual = folder_digest(inner)
        else:
            named.add(name)
            actual = files.get(name)
        if actual is None:
            verdict.mismatches.append(f"provenance: subject {name} is not in the Bento")
        elif actual != digest:
            verdict.mismatches.append(f"provenance: subject {name} has sha256 {actual}, the provenance lists {digest}")
    for rel in sorted(set(files) - named - SEAL_FILES):
        parts = rel.split("/")
        if not (len(parts) == 3 and parts[0] == "models" and parts[2] == "latest"):  # BentoML's export pointers
            verdict.mismatches.append(f"provenance: Bento {rel} is not among its subjects")
    return folders


def verify_standard(files: dict[str, str], manifest: bytes | None, standard: Standard, strict: bool,
                    verdict: Verdict) -> None:
    """The standard formats: the in-toto SLSA provenance (its subjects against the Bento's files, its DSSE
    signature with securesystemslib) and every model folder against its ``model.sig`` with model_signing's own
    verifier. An unsigned Bento, or one without them, is a note (a mismatch under ``strict``)."""
    report = verdict.mismatches if strict else verdict.notes
    if standard.provenance is None:
        report.append(f"no {PROVENANCE_FILE} in this Bento (packaged before the standard formats): no OpenSSF "
                      "model signatures or SLSA provenance to check")
        return
    try:
        envelope, statement = read_envelope(standard.provenance, PROVENANCE_FILE)
    except SigningError as exc:
        verdict.mismatches.append(str(exc))
        return
    if statement.get("predicateType") != SLSA_PREDICATE:
        verdict.mismatches.append(f"{PROVENANCE_FILE}: predicate {statement.get('predicateType')!r}, not SLSA "
                                  "Provenance v1")
    folders = _subjects_match(statement, files, verdict)
    verdict.verified.append(f"the SLSA provenance's {len(statement.get('subject') or [])} subjects against the "
                            f"Bento's files ({len(folders)} model folders by their model_signing digest)")
    if not envelope.get("signatures"):
        report.append(f"unsigned: {PROVENANCE_FILE} carries no signature and the models no {MODEL_SIGNATURE} "
                      "(packaged with package.signing: none)")
        return
    if standard.key is None:
        verdict.notes.append(f"signed ({PROVENANCE_FILE}, each model's {MODEL_SIGNATURE}): give --public-key PEM "
                             "(the .pub.pem exported beside the Bento) to check the signatures")
        return
    fingerprint = key_fingerprint(standard.key)
    whose = f"the key sha256 {fingerprint}" + ("" if standard.explicit else
                                               f" (found beside the archive: {standard.key_path})")
    verdict.checked += 1
    provenance_ok = envelope_verified(standard.provenance, standard.key)
    if provenance_ok:
        verdict.verified.append(f"standard: in-toto SLSA Provenance v1, its DSSE signature by {whose} "
                                "(securesystemslib's verifier)")
    else:
        verdict.mismatches.append(f"{PROVENANCE_FILE}: no valid DSSE signature by {whose}")
    with standard.model_dirs() as dirs:
        for tag, folder in sorted(dirs.items()):
            name, _, version = tag.partition(":")
            verdict.checked += 1
            if not (folder / MODEL_SIGNATURE).is_file():
                verdict.mismatches.append(f"models/{name}/{version}: no {MODEL_SIGNATURE} (not signed)")
                continue
            error = verify_model_folder(folder, standard.key_path)
            if error:
                verdict.mismatches.append(f"models/{name}/{version}: model_signing rejects it: {error}")
            else:
                verdict.verified.append(f"standard: OpenSSF model signature of models/{name}/{version} "
                                        f"({MODEL_SIGNATURE}) by {whose} (model_signing's verifier)")
    manifest_listed = any(s.get("name") == MANIFEST_FILE for s in statement.get("subject") or [])
    if (standard.explicit and provenance_ok and manifest is not None and manifest_listed
            and not any(m.startswith("provenance:") for m in verdict.mismatches)):
        verdict.bound_by.append(f"signature: the SLSA provenance signed by the key sha256 {fingerprint} lists "
                                f"{MANIFEST_FILE} (SHA-256 {sha256_bytes(manifest)}) and every other file")
    elif not standard.explicit and provenance_ok:
        verdict.notes.append("the signatures check out against the key beside the archive, which travels with it: "
                             "give --public-key from a place the publisher cannot rewrite to bind the Bento")


def verify_pin(bento: dict, pin: str, verdict: Verdict) -> None:
    """The exported archive is byte for byte the one whose SHA-256 the auditor pinned."""
    verdict.checked += 1
    actual = bento.get("sha256")
    if actual != pin.strip().lower():
        verdict.mismatches.append(f"{bento.get('file')}: SHA-256 {actual}, pinned {pin}")
    else:
        verdict.bound_by.append(ARCHIVE_PINNED)


def _own_md5(info: dict) -> str:
    return info["files"][""] if "" in info["files"] else dir_md5(info["files"])


def verify_record(record: dict, verdict: Verdict) -> None:
    """The record agrees with itself (per-file hashes add up to DVC's, stage entries pin them, the model is
    its fine-tuning stage's output), tying the packaged files to ``dvc.lock``. Needs no workspace."""
    files, model = record["files"], record["model"]
    verdict.verified.append(f"the lineage record against itself ({len(record['stages'])} dvc.lock entries, "
                            f"{len(files)} paths)")
    for path, info in files.items():
        verdict.checked += 1
        if _own_md5(info) != info["md5"]:
            verdict.mismatches.append(f"record: {path}: its files' hashes add up to {_own_md5(info)}, not "
                                      f"{info['md5']}")
    for name, entry in record["stages"].items():
        for kind in ("deps", "outs"):
            for e in entry.get(kind, []):
                verdict.checked += 1
                held = (files.get(e["path"]) or {}).get("md5")
                if held != e.get("md5"):
                    verdict.mismatches.append(f"record: {name} {kind} {e['path']}: dvc.lock entry {e.get('md5')}, "
                                              f"files {held}")
    for inner in files:
        for outer in files:
            if inner.startswith(outer.rstrip("/") + "/"):
                sub = inner[len(outer.rstrip("/")) + 1:]
                for rel, md5 in files[inner]["files"].items():
                    key = f"{sub}/{rel}" if rel else sub
                    verdict.checked += 1
                    if files[outer]["files"].get(key) != md5:
                        verdict.mismatches.append(f"record: {outer}/{key}: differs from its hash under {inner}")
    verdict.checked += 1
    held = files.get(model.get("path") or "")
    if held is None or held["files"] != model["files"] or held["md5"] != model["md5"] or (
            dir_md5(model["files"]) != model["md5"]):
        verdict.mismatches.append(f"record: the model's files differ from {model.get('path')} as its stage wrote it")


def verify_lock(record: dict, lock: Lock, verdict: Verdict) -> None:
    """The workspace's ``dvc.lock`` pins what the record holds, and no upstream stage is missing from it."""
    try:
        expected = lock.upstream([record["model"]["stage"], "evaluate"])
    except LineageError as exc:
        verdict.mismatches.append(str(exc))
        expected = []
    for name in expected:
        if name not in record["stages"]:
            verdict.mismatches.append(f"dvc.lock: stage {name} is upstream of the model but not in the record")
    for name, entry in record["stages"].items():
        verdict.checked += 1
        now = lock.stages.get(name)
        if now is None:
            verdict.mismatches.append(f"dvc.lock: no stage {name}")
            continue
        for kind in ("deps", "outs"):
            pinned = {e["path"]: e.get("md5") for e in now.get(kind, [])}
            for path in sorted(set(pinned) - {e["path"] for e in entry.get(kind, [])}):
                verdict.mismatches.append(f"dvc.lock: {name} lists {path} in {kind}; the record does not")
            for e in entry.get(kind, []):
                if e["path"] not in pinned:
                    verdict.mismatches.append(f"dvc.lock: {name} no longer lists {e['path']} in {kind}")
                elif pinned[e["path"]] != e.get("md5"):
                    verdict.mismatches.append(
                        f"dvc.lock: {name} {kind} {e['path']}: md5 {pinned[e['path']]}, recorded {e.get('md5')}")
        if (now.get("params") or {}) != (entry.get("params") or {}):
            verdict.mismatches.append(f"dvc.lock: {name} params differ from the record")
        if now.get("cmd") != entry.get("cmd"):
            verdict.mismatches.append(f"dvc.lock: {name} command differs from the record")


def verify_files(record: dict, workspace: Path, verdict: Verdict) -> None:
    """Every file the upstream stages read or wrote hashes to what the record holds."""
    for path, info in record["files"].items():
        verdict.checked += 1
        target = workspace / path
        if not target.exists():
            verdict.mismatches.append(f"{path}: missing from the workspace (recorded md5 {info['md5']})")
            continue
        try:
            digest, manifest = path_hashes(target, (workspace, dvc_cache(workspace)))
        except IrregularFile as exc:
            verdict.mismatches.append(str(exc))
            continue
        if digest != info["md5"]:
            verdict.mismatches += diff_manifests(path, info["files"], manifest) or [
                f"{path}: md5 {digest}, recorded {info['md5']}"]


def verify_sources(record: dict, workspace: Path, lock: Lock, verdict: Verdict) -> None:
    """The record's raw sources (kinds, descriptions, licences, pins) are what the workspace's ingest manifests
    say: the files' hashes alone would pass a record whose licence text was edited."""
    recorded = record.get("sources") or {}
    now = sources(workspace, sorted(n for n in record["stages"] if n in lock.stages), lock)
    for corpus in sorted(set(recorded) | set(now)):
        verdict.checked += 1
        was, held = recorded.get(corpus) or {}, now.get(corpus) or {}
        where = f"the manifest of {held.get('stage', corpus)}"
        if not held or not was:
            verdict.mismatches.append(f"record: sources of {corpus}: {'not in the record' if held else 'no ' + where}")
            continue
        if len(was.get("sources", [])) != len(held.get("sources", [])):
            verdict.mismatches.append(f"record: sources of {corpus}: {len(was.get('sources', []))} in the record, "
                                      f"{len(held.get('sources', []))} in {where}")
        for i, (a, b) in enumerate(zip(was.get("sources", []), held.get("sources", []))):
            for key in sorted(set(a) | set(b), key=str):
                if a.get(key) != b.get(key):
                    verdict.mismatches.append(f"record: sources of {corpus}[{i}].{key}: {str(a.get(key))[:80]!r} in "
                                              f"the record, {str(b.get(key))[:80]!r} in {where}")
        for key in ("counts", "outputs"):
            if was.get(key) != held.get(key):
                verdict.mismatches.append(f"record: sources of {corpus}: {key} differ from {where}")


def verify_source_files(record: dict, workspace: Path, verdict: Verdict) -> None:
    """Each local file a ``files`` source read at ingest (its path relative to the workspace, ``~/`` or absolute)
    still has the SHA-256 the record holds: DVC does not track a user's own files, so an edit since is named here."""
    import os

    from stages.common.hashing import sha256_file

    for corpus, info in sorted((record.get("sources") or {}).items()):
        for src in info.get("sources") or []:
            for f in src.get("files") or [] if src.get("kind") == "files" else []:
                path = Path(os.path.expanduser(f["path"]))
                path = path if path.is_absolute() else workspace / path
                if not path.is_file():
                    verdict.notes.append(f"source file {f['path']} of {corpus}: not on this machine, not checked")
                    continue
                verdict.checked += 1
                now = sha256_file(path)
                if now != f.get("sha256"):
                    verdict.mismatches.append(
                        f"{f['path']}: sha256 {now}, recorded {f.get('sha256')} when {corpus} was ingested: the "
                        f"source file changed since (`dvc repro --force ingest@{corpus}` ingests it again)")


def verify(target: Target, *, workspace: Path | None = None, audit: Audit = Audit()) -> Verdict:
    """Check the target's lineage record, its packaged models, the Bento's code, every file of the Bento against
    its manifest (bound as ``audit`` says), and the workspace when given. Files nothing vouches for are
    ``verdict.unverified``."""
    record, packaged, files = target.record, target.packaged, target.files
    verdict = Verdict()
    verify_record(record, verdict)
    if packaged:
        verify_packaged(record, packaged, verdict)
        verify_base(record, packaged, files, verdict)
    if target.src is not None:
        verify_src(record, target.src, verdict)
    all_files = sorted(files) if files is not None and target.all_files is None else target.all_files
    uncovered = verify_coverage(record, packaged, all_files, verdict) if all_files is not None else None
    if files is not None:
        if audit.standard is not None:  # first: a signed provenance that lists the manifest binds it
            verify_standard(files, target.manifest, audit.standard, audit.strict, verdict)
        verify_seal(target, audit, executable_extras(all_files), verdict)
    elif audit.pin is not None:
        verify_pin(target.bento, audit.pin, verdict)
    if files is None:  # a model folder on its own: it holds regular files only
        verdict.mismatches += [f"{rel}: not a regular file (a link or special file; not followed or read)"
                               for rel in target.irregular]
    if uncovered is not None:
        verdict.unverified = [] if verdict.bound_by else uncovered
    if workspace is not None:
        try:
            lock = Lock.read(workspace / "dvc.lock")
        except LineageError as exc:
            verdict.mismatches.append(str(exc))
            return verdict
        verify_lock(record, lock, verdict)
        verify_files(record, workspace, verdict)
        verify_sources(record, workspace, lock, verdict)
        verify_source_files(record, workspace, verdict)
        verdict.verified.append(f"the record against the workspace: its dvc.lock and the {len(record['files'])} "
                                "paths the upstream stages read or wrote")
        verdict.verified.append("the record's raw sources (licences, pins) against the workspace's ingest manifests")
        recorded, now = record.get("git", {}).get("commit"), git_state(workspace).get("commit")
        if recorded and now and recorded != now:
            verdict.notes.append(f"git: the workspace is at {now[:12]}, the model was packaged at {recorded[:12]}; "
                                 "the code that matters is checked through the stages' dependencies above")
    return verdict
