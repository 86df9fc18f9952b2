"""dvc.yaml's dependencies cannot drift from the code: each stage's dependencies cover every module
under stages/ that its command can import (lazy imports inside functions included), so a change to any of
them makes ``dvc repro`` run the stage again; and each stage's params keys are exactly the sections its
config loader reads."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def module_file(name: str) -> Path | None:
    base = ROOT / Path(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imports_of(path: Path) -> set[str]:
    """Every ``stages.*`` module a file imports anywhere in it (``from stages.a import b`` counts ``stages.a``
    and, when it is a module, ``stages.a.b``)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("stages")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("stages") and not node.level:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names if module_file(f"{node.module}.{a.name}")}
    return out


def closure(module: str) -> set[Path]:
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")  # a package's __init__ runs on import of anything under it
        todo += [".".join(parts[:i]) for i in range(2, len(parts))]
        path = module_file(name)
        if path is not None:
            todo += sorted(imports_of(path) - seen)
    return {p.relative_to(ROOT) for p in map(module_file, seen) if p is not None}


def stages() -> dict[str, tuple[str, list[str]]]:
    spec = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    out = {}
    for name, stage in spec["stages"].items():
        body = stage.get("do", stage)
        module = re.search(r"python -m (stages\.\w+)", body["cmd"]).group(1)
        deps = [d if isinstance(d, str) else next(iter(d)) for d in body.get("deps", [])]
        out[name] = (module, [d.replace("${item}", "x") for d in deps])
    return out


def test_every_stage_depends_on_all_the_code_it_can_import():
    missing = {}
    for name, (module, deps) in stages().items():
        covered = [Path(d) for d in deps]
        gaps = sorted(str(f) for f in closure(module)
                      if f.name != "__init__.py" or f.parent != Path("stages")
                      if not any(f == d or d in f.parents for d in covered))
        if gaps:
            missing[name] = gaps
    assert not missing, "dvc.yaml misses code its stages import: " + "; ".join(
        f"{k}: {', '.join(v)}" for k, v in missing.items())


def test_the_closure_follows_lazy_imports():
    files = closure("stages.finetune")
    assert Path("stages/finetuning/heads.py") in files  # imported inside a function
    assert Path("stages/training/loop.py") in files


def params_with(*profiles: str) -> dict:
    """params.yaml with the named profiles applied (the compare profile defines the comparison's stages)."""
    from stages.config import load_params
    from stages.profile import apply, load_profile

    params = load_params(ROOT / "params.yaml")
    for name in profiles:
        params = apply(params, load_profile(name, ROOT))
    return params


def expanded_stages(params: dict | None = None) -> dict[str, tuple[str, list[str]]]:
    """Every stage instance (``foreach`` expanded, a ``${params.key}`` list or mapping read from ``params``):
    its command and its declared params keys."""
    spec = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    params = params_with() if params is None else params
    out = {}
    for name, stage in spec["stages"].items():
        items = stage.get("foreach")
        body = stage.get("do", stage)
        if items is None:
            out[name] = (body["cmd"], [str(p) for p in body.get("params", [])])
            continue
        if isinstance(items, str):  # foreach: ${compare.objectives}
            node = params
            for part in re.fullmatch(r"\$\{(.+)\}", items).group(1).split("."):
                node = node[part]
            items = node
        for key, item in (items.items() if isinstance(items, dict) else ((i, i) for i in items)):
            def sub(text: str, key=key, item=item) -> str:
                text = text.replace("${key}", str(key))
                if isinstance(item, dict):
                    for k, v in item.items():
                        text = text.replace("${item.%s}" % k, str(v))
                return text.replace("${item}", str(item))
            out[f"{name}@{key}"] = (sub(body["cmd"]), [sub(str(p)) for p in body.get("params", [])])
    return out


def test_the_comparison_defines_no_stage_by_default_and_four_per_objective_with_its_profile():
    default = expanded_stages()
    assert not [n for n in default if n.startswith("compare-")]
    params = params_with("compare")
    names = set(expanded_stages(params))
    entries = sorted(params["compare"]["objectives"])
    assert len(entries) >= 4
    for kind in ("pretrain", "dapt", "finetune"):
        assert {f"compare-{kind}@{e}" for e in entries} <= names
    assert "compare-report@objectives" in names


def test_every_stage_declares_the_params_sections_its_config_reads(monkeypatch, tmp_path):
    # A params section a stage reads but dvc.yaml does not list would not make `dvc repro` run the stage again
    # when it changes (and one listed but never read re-runs it for nothing). Each stage's config loader is run
    # on the project's params.yaml with `section` recorded.
    import importlib
    import sys

    import stages.config

    read: list[str] = []
    real = stages.config.section

    def recording(params, dotted):
        read.append(dotted)
        return real(params, dotted)

    params_dict = params_with("compare")  # the comparison's stages too
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(params_dict, sort_keys=False))
    drift = {}
    for name, (cmd, declared) in expanded_stages(params_dict).items():
        module = importlib.import_module(re.search(r"python -m (stages\.\w+)", cmd).group(1))
        for mod in [m for n, m in list(sys.modules.items()) if n.startswith("stages") and m is not None]:
            if getattr(mod, "section", None) is real:
                monkeypatch.setattr(mod, "section", recording)
        arg = {k: v for k, v in re.findall(r"--(corpus|paradigm|section|variant) (\S+)", cmd)}
        read.clear()
        if module.__name__ in ("stages.ingest", "stages.clean"):
            module.load_config(params, arg["corpus"])
        elif module.__name__ == "stages.pretrain":
            module.load_config(params, arg["section"], arg["paradigm"], arg.get("variant"))
        elif module.__name__ in ("stages.tokenizer", "stages.tokens", "stages.finetune"):
            module.load_config(params, arg["paradigm"])
        else:
            module.load_config(params)
        assert read, f"{name}: its config loader read no params section (the recording missed it)"
        undeclared = sorted({r for r in read if not any(r == d or r.startswith(d + ".") for d in declared)})
        unread = sorted({d for d in declared if not any(r == d or r.startswith(d + ".") for r in read)})
        if undeclared or unread:
            drift[name] = {"read, not in dvc.yaml": undeclared, "in dvc.yaml, not read": unread}
    assert not drift, drift
