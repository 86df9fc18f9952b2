"""Adaptation runs (params ``adapt.runs``): their config over ``finetune.<paradigm>``, refusals naming the key, the
pre-trained init they start from, and the finetune stage's ``--variant`` writing a run beside the full ones."""

from __future__ import annotations

import json

import pytest
import yaml

from stages.config import ConfigError
from stages.finetune import main as finetune_main
from stages.finetuning.runs import choose_init, load_adapt_config, run_config
from tests.unit.finetuning.conftest import write_params


def params_with(tmp_path, runs, **finetune_overrides):
    path = write_params(tmp_path / "params.yaml", **finetune_overrides)
    data = yaml.safe_load(path.read_text())
    data["adapt"] = {"runs": runs}
    data["finetune"]["bert"] = {"embedding_rms": 0.02}  # the paradigm's own setting, for the override below
    path.write_text(yaml.safe_dump(data))
    return path


def test_run_config_merges_the_paradigm_section_the_run_and_its_method(tmp_path):
    path = params_with(tmp_path, {"bert-lora": {"paradigm": "bert", "method": "lora", "finetune": {
        "head": "pooled", "embedding_rms": 0, "lr_grid": [0.01, 0.003], "lora": {"r": 4}}}})
    run, cfg = run_config(path, "bert-lora")
    assert (run.paradigm, run.method, run.init) == ("bert", "lora", "best")
    assert cfg.method == "lora" and cfg.lr_grid == (0.01, 0.003) and cfg.lora.r == 4
    assert cfg.embedding_rms == 0 and cfg.max_len == 24  # the run's override, then finetune.defaults


@pytest.mark.parametrize("runs, key", [
    ({"bert-x": {"paradigm": "bert", "method": "prompt"}}, "adapt.runs.bert-x.method"),
    ({"bert-x": {"paradigm": "xlnet", "method": "lora"}}, "adapt.runs.bert-x.paradigm"),
    ({"bert-x": {"paradigm": "bert", "method": "lora", "init": "random"}}, "adapt.runs.bert-x.init"),
    ({"bert-x": {"paradigm": "bert", "method": "lora", "finetune": {"method": "full"}}}, "finetune.method"),
    ({"bert-dapt": {"paradigm": "bert", "method": "lora"}}, "runs.bert-dapt"),
    ({"bert x": {"paradigm": "bert", "method": "lora"}}, "runs.bert x"),
    ({"bert-x": {"paradigm": "bert", "method": "lora", "rank": 4}}, "rank"),
])
def test_bad_runs_are_refused_naming_the_key(tmp_path, runs, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_adapt_config(params_with(tmp_path, runs))


def test_a_setting_the_method_cannot_take_names_the_run(tmp_path):
    path = params_with(tmp_path, {"bert-frozen": {"paradigm": "bert", "method": "frozen",
                                                  "finetune": {"head": "pooled"}}})
    with pytest.raises(ConfigError, match=r"adapt\.runs\.bert-frozen\.finetune.*embedding_rms"):
        run_config(path, "bert-frozen")  # finetune.bert's embedding_rms is not for a frozen base
    with pytest.raises(ConfigError, match=r"adapt\.runs\.nope: no such run"):
        run_config(path, "nope")


def test_best_init_is_chosen_on_validation_and_a_fixed_one_is_kept(tmp_path):
    path = params_with(tmp_path, {"a": {"paradigm": "bert", "method": "lora"},
                                  "b": {"paradigm": "bert", "method": "lora", "init": "pretrained"}})
    runs = load_adapt_config(path).runs
    records = {"pretrained": {"metrics": {"best_val_macro_f1": 0.7}},
               "dapt": {"metrics": {"best_val_macro_f1": 0.6}}}
    assert choose_init(runs["a"], records) == "pretrained"
    records["dapt"]["metrics"]["best_val_macro_f1"] = 0.8
    assert choose_init(runs["a"], records) == "dapt" and choose_init(runs["b"], records) == "pretrained"
    records["dapt"]["metrics"]["best_val_macro_f1"] = 0.7  # a tie: the later name, as the report's gains
    assert choose_init(runs["a"], records) == "pretrained"
    with pytest.raises(FileNotFoundError, match="init pretrained"):
        choose_init(runs["b"], {"dapt": records["dapt"]})


def test_the_stage_runs_a_variant_from_the_best_full_run_and_records_it(models, tmp_path):
    path = params_with(tmp_path, {"bert-lora": {"paradigm": "bert", "method": "lora", "finetune": {
        "head": "pooled", "embedding_rms": 0, "lora": {"r": 2}}}}, epochs=1)
    full = {}
    for init in ("pretrained", "dapt"):  # two full runs from the same body; their records choose
        full[init] = tmp_path / "finetune" / f"bert-{init}"
        assert finetune_main(["--paradigm", "bert", "--init", init, "--params", str(path), "--task",
                              str(models.task), "--model", str(models.models["bert"]), "--output", str(full[init]),
                              "--report", str(tmp_path / "gate.json"), "--no-progress"]) == 0
    vals = {i: json.loads((full[i] / "finetune.json").read_text())["metrics"]["best_val_macro_f1"] for i in full}
    out = tmp_path / "finetune" / "bert-lora"
    assert finetune_main(["--paradigm", "bert", "--variant", "bert-lora", "--params", str(path), "--task",
                          str(models.task), "--choose-from", str(full["pretrained"]), str(full["dapt"]),
                          "--output", str(out), "--report", str(tmp_path / "gate.json"), "--no-progress"]) == 0
    record = json.loads((out / "finetune.json").read_text())
    expected = max(vals, key=lambda i: (vals[i], f"bert-{i}"))
    assert record["variant"] == "bert-lora" and record["init"] == expected
    assert record["model"] == str(models.models["bert"]) and record["config"]["method"] == "lora"
    assert json.loads((out / "adaptation.json").read_text())["method"] == "lora"
    assert (out / "adapter_model.safetensors").is_file()


def test_the_stage_refuses_mixed_arguments(models, tmp_path, capsys):
    path = params_with(tmp_path, {"bert-lora": {"paradigm": "bert", "method": "lora",
                                                "finetune": {"head": "pooled", "embedding_rms": 0}}})
    common = ["--params", str(path), "--task", str(models.task), "--output", str(tmp_path / "out"), "--no-progress"]
    full = str(tmp_path / "bert-dapt")
    assert finetune_main(["--paradigm", "bert", "--variant", "bert-lora", "--init", "dapt",
                          "--choose-from", full, *common]) == 1
    assert "--variant takes --choose-from" in capsys.readouterr().err
    assert finetune_main(["--paradigm", "gpt", "--variant", "bert-lora", "--choose-from", full, *common]) == 1
    assert "adapt.runs.bert-lora.paradigm is bert, not --paradigm gpt" in capsys.readouterr().err
    assert finetune_main(["--paradigm", "bert", *common]) == 1
    assert "--init and --model are required" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
