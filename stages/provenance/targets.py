"""What ``python -m stages.lineage`` can be pointed at, each opened as a :class:`Target` (the record, the Bento's
description, each packaged model file's MD5; for a Bento, each file's SHA-256, its manifest and signature): an
exported ``.bento`` (read in place), a tag in the BentoML store, a Bento folder, a model folder holding
``lineage.json``, or a workspace model folder (its record built from ``dvc.lock`` as the package stage does)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from stages.finetuning.adapt import ADAPTATION_FILE
from stages.provenance.hashing import CHUNK, IGNORED_DIRS, folder_manifest, md5_file
from stages.provenance.manifest import MANIFEST_FILE, SIGNATURE_FILE, bento_layout, folder_files, model_tags, sha256_path
from stages.provenance.record import (CLASSIFIER_STAGES, MODEL_STAGES, SCHEMA, LineageError, Lock, classifier_stage,
                                      collect, find_workspace, stored)
from stages.provenance.signing import PROVENANCE_FILE


@dataclass
class Target:
    record: dict
    bento: dict = field(default_factory=dict)  # tag, file, sha256, model_tag
    packaged: list[dict] = field(default_factory=list)  # see verify.verify_packaged
    src: dict[str, str] | None = None  # the Bento's src/ files: {relpath: md5}
    all_files: list[str] | None = None  # every file of the Bento, as the exported archive lays it out
    files: dict[str, str] | None = None  # the same files' SHA-256: {relpath: sha256}
    irregular: list[str] = field(default_factory=list)  # members that are not regular files (links, devices)
    manifest: bytes | None = None  # provenance/manifest.json, as the Bento holds it
    signature: bytes | None = None  # provenance/manifest.json.sig
    provenance: bytes | None = None  # provenance/provenance.intoto.json
    model_paths: dict[str, Path] | None = None  # a Bento folder's models: tag -> folder (None: in an archive)
    folder: str | None = None  # a workspace model folder: its path as dvc.lock names it
    stage: str | None = None  # ... and the stage that wrote it
    workspace: Path | None = None  # ... and the workspace it belongs to


def _yaml(text: str) -> dict:
    import yaml

    return yaml.safe_load(text) or {}


def _packaged_item(name: str, files: dict[str, str], model_yaml: dict, adaptation: str | None = None) -> dict:
    """A packaged model: ``role`` classifier (it holds ``lineage.json``), base (the base a frozen or lora
    classifier needs, stored byte for byte) or generative; a classifier's ``adaptation`` (its parsed
    ``adaptation.json``; ``None`` for a full model or when unreadable)."""
    meta = model_yaml.get("metadata") or {}
    role = "classifier" if "lineage.json" in files else "base" if meta.get("role") == "base" else "generative"
    item = {"name": name, "role": role, "source": meta.get("source"), "files": files}
    if role == "classifier" and ADAPTATION_FILE in files:
        try:
            item["adaptation"] = json.loads(adaptation) if adaptation is not None else None
        except ValueError:
            item["adaptation"] = None
    return item


def _adaptation_text(folder: Path) -> str | None:
    path = folder / ADAPTATION_FILE
    return path.read_text(encoding="utf-8") if path.is_file() and not path.is_symlink() else None


def _member_name(name: str) -> str:
    """An archive member's path inside the Bento (``./bento.yaml`` -> ``bento.yaml``; a file name's dot is kept)."""
    while name.startswith("./"):
        name = name[2:]
    return name.lstrip("/")


def from_bento_file(path: Path) -> Target:
    """An exported ``.bento`` (or .tar.gz) read in place."""
    models: dict[str, dict[str, str]] = {}
    texts: dict[str, str] = {}
    src: dict[str, str] = {}
    files: dict[str, str] = {}
    irregular: list[str] = []
    seal: dict[str, bytes] = {}
    try:
        with tarfile.open(path, "r:*") as tar:
            for member in tar:
                name = _member_name(member.name)
                if member.isdir():
                    continue
                if not member.isfile():
                    irregular.append(name)
                    continue
                parts = name.split("/")
                data = tar.extractfile(member)
                md5, sha = hashlib.md5(), hashlib.sha256()
                small = name in (MANIFEST_FILE, SIGNATURE_FILE, PROVENANCE_FILE, "bento.yaml") or (
                    parts[0] == "models" and parts[-1] in ("model.yaml", "lineage.json")) or (
                    parts[0] == "models" and len(parts) == 4 and parts[-1] == ADAPTATION_FILE)
                kept = []
                while chunk := data.read(CHUNK):
                    md5.update(chunk)
                    sha.update(chunk)
                    if small:
                        kept.append(chunk)
                if name in files:
                    irregular.append(f"{name} (a second member of the same name)")
                files[name] = sha.hexdigest()
                if name in (MANIFEST_FILE, SIGNATURE_FILE, PROVENANCE_FILE):
                    seal[name] = b"".join(kept)
                elif small:
                    texts[name] = b"".join(kept).decode("utf-8")
                if parts[0] == "src" and len(parts) >= 2:
                    src["/".join(parts[1:])] = md5.hexdigest()
                elif parts[0] == "models" and len(parts) >= 4:
                    models.setdefault(f"{parts[1]}:{parts[2]}", {})["/".join(parts[3:])] = md5.hexdigest()
    except (tarfile.TarError, OSError) as exc:
        raise LineageError(f"{path}: not a readable .bento archive ({exc})") from exc
    bento_yaml = _yaml(texts.get("bento.yaml", ""))
    packaged, record = [], None
    for tag, model_files in sorted(models.items()):
        name, version = tag.split(":")
        packaged.append(_packaged_item(tag, model_files, _yaml(texts.get(f"models/{name}/{version}/model.yaml", "")),
                                       texts.get(f"models/{name}/{version}/{ADAPTATION_FILE}")))
        if f"models/{name}/{version}/lineage.json" in texts:
            record = json.loads(texts[f"models/{name}/{version}/lineage.json"])
            model_tag = tag
    if record is None:
        raise LineageError(f"{path}: no packaged model in it carries lineage.json")
    bento = {"tag": f"{bento_yaml.get('name')}:{bento_yaml.get('version')}", "file": str(path),
             "sha256": sha256_path(path), "model_tag": model_tag}
    return Target(record=record, bento=bento, packaged=packaged, src=src, all_files=sorted(files), files=files,
                  irregular=sorted(irregular), manifest=seal.get(MANIFEST_FILE), signature=seal.get(SIGNATURE_FILE),
                  provenance=seal.get(PROVENANCE_FILE))


@contextlib.contextmanager
def model_dirs(target: Target):
    """The Bento's model folders on disk (``{tag: folder}``): a Bento folder's own, or an archive's regular
    ``models/<name>/<version>/`` members extracted to a temporary folder, removed afterwards."""
    if target.model_paths is not None or not target.bento.get("file"):
        yield dict(target.model_paths or {})
        return
    tmp = Path(tempfile.mkdtemp(prefix="lm-lineage-models-"))
    try:
        dirs: dict[str, Path] = {}
        with tarfile.open(target.bento["file"], "r:*") as tar:
            for member in tar:
                parts = _member_name(member.name).split("/")
                if (not member.isfile() or len(parts) < 4 or parts[0] != "models"
                        or any(p in ("", ".", "..") for p in parts)):
                    continue  # links and special files are named by the manifest check, never written
                folder = dirs.setdefault(f"{parts[1]}:{parts[2]}", tmp / parts[1] / parts[2])
                out = folder.joinpath(*parts[3:])
                out.parent.mkdir(parents=True, exist_ok=True)
                with tar.extractfile(member) as src, open(out, "wb") as dst:
                    shutil.copyfileobj(src, dst, CHUNK)
        yield dirs
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _model_folder_item(tag: str, folder: Path) -> dict:
    model_yaml = _yaml((folder / "model.yaml").read_text(encoding="utf-8")) if (folder / "model.yaml").is_file() else {}
    return _packaged_item(tag, folder_manifest(folder), model_yaml, _adaptation_text(folder))


def from_model_folder(folder: Path, tag: str | None = None) -> Target:
    """A packaged model folder handed over on its own: its regular files are hashed; links and special files
    (which a packaged model never holds) are never followed or read, and are named as irregular."""
    lineage = folder / "lineage.json"
    if not lineage.is_file() or lineage.is_symlink():
        raise LineageError(f"{folder}: no lineage.json (not a model packaged by stages.package)")
    record = json.loads(lineage.read_text(encoding="utf-8"))
    tag = tag or str(folder)
    regular, irregular = folder_files(folder)
    files = {rel: md5_file(path) for rel, path in regular.items() if not IGNORED_DIRS & set(rel.split("/")[:-1])}
    model_yaml = _yaml((folder / "model.yaml").read_text(encoding="utf-8")) if "model.yaml" in files else {}
    return Target(record=record, bento={"model_tag": tag} if ":" in tag else {},
                  packaged=[_packaged_item(tag, files, model_yaml, _adaptation_text(folder))], irregular=irregular)




def is_classifier(stage: str | None) -> bool:
    """Whether ``stage`` wrote a fine-tuned classifier (``finetune@...`` or ``adapt@...``)."""
    return bool(stage) and stage.split("@", 1)[0] in CLASSIFIER_STAGES


def from_workspace_model(folder: Path, evaluate_stage: str = "evaluate") -> Target:
    """A workspace model folder (finetune, pretrain or dapt): the record the package stage would build (for
    a pre-trained model, that of the selected classifier). The workspace must match its ``dvc.lock``."""
    folder = folder.resolve()
    root = find_workspace(folder)
    if root is None:
        raise LineageError(f"{folder}: no lineage.json, and no dvc.lock at or above it (neither a packaged model "
                           "nor a model folder of a workspace)")
    rel = folder.relative_to(root).as_posix()
    lock = Lock.read(root / "dvc.lock")

    def model_out(stage: str) -> str | None:
        return next((o["path"] for o in lock.stages[stage].get("outs", []) if "nfiles" in o), None)

    stage = lock.writer(rel)
    if stage is None or stage.split("@", 1)[0] not in MODEL_STAGES:
        raise LineageError(f"{rel}: not a model folder a finetune, adapt, pretrain, dapt or base stage wrote "
                           f"(per {root / 'dvc.lock'})")
    if evaluate_stage not in lock.stages:
        raise LineageError(f"{root / 'dvc.lock'}: no {evaluate_stage} stage, so no model gate to record")
    gate = next((o["path"] for o in lock.stages[evaluate_stage].get("outs", [])
                 if o["path"].endswith("model-gate.json")), None)
    if gate is None:
        raise LineageError(f"{root / 'dvc.lock'}: the {evaluate_stage} stage writes no model-gate.json")
    if is_classifier(stage):
        name, model_dir = Path(rel).name, rel  # the run's name is its folder's (data/models/finetune/<name>)
    else:
        report = json.loads((root / gate).read_text(encoding="utf-8")) if (root / gate).is_file() else {}
        finetunes = [s for s in lock.stages if s.startswith("finetune@") and model_out(s)]
        name = report.get("selected") or (finetunes[0].split("@", 1)[1] if finetunes else None)
        writer = classifier_stage(lock, name) if name else None
        if not name or writer not in lock.stages or not model_out(writer):
            raise LineageError(f"{rel}: no fine-tuned model in {root / 'dvc.lock'} whose record would hold it")
        model_dir = model_out(writer)
    record = collect(root, model_name=name, model_dir=Path(model_dir), gate_report=Path(gate),
                     evaluate_stage=evaluate_stage)
    if rel not in record["files"]:
        raise LineageError(f"{rel}: not upstream of the {evaluate_stage} stage in {root / 'dvc.lock'}")
    return Target(record=stored(record), folder=rel, stage=stage, workspace=root)


def from_store(tag: str) -> Target:
    """A Bento tag (its models from the model store) or a model tag."""
    import os

    os.environ.setdefault("BENTOML_DO_NOT_TRACK", "True")
    import bentoml
    from bentoml.exceptions import NotFound

    try:
        bento = bentoml.bentos.get(tag)
    except NotFound:
        bento = None
    except Exception as exc:  # a malformed tag
        raise LineageError(f"{tag}: not a file, folder or BentoML tag ({exc})") from exc
    if bento is None:
        try:
            model = bentoml.models.get(tag)
        except NotFound as exc:
            raise LineageError(f"{tag}: no such file, folder, Bento or model (BENTOML_HOME "
                               f"{os.environ.get('BENTOML_HOME', '~/bentoml')})") from exc
        return from_model_folder(Path(model.path), str(model.tag))
    return from_bento_folder(Path(bento.path), str(bento.tag))


def from_bento_folder(folder: Path, tag: str | None = None) -> Target:
    """A built Bento: its ``bento.yaml`` names the models; they live in the store (or under ``models/``)."""
    import bentoml

    info = _yaml((folder / "bento.yaml").read_text(encoding="utf-8"))
    packaged, record, model_tag = [], None, None
    paths: dict[str, Path] = {}
    for t in model_tags(info):
        name, version = t.split(":")
        inside = folder / "models" / name / version
        if inside.is_dir():
            path = inside
        else:
            try:
                path = Path(bentoml.models.get(t).path)
            except Exception as exc:  # NotFound: the Bento was copied without its models
                raise LineageError(f"{folder}: its model {t} is not in the model store ({exc})") from exc
        paths[t] = path
        packaged.append(_model_folder_item(t, path))
        if (path / "lineage.json").is_file():
            record = json.loads((path / "lineage.json").read_text(encoding="utf-8"))
            model_tag = t
    if record is None:
        raise LineageError(f"{folder}: no packaged model in this Bento carries lineage.json")
    layout, irregular = bento_layout(folder, paths)
    files = {rel: sha256_path(p) for rel, p in layout.items()}
    src = None  # byte-code caches too (folder_manifest skips them): a server would run them
    if (folder / "src").is_dir():
        src = {rel: md5_file(p) for rel, p in folder_files(folder / "src")[0].items()}
    seal = {name: (folder / name).read_bytes() for name in (MANIFEST_FILE, SIGNATURE_FILE, PROVENANCE_FILE)
            if (folder / name).is_file()}
    return Target(record=record, bento={"tag": tag or f"{info.get('name')}:{info.get('version')}",
                                        "folder": str(folder), "model_tag": model_tag}, packaged=packaged,
                  src=src, all_files=sorted(files), files=files, irregular=irregular,
                  manifest=seal.get(MANIFEST_FILE), signature=seal.get(SIGNATURE_FILE),
                  provenance=seal.get(PROVENANCE_FILE), model_paths=paths)


REQUIRED = {"model": ("name", "stage", "path", "files", "md5"), "stages": (), "files": (), "git": (), "metrics": (),
            "gates": ()}


def check_record(record, where: str) -> dict:
    """A record this version can read: schema 1 with the keys the chain and the checks use."""
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        raise LineageError(f"{where}: lineage.json is not a schema-{SCHEMA} lineage record")
    for key, inner in REQUIRED.items():
        if not isinstance(record.get(key), dict) or any(k not in record[key] for k in inner):
            raise LineageError(f"{where}: lineage.json lacks {key}" + (f" ({', '.join(inner)})" if inner else ""))
    return record


def open_target(target: str) -> Target:
    """Open ``target``; any unreadable input is a ``LineageError`` naming it."""
    import lzma

    import yaml

    path = Path(target)
    try:
        if path.is_file():
            opened = from_bento_file(path)
        elif path.is_dir():
            if (path / "bento.yaml").is_file():
                opened = from_bento_folder(path)
            elif (path / "lineage.json").is_file() or find_workspace(path.resolve()) is None:
                opened = from_model_folder(path)
            else:
                opened = from_workspace_model(path)
        else:
            opened = from_store(target)
    except (EOFError, lzma.LZMAError, UnicodeDecodeError, ValueError, KeyError, yaml.YAMLError, OSError) as exc:
        raise LineageError(f"{target}: cannot be read ({type(exc).__name__}: {exc})") from exc
    check_record(opened.record, target)
    return opened

