"""What a flow run shows in the Prefect UI, built from the files the stages write: gates as tables, metrics
and the evaluation report as markdown, and links. Keys are stable (``gate-clean-general``, ...) so the UI
keeps each one's history."""

from __future__ import annotations

import json
import re
from pathlib import Path

from stages.quality.gate import DATA_DOCS_INDEX


def key_for(kind: str, name: str) -> str:
    """A Prefect artifact key: lowercase letters, digits and dashes."""
    return re.sub(r"[^a-z0-9-]+", "-", f"{kind}-{name}".lower()).strip("-")


def _short(value, limit: int = 120) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def gate_rows(report: dict) -> list[dict]:
    """One row per check of a gate report (``stages.quality.gate``) or of the model gate."""
    if "checks" in report and "gate" in report:
        return [{"check": c.get("name"), "passed": bool(c.get("success")), "observed": _short(c.get("observed", {}))}
                for c in report["checks"]]
    return [{"check": c.get("check"), "passed": bool(c.get("passed")), "observed": _short(c.get("value")),
             "minimum": c.get("minimum")} for c in report.get("checks", [])]


def publish_stage(stage: str, outs: list[str], root: Path) -> int:
    """Create the artifacts of one stage's outputs; returns how many."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    made = 0
    for out in outs:
        path = root / out
        if not (path.suffix == ".json" and path.is_file()):
            continue
        data = json.loads(path.read_text(encoding="utf-8"))
        if out.startswith("reports/quality/"):
            verdict = "passed" if data.get("success", data.get("passed")) else "FAILED"
            title = f"{data.get('gate') or path.stem}: {verdict}" + (f", selected {data['selected']}"
                                                                     if data.get("selected") else "")
            create_table_artifact(table=gate_rows(data), key=key_for("gate", path.stem), description=f"{title} ({out})")
            made += 1
        elif out.startswith("reports/metrics/") and isinstance(data, dict):
            rows = [f"| {k} | {_short(v)} |" for k, v in sorted(data.items())]
            create_markdown_artifact(markdown="\n".join([f"### {stage}", "", "| metric | value |", "|---|---|", *rows]),
                                     key=key_for("metrics", stage), description=f"{stage} metrics ({out})")
            made += 1
    return made


REPORTS_URL = "LMPIPE_REPORTS_URL"  # where the project folder's reports/ and dist/ are served (``make ui`` sets it)


def embed_figures(markdown: str, base: Path) -> str:
    """The report with each ``![alt](relative.svg|png)`` figure inlined as a data URI (missing files left)."""
    import base64

    kinds = {".svg": "image/svg+xml", ".png": "image/png"}

    def inline(match: re.Match) -> str:
        alt, target = match.group(1), match.group(2)
        path = base / target
        if "://" in target or path.suffix.lower() not in kinds or not path.is_file():
            return match.group(0)
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        return f"![{alt}](data:{kinds[path.suffix.lower()]};base64,{data})"

    return re.sub(r"!\[([^\]]*)\]\(([^)\s]+)\)", inline, markdown)


def file_link(root: Path, path: Path) -> str | None:
    """An address a browser opens for ``path``: on the reports server when ``LMPIPE_REPORTS_URL`` is set and
    ``path`` is under ``root``, else none (browsers do not open ``file://`` links from a web page)."""
    import os

    base = os.environ.get(REPORTS_URL, "").rstrip("/")
    if not base or not path.resolve().is_relative_to(root.resolve()):
        return None
    rel = path.resolve().relative_to(root.resolve()).as_posix()
    return f"{base}/{rel}" + ("/" if path.is_dir() else "")


def publish_run(root: Path) -> int:
    """The evaluation report (figures inline) and the run's files: links when served, else local paths."""
    from prefect.artifacts import create_link_artifact, create_markdown_artifact

    made = 0
    report = root / "reports/evaluation.md"
    if report.is_file():
        create_markdown_artifact(markdown=embed_figures(report.read_text(encoding="utf-8"), report.parent),
                                 key="evaluation-report", description="reports/evaluation.md")
        made += 1
    # Data Docs: Great Expectations' pages of every gate of the workspace (stages.quality.gate)
    files = [(name, path) for name, path in (("evaluation report", report), ("gate results", root / "reports/quality"),
                                             ("Data Docs", root / "reports" / DATA_DOCS_INDEX)) if path.exists()]
    package = root / "reports/metrics/package.json"
    exported = json.loads(package.read_text(encoding="utf-8")).get("exported") if package.is_file() else None
    if exported and "://" in exported and not exported.startswith("file://"):
        create_link_artifact(link=exported, link_text=exported.rsplit("/", 1)[-1], key="link-bento")
        made += 1
    elif exported:
        files.append(("Bento", root / exported))  # an absolute path stays as it is
    rows = []
    for name, path in files:
        if url := file_link(root, path):
            create_link_artifact(link=url, link_text=path.name, key="link-" + name.lower().replace(" ", "-"))
            made += 1
        rows.append(f"| {name} | `{path.resolve()}` |" + (f" [open]({url}) |" if url else " |"))
    if rows:
        create_markdown_artifact(markdown="\n".join(["### Files of this run", "", "| what | path | |", "|---|---|---|",
                                                      *rows]), key="run-files",
                                 description="where the run's report, gate results, Data Docs and Bento are")
        made += 1
    return made
