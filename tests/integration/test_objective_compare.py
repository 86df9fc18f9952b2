"""The objective comparison end to end, as DVC runs it: on a copy of the tiny project, three objectives of
``compare.objectives`` get their pre-training, DAPT and fine-tuning stages (experiments/compare/dvc.yaml),
train on the FLOPs of their paradigm's own runs, and ``compare-report@objectives`` writes the report.

Named to run after test_kill_resume: in a CI run where this module built the shared tiny project first (before
the Dask tests), the kill suite's forced re-run of pretrain@gpt gave other weights than the fixture's first run
and its package case failed on the inconsistent workspace. The cause: a Dask LocalCluster leaves
OMP_NUM_THREADS=1 (its nanny's pre-spawn environment) in the process that starts it, so stages started after
the Dask tests train on one thread and sum in another order."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from stages.profile import targets
from stages.provenance.stagecard import objective_text
from tests.integration.test_ingest_pipeline import _dvc, changed

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]

OBJECTIVES = {"bert-sop": {"paradigm": "bert", "objective": "sop"},
              "gpt-permuted": {"paradigm": "gpt", "objective": "permuted"},
              "t5-bart": {"paradigm": "t5", "objective": "bart"}}


def flops(folder: Path) -> tuple[float, dict]:
    record = json.loads((folder / "training.json").read_text())
    m = record["metrics"]
    return m["tokens"] * m["flops_per_token"], record


@pytest.fixture(scope="module")
def compared(tiny_project, tmp_path_factory):
    dest = tmp_path_factory.mktemp("compare") / "project"
    shutil.copytree(tiny_project, dest, symlinks=True)
    params = yaml.safe_load((dest / "params.yaml").read_text())
    params["compare"].update(objectives=OBJECTIVES, reports=["objectives"], sizes=[50], seeds=[0, 1], min_steps=5,
                             workers=1)
    (dest / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    proc = _dvc(dest, "repro", *targets(params))  # as `make run PROFILE=compare`: dvc.yaml and the comparison's file
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return dest, proc.stdout


def test_each_objective_gets_its_stages_and_the_default_run_is_left_alone(compared):
    dest, log = compared
    for name in OBJECTIVES:
        for kind in ("pretrain", "dapt", "finetune"):
            assert f"compare-{kind}@{name}" in log
            assert (dest / "data" / "models" / "compare" / kind / name / "config.json").is_file()
    assert "Running stage 'pretrain@" not in log and "Running stage 'finetune@" not in log  # already made
    status = _dvc(dest, "status")
    assert status.returncode == 0 and changed(status) == [], status.stdout


def test_each_objective_trains_on_its_paradigms_flops(compared):
    dest, _ = compared
    for name, entry in OBJECTIVES.items():
        p = entry["paradigm"]
        for kind in ("pretrain", "dapt"):
            ref, _ = flops(dest / "data" / "models" / kind / p)
            got, record = flops(dest / "data" / "models" / "compare" / kind / name)
            assert record["config"]["train"]["objective"] == entry["objective"]
            assert record["config"]["train"]["budget_flops"] == pytest.approx(ref)
            # a run stops at the first whole step past its budget: within one step's FLOPs of it
            t = record["config"]["train"]
            step = t["micro_batch"] * t["grad_accum"] * record["layout"]["seq_len"] * record["metrics"]["flops_per_token"]
            assert ref <= got + 1 and got < ref + step + 1, (name, kind, got, ref, step)
        card = (dest / "data" / "models" / "compare" / "dapt" / name / "README.md").read_text()
        t = record["config"]["train"]
        assert objective_text(p, entry["objective"], t["mlm_select"], t["generator_size"]) in card


def test_the_report_compares_every_objective_with_the_paradigms_own_and_random_init(compared):
    dest, _ = compared
    md = (dest / "reports" / "objectives.md").read_text()
    metrics = json.loads((dest / "reports" / "metrics" / "objectives.json").read_text())
    for row in ("bert-masked_lm", "bert-sop", "bert-random", "gpt-causal_lm", "gpt-permuted", "gpt-random",
                "t5-span_corruption", "t5-bart", "t5-random"):
        assert f"| {row} |" in md
        assert set(metrics["rows"][row]["test_macro_f1"]) == {"50", "300"}  # the tiny profile fine-tunes on 300
    verdicts = {(v["paradigm"], v["train_examples"]) for v in metrics["verdict"]}
    assert verdicts == {(p, n) for p in ("bert", "gpt", "t5") for n in (50, 300)}
    for v in metrics["verdict"]:
        assert v["best"] in metrics["rows"] and metrics["rows"][v["best"]]["objective"] != "none"
        line = f"- {v['paradigm'].upper()}, {v['train_examples']} labels: **{v['best']}** ({v['test_macro_f1']:.3f}"
        assert line in md
