"""docs/your-own-data.md's example as written: a general corpus of Common Crawl WET files and a zstd JSONL file
(text in `content`, a broken line skipped), and a 3-label Parquet task split by customer, with the keys the page
says to set, through the tiny chain to a Bento. The data are made up here; then an edit of the task file is named
as a reason to ingest again.
"""

from __future__ import annotations

import io
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.integration.test_ingest_pipeline import changed

pytestmark = [pytest.mark.integration, pytest.mark.timeout(3600)]

PY = sys.executable
BIN = Path(PY).parent
LABELS = ["billing", "bug", "feature"]
WORDS = {"billing": "invoice refund charge payment card receipt plan subscription price account".split(),
         "bug": "crash error freeze broken stack trace screen login button page".split(),
         "feature": "request option export dark mode shortcut support setting filter widget".split()}
COMMON = ("the a our my this that when after before because while every other new old second last first "
          "team user customer service app site week month morning today").split()


def _sentence(rng: random.Random, vocab: list[str], n: int = 9) -> str:
    words = [rng.choice(vocab if rng.random() < 0.4 else COMMON) for _ in range(n)]
    return " ".join(words).capitalize() + "."


def _document(rng: random.Random, vocab: list[str], sentences: int = 5) -> str:
    return "\n".join(_sentence(rng, vocab) for _ in range(sentences))


def _wet(path: Path, texts: list[str]) -> None:
    from warcio.warcwriter import WARCWriter

    with open(path, "wb") as fh:
        writer = WARCWriter(fh, gzip=True)
        for i, text in enumerate(texts):
            writer.write_record(writer.create_warc_record(f"https://example.org/page/{i}", "conversion",
                                                          payload=io.BytesIO(text.encode("utf-8"))))


def _make_data(folder: Path) -> dict[str, Path]:
    import pandas as pd
    import zstandard

    rng = random.Random(0)
    vocab = sum(WORDS.values(), [])
    crawl = folder / "crawl"
    crawl.mkdir(parents=True)
    for shard in range(2):
        _wet(crawl / f"part-{shard}.warc.wet.gz", [_document(rng, vocab) for _ in range(500)])
    lines = [json.dumps({"content": _document(rng, vocab), "id": i}) for i in range(500)]
    lines.insert(7, "{not json")  # on_error: skip
    (folder / "extra.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(("\n".join(lines) + "\n").encode()))
    rows = [{"text": _document(rng, WORDS[label], 2), "category": label, "customer_id": f"c{rng.randrange(200)}"}
            for label in LABELS for _ in range(400)]
    pd.DataFrame(rows).to_parquet(folder / "tickets.parquet")
    return {"crawl": crawl, "extra": folder / "extra.jsonl.zst", "tickets": folder / "tickets.parquet"}


def _own_params(params: dict, files: dict[str, Path]) -> dict:
    """The page's ingest example, its clean and fine-tuning keys, and the smaller corpus's row bounds."""
    params["ingest"]["general"] = {"sources": [
        {"kind": "files", "path": f"{files['crawl']}/*.warc.wet.gz"},
        {"kind": "files", "path": str(files["extra"]), "text_field": "content", "on_error": "skip"}],
        "gate": {"min_rows": 1000, "max_rows": 50000000, "min_nonempty_ratio": 0.95}}
    params["ingest"]["task"] = {"labeled": True, "sources": [
        {"kind": "files", "path": str(files["tickets"]), "label_field": "category", "group_field": "customer_id"}],
        "gate": {"labels": LABELS, "min_rows": 1000, "max_rows": 1000000, "max_class_share": 0.8}}
    params["clean"]["general"].setdefault("gate", {}).update(max_kept_fraction=1.0, min_rows=500)
    params["finetune"]["defaults"]["labels"] = LABELS
    params["finetune"]["defaults"].setdefault("gate", {})["max_class_share"] = 0.8
    return params


@pytest.fixture(scope="module")
def project(tiny_project, tmp_path_factory):
    base = tmp_path_factory.mktemp("own-data")
    files = _make_data(base / "data")
    dest = base / "project"
    shutil.copytree(tiny_project, dest, symlinks=True, ignore=shutil.ignore_patterns(".bentoml", "dist"))
    params = _own_params(yaml.safe_load((dest / "params.yaml").read_text()), files)
    (dest / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(tmp_path_factory.mktemp("home")), "BENTOML_HOME": str(dest / ".bentoml"),
           "BENTOML_DO_NOT_TRACK": "True", "GX_ANALYTICS_ENABLED": "false", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([str(BIN / "dvc"), "repro", "package"], cwd=dest, env=env, capture_output=True, text=True,
                          timeout=3000)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return dest, files, env


def test_the_pages_example_reaches_a_bento_for_its_labels(project):
    dest, _, _ = project
    made = json.loads((dest / "reports/metrics/package.json").read_text())
    assert Path(made["exported"]).is_file()
    lineage = json.loads(next((dest / ".bentoml" / "models").glob("lm-pipeline-classifier/*/lineage.json"))
                         .read_text())
    assert sorted(lineage["model"]["labels"]) == LABELS


def test_the_sources_are_recorded_with_every_file_and_the_broken_line_skipped(project):
    dest, files, _ = project
    general = json.loads((dest / "data/ingested/general/manifest.json").read_text())
    read = [f["path"] for s in general["sources"] for f in s["files"]]
    assert read == [*(str(p) for p in sorted(files["crawl"].glob("*.gz"))), str(files["extra"])]
    assert general["counts"]["skipped"] == {"invalid_json": 1}
    task = json.loads((dest / "data/ingested/task/manifest.json").read_text())
    assert task["sources"][0]["files"][0]["path"] == str(files["tickets"])


def test_an_edited_task_file_is_ingested_again_by_a_plain_dvc_repro(project):
    import hashlib

    import pandas as pd

    dest, files, env = project
    df = pd.read_parquet(files["tickets"])
    df.loc[:99, "category"] = "bug"  # relabelled after ingest
    df.to_parquet(files["tickets"])
    proc = subprocess.run([str(BIN / "dvc"), "repro", "ingest@task"], cwd=dest, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"[sources] task: {files['tickets']} changed: ingest@task runs again" in proc.stdout + proc.stderr
    manifest = json.loads((dest / "data/ingested/task/manifest.json").read_text())
    assert manifest["sources"][0]["files"][0]["sha256"] == hashlib.sha256(files["tickets"].read_bytes()).hexdigest()
    status = subprocess.run([str(BIN / "dvc"), "status", "ingest@task"], cwd=dest, env=env, capture_output=True,
                            text=True, timeout=300)
    assert changed(status) == [], status.stdout  # ingested: up to date
