"""Verify a lineage record: against the packaged model's own files (anywhere) and against a workspace
(its ``dvc.lock`` and the files on disk), naming every mismatch."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from stages.provenance.card import CARD_FILE, expected_card
from stages.provenance.hashing import dir_md5, path_hashes
from stages.provenance.record import LineageError, Lock, git_state

# Files BentoML or packaging add to the model folder beside the fine-tuned model's own files (the model card,
# README.md, is checked on its own: it must be the card the record renders).
PACKAGING_FILES = frozenset({"lineage.json", "model.yaml", CARD_FILE})


@dataclass
class Verdict:
    checked: int = 0
    mismatches: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def as_dict(self) -> dict:
        return {"ok": self.ok, "checked": self.checked, "mismatches": self.mismatches, "notes": self.notes}


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
    """The packaged models' files are the ones the record describes: the classifier against
    ``record["model"]``, each shipped pre-trained model against the record's hashes of its source folder.
    ``packaged``: ``{"name", "role": "classifier" | "generative", "source", "files": {relpath: md5}}``."""
    for item in packaged:
        files = {rel: md5 for rel, md5 in item["files"].items() if rel not in PACKAGING_FILES}
        if item["role"] == "classifier":
            expected = record["model"]["files"]
        else:
            source = (record["files"].get(item.get("source") or "") or {}).get("files")
            if source is None:
                verdict.mismatches.append(f"{item['name']}: its source {item.get('source')!r} is not in the record")
                continue
            expected = source
        verdict.checked += len(expected)
        verdict.mismatches += diff_manifests(f"{item['name']} (packaged)", expected, files)
        verify_card(record, item, verdict)


def verify_card(record: dict, item: dict, verdict: Verdict) -> None:
    """A packaged model's card (``README.md``, where it has one: models packaged before cards have none) is
    the one its lineage record renders, so it states nothing the record does not."""
    import hashlib

    if CARD_FILE not in item["files"]:
        return
    verdict.checked += 1
    card = expected_card(record, item)
    if card is None or hashlib.md5(card.encode("utf-8")).hexdigest() != item["files"][CARD_FILE]:
        verdict.mismatches.append(f"{item['name']} (packaged)/{CARD_FILE}: not the model card its lineage record "
                                  "renders (edited after packaging, or rendered by another version of "
                                  "stages.provenance.card)")


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


def verify_coverage(record: dict, packaged: list[dict], all_files: list[str], verdict: Verdict) -> None:
    """What of the Bento the record vouches for. Byte-code under ``src/`` is a mismatch: packaging ships
    none, and Python would run a ``.pyc`` in place of the checked source. Every other file the record does
    not cover (``bento.yaml``, ``bento_config.json``, requirements, ``model.yaml``, and ``lineage.json``,
    which vouches for itself) is listed in a note: only ``--pin`` binds those. A model card is covered: it is
    compared with the card the record renders."""
    covered = {f"src/{rel}" for rel in record.get("served_code") or {}}
    for item in packaged:
        name, _, version = item["name"].partition(":")
        covered |= {f"models/{name}/{version}/{rel}" for rel in item["files"]
                    if rel not in PACKAGING_FILES or rel == CARD_FILE}  # the card is checked against the record
    verdict.checked += 1
    bytecode = [rel for rel in all_files
                if rel.startswith("src/") and (rel.endswith((".pyc", ".pyo")) or "/__pycache__/" in rel)]
    verdict.mismatches += [f"Bento {rel}: byte-code in the Bento (packaging ships none; Python would run it "
                           "instead of the checked source)" for rel in bytecode]
    rest = [rel for rel in all_files if rel not in covered and rel not in bytecode]
    if rest:
        shown = ", ".join(rest[:6]) + (f" and {len(rest) - 6} more" if len(rest) > 6 else "")
        verdict.notes.append(f"{len(rest)} of the Bento's {len(all_files)} files are not covered by the record "
                             f"({shown}); the record (lineage.json) vouches for itself. --pin SHA256 with the "
                             "archive's digest from a place its publisher cannot rewrite (the package stage's "
                             "reports/metrics/package.json in git, your registry) binds every byte")


def verify_pin(bento: dict, pin: str, verdict: Verdict) -> None:
    """The exported archive is byte for byte the one whose SHA-256 the auditor pinned."""
    verdict.checked += 1
    actual = bento.get("sha256")
    if actual != pin.strip().lower():
        verdict.mismatches.append(f"{bento.get('file')}: SHA-256 {actual}, pinned {pin}")
    else:
        verdict.notes.append("pin: the archive's SHA-256 is the pinned one: every file in it is the one published")


def _own_md5(info: dict) -> str:
    return info["files"][""] if "" in info["files"] else dir_md5(info["files"])


def verify_record(record: dict, verdict: Verdict) -> None:
    """The record agrees with itself, so the packaged files are tied to the ``dvc.lock`` entries it holds:
    each path's per-file hashes add up to its DVC hash; every stage entry pins the hash the record's files
    give that path; a file inside a recorded folder has the same hash in both; the model's files are its
    fine-tuning stage's output. Needs no workspace."""
    files, model = record["files"], record["model"]
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
    """Every upstream stage's entry in the workspace's ``dvc.lock`` pins what the record holds, and no
    stage upstream of the model (by the workspace's lock) is missing from the record."""
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
        digest, manifest = path_hashes(target)
        if digest != info["md5"]:
            verdict.mismatches += diff_manifests(path, info["files"], manifest) or [
                f"{path}: md5 {digest}, recorded {info['md5']}"]


def verify(record: dict, *, packaged: list[dict] | None = None, workspace: Path | None = None,
           src: dict[str, str] | None = None, all_files: list[str] | None = None, bento: dict | None = None,
           pin: str | None = None) -> Verdict:
    """Check the record itself, the packaged models (``packaged``, see ``verify_packaged``), the Bento's code
    (``src``), what else the Bento holds (``all_files``), the archive against a pinned SHA-256 (``pin``, with
    ``bento`` from an exported file) and the workspace (when given)."""
    verdict = Verdict()
    verify_record(record, verdict)
    if packaged:
        verify_packaged(record, packaged, verdict)
    if src is not None:
        verify_src(record, src, verdict)
    if all_files is not None:
        verify_coverage(record, packaged or [], all_files, verdict)
    if pin is not None:
        verify_pin(bento or {}, pin, verdict)
    if workspace is not None:
        try:
            lock = Lock.read(workspace / "dvc.lock")
        except LineageError as exc:
            verdict.mismatches.append(str(exc))
            return verdict
        verify_lock(record, lock, verdict)
        verify_files(record, workspace, verdict)
        recorded, now = record.get("git", {}).get("commit"), git_state(workspace).get("commit")
        if recorded and now and recorded != now:
            verdict.notes.append(f"git: the workspace is at {now[:12]}, the model was packaged at {recorded[:12]}; "
                                 "the code that matters is checked through the stages' dependencies above")
    return verdict
