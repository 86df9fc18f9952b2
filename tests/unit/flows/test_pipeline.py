"""The flow on a small DVC project made in code: stages in graph order, DVC's cache honoured, a failing
stage failing its task with the stage's message and stopping what depends on it, artifacts published."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from flows.graph import closure, read_pipeline

MAKE = """import json, sys, pathlib
item = sys.argv[1]
if item == "b" and pathlib.Path("FAIL").exists():
    print("error: gate make-b failed: rows: 0 < 1 (report: reports/quality/make-b.json)", file=sys.stderr)
    sys.exit(1)
pathlib.Path("data").mkdir(exist_ok=True)
pathlib.Path(f"data/{item}.txt").write_text(item * 3)
pathlib.Path("reports/quality").mkdir(parents=True, exist_ok=True)
pathlib.Path("reports/metrics").mkdir(parents=True, exist_ok=True)
pathlib.Path(f"reports/quality/make-{item}.json").write_text(json.dumps({"gate": f"make-{item}", "success": True,
    "checks": [{"name": "rows", "success": True, "observed": {"rows": 3}}]}))
pathlib.Path(f"reports/metrics/make-{item}.json").write_text(json.dumps({"chars": 3}))
"""
JOIN = """import json, pathlib
pathlib.Path("data/joined.txt").write_text(pathlib.Path("data/a.txt").read_text() + pathlib.Path("data/b.txt").read_text())
pathlib.Path("reports/metrics/join.json").write_text(json.dumps({"chars": 6}))
"""
DVC_YAML = f"""stages:
  make:
    foreach: [a, b]
    do:
      cmd: {sys.executable} make.py ${{item}}
      deps: [make.py]
      outs:
        - data/${{item}}.txt
        - reports/quality/make-${{item}}.json:
            cache: false
      metrics:
        - reports/metrics/make-${{item}}.json:
            cache: false
  join:
    cmd: {sys.executable} join.py
    deps: [join.py, data/a.txt, data/b.txt]
    outs: [data/joined.txt]
    metrics:
      - reports/metrics/join.json:
          cache: false
"""


@pytest.fixture
def project(tmp_path):
    (tmp_path / "make.py").write_text(MAKE)
    (tmp_path / "join.py").write_text(JOIN)
    (tmp_path / "dvc.yaml").write_text(DVC_YAML)
    subprocess.run([str(Path(sys.executable).parent / "dvc"), "init", "--no-scm", "-q"], cwd=tmp_path, check=True)
    return tmp_path


def test_graph_comes_from_dvc_yaml(project):
    graph, outs = read_pipeline(project)
    assert graph == {"make@a": [], "make@b": [], "join": ["make@a", "make@b"]}
    assert outs["make@a"] == ["data/a.txt", "reports/quality/make-a.json", "reports/metrics/make-a.json"]
    assert closure(graph, None) == ["make@a", "make@b", "join"]
    assert closure(graph, ["make"]) == ["make@a", "make@b"]
    assert closure(graph, ["make@b"]) == ["make@b"]
    with pytest.raises(ValueError, match="no stage nope"):
        closure(graph, ["nope"])


def _artifacts() -> dict[str, object]:
    import asyncio

    from prefect.client.orchestration import get_client

    async def read():
        async with get_client() as client:
            return await client.read_artifacts()

    return {a.key: a for a in asyncio.run(read()) if a.key}


def test_flow_runs_every_stage_then_skips_them(prefect_harness, project):
    from flows.pipeline import pipeline

    out = pipeline(root=str(project))
    assert out["stages"] == ["make@a", "make@b", "join"] and out["ran"] == out["stages"]
    assert (project / "data/joined.txt").read_text() == "aaabbb"
    artifacts = _artifacts()
    assert {"gate-make-a", "gate-make-b", "metrics-make-a", "metrics-join"} <= set(artifacts)
    assert json.loads(artifacts["gate-make-a"].data)[0]["passed"] is True
    again = pipeline(root=str(project))
    assert again["ran"] == []  # DVC's cache: nothing changed


def test_a_failing_stage_fails_its_task_with_its_message_and_stops_downstream(prefect_harness, project):
    from flows.pipeline import StageFailed, pipeline

    (project / "FAIL").write_text("")
    with pytest.raises(StageFailed, match=r"1 stage\(s\) failed, 1 not run: make@b: error: gate make-b failed: "
                                           r"rows: 0 < 1"):
        pipeline(root=str(project))
    assert (project / "data/a.txt").exists()  # the independent branch ran
    assert not (project / "data/b.txt").exists() and not (project / "data/joined.txt").exists()


def test_a_target_runs_only_what_it_needs(prefect_harness, project):
    from flows.pipeline import pipeline

    out = pipeline(target="make@a", root=str(project))
    assert out["stages"] == ["make@a"]
    assert (project / "data/a.txt").exists() and not (project / "data/b.txt").exists()


def test_a_profile_is_applied_to_params_keeping_comments(tmp_path):
    from stages.config import ConfigError

    from flows.pipeline import apply_profile

    (tmp_path / "profiles").mkdir()
    (tmp_path / "params.yaml").write_text("split:\n  heldout_fraction: 0.05   # held out\n  salt: ''\n")
    (tmp_path / "profiles" / "small.yaml").write_text("split.heldout_fraction: 0.1\n")
    assert apply_profile(tmp_path, "small") == {"split.heldout_fraction": 0.1}
    text = (tmp_path / "params.yaml").read_text()
    assert "heldout_fraction: 0.1" in text and "# held out" in text
    (tmp_path / "profiles" / "bad.yaml").write_text("split.nope: 1\n")
    with pytest.raises(ConfigError, match="split.nope: no such key"):
        apply_profile(tmp_path, "bad")



def test_a_profile_holds_for_the_run_only_and_params_come_back_byte_for_byte(prefect_harness, project):
    from flows.pipeline import pipeline, profile_applied

    original = "split:\n  heldout_fraction: 0.05   # held out\n  salt: ''\n"
    (project / "params.yaml").write_text(original)
    (project / "profiles").mkdir()
    (project / "profiles" / "small.yaml").write_text("split.heldout_fraction: 0.1\n")
    with pytest.raises(RuntimeError, match="a stage broke"):
        with profile_applied(project, "small"):
            assert "heldout_fraction: 0.1" in (project / "params.yaml").read_text()
            raise RuntimeError("a stage broke")
    assert (project / "params.yaml").read_text() == original  # restored after a failure too
    out = pipeline(root=str(project), profile="small")
    assert out["ran"] == ["make@a", "make@b", "join"]
    assert (project / "params.yaml").read_text() == original
    assert not list(project.glob(".params.yaml.*"))


def test_scale_out_reaches_only_the_stages_it_is_for():
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.pipeline import stage_env

    with temporary_settings(updates={PREFECT_API_URL: "http://127.0.0.1:4200/api"}):
        assert stage_env("ingest") == {"PREFECT_API_URL": "http://127.0.0.1:4200/api"}  # shard flows report there
        assert stage_env("clean@general", dask="tcp://sched:8786", train_processes=4) == {
            "PREFECT_API_URL": "http://127.0.0.1:4200/api", "LMPIPE_DASK": "tcp://sched:8786"}
        train = stage_env("dapt@t5", dask="local:2", train_processes=4, launcher="accelerate")
        assert {k: v for k, v in train.items() if k.startswith("LMPIPE_")} == {
            "LMPIPE_DASK": "local:2", "LMPIPE_TRAIN_PROCESSES": "4", "LMPIPE_TRAIN_LAUNCHER": "accelerate",
            "LMPIPE_TRAIN_LAUNCH_ARGS": ""}
        assert "LMPIPE_TRAIN_PROCESSES" not in stage_env("finetune@bert-random", train_processes=4)
        with pytest.raises(ValueError, match="LMPIPE_TRAIN_LAUNCHER='mpi'"):
            stage_env("pretrain@gpt", train_processes=2, launcher="mpi")
