"""Profiles are small diffs over params.yaml, validated before any run."""

from __future__ import annotations

import pytest

from stages.config import ConfigError, load_params
from stages.profile import apply, load_profile, main, set_args, validate


def test_gpu_profile_is_a_valid_diff_over_params():
    profile = load_profile("gpu")
    params = load_params("params.yaml")
    merged = apply(params, profile)
    validate(merged)
    assert merged["clean"]["defaults"]["workers"] == 0
    assert params["clean"]["defaults"]["workers"] == 2  # the base is untouched
    assert set_args({"a.b": 0, "c": True, "d": "x"}) == ["-S", "a.b=0", "-S", "c=true", "-S", "d=x"]


def test_unknown_keys_and_invalid_values_are_named():
    params = load_params("params.yaml")
    with pytest.raises(ConfigError, match="clean.defaults.wrokers: no such key"):
        apply(params, {"clean.defaults.wrokers": 0})
    with pytest.raises(ConfigError, match="workers"):
        validate(apply(params, {"clean.defaults.workers": -1}))
    with pytest.raises(ConfigError, match=r"pretrain\.bert\.model\.heads: d_model must be a multiple"):
        validate(apply(params, {"pretrain.defaults.model.heads": 3}))  # 128 is not a multiple of 3
    with pytest.raises(ConfigError, match="no such profile"):
        load_profile("tpu")


def test_cli_prints_dvc_set_arguments(capsys):
    assert main(["gpu"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("-S clean.defaults.workers=0 -S tokens.defaults.seq_len=512")
    assert "-S pretrain.defaults.model.d_model=512" in out


def test_tiny_profile_keeps_every_paradigm_small(tmp_path):
    """A paradigm's own value in params.yaml wins over `defaults`: a profile that shrinks only the defaults
    leaves that paradigm at full size (the tiny run once spent minutes on GPT's 3 M-token DAPT)."""
    import yaml

    from stages.finetune import load_config as finetune_config
    from stages.pretrain import load_config as pretrain_config

    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(apply(load_params("params.yaml"), load_profile("tiny"))))
    for paradigm in ("bert", "gpt", "t5"):
        for stage in ("pretrain", "dapt"):
            train = pretrain_config(path, stage, paradigm).train
            assert train.budget_tokens <= 40_000, (stage, paradigm, train.budget_tokens)
            assert not train.budget_flops, (stage, paradigm)
        ft = finetune_config(path, paradigm)
        assert 0 < ft.max_train_examples <= 300 and ft.epochs == 1 and tuple(ft.seeds) == (0,) and not ft.lr_grid, paradigm
