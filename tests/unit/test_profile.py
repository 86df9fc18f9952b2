"""Profiles are small diffs over params.yaml, validated before any run."""

from __future__ import annotations

import pytest

from stages.config import ConfigError, load_params
from stages.profile import apply, load_profile, load_profiles, main, run_args, set_args, targets, validate


def test_gpu_profile_is_a_valid_diff_over_params():
    profile = load_profile("gpu")
    params = load_params("params.yaml")
    merged = apply(params, profile)
    validate(merged)
    assert merged["clean"]["defaults"]["workers"] == 0
    assert "workers" not in params["clean"]["defaults"]  # the base is untouched (its default: 2)
    assert set_args({"a.b": 0, "c": True, "d": "x"}) == ["-S", "a.b=0", "-S", "c=true", "-S", "d=x"]


def test_unknown_keys_and_invalid_values_are_named():
    params = load_params("params.yaml")
    with pytest.raises(ConfigError, match="clean.defaults.wrokers: no such key"):
        apply(params, {"clean.defaults.wrokers": 0})
    with pytest.raises(ConfigError, match="workers"):
        validate(apply(params, {"clean.defaults.workers": -1}))
    with pytest.raises(ConfigError, match=r"pretrain\.bert\.model\.heads: d_model must be a multiple"):
        validate(apply(params, {"pretrain.defaults.model.heads": 3}))  # 128 is not a multiple of 3
    with pytest.raises(ConfigError, match=r"pretrain.bret.train.lr: no such key in params.yaml \(at pretrain.bret\)"):
        apply(params, {"pretrain.bret.train.lr": 0.1})  # a paradigm params.yaml does not have
    with pytest.raises(ConfigError, match="no such profile"):
        load_profile("tpu")


def test_a_key_params_leaves_to_its_default_is_added_and_validated():
    params = {"finetune": {"defaults": {"lr": 0.001}, "bert": {}}}
    merged = apply(params, {"finetune.defaults.eval_every": 7, "finetune.bert.gate.min_class_share": 0.01})
    assert merged["finetune"]["defaults"] == {"lr": 0.001, "eval_every": 7}
    assert merged["finetune"]["bert"] == {"gate": {"min_class_share": 0.01}}
    assert "eval_every" not in params["finetune"]["defaults"]  # the base is untouched
    # set with Hydra's add-or-override, since plain -S only overrides keys the file has
    assert set_args({"finetune.defaults.eval_every": 7, "finetune.defaults.lr": 0.01}, params) == [
        "-S", "++finetune.defaults.eval_every=7", "-S", "finetune.defaults.lr=0.01"]
    with pytest.raises(ConfigError, match=r"finetune.defaults.eval_evry: no such key"):
        apply(params, {"finetune.defaults.eval_evry": 7})


def test_cli_prints_dvc_set_arguments(capsys):
    assert main(["gpu"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("-S ++clean.defaults.workers=0 -S tokens.defaults.seq_len=512")  # ++: a key params leaves out
    assert "-S pretrain.defaults.model.d_model=512" in out


def test_tiny_profile_keeps_every_paradigm_small(tmp_path):
    """A paradigm's own value in params.yaml wins over `defaults`: a profile that shrinks only the defaults
    leaves that paradigm at full size (the tiny run once spent minutes on GPT's 3 M-token DAPT)."""
    import yaml

    from stages.finetuning.core import load_config as finetune_config
    from stages.training.config import load_config as pretrain_config

    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(apply(load_params("params.yaml"), load_profile("tiny"))))
    for paradigm in ("bert", "gpt", "t5"):
        for stage in ("pretrain", "dapt"):
            train = pretrain_config(path, stage, paradigm).train
            assert train.budget_tokens <= 40_000, (stage, paradigm, train.budget_tokens)
            assert not train.budget_flops, (stage, paradigm)
        ft = finetune_config(path, paradigm)
        assert 0 < ft.max_train_examples <= 300 and ft.epochs == 1 and tuple(ft.seeds) == (0,) and not ft.lr_grid, paradigm


def test_profiles_compose_in_order_later_wins(tmp_path, capsys):
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "a.yaml").write_text("x.y: 1\nx.z: 2\n")
    (tmp_path / "profiles" / "b.yaml").write_text("x.z: 3\n")
    merged, label = load_profiles("a b", tmp_path)
    assert merged == {"x.y": 1, "x.z": 3} and label == "profiles/a.yaml + profiles/b.yaml"
    assert load_profiles(["b", "a"], tmp_path)[0] == {"x.z": 2, "x.y": 1}
    assert load_profiles("a,b", tmp_path)[0] == merged
    with pytest.raises(ConfigError, match="no profile named"):
        load_profiles(" ", tmp_path)
    with pytest.raises(ConfigError, match="profiles/c.yaml: no such profile"):
        load_profiles("a c", tmp_path)
    assert main(["gpu", "gpu-quick"]) == 0
    args = capsys.readouterr().out.split()
    values = [a for a in args if a != "-S"]
    assert len(values) == len({v.split("=", 1)[0] for v in values})  # one -S per key: the later profile's value
    assert "pretrain.defaults.train.budget_tokens=2000000" in values and "tokens.defaults.seq_len=512" in values
    assert main([]) == 2


def test_gpu_quick_profile_is_smaller_than_gpu_for_every_paradigm(tmp_path):
    """Over the GPU profile, gpu-quick must shrink every paradigm's budgets (a paradigm's own key wins over
    `defaults`) and keep the GPU profile's models and sequence length."""
    import yaml

    from stages.finetuning.core import load_config as finetune_config
    from stages.training.config import load_config as pretrain_config

    base, quick = tmp_path / "gpu.yaml", tmp_path / "quick.yaml"
    params = load_params("params.yaml")
    base.write_text(yaml.safe_dump(apply(params, load_profile("gpu"))))
    quick.write_text(yaml.safe_dump(apply(params, load_profiles("gpu gpu-quick")[0])))
    validate(yaml.safe_load(quick.read_text()))
    for paradigm in ("bert", "gpt", "t5"):
        for stage in ("pretrain", "dapt"):
            full, small = pretrain_config(base, stage, paradigm), pretrain_config(quick, stage, paradigm)
            assert small.train.budget_tokens <= full.train.budget_tokens / 5, (stage, paradigm)
            if stage == "pretrain":  # DAPT continues the pre-trained model
                assert small.model == full.model and small.model.d_model == 512, paradigm
        ft = finetune_config(quick, paradigm)
        assert tuple(ft.seeds) == (0,) and 0 < ft.max_train_examples <= 2000, paradigm
        full_ft = finetune_config(base, paradigm)
        # one rate, the GPU profile's own (its grid ran on an H200 before; the quick check runs each stage once)
        assert len(full_ft.lr_grid) == 3 and not ft.lr_grid and ft.lr == full_ft.lr, paradigm


def test_only_a_profile_that_names_comparison_runs_targets_the_comparisons_dvc_file():
    """`dvc exp run` with no target runs the root's dvc.yaml, the product's pipeline; the comparison's stages
    (experiments/compare/dvc.yaml) run when the profile's params name some, and then both files are the targets."""
    params = load_params("params.yaml")
    assert targets(params) == []  # params.yaml alone: no comparison runs (`make run` is plain `dvc repro`)
    for name in ("gpu", "tiny"):
        assert not {"dvc.yaml", "experiments/compare/dvc.yaml"} & set(run_args(load_profile(name), params))
    both = ["dvc.yaml", "experiments/compare/dvc.yaml"]
    assert run_args(load_profile("compare"), params)[-2:] == both
    assert run_args(load_profiles("tiny compare")[0], params)[-2:] == both
    assert targets(apply(params, {"compare.reports": ["objectives"]})) == both


def test_dvc_exp_run_runs_a_second_dvc_files_stages_only_when_it_is_a_target(tmp_path):
    """What `python -m stages.profile`'s arguments rely on, on a project shaped like this one: a second DVC file
    (its stages run from the root: wdir ../.., vars ../../params.yaml) with an empty foreach is accepted and left
    out by `dvc exp run` with no target; with the params set, its stages run when both files are the targets."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    bindir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "DVC_NO_ANALYTICS": "1",
           **{f"GIT_{who}_{what}": value for who in ("AUTHOR", "COMMITTER")
              for what, value in (("NAME", "test"), ("EMAIL", "test@example.org"))}}

    def sh(*cmd: str) -> str:
        proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout + proc.stderr

    (tmp_path / "params.yaml").write_text("n: 1\nextra:\n  items: {}\n")
    (tmp_path / "dvc.yaml").write_text(
        "stages:\n  base:\n    cmd: python -c \"open('base.txt', 'w').write('b')\"\n    params: [n]\n"
        "    outs:\n      - base.txt\n")
    (tmp_path / "experiments" / "extra").mkdir(parents=True)
    (tmp_path / "experiments" / "extra" / "dvc.yaml").write_text(
        "vars:\n  - ../../params.yaml\nstages:\n  more:\n    foreach: ${extra.items}\n    do:\n      wdir: ../..\n"
        "      cmd: python -c \"open('more-${key}.txt', 'w').write(open('base.txt').read() + '${item.x}')\"\n"
        "      deps:\n        - base.txt\n      params:\n        - extra.items.${key}\n"
        "      outs:\n        - more-${key}.txt\n")
    sh("git", "init", "-q")
    sh(str(bindir / "dvc"), "init", "-q")
    sh("git", "add", "-A")
    sh("git", "commit", "-q", "-m", "project")
    log = sh(str(bindir / "dvc"), "exp", "run")
    assert (tmp_path / "base.txt").is_file() and "more" not in log
    setting = ["-S", "++extra.items={c:{x:\"q\"}}"]
    log = sh(str(bindir / "dvc"), "exp", "run", *setting)  # no target: the root's dvc.yaml only
    assert not (tmp_path / "more-c.txt").exists() and "more@c" not in log
    log = sh(str(bindir / "dvc"), "exp", "run", *setting, "dvc.yaml", "experiments/extra/dvc.yaml")
    assert "Running stage 'experiments/extra/dvc.yaml:more@c'" in log
    assert (tmp_path / "more-c.txt").read_text() == "bq"  # run from the root, after the root's stage
    assert (tmp_path / "experiments" / "extra" / "dvc.lock").is_file()
