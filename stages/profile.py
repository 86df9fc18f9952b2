"""Profiles: named diffs over params.yaml (``profiles/<name>.yaml``: dotted keys to values), applied in order.

``python -m stages.profile gpu [gpu-quick]`` validates them against params.yaml and the typed configs and prints the
``dvc exp run`` arguments (``-S key=value``, then both DVC project files when comparison runs are named).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import shlex
import sys
import typing
from pathlib import Path
from typing import Any

from stages.config import ConfigError, build, deep_merge, load_params, load_yaml, section
from stages.sources.config import CorpusConfig


def load_profile(name: str, root: Path = Path(".")) -> dict[str, Any]:
    """``profiles/<name>.yaml`` under ``root``; a name that is a path (or leads out of profiles/) is refused."""
    folder = root / "profiles"
    path = folder / f"{name}.yaml"
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name) or path.resolve().parent != folder.resolve():
        raise ConfigError(f"profile {name!r}: a profile is a name under {folder}/ (e.g. gpu), not a path; put your "
                          "own profile there as <name>.yaml")
    if not path.is_file():
        known = sorted(p.stem for p in folder.glob("*.yaml"))
        raise ConfigError(f"{path}: no such profile (known: {', '.join(known) or 'none'})")
    data = load_yaml(path) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of dotted params keys to values")
    return data


def load_profiles(spec: str | list[str] | tuple[str, ...], root: Path = Path(".")) -> tuple[dict[str, Any], str]:
    """The profiles ``spec`` names (``"gpu gpu-quick"``, ``"gpu,gpu-quick"`` or a list) merged, later winning, and
    a label naming their files."""
    names = spec.replace(",", " ").split() if isinstance(spec, str) else [str(n) for n in spec]
    if not names:
        raise ConfigError("no profile named")
    merged: dict[str, Any] = {}
    for name in names:
        merged.update(load_profile(name, root))
    return merged, " + ".join(f"profiles/{name}.yaml" for name in names)


def load_checked(spec: str | list[str], root: Path = Path(".")) -> tuple[dict[str, Any], dict[str, Any]]:
    """The merged profiles of ``spec`` and ``root``'s params.yaml, once every stage config builds from them."""
    profile, label = load_profiles(spec, root)
    params = load_params(root / "params.yaml")
    validate(apply(params, profile, label))
    return profile, params


def set_value(node: dict, key: str, value: Any) -> None:
    """``node[key] = value``, a mapping merged into one there as ``dvc exp run -S ++key={...}`` merges it."""
    node[key] = deep_merge(node[key], value) if isinstance(value, dict) and isinstance(node.get(key), dict) else \
        copy.deepcopy(value)


def schema_depth(dotted: str) -> int:
    """The depth of the section prefix (``pretrain.<paradigm>``: 2) when ``dotted`` names a config field below it,
    else 0: a profile may set such a key that params.yaml leaves to its default."""
    from stages.params.sections import SECTIONS  # here: it imports every stage's config (and pandas)

    parts = dotted.split(".")
    for name, prefix, _, classes in SECTIONS:
        depth = len(prefix.split("."))
        if parts[0] != name or len(parts) <= depth:
            continue
        candidates: tuple = classes
        for part in parts[depth:]:
            hit = next((c for c in candidates if dataclasses.is_dataclass(c) and part in
                        {f.name for f in dataclasses.fields(c)}), None)
            if hit is None:
                return 0
            tp = typing.get_type_hints(hit)[part]
            if not dataclasses.is_dataclass(tp):
                return depth  # a leaf, a list, a mapping or a union: its value is validated when the config is built
            candidates = (tp,)
        return depth
    return 0


def apply(params: dict[str, Any], profile: dict[str, Any], where: str = "profile", *,
          inplace: bool = False) -> dict[str, Any]:
    """``params`` (a copy unless ``inplace``) with the profile's dotted keys set; a key params.yaml lacks is a
    ConfigError unless it is a config field (:func:`schema_depth`)."""
    out = params if inplace else copy.deepcopy(params)
    for dotted, value in profile.items():
        node = out
        parts = str(dotted).split(".")
        depth = schema_depth(str(dotted))
        for i, part in enumerate(parts):
            here = ".".join(parts[: i + 1])
            if not isinstance(node, dict) or (part not in node and not (depth and i >= depth)):
                raise ConfigError(f"{where}: {dotted}: no such key in params.yaml (at {here})")
            if i == len(parts) - 1:
                set_value(node, part, value)
            else:
                node = node.setdefault(part, {})
    return out


def validate(params: dict[str, Any]) -> None:
    """Build every stage config from ``params`` so a profile cannot produce an invalid run."""
    import tempfile

    import yaml

    from stages.cleaning.config import load_config as clean_config
    from stages.evaluation.config import load_compare_config, load_evaluate_config
    from stages.finetuning.core import load_base_config as base_finetune_config
    from stages.finetuning.core import load_config as finetune_config
    from stages.finetuning.runs import load_adapt_config, run_config
    from stages.serving.config import load_config as package_config
    from stages.tokenization.config import load_tokens_config
    from stages.tokenization.tokenizer import load_tokenizer_config
    from stages.published.config import load_published
    from stages.training.config import load_base_config as base_dapt_config
    from stages.training.config import load_config as pretrain_config

    for corpus, data in params.get("ingest", {}).items():
        build(CorpusConfig, data, f"ingest.{corpus}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "params.yaml"
        path.write_text(yaml.safe_dump(params))
        for name, loader in (("clean", clean_config), ("tokenizer", load_tokenizer_config),
                             ("tokens", load_tokens_config), ("pretrain", None), ("dapt", None),
                             ("finetune", finetune_config)):
            for paradigm in params.get(name, {}):
                if paradigm != "defaults" or name == "tokenizer":  # tokenizer has no defaults section
                    loader(path, paradigm) if loader else pretrain_config(path, name, paradigm)
        if "compare" in params:
            for entry in load_compare_config(path).entries():  # each objective's runs, as its stages build them
                for name in ("pretrain", "dapt"):
                    pretrain_config(path, name, entry["paradigm"], entry["name"])
        for name in load_adapt_config(path).runs:  # each adaptation run, as its stage builds it
            run_config(path, name)
        for name in load_published(path).bases:  # each published base's DAPT and fine-tuning, as their stages do
            base_dapt_config(path, name)
            base_finetune_config(path, name)
        for name, loader in (("evaluate", load_evaluate_config), ("package", package_config)):
            if name in params:
                loader(path)


def _override(value: Any) -> str:
    """A value in Hydra's override grammar (``dvc exp run -S``): JSON scalars and lists, ``{key:value}`` mappings."""
    if isinstance(value, dict):
        for k in value:
            if not str(k)[:1].isalpha() or not all(c.isalnum() or c in "-_" for c in str(k)):
                raise ConfigError(f"{k!r}: a key of a mapping set by a profile is a bare name (letters, digits, - and _)")
        return "{" + ",".join(f"{k}:{_override(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_override(v) for v in value) + "]"
    return json.dumps(value)


def set_args(profile: dict[str, Any], params: dict[str, Any] | None = None) -> list[str]:
    """``dvc exp run -S`` arguments; a mapping, and a key ``params`` lacks, with ``++`` (Hydra's add-or-override)."""
    args = []
    for key, value in profile.items():
        add = "++" if isinstance(value, dict) or (params is not None and not _has(params, str(key))) else ""
        args += ["-S", f"{add}{key}={value if isinstance(value, str) else _override(value)}"]
    return args


def _has(params: dict[str, Any], dotted: str) -> bool:
    try:
        section(params, dotted)
    except ConfigError:
        return False
    return True


PIPELINE = "dvc.yaml"                          # the product's pipeline: what `dvc repro` runs with no target
COMPARE_PIPELINE = "experiments/compare/dvc.yaml"  # the objective comparison: stages only when params name runs


def targets(params: dict[str, Any]) -> list[str]:
    """The DVC project files for ``dvc exp run``: none (dvc.yaml, its default), or both when params name comparison
    runs."""
    compare = params.get("compare") or {}
    return [PIPELINE, COMPARE_PIPELINE] if compare.get("objectives") or compare.get("reports") else []


def run_args(profile: dict[str, Any], params: dict[str, Any]) -> list[str]:
    """``dvc exp run`` arguments for ``profile`` over ``params``: its ``-S`` settings, then :func:`targets`."""
    return set_args(profile, params) + targets(apply(params, profile))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or any(a.startswith("-") for a in argv):
        print("usage: python -m stages.profile NAME [NAME ...]   (prints dvc exp run arguments: -S settings, "
              "then targets when comparison runs are named; later names win)", file=sys.stderr)
        return 2
    try:
        profile, params = load_checked(argv)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(" ".join(shlex.quote(a) for a in run_args(profile, params)))
    return 0


if __name__ == "__main__":
    from stages.common.cli import entry

    sys.exit(entry(main))
