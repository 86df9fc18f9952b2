"""A profile run that leaves the workspace as it found it.

A profile (``profiles/<name>.yaml``) changes params, so its run rewrites ``params.yaml``, ``dvc.lock`` and the
tracked reports. :func:`profile_workspace` saves those first, applies the profile to ``params.yaml`` (comments
kept), and after the run (finished, failed or interrupted) copies what the run wrote to
``reports/profiles/<label>/`` and puts the saved files back: ``git status`` is as before, the default run's
report is the default run's, and the next plain ``make run`` runs the default pipeline (``dvc status`` names
the stages whose outputs are the profile's). After a SIGKILL the next run restores first
(:func:`restore_after_kill`).

    python -m stages.profile_run tiny            # what `make run PROFILE=tiny` and `lm-pipeline run --profile` do
    python -m stages.profile_run --restore       # only put back what a killed profile run left
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from stages.common.atomic import write_bytes_atomic, write_json_atomic
from stages.common.hashing import sha256_file
from stages.config import ConfigError, load_params
from stages.profile import apply, load_checked, targets

KEPT_FILES = ("params.yaml", "dvc.lock", "experiments/compare/dvc.lock")
REPORTS = "reports"
NOT_KEPT = ("live", "gx", "profiles")  # under reports/: live logs, Data Docs, and the profiles' results themselves
RESULTS = "reports/profiles"           # one folder per profile label: what its last run wrote (ignored by git)
SNAPSHOT = ".dvc/tmp/lm-pipeline-before-profile"


def label(spec: str | list[str]) -> str:
    """The folder name of a profile spec: ``"gpu gpu-quick"`` -> ``gpu+gpu-quick``."""
    names = spec.replace(",", " ").split() if isinstance(spec, str) else [str(n) for n in spec]
    return "+".join(names)


def kept_paths(root: Path) -> list[str]:
    """The files a profile run must not leave changed: params.yaml, the dvc.lock files and the reports (but
    reports/live, reports/gx and reports/profiles), relative to ``root``."""
    out = [rel for rel in KEPT_FILES if (root / rel).is_file()]
    reports = root / REPORTS
    for path in sorted(reports.rglob("*")) if reports.is_dir() else []:
        rel = path.relative_to(root)
        if path.is_file() and rel.parts[1] not in NOT_KEPT and ".tmp" not in path.name:
            out.append(rel.as_posix())
    return out


def apply_profile(root: Path, spec: str | list[str]) -> dict:
    """Set the profile's keys in ``root``'s params.yaml, keeping its comments and layout."""
    from dvc.utils.serialize import modify_yaml

    profile, _ = load_checked(spec, root)
    with modify_yaml(root / "params.yaml") as data:
        apply(data, profile, inplace=True)
    return profile


def save(root: Path, spec: str | list[str]) -> Path:
    """Copy the kept files to ``root/SNAPSHOT`` with a manifest (written last: a snapshot without one is
    incomplete and ignored); returns the snapshot folder."""
    snap = root / SNAPSHOT
    shutil.rmtree(snap, ignore_errors=True)
    files = kept_paths(root)
    for rel in files:
        (snap / "files" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, snap / "files" / rel)
    write_json_atomic(snap / "manifest.json", {"profile": label(spec), "files": files, "pid": os.getpid()})
    return snap


def collect(root: Path, name: str) -> Path:
    """The run's params, dvc.lock files and reports copied to ``RESULTS/<name>`` (replacing an earlier run's)."""
    dest = root / RESULTS / name
    work = dest.with_name(f".{name}.tmp")
    shutil.rmtree(work, ignore_errors=True)
    for rel in kept_paths(root):
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, work / rel)
    shutil.rmtree(dest, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    os.replace(work, dest)
    return dest


def restore(root: Path, applied_sha256: str | None) -> str:
    """Put the snapshot back: files the run added are removed, the saved ones rewritten. A params.yaml edited
    since the profile was applied (its SHA-256 not ``applied_sha256``) is kept, the saved one written beside it
    as params.yaml.before-profile. Returns what happened to params.yaml, in words."""
    snap = root / SNAPSHOT
    manifest = json.loads((snap / "manifest.json").read_text(encoding="utf-8"))
    before = set(manifest["files"])
    params, said = root / "params.yaml", "params.yaml restored"
    edited = (applied_sha256 is not None and params.is_file() and "params.yaml" in before
              and sha256_file(params) not in (applied_sha256, sha256_file(snap / "files" / "params.yaml")))
    for rel in kept_paths(root):
        if rel not in before:
            (root / rel).unlink()
    for rel in sorted(before):
        saved = snap / "files" / rel
        if rel == "params.yaml" and edited:
            shutil.copy2(saved, root / "params.yaml.before-profile")
            said = "params.yaml edited during the run: kept, the one from before in params.yaml.before-profile"
        elif not (root / rel).is_file() or (root / rel).read_bytes() != saved.read_bytes():
            write_bytes_atomic(root / rel, saved.read_bytes())
    shutil.rmtree(snap)
    return said


def restore_after_kill(root: Path) -> str | None:
    """After a profile run that was killed before it could restore: put the workspace back (see :func:`restore`);
    returns the message, or None when nothing was left."""
    snap = root / SNAPSHOT
    if not (snap / "manifest.json").is_file():
        shutil.rmtree(snap, ignore_errors=True)  # killed while saving: nothing was changed yet
        return None
    manifest = json.loads((snap / "manifest.json").read_text(encoding="utf-8"))
    pid = manifest.get("pid")
    if pid not in (None, os.getpid()) and _alive(pid):
        raise ConfigError(f"a profile run ({manifest['profile']}, pid {pid}) is using this workspace; wait for it to "
                          "finish (it puts params.yaml, dvc.lock and reports/ back when it ends)")
    said = restore(root, manifest.get("applied_sha256"))
    return f"a profile run ({manifest['profile']}) was killed before it restored the workspace: {said}, " \
           "dvc.lock and reports/ put back"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def results_lines(root: Path, dest: Path) -> list[str]:
    """Where a profile run's results are: its report, metrics, and the Bento it packaged, if it did."""
    rel = dest.relative_to(root).as_posix()
    lines = [f"results: {rel}/ (params.yaml as applied, dvc.lock, reports/)"]
    if (dest / "reports" / "evaluation.md").is_file():
        lines.append(f"report: {rel}/reports/evaluation.md; metrics: {rel}/reports/metrics/")
    made = dest / "reports" / "metrics" / "package.json"
    if made.is_file():
        package = json.loads(made.read_text(encoding="utf-8"))
        lines.append(f"Bento: {package.get('bento')} (exported to {package.get('exported')})")
    return lines


@contextmanager
def profile_workspace(root: Path, spec: str | list[str], log: Callable[[str], None] = print) -> Iterator[dict]:
    """Run the block with the profile applied to params.yaml; afterwards the run's files go to
    ``RESULTS/<label>`` and the workspace's params.yaml, dvc.lock files and reports are put back."""
    root = Path(root)
    name = label(spec)
    snap = save(root, spec)
    try:
        profile = apply_profile(root, spec)
        manifest = json.loads((snap / "manifest.json").read_text(encoding="utf-8"))
        write_json_atomic(snap / "manifest.json", {**manifest, "applied_sha256": sha256_file(root / "params.yaml")})
        yield profile
    finally:
        if (snap / "manifest.json").is_file():  # else a later run has put the workspace back already
            _finish(root, name, snap, log)


def _finish(root: Path, name: str, snap: Path, log: Callable[[str], None]) -> None:
    manifest = json.loads((snap / "manifest.json").read_text(encoding="utf-8"))
    dest = collect(root, name)
    said = restore(root, manifest.get("applied_sha256"))
    for line in [f"profile {name}: done", *results_lines(root, dest),
                 f"workspace: {said}, dvc.lock and reports/ as before the run (a plain `make run` runs the "
                 "default pipeline again)"]:
        log(f"[profile] {line}")


def run(spec: str | list[str], root: Path = Path("."), dvc: str = "dvc", env: dict | None = None) -> int:
    """``dvc repro`` (both DVC project files when the profile names comparison runs) under
    :func:`profile_workspace`; returns its exit code."""
    root = Path(root)
    if said := restore_after_kill(root):
        print(f"[profile] {said}", file=sys.stderr)
    profile, params = load_checked(spec, root)  # a bad profile fails before anything is saved or changed
    with profile_workspace(root, spec, log=lambda line: print(line, file=sys.stderr, flush=True)):
        command = [dvc, "repro", *targets(apply(params, profile))]
        print(f"[profile] {label(spec)}: {len(profile)} params set for this run; + {' '.join(command)}",
              file=sys.stderr, flush=True)
        return subprocess.call(command, cwd=root, env=env)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--restore"]:
        if said := restore_after_kill(Path(".")):
            print(f"[profile] {said}", file=sys.stderr)
        return 0
    if not argv or any(a.startswith("-") for a in argv):
        print("usage: python -m stages.profile_run NAME [NAME ...] | --restore", file=sys.stderr)
        return 2
    try:
        load_params(Path("params.yaml"))
        return run(argv)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
