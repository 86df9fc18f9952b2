"""Verify a lineage record: against the packaged model's own files (anywhere) and against a workspace
(its ``dvc.lock`` and the files on disk), naming every mismatch."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from stages.provenance.hashing import path_hashes
from stages.provenance.record import LineageError, Lock, git_state

# Files BentoML or packaging add to the model folder beside the fine-tuned model's own files.
PACKAGING_FILES = frozenset({"lineage.json", "model.yaml"})


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


def verify_lock(record: dict, lock: Lock, verdict: Verdict) -> None:
    """Every upstream stage's entry in the workspace's ``dvc.lock`` pins what the record holds."""
    for name, entry in record["stages"].items():
        verdict.checked += 1
        now = lock.stages.get(name)
        if now is None:
            verdict.mismatches.append(f"dvc.lock: no stage {name}")
            continue
        for kind in ("deps", "outs"):
            pinned = {e["path"]: e.get("md5") for e in now.get(kind, [])}
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


def verify(record: dict, *, packaged: list[dict] | None = None, workspace: Path | None = None) -> Verdict:
    """Check the packaged models (``packaged``, see ``verify_packaged``) and the workspace (when given)."""
    verdict = Verdict()
    if packaged:
        verify_packaged(record, packaged, verdict)
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
