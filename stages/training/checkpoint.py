"""Checkpoints without pickles: the model with ``save_pretrained`` (safetensors), the optimizer's tensors in
``optimizer.safetensors`` and everything else (step, tokens seen, history, the run's fingerprint) in JSON.
Written atomically, so a kill during a save leaves the previous checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

from stages.common.atomic import atomic_dir, write_json_atomic


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
        write_json_atomic(tmp / "state.json", state)


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
    """Load weights and optimizer state saved by ``save`` into ``model`` and ``optimizer``."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    weights = folder / "model" / "model.safetensors"
    try:
        sd = load_file(str(weights))
        missing, unexpected = model.load_state_dict(sd, strict=False)
        tied = {k for k in missing if "lm_head" in k or "decoder.weight" in k or k.endswith("embed_tokens.weight")}
        if unexpected or set(missing) - tied:
            raise CheckpointError(f"{weights}: does not match the model (missing {sorted(set(missing) - tied)[:3]}, "
                                  f"unexpected {unexpected[:3]})")
        if hasattr(model, "tie_weights"):
            model.tie_weights()
        opt_tensors = load_file(str(folder / "optimizer.safetensors"))
        groups = json.loads((folder / "optimizer.json").read_text(encoding="utf-8"))["param_groups"]
    except (OSError, ValueError, SafetensorError) as exc:
        raise CheckpointError(f"{folder}: corrupt or incomplete checkpoint ({exc}); delete it to start over") from None
    state: dict[int, dict] = {}
    for key, tensor in opt_tensors.items():
        idx, name = key.split(".", 1)
        state.setdefault(int(idx), {})[name] = tensor
    try:
        optimizer.load_state_dict({"state": state, "param_groups": groups})
    except (ValueError, KeyError) as exc:
        raise CheckpointError(f"{folder / 'optimizer.safetensors'}: does not match the optimizer ({exc})") from None
