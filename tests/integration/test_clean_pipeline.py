"""`dvc repro` of the cleaning stages on the ingested default corpora, in a copy of the project."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from tests.integration.test_ingest_pipeline import _dvc, project  # noqa: F401  (shared module fixture)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cleaned(project):  # noqa: F811
    proc = _dvc(project, "repro", "clean@general", "clean@domain")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return project


@pytest.mark.parametrize("corpus", ["general", "domain"])
def test_cleaned_corpora_follow_c4_rules(cleaned, corpus):
    out = cleaned / "data/cleaned" / corpus
    published = pd.read_parquet(out / "documents.parquet")
    df = published[published["source"] != "task-train"]  # TAPT texts are the task's own, not C4-cleaned
    assert len(df) > 1000
    text = "\n".join(df["text"])
    assert "lorem ipsum" not in text.lower() and "{" not in text
    lines = text.split("\n")
    assert all(ln.endswith((".", "?", "!", '"')) and not ln.endswith("...") for ln in lines)
    assert len({ln.strip().lower() for ln in lines}) == len(lines)  # corpus-wide line dedup
    assert not re.search(r"\[\d*\]|\[edit\]|\[citation needed\]", text)
    stats = json.loads((out / "stats.json").read_text())
    task = stats["task"]
    assert stats["documents_out"] - sum(task["dropped"].values()) == len(df)
    assert task["tapt_added"] == len(published) - len(df) and (task["tapt_added"] > 9000) == (corpus == "domain")
    assert stats["filter_order"][:3] == ["page_length", "url_dedup", "c4_lines"]  # C4's order
    metrics = json.loads((cleaned / f"reports/metrics/clean-{corpus}.json").read_text())
    assert metrics == stats
    plot = (cleaned / f"reports/plots/clean-{corpus}.csv").read_text().splitlines()
    assert plot[0] == "filter,documents_dropped,lines_dropped,characters_removed" and len(plot) >= 6
    assert json.loads((cleaned / f"reports/quality/clean-{corpus}.json").read_text())["success"] is True
    rejects = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    assert rejects and all(r["reason"] and r["filter"] for r in rejects)


def test_no_held_out_task_example_in_either_corpus(cleaned):
    from stages.cleaning.task_guard import HeldOut

    task = pd.read_parquet(cleaned / "data/ingested/task/documents.parquet")
    held = HeldOut(task, ("validation", "test"))
    for corpus in ("general", "domain"):
        df = pd.read_parquet(cleaned / "data/cleaned" / corpus / "documents.parquet")
        assert not any(held.reason(t, m) for t, m in zip(df["text"], df["meta"]))
    stats = json.loads((cleaned / "data/cleaned/domain/stats.json").read_text())
    assert stats["task"]["dropped"].get("held-out source package", 0) > 100  # the guard had work to do


def test_raw_noise_is_gone_from_the_general_corpus(cleaned):
    df = pd.read_parquet(cleaned / "data/cleaned/general/documents.parquet")
    assert not df["text"].str.contains(r"^Received: from", regex=True).any()
    assert not df["text"].str.contains("<html", case=False).any()


def test_plots_render_with_dvc(cleaned):
    proc = _dvc(cleaned, "plots", "show", "--json", "reports/plots/clean-general.csv")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "c4_lines" in proc.stdout
