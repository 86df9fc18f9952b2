"""The package stage's core: the model the gate chose (with the pre-trained ones beside it, and for a frozen or
lora classifier the base it was fine-tuned on) saved to the BentoML store with its lineage record, each model
folder signed (OpenSSF Model Signing), built into a Bento with the service and the code that serves, sealed with
a manifest and a signed SLSA provenance statement, and exported to the registry with the public key beside it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from stages.common.atomic import temp_sibling, work_dir, write_bytes_atomic, write_json_atomic
from stages.common.inputs import check_folder, read_json
from stages.common.redact import redact_url
from stages.finetuning.adapt import ADAPTATION_FILE, base_digest, read_adaptation
from stages.provenance.card import CARD_FILE, bento_card, classifier_card, generative_card
from stages.provenance.hashing import folder_manifest, md5_file
from stages.provenance import signing
from stages.provenance.manifest import (MANIFEST_FILE, model_tags, sha256_path, sha256_stream,
                                        write_manifest)
from stages.provenance.record import MODEL_STAGES, LineageError, Lock, collect
from stages.provenance.record import stored as as_stored
from stages.serving.config import EXPORT_SUFFIX, PackageConfig


class PackageRefused(RuntimeError):
    """The model gate did not pass (or named no model): nothing is packaged."""


def read_gate(path: Path) -> dict:
    """The model gate's verdict; raises ``PackageRefused`` naming the failed checks unless it passed."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no model gate verdict (run the evaluate stage first)")
    gate = read_json(path)
    if not isinstance(gate, dict):
        raise ValueError(f"{path}: not a model gate verdict (a JSON object)")
    if not gate.get("passed"):
        failed = [f"{c.get('check')} = {c.get('value')} (minimum {c.get('minimum')})"
                  for c in gate.get("checks", []) if not c.get("passed")]
        raise PackageRefused(f"{path}: the model gate did not pass ({'; '.join(failed) or 'no candidate'}); "
                             "nothing was packaged")
    if not gate.get("selected"):
        raise PackageRefused(f"{path}: the gate passed but selected no model")
    return gate


def model_metadata(record: dict, base: dict | None = None) -> tuple[dict[str, str], dict]:
    """BentoML labels (flat strings) and metadata (the audit summary; the full record is ``lineage.json``).
    ``base``: a frozen or lora classifier's packaged base (``tag``, ``source``, ``digest``): the labels name the
    method and the base's tag, the metadata (``adaptation``) the base's tag, folder and digest as well."""
    git, model = record["git"], record["model"]
    gate = record.get("model_gate") or {}
    labels = {"pipeline": "lm-pipeline", "selected": model["name"], "paradigm": str(model["paradigm"]),
              "init": str(model["init"]), "git_commit": str(git.get("commit")), "git_dirty": str(git.get("dirty")),
              "model_gate": "passed" if gate.get("passed") else "failed"}
    stages = {name: {kind: {e["path"]: e.get("md5") for e in entry.get(kind, [])} for kind in ("deps", "outs")}
              for name, entry in record["stages"].items()}
    metadata = _plain({"git": git, "model": {k: model.get(k) for k in ("name", "paradigm", "init", "labels",
                                                                        "parameters", "md5")},
                "dvc_lock": stages, "params": record["params"], "gates": record["gates"],
                "model_gate": gate, "evaluation": record["metrics"].get("reports/metrics/evaluation.json"),
                "lineage_file": "lineage.json"})
    if base is not None:  # a full model's labels and metadata stay as they were
        method = record["model"]["adaptation"]["method"]
        labels.update(method=str(method), base=base["tag"])
        metadata["adaptation"] = _plain({"method": method, "base": base})
    return labels, metadata


def _plain(value):
    """BentoML metadata takes no None: dropped from mappings, "null" in lists."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_plain(v) if v is not None else "null" for v in value]
    return value


def save_base(record: dict, cfg: PackageConfig, *, root: Path, base_dir: Path, made: list[str],
              key: signing.SigningKey | None = None) -> dict:
    """Copy a frozen or lora classifier's base model into the model store byte for byte, its own card included
    (its digest, BentoML's ``model.yaml`` and ``model.sig`` aside, is the one ``adaptation.json`` records), signed
    with ``key``; returns ``{"tag", "source", "digest"}`` and appends ``"model <tag>"`` to ``made``."""
    import bentoml

    rel = base_dir.as_posix()
    info, adaptation = record["files"][rel], record["model"]["adaptation"]
    meta = _plain({"role": "base", "source": rel, "digest": adaptation["base_digest"], "md5": info["md5"],
                   "files": info["files"], "method": adaptation["method"], "git": record["git"],
                   "stage": Lock(stages=record["stages"]).writer(rel)})
    with bentoml.models.create(f"{cfg.name}-base",
                               labels={"pipeline": "lm-pipeline", "role": "base",
                                       "paradigm": str(record["model"]["paradigm"]),
                                       "method": str(adaptation["method"]),
                                       "git_commit": str(record["git"].get("commit"))},
                               metadata=meta) as b:
        _copy_files(root / base_dir, Path(b.path))
    made.append(f"model {b.tag}")
    if key is not None:
        signing.sign_model_folder(Path(bentoml.models.get(b.tag).path), key)
    return {"tag": str(b.tag), "source": rel, "digest": adaptation["base_digest"]}


def save_models(record: dict, cfg: PackageConfig, *, root: Path, model_dir: Path, generative_dirs: dict[str, Path],
                made: list[str], key: signing.SigningKey | None = None, base_dir: Path | None = None) -> dict:
    """Copy the classifier and the chosen pre-trained models into the model store, each with its model card
    (``README.md``, rendered from ``record``) and, with ``key``, signed whole (``model.sig``, once BentoML has
    written its ``model.yaml``); returns their tags and appends ``"model <tag>"`` to ``made`` for each.
    ``base_dir``: a frozen or lora classifier's base, stored first as its own model (:func:`save_base`)."""
    import bentoml

    stored = as_stored(record)  # the cards are rendered from the record as lineage.json stores it, as verify reads it
    base = save_base(record, cfg, root=root, base_dir=base_dir, made=made, key=key) if base_dir is not None else None
    labels, metadata = model_metadata(record, base)
    with bentoml.models.create(f"{cfg.name}-classifier", labels=labels, metadata=metadata) as m:
        _copy_files(root / model_dir, Path(m.path), skip=CARD_FILE)
        write_json_atomic(Path(m.path) / "lineage.json", record)
        (Path(m.path) / CARD_FILE).write_bytes(classifier_card(stored).encode("utf-8"))
    made.append(f"model {m.tag}")
    if key is not None:
        signing.sign_model_folder(Path(bentoml.models.get(m.tag).path), key)  # in the store now
    tags = {"classifier": str(m.tag), "generative": {}, **({"base": base["tag"]} if base else {})}
    for paradigm, folder in generative_dirs.items():
        rel = folder.as_posix()
        info = record["files"].get(rel)
        meta = _plain({"source": rel, "md5": info["md5"], "files": info["files"], "classifier": str(m.tag),
                       "git": record["git"], "stage": Lock(stages=record["stages"]).writer(rel)})
        with bentoml.models.create(f"{cfg.name}-{paradigm}",
                                   labels={"pipeline": "lm-pipeline", "paradigm": paradigm,
                                           "weights": cfg.generative_from, "git_commit": labels["git_commit"]},
                                   metadata=meta) as g:
            _copy_files(root / folder, Path(g.path), skip=CARD_FILE)
            (Path(g.path) / CARD_FILE).write_bytes(generative_card(stored, rel).encode("utf-8"))
        made.append(f"model {g.tag}")
        if key is not None:
            signing.sign_model_folder(Path(bentoml.models.get(g.tag).path), key)
        tags["generative"][paradigm] = str(g.tag)
    return tags


def _remove(made: list[str]) -> None:
    """Delete the Bento and models a failed run created (newest first): the store holds only whole packages."""
    import bentoml

    for item in reversed(made):
        kind, tag = item.split(" ", 1)
        try:
            (bentoml.bentos.delete if kind == "bento" else bentoml.models.delete)(tag)
        except Exception:  # already gone, or the store is unwritable: nothing more to undo
            pass


def _copy_files(src: Path, dst: Path, skip: str | None = None) -> None:
    """``src``'s files into ``dst``, but for the top-level ``skip`` (the folder's own card, which is replaced)."""
    for item in sorted(src.rglob("*")):
        if item.is_file() and "__pycache__" not in item.parts and item.relative_to(src).as_posix() != skip:
            target = dst / item.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(item, target)


def python_packages() -> list[str]:
    """The serving dependencies pinned to the versions that built the Bento (``bentoml containerize``
    installs these). A local build label (torch's ``+cpu`` / ``+cu128``) is dropped: no default index carries
    it, and which torch build the image gets (CPU or CUDA) is the image builder's choice (docs/deploying.md)."""
    from importlib.metadata import PackageNotFoundError, version

    pins = []
    for name in ("torch", "transformers", "tokenizers", "safetensors", "numpy", "pydantic", "pyyaml"):
        try:
            pins.append(f"{name}=={version(name).split('+', 1)[0]}")
        except PackageNotFoundError:
            pass
    return pins


# The image's base distribution (BentoML's python:<version>-slim) and the system packages the service needs on it:
# none, since every dependency above is a manylinux wheel with its native libraries inside.
DISTRO = "debian"
SYSTEM_PACKAGES: tuple[str, ...] = ()


def python_version() -> str:
    """The running interpreter's ``major.minor``: the Bento is built, and its pins resolved, with it."""
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def image_options() -> dict:
    """The Bento's image as ``bentoml.bentos.build``'s ``docker`` and ``python`` build options."""
    return {"docker": {"distro": DISTRO, "python_version": python_version(),
                       "system_packages": list(SYSTEM_PACKAGES)},
            "python": {"packages": python_packages(), "lock_packages": False}}


def served_code(stages_dir: Path, service: Path) -> dict[str, str]:
    """MD5 of every Python file the Bento's ``src/`` will hold, for ``stages.lineage --verify``."""
    code = {f"stages/{rel}": md5 for rel, md5 in folder_manifest(stages_dir).items() if rel.endswith(".py")}
    code["service.py"] = md5_file(service)
    return code


def build_bento(cfg: PackageConfig, tags: dict, *, service: Path, stages_dir: Path, record: dict, scratch: Path,
                sources: dict[str, str] | None = None, key: signing.SigningKey | None = None):
    """Build the Bento in a temporary build context: the service, its config and the ``stages`` package; its
    README is the Bento's card (``stages.provenance.card.bento_card``). ``sources``: each generative model's
    folder as the record names it."""
    import bentoml

    image = image_options()
    config = {"name": cfg.name, "classifier": tags["classifier"], "generative": tags["generative"],
              "limits": asdict(cfg.limits), "batching": asdict(cfg.batching), "resources": cfg.resources.as_service()}
    if "base" in tags:  # a frozen or lora classifier: the service loads its base from this model
        config["base"] = tags["base"]
    served = {**config, "image": {**image["docker"], "python_packages": image["python"]["packages"]},  # for the card
              "generative": {p: {"tag": t, "source": (sources or {}).get(p)} for p, t in tags["generative"].items()},
              "signing": key and {"algorithm": key.algorithm, "public_key_sha256": key.fingerprint}}
    if "base" in tags:
        served["base"] = {"tag": tags["base"], **(record["model"].get("adaptation") or {})}
    # scratch in the workspace, not /tmp: one a killed run leaves is swept (stages.common.atomic.sweep_dead)
    with work_dir(scratch / "bento-ctx") as tmp:
        ctx = Path(tmp)
        shutil.copy2(service, ctx / "service.py")
        shutil.copytree(stages_dir, ctx / "stages", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        (ctx / "bento_config.json").write_text(json.dumps(config, indent=2, sort_keys=True), encoding="utf-8")
        git = record["git"]
        return bentoml.bentos.build(
            "service:LMPipeline", name=cfg.name, build_ctx=str(ctx),
            include=["service.py", "bento_config.json", "stages/**/*.py"],
            labels={"pipeline": "lm-pipeline", "selected": record["model"]["name"],
                    "git_commit": str(git.get("commit")), "git_dirty": str(git.get("dirty")),
                    "signed": str(key is not None).lower()},
            description=bento_card(record, served), docker=image["docker"], python=image["python"],
        )


def archive_digest(target: str) -> tuple[int, str]:
    """(bytes, SHA-256) of the exported archive, read back from where it was written (a path or fsspec URL)."""
    if "://" not in target:
        return Path(target).stat().st_size, sha256_path(Path(target))
    import fsspec

    fs, path = fsspec.url_to_fs(target)
    with fs.open(path, "rb") as f:
        digest = sha256_stream(f)
    return int(fs.size(path)), digest


@dataclass(frozen=True)
class Sealed:
    """A built Bento's manifest: what the metrics record of it, the SHA-256 of every file it lists and each
    model's folder in the store (tag -> path)."""

    made: dict
    hashes: dict[str, str]
    models: dict[str, Path]


def seal(bento) -> Sealed:
    """Write the Bento's manifest into the built Bento."""
    import bentoml
    import yaml

    folder = Path(bento.path)
    info = yaml.safe_load((folder / "bento.yaml").read_text(encoding="utf-8")) or {}
    models = {tag: Path(bentoml.models.get(tag).path) for tag in model_tags(info)}
    made, hashes = write_manifest(folder, str(bento.tag), models)
    return Sealed(made, hashes, models)


def _builder() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": python_version()}
    for name in ("lm-pipeline", "dvc", "bentoml", "model-signing", "securesystemslib", "torch", "transformers"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            pass
    return out


def attest(bento, record: dict, *, root: Path, sealed: Sealed, cfg: PackageConfig, key: signing.SigningKey | None,
           base: dict | None = None) -> bytes:
    """The SLSA provenance of the Bento (its model folders and every other file, the manifest included), signed
    with ``key`` into ``provenance/provenance.intoto.json``; returns the envelope's bytes. Its resolved
    dependencies list every upstream model folder by digest; a frozen or lora classifier's base is annotated as
    such (``base``: its ``source`` folder and the ``tag`` of the model that ships it)."""
    hashes, subjects = sealed.hashes, []
    for tag in sorted(sealed.models):
        name, version = tag.split(":")
        prefix = f"models/{name}/{version}/"
        inner = {rel[len(prefix):]: d for rel, d in hashes.items() if rel.startswith(prefix)}
        subjects.append({"name": prefix.rstrip("/"), "digest": {"sha256": signing.folder_digest(inner)},
                         "annotations": {"tag": tag, "files": len(inner)}})
    subjects += [{"name": rel, "digest": {"sha256": d}} for rel, d in sorted(hashes.items())
                 if not rel.startswith("models/")]
    subjects.append({"name": MANIFEST_FILE, "digest": {"sha256": sealed.made["manifest_sha256"]}})
    lock = Lock(stages=record["stages"])
    model_dir = record["model"]["path"]  # listed even when it holds no config.json (a frozen or lora head)
    upstream = {path: signing.folder_files_digest(root / path) for path in sorted(record["files"])
                if (lock.writer(path) or "").split("@", 1)[0] in MODEL_STAGES
                and (root / path / "config.json").is_file() or path == model_dir}
    adaptation = record["model"].get("adaptation")
    roles = {} if not (adaptation and base) else {  # the base a frozen or lora classifier was fine-tuned on
        model_dir: {"method": adaptation["method"], "base": base["source"], "base_digest": adaptation["base_digest"]},
        base["source"]: {"base_of": model_dir, "packaged_as": base["tag"]}}
    gates = sorted({*record.get("gates", {}), record["model_gate_path"]})
    reports = {path: sha256_path(root / path) for path in gates if (root / path).is_file()}
    run = signing.Invocation(bento=str(bento.tag), finished=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                             builder=_builder(),
                             internal={"package": {"name": cfg.name, "generative": list(cfg.generative),
                                                   "generative_from": cfg.generative_from, "signing": cfg.signing}})
    statement = signing.build_statement(record, subjects=subjects, models=upstream, reports=reports, run=run,
                                        roles=roles)
    envelope = signing.sign_statement(statement, key)
    target = Path(bento.path) / signing.PROVENANCE_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(envelope)
    return envelope


def write_beside(target: str, suffix: str, data: bytes) -> str:
    """Write ``data`` beside the exported archive (a local file atomically, or through fsspec)."""
    path = signing.sidecar(target, suffix)
    if "://" in path:
        import fsspec

        fs, inner = fsspec.url_to_fs(path)
        with fs.open(inner, "wb") as f:
            f.write(data)
    else:
        write_bytes_atomic(path, data)
    return path


def export(bento, registry: str, fmt: str = "bento") -> str:
    """Export to ``registry`` as ``<name>-<version>.bento`` (or ``.tar.gz`` / ``.tar``: ``fmt``); a local file
    appears whole or not at all. Returns the file's path, or its URL (as ``registry`` gave it, user-info
    included: redact before showing it)."""
    import bentoml

    suffix = EXPORT_SUFFIX[fmt]
    name = f"{bento.tag.name}-{bento.tag.version}{suffix}"
    if "://" in registry:
        import fsspec

        fs, root = fsspec.url_to_fs(registry)
        fs.makedirs(root, exist_ok=True)  # a no-op on object stores; BentoML does not create the folder
        url = registry.rstrip("/") + "/" + name
        bentoml.bentos.export_bento(bento.tag, url, fmt)
        return url
    folder = Path(registry).resolve()  # BentoML's fsspec export reads a relative path from the filesystem root
    folder.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(folder / name, suffix=suffix)
    try:
        bentoml.bentos.export_bento(bento.tag, str(tmp), fmt)
        os.replace(tmp, folder / name)
    finally:
        tmp.unlink(missing_ok=True)
    return str(folder / name)


def package(cfg: PackageConfig, *, root: Path, gate_path: Path, finetuned: Path, pretrained: Path, dapt: Path,
            service: Path, log=print) -> dict:
    """Gate, record, save, build, export; returns what was made (the stage's metrics)."""
    def rel(p: Path) -> Path:  # the record names paths as dvc.lock does: relative to the workspace
        return Path(os.path.relpath(p if p.is_absolute() else root / p, root))

    gate = read_gate(root / rel(gate_path))
    selected = gate["selected"]
    model_dir = rel(finetuned) / selected
    service = root / rel(service)
    record = collect(root, model_name=selected, model_dir=model_dir, gate_report=rel(gate_path))
    # frozen or lora: the folder holds a head (and adapter) only; its base ships beside it as its own model
    base_dir = adapted_base(root, model_dir, record) if read_adaptation(root / model_dir) is not None else None
    record["served_code"] = served_code(Path(__file__).parents[1], service)
    base = rel({"pretrained": pretrained, "dapt": dapt}[cfg.generative_from])
    generative_dirs = {p: base / p for p in cfg.generative}
    for p, folder in generative_dirs.items():
        if not (root / folder / "config.json").is_file():
            raise FileNotFoundError(f"{folder}: no {p} model to ship (package.generative lists {p})")
        if folder.as_posix() not in record["files"]:
            raise LineageError(f"{folder}: not upstream of the evaluation in dvc.lock, so it cannot be shipped "
                               "with its lineage")
    for folder in [model_dir, *generative_dirs.values(), *([base_dir] if base_dir else [])]:  # what ships, checked
        check_folder(root / folder)
    key = signing.load_signing_key(root) if cfg.signing == "key" else None  # first: a bad key packages nothing
    if key is not None and key.created:
        log(f"[package] created the signing key {key.path} (its public half is exported beside each Bento)")
    registry = cfg.registry if "://" in cfg.registry else str(root / cfg.registry)  # an absolute path stays
    made: list[str] = []  # what this run put in the store, removed again if a later step fails
    try:
        tags = save_models(record, cfg, root=root, model_dir=model_dir, generative_dirs=generative_dirs, made=made,
                           key=key, base_dir=base_dir)
        log(f"[package] models: {tags['classifier']}" + "".join(f", {t}" for t in tags["generative"].values())
            + (f", {tags['base']} (the base of its {record['model']['adaptation']['method']} head)"
               if "base" in tags else ""))
        bento = build_bento(cfg, tags, service=service, stages_dir=Path(__file__).parents[1], record=record,
                            scratch=root / "dist",
                            sources={p: folder.as_posix() for p, folder in generative_dirs.items()}, key=key)
        made.append(f"bento {bento.tag}")
        log(f"[package] bento: {bento.tag}")
        sealed = seal(bento)
        log(f"[package] manifest: {sealed.made['manifest_files']} files, sha256 {sealed.made['manifest_sha256']}")
        envelope = attest(bento, record, root=root, sealed=sealed, cfg=cfg, key=key,
                          base=base_dir and {"tag": tags["base"], "source": base_dir.as_posix()})
        log(f"[package] provenance: {signing.PROVENANCE_FILE} (in-toto SLSA v1, "
            + (f"signed by the key sha256 {key.fingerprint})" if key else "unsigned: package.signing is none)"))
        target = export(bento, registry, cfg.export_format)
        size, digest = archive_digest(target)
        beside = {"provenance": redact_url(write_beside(target, signing.PROVENANCE_SUFFIX, envelope))}
        if key is not None:
            pem = signing.public_pem(key.public)
            beside["public_key"] = redact_url(write_beside(target, signing.PUBLIC_KEY_SUFFIX, pem))
    except BaseException:
        _remove(made)
        raise
    shown = redact_url(target)
    log(f"[package] exported: {shown} (sha256 {digest})")
    return {"bento": str(bento.tag), "models": tags, "exported": shown, "selected": selected,
            "model_gate_passed": True, "git_commit": record["git"]["commit"], "git_dirty": record["git"]["dirty"],
            "model_md5": record["model"]["md5"], "lineage_md5": lineage_md5(tags["classifier"]),
            "bytes": size, "sha256": digest, **sealed.made,
            "signing": None if key is None else {
                "method": "key", "algorithm": key.algorithm, "public_key_sha256": key.fingerprint,
                "format": "OpenSSF model signing", "models": sorted(sealed.models),
                "model_signature": signing.MODEL_SIGNATURE},
            "provenance": {"file": signing.PROVENANCE_FILE, "sha256": hashlib.sha256(envelope).hexdigest(),
                           "signed": key is not None, "predicate": signing.SLSA_PREDICATE},
            "beside": beside}


def adapted_base(root: Path, model_dir: Path, record: dict) -> Path:
    """The base folder (relative to ``root``) that the frozen or lora classifier in ``model_dir`` names in its
    ``adaptation.json``, checked before anything is made: upstream of the evaluation in dvc.lock (so it ships
    with its lineage), a model folder, its digest the recorded one, and no file the model store would replace."""
    adaptation = record["model"].get("adaptation") or read_adaptation(root / model_dir)
    named = Path(adaptation["base"])
    try:
        base = Path(os.path.relpath(named, root)) if named.is_absolute() else Path(os.path.normpath(named))
    except ValueError:  # another drive
        base = named
    where = f"{model_dir}: fine-tuned with method {adaptation.get('method')} on the base {named} ({ADAPTATION_FILE})"
    if base.is_absolute() or base.parts[:1] == ("..",):
        raise PackageRefused(f"{where}, outside the workspace {root}: it cannot be shipped with its lineage")
    if base.as_posix() not in record["files"]:
        raise LineageError(f"{where}: not upstream of the evaluation in dvc.lock, so it cannot be shipped with "
                           "its lineage")
    if not (root / base / "config.json").is_file():
        raise FileNotFoundError(f"{where}: {base} holds no model (no config.json)")
    clash = sorted(n for n in signing.STORE_FILES if (root / base / n).exists())
    if clash:
        raise PackageRefused(f"{where}: {base} holds {', '.join(clash)}, which the model store would replace")
    got = base_digest(root / base)
    if got != adaptation.get("base_digest"):
        raise PackageRefused(f"{where}: {base} has digest {got}, not {adaptation.get('base_digest')} as recorded "
                             "(the base changed since fine-tuning): fine-tune again")
    return base


def lineage_md5(model_tag: str) -> str:
    """MD5 of the ``lineage.json`` packaged with the classifier ``model_tag``."""
    import bentoml

    return md5_file(Path(bentoml.models.get(model_tag).path) / "lineage.json")
