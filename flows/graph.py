"""The stage graph, read from the project's DVC files through DVC itself (no second copy of the DAG): the
product's pipeline (``dvc.yaml``) and the opt-in objective comparison (``experiments/compare/dvc.yaml``)."""

from __future__ import annotations

import os
from pathlib import Path


def read_pipeline(root: str | Path) -> tuple[dict[str, list[str]], dict[str, list[str]], dict[str, str]]:
    """For every stage of the project at ``root`` (``foreach`` items as ``name@item``, names unique across the
    DVC files): the stages it depends on, its output paths (metrics and plots included), and the target
    ``dvc repro`` takes for it (its name in the root's ``dvc.yaml``, else ``path/to/dvc.yaml:name``)."""
    from dvc.repo import Repo

    root = Path(root).resolve()
    with Repo(str(root)) as repo:
        graph = repo.index.graph
        targets: dict[str, str] = {}
        for s in graph.nodes:
            dvcfile = os.path.relpath(s.dvcfile.path, root)
            if s.name in targets:
                raise ValueError(f"stage {s.name} is defined twice ({targets[s.name]}, {dvcfile}): a flow names "
                                 "stages by their names, so they must be unique across the project's dvc.yaml files")
            targets[s.name] = s.name if dvcfile == "dvc.yaml" else f"{Path(dvcfile).as_posix()}:{s.name}"
        deps = {s.name: sorted(d.name for d in graph.successors(s)) for s in graph.nodes}
        outs = {s.name: [Path(os.path.relpath(o.fs_path, root)).as_posix() for o in s.outs] for s in graph.nodes}
    return deps, outs, targets


def closure(graph: dict[str, list[str]], targets: list[str] | None) -> list[str]:
    """The stages ``targets`` need (all stages for none), in a topological order: dependencies first, ties
    broken by name so the order is stable. A target may be a stage or a ``foreach`` group (``clean``)."""
    if targets:
        unknown = [t for t in targets if t not in graph and not any(s.split("@", 1)[0] == t for s in graph)]
        if unknown:
            raise ValueError(f"no stage {', '.join(unknown)} in the pipeline (stages: {', '.join(sorted(graph))})")
        wanted: set[str] = set()
        stack = [s for s in graph if s in targets or s.split("@", 1)[0] in targets]
        while stack:
            s = stack.pop()
            if s not in wanted:
                wanted.add(s)
                stack.extend(graph[s])
    else:
        wanted = set(graph)
    order, done = [], set()
    while len(order) < len(wanted):
        ready = sorted(s for s in wanted - done if all(d in done for d in graph[s]))
        if not ready:
            raise ValueError(f"the pipeline: a cycle among {sorted(wanted - done)}")
        order.extend(ready)
        done.update(ready)
    return order
