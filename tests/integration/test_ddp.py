"""Data-parallel pre-training: ``torchrun --nproc_per_node 2`` at micro-batch m trains exactly as one process
at micro-batch 2m (same blocks, same masks, gradients averaged), so the loss curves and final weights match.
CPU (gloo), fp32, dropout 0, one thread per process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from tests.unit.training.conftest import build_datasets, params_dict, read_json, weights

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
M, ACCUM, STEPS, SEQ = 2, 2, 12, 32          # global batch: 2 processes x 2 x 2 = 1 process x 4 x 2 = 8 blocks


def params(path: Path, micro_batch: int) -> Path:
    data = params_dict(budget_tokens=STEPS * 2 * M * ACCUM * SEQ, micro_batch=micro_batch, grad_accum=ACCUM,
                       log_every=2, eval_every=6, checkpoint_every=6, threads=1, precision="fp32", seed=3)
    path.write_text(yaml.safe_dump(data))
    return path


def run(cmd: list[str], timeout: int = 420, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **(env or {}), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "LMPIPE_TRAIN_PROCESSES"):
        env.pop(k, None)
    if not env.get("PREFECT_API_URL"):
        env.pop("PREFECT_API_URL", None)
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp")
    ds = build_datasets(root / "data", paradigms=("gpt",))
    ddp_params, single_params = params(root / "ddp.yaml", M), params(root / "single.yaml", 2 * M)
    ddp = run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "-m", "stages.pretrain", *ds.args("gpt", root / "ddp", ddp_params, checkpoints=root / "ck-ddp",
                                                 metrics=root / "ddp.json")])
    assert ddp.returncode == 0, ddp.stdout[-3000:] + ddp.stderr[-5000:]
    single = run([sys.executable, "-m", "stages.pretrain",
                  *ds.args("gpt", root / "single", single_params, checkpoints=root / "ck-single",
                           metrics=root / "single.json")])
    assert single.returncode == 0, single.stdout[-3000:] + single.stderr[-5000:]
    return {"root": root, "ds": ds, "ddp_params": ddp_params, "ddp": ddp, "single": single}


@pytest.mark.timeout(900)
def test_two_processes_match_one_process_with_twice_the_micro_batch(runs):
    root = runs["root"]
    ddp, single = read_json(root / "ddp" / "training.json"), read_json(root / "single" / "training.json")
    assert ddp["metrics"]["devices"] == 2 and single["metrics"]["devices"] == 1
    assert ddp["metrics"]["steps"] == single["metrics"]["steps"] == STEPS
    assert ddp["metrics"]["tokens"] == single["metrics"]["tokens"] == STEPS * 8 * SEQ
    assert ddp["fingerprint"] != single["fingerprint"]          # the world size is part of the run's identity
    assert [r["step"] for r in ddp["history"]] == [r["step"] for r in single["history"]] == list(range(2, 13, 2))
    for a, b in zip(ddp["history"], single["history"]):
        assert a["lr"] == b["lr"] and a["tokens"] == b["tokens"]
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4), f"step {a['step']}: {a['loss']} vs {b['loss']}"
    for a, b in zip(ddp["evals"], single["evals"]):
        assert a["step"] == b["step"] and a["eval_loss"] == pytest.approx(b["eval_loss"], rel=1e-4)
    assert ddp["history"][-1]["loss"] < ddp["history"][0]["loss"]  # it trained
    wd, ws = weights(root / "ddp"), weights(root / "single")
    assert wd.keys() == ws.keys()
    for k in wd:
        torch.testing.assert_close(wd[k], ws[k], rtol=1e-4, atol=1e-5, msg=k)
    assert read_json(root / "ddp.json") == ddp["metrics"]        # written once, by rank 0


@pytest.mark.timeout(900)
def test_a_checkpoint_of_two_processes_is_not_resumed_by_one(runs, tmp_path):
    """The same params on another world size are another run: its checkpoint is not resumed."""
    import shutil

    ds = runs["ds"]
    # a checkpoint as a killed 2-process run would leave it: rerun 2 processes, keep the checkpoint of step 6
    ck = tmp_path / "ck"
    script = ("import sys, stages.training.checkpoint as c, stages.pretrain as p\n"
              "real = c.save\n"
              "def save(*a, **k):\n"
              "    real(*a, **k)\n"
              "    raise SystemExit(3)\n"
              "c.save = save\n"
              "sys.exit(p.main(sys.argv[1:]))\n")
    (tmp_path / "killed.py").write_text(script)
    proc = run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                str(tmp_path / "killed.py"), *ds.args("gpt", tmp_path / "out", runs["ddp_params"], checkpoints=ck)])
    assert proc.returncode != 0 and read_json(ck / "state.json")["step"] == 6, proc.stderr[-3000:]
    one = run([sys.executable, "-m", "stages.pretrain",
               *ds.args("gpt", tmp_path / "out", runs["ddp_params"], checkpoints=ck, live=tmp_path / "live")])
    assert one.returncode == 0, one.stderr[-3000:]
    assert "holds another run" in one.stderr
    assert read_json(tmp_path / "live" / "metrics.json")["resumed_from"] == 0
    shutil.rmtree(tmp_path / "out", ignore_errors=True)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("launcher", ["torchrun", "accelerate"])
def test_the_flow_launches_a_training_stage_in_two_processes(runs, tmp_path, launcher):
    """``python -m flows.pipeline --train-processes 2`` on a DVC project: the stage's plain command starts
    itself under the launcher, and trains exactly as the direct ``torchrun --nproc_per_node 2`` run above."""
    ds, proj = runs["ds"], tmp_path / "proj"
    proj.mkdir()
    args = ds.args("gpt", Path("out/${item}"), runs["ddp_params"], metrics=Path("metrics.json"))
    (proj / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"pretrain": {"foreach": ["gpt"], "do": {
        "cmd": " ".join([sys.executable, "-m", "stages.pretrain", *args]),
        "outs": ["out/${item}"], "metrics": [{"metrics.json": {"cache": False}}]}}}}))
    subprocess.run([str(Path(sys.executable).parent / "dvc"), "init", "--no-scm", "-q"], cwd=proj, check=True)
    home = tmp_path / "prefect-home"
    proc = run([sys.executable, "-m", "flows.pipeline", "--root", str(proj), "--train-processes", "2",
                "--launcher", launcher],
               env={"PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120", "PREFECT_API_URL": ""})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    out = proc.stdout + proc.stderr
    launched = {"torchrun": "[launch] -m torch.distributed.run --standalone --nproc_per_node 2 -m stages.pretrain",
                "accelerate": "[launch] -m accelerate.commands.launch --multi_gpu --num_processes 2 -m stages.pretrain"}
    assert "LMPIPE_TRAIN_PROCESSES=2" in out and launched[launcher] in out
    flow_run, direct = read_json(proj / "out/gpt/training.json"), read_json(runs["root"] / "ddp/training.json")
    assert flow_run["metrics"]["devices"] == 2
    assert [r["loss"] for r in flow_run["history"]] == pytest.approx([r["loss"] for r in direct["history"]], rel=1e-5)
    wf, wd = weights(proj / "out/gpt"), weights(runs["root"] / "ddp")
    for k in wd:
        torch.testing.assert_close(wf[k], wd[k], rtol=1e-5, atol=1e-6, msg=k)
    lock = yaml.safe_load((proj / "dvc.lock").read_text())
    assert "pretrain@gpt" in lock["stages"]                     # recorded by DVC as any other run
