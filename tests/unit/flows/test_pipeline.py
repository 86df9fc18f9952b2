"""The flow on a small DVC project made in code: stages in graph order, DVC's cache honoured, a failing
stage failing its task with the stage's message and stopping what depends on it, artifacts published."""

from __future__ import annotations

import json
import os
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
    graph, outs, targets = read_pipeline(project)
    assert graph == {"make@a": [], "make@b": [], "join": ["make@a", "make@b"]}
    assert targets == {s: s for s in graph}  # the root's dvc.yaml: `dvc repro` takes the name
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
    forced = pipeline(root=str(project), force=["make@b"])
    assert forced["ran"] == ["make@b"]  # run again although unchanged; its dependents stay up to date
    with pytest.raises(ValueError, match="no stage nope"):
        pipeline(root=str(project), force=["nope"])


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


# A second DVC file shaped like experiments/compare/dvc.yaml: its stages run from the root on the root's params,
# one per entry of a params mapping (none by default), and read the root pipeline's outputs.
EXTRA_YAML = f"""vars:
  - ../../params.yaml
stages:
  more:
    foreach: ${{extra.items}}
    do:
      wdir: ../..
      cmd: {sys.executable} -c "import pathlib; pathlib.Path('data/more-${{key}}.txt').write_text(pathlib.Path('data/joined.txt').read_text() + '${{item.x}}')"
      deps:
        - data/joined.txt
      params:
        - extra.items.${{key}}
      outs:
        - data/more-${{key}}.txt
"""


def test_a_second_dvc_files_stages_join_the_graph_and_run_by_their_address(prefect_harness, project):
    from flows.pipeline import pipeline

    (project / "experiments" / "extra").mkdir(parents=True)
    (project / "experiments" / "extra" / "dvc.yaml").write_text(EXTRA_YAML)
    (project / "params.yaml").write_text("extra:\n  items: {}\n")
    assert read_pipeline(project)[0] == {"make@a": [], "make@b": [], "join": ["make@a", "make@b"]}  # none yet
    (project / "params.yaml").write_text("extra:\n  items:\n    c: {x: '!'}\n")
    graph, outs, targets = read_pipeline(project)
    assert graph["more@c"] == ["join"] and outs["more@c"] == ["data/more-c.txt"]
    assert targets["more@c"] == "experiments/extra/dvc.yaml:more@c" and targets["join"] == "join"
    out = pipeline(target="more", root=str(project))
    assert out["stages"] == ["make@a", "make@b", "join", "more@c"] and out["ran"] == out["stages"]
    assert (project / "data/more-c.txt").read_text() == "aaabbb!"
    assert (project / "experiments" / "extra" / "dvc.lock").is_file()
    assert pipeline(root=str(project))["ran"] == []  # everything, both files: up to date


def test_a_profile_holds_for_the_run_only_and_params_come_back_byte_for_byte(prefect_harness, project):
    from flows.pipeline import pipeline

    original = "split:\n  heldout_fraction: 0.05   # held out\n  salt: ''\n"
    (project / "params.yaml").write_text(original)
    (project / "profiles").mkdir()
    (project / "profiles" / "small.yaml").write_text("split.heldout_fraction: 0.1\n")
    out = pipeline(root=str(project), profile="small")
    assert out["ran"] == ["make@a", "make@b", "join"]
    assert (project / "params.yaml").read_text() == original
    assert not list(project.glob(".params.yaml.*"))
    results = project / "reports" / "profiles" / "small"
    assert "heldout_fraction: 0.1" in (results / "params.yaml").read_text()  # the run's, kept beside
    assert (results / "reports" / "metrics" / "join.json").is_file() and (results / "dvc.lock").is_file()
    assert not (project / "reports" / "metrics" / "join.json").exists()  # the run's reports left the workspace
    assert not (project / "dvc.lock").exists()                            # as before it


def test_params_of_a_killed_profile_run_come_back_with_the_next_run(prefect_harness, project):
    """SIGKILL skips the context manager's restore: the profile's params stay in params.yaml, with the user's
    saved beside them. The next flow run on the workspace puts them back before any stage runs."""
    from flows.pipeline import pipeline
    from stages.profile_run import SNAPSHOT, profile_workspace, restore_after_kill

    original = "split:\n  heldout_fraction: 0.05   # held out\n  salt: ''\n"
    (project / "params.yaml").write_text(original)
    (project / "profiles").mkdir()
    (project / "profiles" / "small.yaml").write_text("split.heldout_fraction: 0.1\n")
    killed = profile_workspace(project, "small")
    killed.__enter__()  # ... and never exited, as after a SIGKILL
    assert "heldout_fraction: 0.1" in (project / "params.yaml").read_text()
    out = pipeline(root=str(project))
    assert (project / "params.yaml").read_text() == original  # restored before any stage ran
    assert out["ran"] == ["make@a", "make@b", "join"] and not (project / SNAPSHOT).exists()
    assert restore_after_kill(project) is None  # nothing left to restore


def test_scale_out_reaches_only_the_stages_it_is_for():
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.pipeline import stage_env

    with temporary_settings(updates={PREFECT_API_URL: "http://127.0.0.1:4200/api"}):
        assert stage_env("ingest") == {}  # stages never talk to Prefect: nothing of the flow's API leaks in
        assert stage_env("clean@general", dask="tcp://sched:8786", train_processes=4) == {
            "LMPIPE_DASK": "tcp://sched:8786"}
        assert stage_env("clean@domain", dask="tcp://sched:8786", scratch="s3://bucket/lm") == {
            "LMPIPE_DASK": "tcp://sched:8786", "LMPIPE_SCRATCH": "s3://bucket/lm"}
        assert "LMPIPE_SCRATCH" not in stage_env("tokens@bert", scratch="s3://bucket/lm")  # cleaning's shards only
        train = stage_env("dapt@t5", dask="local:2", train_processes=4, launcher="accelerate")
        assert train == {
            "LMPIPE_DASK": "local:2", "LMPIPE_TRAIN_PROCESSES": "4", "LMPIPE_TRAIN_LAUNCHER": "accelerate",
            "LMPIPE_TRAIN_LAUNCH_ARGS": ""}
        assert "LMPIPE_TRAIN_PROCESSES" not in stage_env("finetune@bert-random", train_processes=4)
        with pytest.raises(ValueError, match="LMPIPE_TRAIN_LAUNCHER='mpi'"):
            stage_env("pretrain@gpt", train_processes=2, launcher="mpi")


def test_output_splits_into_lines_and_progress_updates():
    from flows.pipeline import split_output

    segments, rest = split_output("Running stage 'x':\n\r 10%|#\r 50%|#####\r100%|##########\nlast line\npart")
    assert segments == [("Running stage 'x':", False), ("", True), (" 10%|#", True), (" 50%|#####", True),
                        ("100%|##########", False), ("last line", False)]
    assert rest == "part"


SLOW = """import sys, time
print("[slow] first line", flush=True)
for i in range(5):
    sys.stderr.write(f"\\r{i * 25}%|bar"); sys.stderr.flush(); time.sleep(0.3)
sys.stderr.write("\\r100%|bar\\n")
time.sleep(float(sys.argv[1]))
print("[slow] done", flush=True)
open("out.txt", "w").write("done")
"""


def _slow_project(tmp_path: Path, seconds: float) -> Path:
    (tmp_path / "slow.py").write_text(SLOW)
    (tmp_path / "dvc.yaml").write_text(f"stages:\n  slow:\n    cmd: {sys.executable} slow.py {seconds}\n"
                                       f"    deps: [slow.py]\n    outs: [out.txt]\n")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)  # with git, DVC adds its git hints
    subprocess.run([str(Path(sys.executable).parent / "dvc"), "init", "-q"], cwd=tmp_path, check=True)
    return tmp_path


def test_a_stage_streams_its_output_while_it_runs_without_dvc_hints(tmp_path):
    import time

    from flows.pipeline import run_dvc

    seen: list[tuple[float, str]] = []
    start = time.monotonic()
    run = run_dvc("slow", _slow_project(tmp_path, 3.0), on_line=lambda line: seen.append((time.monotonic(), line)),
                  progress_every_s=0.5)
    end = time.monotonic()
    lines = [line for _, line in seen]
    assert run.returncode == 0 and not run.timed_out
    first = next(t for t, line in seen if line == "[slow] first line")
    assert end - first > 2.5, "the first line arrived only when the stage ended"
    assert "[slow] done" in lines and lines.index("[slow] first line") < lines.index("[slow] done")
    progress = [line for line in lines if "|bar" in line]
    assert progress[-1] == "100%|bar" and 2 <= len(progress) <= 4  # throttled updates, then the final state
    assert start < first < end and run.lines[-1] == lines[-1]
    assert "Updating lock file 'dvc.lock'" in lines  # DVC's own lines stay, its git and push hints do not
    assert not any(line.strip().startswith(("git add", "To track the changes", "To enable auto staging",
                                            "dvc config", "Use `dvc push`")) for line in lines)


def test_a_stage_past_its_timeout_is_stopped_with_its_processes(tmp_path):
    import time

    from flows.pipeline import run_dvc, stage_timeout_s

    start = time.monotonic()
    run = run_dvc("slow", _slow_project(tmp_path, 120.0), timeout_s=4.0)
    assert run.timed_out and time.monotonic() - start < 40
    assert "[slow] first line" in run.lines and "[slow] done" not in run.lines
    out = subprocess.run(["pgrep", "-f", f"{tmp_path}/slow.py|slow.py 120"], capture_output=True, text=True)
    assert out.stdout.strip() == "", "the stage's process outlived the timeout"
    assert stage_timeout_s("pretrain@gpt") == 168 * 3600 and stage_timeout_s("evaluate", 0.5) == 1800
    with pytest.raises(ValueError, match="stage_timeout_hours: must be > 0"):
        stage_timeout_s("evaluate", 0)


def test_a_second_run_on_the_same_workspace_is_refused(prefect_harness, project):
    from flows.pipeline import LOCK, StageFailed, pipeline, workspace_lock

    with workspace_lock(project):
        with pytest.raises(StageFailed, match=rf"another pipeline run is using {project} .*{LOCK}.*\"pid\": "
                                              rf"{os.getpid()}"):
            pipeline(root=str(project))
        assert not (project / "data").exists()  # nothing ran
    out = pipeline(root=str(project))  # released: the next run goes ahead
    assert out["ran"] == ["make@a", "make@b", "join"]


def test_only_the_stages_that_download_are_retried():
    # A flaky mirror is worth a retry; a training run, a fine-tuning grid or a gate that failed is not.
    from flows.pipeline import NETWORK_STAGES, RETRIES, task_options

    stages = set(read_pipeline(Path(__file__).resolve().parents[3])[0])
    retried = {s for s in stages if task_options(s)}
    assert retried == {s for s in stages if s.split("@")[0] in {"ingest", "clean"}} and retried
    assert NETWORK_STAGES == {"ingest", "clean"}
    assert task_options("ingest@task") == {"retries": RETRIES, "retry_delay_seconds": 10} and RETRIES >= 1
    for stage in ("pretrain@bert", "dapt@gpt", "finetune@t5-random", "evaluate", "package"):
        assert task_options(stage) == {}
