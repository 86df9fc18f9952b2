"""Checkpoints without pickles (safetensors and JSON, written atomically); ``state.json`` records the SHA-256 of
every file and of itself, checked before a resume loads anything, so a changed byte is an error naming the file."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from stages.common.atomic import atomic_dir, write_json_atomic
from stages.common.hashing import sha256_file


class CheckpointError(RuntimeError):
    """A checkpoint that should be resumed cannot be read; the message names the file."""


def save(folder: Path, model, optimizer, state: dict) -> None:
    from safetensors.torch import save_file

    sd = optimizer.state_dict()
    tensors = {f"{idx}.{k}": v.detach().contiguous().cpu() for idx, st in sd["state"].items()
               for k, v in st.items()}
    with atomic_dir(folder) as tmp:
        model.save_pretrained(str(tmp / "model"))
        save_file(tensors, str(tmp / "optimizer.safetensors"))
        write_json_atomic(tmp / "optimizer.json", {"param_groups": sd["param_groups"]})
        full = {**state, "files": digests(tmp)}
        write_json_atomic(tmp / "state.json", {**full, "state_sha256": state_digest(full)})


def state_digest(state: dict) -> str:
    """SHA-256 of ``state`` without its own digest, as canonical JSON (what ``state.json`` holds, re-read)."""
    body = {k: v for k, v in state.items() if k != "state_sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def digests(folder: Path) -> dict[str, str]:
    """SHA-256 of every file of a checkpoint folder but ``state.json``, by path relative to it."""
    return {p.relative_to(folder).as_posix(): sha256_file(p) for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != "state.json"}


def verify(folder: Path, state: dict) -> None:
    """Raise :class:`CheckpointError` naming the first file whose content is not what ``state.json`` records
    (or that is missing, or a checkpoint without digests)."""
    recorded = state.get("files")
    if not isinstance(recorded, dict) or not recorded:
        raise CheckpointError(f"{folder / 'state.json'}: records no file digests (an older or hand-made "
                              f"checkpoint); delete {folder} to start over")
    if state.get("state_sha256") != state_digest(state):
        raise CheckpointError(f"{folder / 'state.json'}: its content (step, history, file digests) is not what was "
                              f"written: the checkpoint was changed after it was written (or by an older version); "
                              f"delete {folder} to start over")
    actual = digests(folder)
    for rel, sha in sorted(recorded.items()):
        if actual.get(rel) != sha:
            what = "is missing" if rel not in actual else f"has SHA-256 {actual[rel][:16]}..., recorded {sha[:16]}..."
            raise CheckpointError(f"{folder / rel}: {what}: the checkpoint was changed after it was written; "
                                  f"delete {folder} to start over")


def read_state(folder: Path) -> dict | None:
    """The saved run state, or None when there is no checkpoint."""
    path = folder / "state.json"
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: unreadable checkpoint state ({exc}); delete {folder} to start over") from None


def load(folder: Path, model, optimizer) -> None:
    """Load weights and optimizer state saved by ``save`` into ``model`` and ``optimizer``, after checking every
    file against the digests in ``state.json``."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    verify(folder, read_state(folder) or {})
    weights = folder / "model" / "model.safetensors"
    opt_path, groups_path = folder / "optimizer.safetensors", folder / "optimizer.json"
    # from_pretrained knows which weights the class ties (and so did not save); copy from it.
    saved = _read(folder, weights, lambda: type(model).from_pretrained(str(folder / "model")),
                  (OSError, ValueError, RuntimeError, SafetensorError))
    try:
        model.load_state_dict(saved.state_dict())
    except RuntimeError as exc:
        raise CheckpointError(f"{weights}: does not match the model ({_first_line(exc)})") from None
    opt_tensors = _read(folder, opt_path, lambda: load_file(str(opt_path)), (OSError, ValueError, SafetensorError))
    groups = _read(folder, groups_path, lambda: json.loads(groups_path.read_text(encoding="utf-8"))["param_groups"],
                   (OSError, ValueError, KeyError))
    state: dict[int, dict] = {}
    for key, tensor in opt_tensors.items():
        idx, name = key.split(".", 1)
        state.setdefault(int(idx), {})[name] = tensor
    try:
        optimizer.load_state_dict({"state": state, "param_groups": groups})
    except (ValueError, KeyError) as exc:
        raise CheckpointError(f"{opt_path}: does not match the optimizer ({_first_line(exc)})") from None


def _read(folder: Path, path: Path, read, errors):
    """``read()``, its ``errors`` raised as a CheckpointError naming ``path``."""
    try:
        return read()
    except errors as exc:
        raise CheckpointError(f"{path}: corrupt or incomplete checkpoint ({_first_line(exc)}); "
                              f"delete {folder} to start over") from None


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200]
