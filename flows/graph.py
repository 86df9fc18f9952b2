"""The stage graph, read from ``dvc.yaml`` through DVC itself (no second copy of the DAG)."""

from __future__ import annotations

from pathlib import Path


def read_pipeline(root: str | Path) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """For every stage of the project at ``root`` (``foreach`` items as ``name@item``): the stages it depends
    on, and the paths of its outputs (metrics and plots included), from one read of ``dvc.yaml``."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        graph = repo.index.graph
        deps = {s.name: sorted(d.name for d in graph.successors(s)) for s in graph.nodes}
        outs = {s.name: [str(o.def_path) for o in s.outs] for s in graph.nodes}
    return deps, outs


def closure(graph: dict[str, list[str]], targets: list[str] | None) -> list[str]:
    """The stages ``targets`` need (all stages for none), in a topological order: dependencies first, ties
    broken by name so the order is stable. A target may be a stage or a ``foreach`` group (``clean``)."""
    if targets:
        unknown = [t for t in targets if t not in graph and not any(s.split("@", 1)[0] == t for s in graph)]
        if unknown:
            raise ValueError(f"no stage {', '.join(unknown)} in dvc.yaml (stages: {', '.join(sorted(graph))})")
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
            raise ValueError(f"dvc.yaml: a cycle among {sorted(wanted - done)}")
        order.extend(ready)
        done.update(ready)
    return order
