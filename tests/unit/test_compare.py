"""The objective comparison's configuration, equal-FLOPs budget, verdict and report (stages.compare, and the
pre-training stage's --variant / --match-flops); the stages run end to end in tests/integration/test_objective_compare.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from stages.evaluation.config import CompareConfig
from stages.evaluation.compare import markdown, metrics_json
from stages.evaluation.compare import verdict
from stages.config import ConfigError, build, load_params
from stages.training.config import compare_entries, load_config, match_flops
from stages.profile import apply, load_profile, run_args, set_args

ROOT = Path(__file__).resolve().parents[2]


def params_file(tmp_path: Path, objectives: dict) -> Path:
    params = load_params(ROOT / "params.yaml")
    params["compare"]["objectives"] = objectives
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


def test_a_variant_trains_its_objective_with_its_settings_over_the_section(tmp_path):
    path = params_file(tmp_path, {"bert-electra": {"paradigm": "bert", "objective": "electra",
                                                   "train": {"generator_size": 0.25}}})
    base = load_config(path, "dapt", "bert")
    cfg = load_config(path, "dapt", "bert", "bert-electra")
    assert (cfg.train.objective, cfg.train.generator_size) == ("electra", 0.25)
    assert base.train.objective != "electra"
    # everything else is the section's: the same budget, rate and batch
    for key in ("budget_tokens", "lr", "micro_batch", "mlm_select", "seed"):
        assert getattr(cfg.train, key) == getattr(base.train, key), key


@pytest.mark.parametrize("entries, message", [
    ({"bert-x": {"paradigm": "bert", "objective": "permuted"}}, "compare.objectives.bert-x.objective"),
    ({"bert-x": {"paradigm": "bart", "objective": "bart"}}, "compare.objectives.bert-x.paradigm"),
    ({"bert-x": {"paradigm": "bert"}}, "missing objective"),
    ({"bert-x": {"paradigm": "bert", "objective": "nsp", "lr": 1}}, "unknown key(s) lr"),
    ({"bert x": {"paradigm": "bert", "objective": "nsp"}}, "letters, digits"),
    ({"bert-x": {"paradigm": "bert", "objective": "nsp", "train": 3}}, "compare.objectives.bert-x.train"),
    ([{"paradigm": "bert", "objective": "nsp"}], "expected a mapping of names"),
])
def test_bad_entries_are_refused_naming_the_key(entries, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        compare_entries(entries)


def test_a_variant_of_another_paradigm_or_a_missing_one_is_refused(tmp_path):
    path = params_file(tmp_path, {"t5-bart": {"paradigm": "t5", "objective": "bart"}})
    with pytest.raises(ConfigError, match="not --paradigm gpt"):
        load_config(path, "pretrain", "gpt", "t5-bart")
    with pytest.raises(ConfigError, match="compare.objectives.t5-nope"):
        load_config(path, "pretrain", "t5", "t5-nope")
    bad = params_file(tmp_path, {"t5-bart": {"paradigm": "t5", "objective": "bart", "train": {"lrr": 1}}})
    with pytest.raises(ConfigError, match="compare.objectives.t5-bart.train.lrr"):
        load_config(bad, "pretrain", "t5", "t5-bart")


def test_match_flops_sets_the_reference_runs_flops(tmp_path):
    ref = tmp_path / "ref"
    ref.mkdir()
    (ref / "config.json").write_text("{}")
    (ref / "training.json").write_text(json.dumps({"metrics": {"tokens": 801_000, "flops_per_token": 5.53e6}}))
    path = params_file(tmp_path, {})
    cfg = match_flops(load_config(path, "pretrain", "bert"), ref)
    assert cfg.train.budget_flops == pytest.approx(801_000 * 5.53e6)
    (ref / "training.json").write_text(json.dumps({"metrics": {"tokens": 10}}))
    with pytest.raises(ValueError, match="flops_per_token"):
        match_flops(cfg, ref)


def test_the_compare_profile_is_valid_and_sets_the_mapping_with_add_or_override():
    profile = load_profile("compare", ROOT)
    params = apply(load_params(ROOT / "params.yaml"), profile)
    cfg = build(CompareConfig, params["compare"], "compare")
    entries = cfg.entries()
    assert {e["paradigm"] for e in entries} == {"bert", "gpt", "t5"}
    assert cfg.reports == ("objectives",)
    args = set_args(profile)
    objectives = next(a for a in args if "compare.objectives" in a)
    assert objectives.startswith("++compare.objectives={bert-electra:{paradigm:\"bert\",objective:\"electra\"")
    assert "compare.reports=[\"objectives\"]" in args
    # the comparison's stages are in their own DVC file: `make run PROFILE=compare` names both files as targets
    assert run_args(profile, load_params(ROOT / "params.yaml"))[-2:] == ["dvc.yaml", "experiments/compare/dvc.yaml"]


def test_the_report_needs_objectives():
    with pytest.raises(ConfigError, match="nothing to compare"):
        build(CompareConfig, {"objectives": {}, "reports": ["objectives"]}, "compare")
    with pytest.raises(ConfigError, match="the only report"):
        build(CompareConfig, {"objectives": {"t5-bart": {"paradigm": "t5", "objective": "bart"}},
                              "reports": ["other"]}, "compare")


def point(n: int, test: float, std: float, val: float, runs: int = 3) -> dict:
    return {"train_examples": n, "macro_f1": {"mean": test, "std": std, "runs": runs},
            "val_macro_f1": {"mean": val, "std": 0.01, "runs": runs}}


def rows() -> dict:
    def row(objective, init, own, pts, tokens=4.8e6, fpt=5.5e6):
        return {"paradigm": "bert", "objective": objective, "init": init, "own": own,
                "tokens": None if init == "random" else tokens, "flops_per_token": None if init == "random" else fpt,
                "flops": None if init == "random" else tokens * fpt, "pretrain_eval_loss": 5.7,
                "dapt_eval_loss": 4.3, "lr": 1e-3, "points": {str(p["train_examples"]): p for p in pts}}
    return {
        "bert-masked_lm": row("masked_lm", "dapt", True, [point(300, 0.47, 0.03, 0.48), point(9274, 0.78, 0.01, 0.82)]),
        # best on validation at 300 labels, but not on test: the verdict follows validation, reports test
        "bert-sop": row("sop", "dapt", False, [point(300, 0.46, 0.02, 0.50), point(9274, 0.70, 0.01, 0.70)]),
        "bert-random": row("none", "random", False, [point(300, 0.40, 0.01, 0.40), point(9274, 0.76, 0.02, 0.80)]),
    }


def test_the_verdict_chooses_on_validation_and_judges_differences_by_the_seed_noise():
    v = {(x["train_examples"]): x for x in verdict(rows())}
    at300, full = v[300], v[9274]
    assert at300["best"] == "bert-sop" and at300["test_macro_f1"] == 0.46
    assert at300["vs_own"]["other"] == "bert-masked_lm"
    assert at300["vs_own"]["difference"] == pytest.approx(-0.01)
    assert not at300["vs_own"]["resolved"]  # 0.01 against a pooled std of about 0.026
    assert at300["vs_random"]["difference"] == pytest.approx(0.06) and at300["vs_random"]["resolved"]
    assert full["best"] == "bert-masked_lm" and "vs_own" not in full
    assert full["vs_random"]["difference"] == pytest.approx(0.02) and not full["vs_random"]["resolved"]


def test_one_seed_never_resolves_a_difference():
    r = rows()
    for name in r:
        r[name]["points"] = {"300": point(300, r[name]["points"]["300"]["macro_f1"]["mean"], 0.0,
                                          r[name]["points"]["300"]["val_macro_f1"]["mean"], runs=1)}
    (v,) = verdict(r)
    assert v["vs_random"]["difference"] == pytest.approx(0.06) and not v["vs_random"]["resolved"]
    assert "+0.060 against random init (bert-random; one seed: no spread to judge it by)" in markdown(
        {"rows": r, "verdict": [v]})


def test_the_report_states_the_numbers_it_was_given():
    result = {"rows": rows(), "verdict": verdict(rows())}
    md = markdown(result)
    assert "| bert-sop | sop | 4.8 M | 5.5 M | 26.4 T |" in md
    assert "masked_lm (the paradigm's own)" in md
    assert "0.460 ± 0.020 (0.500)" in md
    assert "- BERT, 300 labels: **bert-sop** (0.460 ± 0.020): -0.010 against the paradigm's own objective" in md
    assert "within 2x: not resolved" in md
    assert "+0.060 against random init (bert-random; pooled seed std 0.016, resolved)" in md
    m = metrics_json(result)
    assert m["rows"]["bert-sop"]["test_macro_f1"] == {"300": 0.46, "9274": 0.70}


def test_a_profiles_objectives_add_to_those_in_params_as_dvc_exp_run_merges_them(tmp_path):
    from stages.profile import set_value

    params = load_params(params_file(tmp_path, {"bert-mine": {"paradigm": "bert", "objective": "nsp"}}))
    merged = apply(params, load_profile("compare", ROOT))
    assert "bert-mine" in merged["compare"]["objectives"] and "t5-bart" in merged["compare"]["objectives"]
    node = {"a": {"x": {"p": 1, "q": 2}}, "b": [1]}
    set_value(node, "a", {"x": {"q": 3}, "y": {}})
    set_value(node, "b", [2])
    assert node == {"a": {"x": {"p": 1, "q": 3}, "y": {}}, "b": [2]}
