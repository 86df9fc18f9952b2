"""When and how a training stage starts itself in several processes (the environment asks; the launcher runs)."""

from __future__ import annotations

import sys

import pytest

from stages.training import launch


@pytest.fixture
def clean_env(monkeypatch):
    for k in (*launch.INSIDE, launch.PROCESSES, launch.LAUNCHER, launch.LAUNCH_ARGS):
        monkeypatch.delenv(k, raising=False)
    return monkeypatch


def test_torchrun_on_one_machine_and_on_several():
    one = launch.launch_command("stages.pretrain", ["--paradigm", "gpt"], 4)
    assert one == [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "4",
                   "-m", "stages.pretrain", "--paradigm", "gpt"]
    many = launch.launch_command("stages.pretrain", ["--paradigm", "gpt"], 8, "torchrun",
                                 ["--nnodes", "2", "--node_rank", "1", "--rdzv_endpoint", "head:29500"])
    assert "--standalone" not in many                      # the rendezvous is the head node's, not local
    assert many[3:11] == ["--nproc_per_node", "8", "--nnodes", "2", "--node_rank", "1", "--rdzv_endpoint",
                          "head:29500"]


def test_accelerate_launch():
    cmd = launch.launch_command("stages.pretrain", ["--x"], 2, "accelerate")
    assert cmd == [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                   "-m", "stages.pretrain", "--x"]


def test_bad_values_name_the_variable():
    with pytest.raises(ValueError, match="LMPIPE_TRAIN_LAUNCHER='mpirun': must be one of torchrun, accelerate"):
        launch.launch_command("m", [], 2, "mpirun")
    with pytest.raises(ValueError, match="LMPIPE_TRAIN_PROCESSES=0"):
        launch.launch_command("m", [], 0)


def test_the_environment_decides(clean_env):
    assert launch.from_environment("stages.pretrain", ["-a"]) is None          # nothing asked: one process
    clean_env.setenv(launch.PROCESSES, "1")
    assert launch.from_environment("stages.pretrain", ["-a"]) is None
    clean_env.setenv(launch.PROCESSES, "3")
    assert launch.from_environment("stages.pretrain", ["-a"])[3:6] == ["--standalone", "--nproc_per_node", "3"]
    clean_env.setenv(launch.LAUNCHER, "accelerate")
    assert launch.from_environment("stages.pretrain", ["-a"])[2] == "accelerate.commands.launch"
    clean_env.setenv("LOCAL_RANK", "0")                  # already one of the launched processes: train
    assert launch.from_environment("stages.pretrain", ["-a"]) is None
    clean_env.delenv("LOCAL_RANK")
    clean_env.setenv(launch.PROCESSES, "two")
    with pytest.raises(ValueError, match="LMPIPE_TRAIN_PROCESSES='two': not a whole number"):
        launch.from_environment("stages.pretrain", [])


def test_a_bad_launcher_is_the_stages_error_line(clean_env, capsys, tmp_path):
    from stages.pretrain import main

    clean_env.setenv(launch.PROCESSES, "2")
    clean_env.setenv(launch.LAUNCHER, "mpirun")
    assert main(["--paradigm", "gpt", "--tokens", str(tmp_path / "tokens"), "--tokenizer", str(tmp_path / "tok"),
                 "--output", str(tmp_path / "out")]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("error: LMPIPE_TRAIN_LAUNCHER='mpirun'")
