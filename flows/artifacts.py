"""What a flow run shows in the Prefect UI, built from the files the stages write: each Great Expectations
gate as a table, each stage's metrics and the evaluation report as markdown, links to the report and to the
exported Bento. Keys are stable (``gate-clean-general``, ``metrics-pretrain-bert``, ...) so the UI keeps each
one's history across runs."""

from __future__ import annotations

import json
import re
from pathlib import Path


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


def gate_title(path: Path, report: dict) -> str:
    name = report.get("gate") or path.stem
    ok = report.get("success", report.get("passed"))
    return f"{name}: {'passed' if ok else 'FAILED'}" + (f", selected {report['selected']}"
                                                        if report.get("selected") else "")


def metrics_markdown(stage: str, metrics: dict) -> str:
    rows = [f"| {k} | {_short(v)} |" for k, v in sorted(metrics.items())]
    return "\n".join([f"### {stage}", "", "| metric | value |", "|---|---|", *rows])


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
            create_table_artifact(table=gate_rows(data), key=key_for("gate", path.stem),
                                  description=f"{gate_title(path, data)} ({out})")
            made += 1
        elif out.startswith("reports/metrics/") and isinstance(data, dict):
            create_markdown_artifact(markdown=metrics_markdown(stage, data), key=key_for("metrics", stage),
                                     description=f"{stage} metrics ({out})")
            made += 1
    return made


def publish_run(root: Path) -> int:
    """The evaluation report and links to it and to the exported Bento, when the run produced them."""
    from prefect.artifacts import create_link_artifact, create_markdown_artifact

    made = 0
    report = root / "reports/evaluation.md"
    if report.is_file():
        create_markdown_artifact(markdown=report.read_text(encoding="utf-8"), key="evaluation-report",
                                 description="reports/evaluation.md")
        create_link_artifact(link=report.resolve().as_uri(), link_text="reports/evaluation.md",
                             key="link-evaluation-report")
        made += 2
    quality = root / "reports/quality"
    if quality.is_dir():
        create_link_artifact(link=quality.resolve().as_uri(), link_text="gate results (reports/quality)",
                             key="link-gate-results")
        made += 1
    package = root / "reports/metrics/package.json"
    if package.is_file():
        exported = json.loads(package.read_text(encoding="utf-8")).get("exported")
        if exported:
            link = exported if "://" in exported else Path(exported).resolve().as_uri()
            create_link_artifact(link=link, link_text=Path(exported).name, key="link-bento")
            made += 1
    return made
