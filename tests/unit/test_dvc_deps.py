"""The DVC files' dependencies cannot drift from the code: each stage's dependencies cover every module
under stages/ that its command can import (lazy imports inside functions included), so a change to any of
them makes ``dvc repro`` run the stage again; and each stage's params keys are exactly the sections its
config loader reads. Both files: dvc.yaml (the product's pipeline) and experiments/compare/dvc.yaml (the
objective comparison, whose stages read the product pipeline's outputs)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
PIPELINE, COMPARE = "dvc.yaml", "experiments/compare/dvc.yaml"


def spec_stages(*files: str) -> dict[str, dict]:
    """The stage definitions of the named DVC files (default: both), by name, as written (``foreach`` unexpanded).
    Every stage runs from the repository root (the comparison's with ``wdir: ../..``), so paths compare as they are."""
    out: dict[str, dict] = {}
    for rel in files or (PIPELINE, COMPARE):
        for name, stage in yaml.safe_load((ROOT / rel).read_text())["stages"].items():
            assert name not in out, f"{name}: defined in two DVC files"
            out[name] = stage
    return out


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
    out = {}
    for name, stage in spec_stages().items():
        body = stage.get("do", stage)
        module = re.search(r"python -m (stages(?:\.\w+)+)", body["cmd"]).group(1)
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
    assert not missing, "a DVC file misses code its stages import: " + "; ".join(
        f"{k}: {', '.join(v)}" for k, v in missing.items())


def test_the_closure_follows_lazy_imports():
    files = closure("stages.finetune")
    assert Path("stages/finetuning/heads.py") in files  # imported inside a function
    assert Path("stages/training/trainer.py") in files


def params_with(*profiles: str) -> dict:
    """params.yaml with the named profiles applied (the compare profile defines the comparison's stages)."""
    from stages.config import load_params
    from stages.profile import apply, load_profile

    params = load_params(ROOT / "params.yaml")
    for name in profiles:
        params = apply(params, load_profile(name, ROOT))
    return params


def paths(entries: list) -> list[str]:
    """The paths of a ``deps`` / ``outs`` / ``metrics`` list (an entry is a path or ``{path: options}``)."""
    return [e if isinstance(e, str) else next(iter(e)) for e in entries]


def expanded(params: dict | None = None, *files: str) -> dict[str, dict]:
    """Every stage instance of the named DVC files (default: both; ``foreach`` expanded, a ``${params.key}``
    list or mapping read from ``params``): its ``cmd``, ``params``, ``deps`` and ``outs`` (metrics and plots
    included) with ``${key}`` / ``${item...}`` substituted."""
    params = params_with() if params is None else params
    out = {}

    def instance(body: dict, sub=lambda text: text) -> dict:
        return {"cmd": sub(body["cmd"]), "params": [sub(str(p)) for p in body.get("params", [])],
                "deps": [sub(d) for d in paths(body.get("deps", []))],
                "outs": [sub(o) for kind in ("outs", "metrics", "plots") for o in paths(body.get(kind, []))]}

    for name, stage in spec_stages(*files).items():
        items = stage.get("foreach")
        body = stage.get("do", stage)
        if items is None:
            out[name] = instance(body)
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
            out[f"{name}@{key}"] = instance(body, sub)
    return out


def expanded_stages(params: dict | None = None) -> dict[str, tuple[str, list[str]]]:
    """Every stage instance of both DVC files: its command and its declared params keys."""
    return {name: (s["cmd"], s["params"]) for name, s in expanded(params).items()}


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


def test_dvc_yaml_is_the_products_pipeline_and_the_comparison_reads_its_outputs():
    """The objective comparison lives in experiments/compare/dvc.yaml: dvc.yaml has no compare-* stage; the
    comparison's stages run from the repository root on its params.yaml, and each reads outputs that dvc.yaml's
    stages declare (the paradigm's own models, tokens, tokenizers, the ingested task), its data/ dependencies all
    made by a stage of either file (none a path that nothing makes)."""
    assert not [n for n in spec_stages(PIPELINE) if n.startswith("compare")]
    compare_spec = yaml.safe_load((ROOT / COMPARE).read_text())
    assert compare_spec["vars"] == ["../../params.yaml"]  # ${compare...} from the root's params.yaml
    assert set(compare_spec["stages"]) == {"compare-pretrain", "compare-dapt", "compare-finetune", "compare-report"}
    for name, stage in compare_spec["stages"].items():
        assert stage.get("do", stage)["wdir"] == "../..", name  # paths, commands and params.yaml from the root

    params = params_with("compare")
    product = [Path(o) for s in expanded(params, PIPELINE).values() for o in s["outs"]]
    comparison = expanded(params, COMPARE)
    own = [Path(o) for s in comparison.values() for o in s["outs"]]

    def made_by(dep: Path, outs: list[Path]) -> bool:  # the dep is an output, inside one, or a folder of them
        return any(dep == o or o in dep.parents or dep in o.parents for o in outs)

    assert len(comparison) == 3 * len(params["compare"]["objectives"]) + len(params["compare"]["reports"])
    for name, stage in comparison.items():
        data = [Path(d) for d in stage["deps"] if d.startswith("data/")]
        assert any(made_by(d, product) for d in data), f"{name}: reads no output of dvc.yaml's stages"
        unmade = [str(d) for d in data if not made_by(d, product + own)]
        assert not unmade, f"{name}: no stage makes {unmade}"
    read = {d for s in comparison.values() for d in s["deps"]}
    assert {f"data/models/{kind}/{e['paradigm']}" for e in params["compare"]["objectives"].values()
            for kind in ("pretrain", "dapt")} <= read  # each objective's FLOPs match its paradigm's own runs


def test_a_fresh_clone_packages_again_even_where_every_committed_output_matches():
    """The Bento lives in the machine's store and registry, not in git: the package stage declares an output that
    git ignores and DVC caches, so a fresh clone (every tracked output matching dvc.lock, as when the run
    reproduces byte for byte) lacks it and `dvc repro` runs the stage, while `dvc pull` of the run brings it."""
    import subprocess

    stage = spec_stages(PIPELINE)["package"]
    outs = [o if isinstance(o, str) else next(iter(o)) for o in stage.get("outs", [])]
    cached = [o for o in stage.get("outs", []) if isinstance(o, str) or next(iter(o.values())).get("cache", True)]
    assert outs and len(cached) == len(outs), "package: an output outside git that DVC caches"
    for path in outs:
        assert subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT).returncode == 0, f"{path}: tracked by git"
        assert f"--exported {path}" in stage["cmd"]


# Each stage's config loader (the stage module only calls it).
LOADERS = {
    "stages.sources.watch": "stages.sources.config:load_config",
    "stages.ingest": "stages.sources.config:load_config",
    "stages.clean": "stages.cleaning.config:load_config",
    "stages.tokenizer": "stages.tokenization.tokenizer:load_tokenizer_config",
    "stages.tokens": "stages.tokenization.config:load_tokens_config",
    "stages.base": "stages.published.config:load_base",
    "stages.pretrain": "stages.training.config:load_config",
    "stages.finetune": "stages.finetuning.core:load_config",
    "stages.evaluate": "stages.evaluation.config:load_evaluate_config",
    "stages.compare": "stages.evaluation.config:load_compare_config",
    "stages.package": "stages.serving.config:load_config",
}


def _loader(stage: str):
    import importlib

    module, name = LOADERS[stage].split(":")
    return getattr(importlib.import_module(module), name)


def test_every_stage_declares_the_params_sections_its_config_reads(monkeypatch, tmp_path):
    # A params section a stage reads but dvc.yaml does not list would not make `dvc repro` run the stage again
    # when it changes (and one listed but never read re-runs it for nothing). Each stage's config loader is run
    # on the project's params.yaml with `section` recorded.
    import importlib
    import sys

    import stages.config
    from stages.finetuning.core import load_base_config as load_base_finetune
    from stages.finetuning.runs import load_adapt_config, published_run_config, run_config
    from stages.published.config import load_base, load_published
    from stages.sources.config import head_labels
    from stages.training.config import load_base_config as load_base_dapt

    read: list[str] = []
    real = stages.config.section

    def recording(params, dotted):
        read.append(dotted)
        return real(params, dotted)

    params_dict = params_with("compare", "published")  # the comparison's stages and a published base's too
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(params_dict, sort_keys=False))
    drift = {}
    for name, (cmd, declared) in expanded_stages(params_dict).items():
        module = importlib.import_module(re.search(r"python -m (stages(?:\.\w+)+)", cmd).group(1))
        for mod in [m for n, m in list(sys.modules.items()) if n.startswith("stages") and m is not None]:
            if getattr(mod, "section", None) is real:
                monkeypatch.setattr(mod, "section", recording)
        arg = {k: v for k, v in re.findall(r"--(corpus|paradigm|section|variant|base|name|published-run) (\S+)", cmd)}
        read.clear()
        load = _loader(module.__name__)
        if module.__name__ == "stages.base":
            load(params, arg["name"], "paradigm", "source")
        elif "published-run" in arg:  # a run of published.runs: its entry, its base's paradigm and settings
            published_run_config(params, arg["published-run"])
        elif "base" in arg:  # a published base's DAPT or fine-tuning: its paradigm and its own settings
            load_base(params, arg["base"], "paradigm")
            (load_base_dapt if module.__name__ == "stages.pretrain" else load_base_finetune)(params, arg["base"])
        elif module.__name__ in ("stages.sources.watch", "stages.ingest", "stages.clean"):
            load(params, arg["corpus"])
            if module.__name__ == "stages.ingest":
                head_labels(params)  # a labeled corpus is checked against the head's label set
        elif module.__name__ == "stages.pretrain":
            load(params, arg["section"], arg["paradigm"], arg.get("variant"))
        elif module.__name__ == "stages.finetune" and "variant" in arg:  # an adaptation run (adapt.runs)
            run_config(params, arg["variant"])
        elif module.__name__ in ("stages.tokenizer", "stages.tokens", "stages.finetune"):
            load(params, arg["paradigm"])
        else:
            load(params)
        if module.__name__ == "stages.evaluate":
            load_adapt_config(params)  # the names of the adaptation runs it reads
            load_published(params)  # ... and of the published bases
        assert read, f"{name}: its config loader read no params section (the recording missed it)"
        undeclared = sorted({r for r in read if not any(r == d or r.startswith(d + ".") for d in declared)})
        unread = sorted({d for d in declared if not any(r == d or r.startswith(d + ".") for r in read)})
        if undeclared or unread:
            drift[name] = {"read, not in dvc.yaml": undeclared, "in dvc.yaml, not read": unread}
    assert not drift, drift
