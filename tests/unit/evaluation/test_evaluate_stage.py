"""The evaluate stage end to end on tiny models: nine fine-tuned runs in, the metrics, the data-efficiency
series (with the practitioner baselines), the report with its figures and verdict, and the gate verdict out."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
import yaml

from stages.evaluate import main as evaluate_main
from stages.finetuning.core import INITS
from stages.finetune import main as finetune_main
from stages.tokenization.trainers import PARADIGMS
from tests.unit.finetuning.conftest import write_params

EVALUATE = {"curve": {"paradigms": ["bert"], "inits": ["pretrained", "random"], "sizes": [10, 30, 1000],
                      "seeds": [0, 1], "min_steps": 6, "workers": 2},
            "icl": {"inits": ["pretrained", "dapt"], "shots": [0, 1], "max_examples": 6, "separator": "\nSection:",
                    "seed": 0, "orderings": 2, "content_free": ["N/A", ""]},
            "baseline": {"enabled": True, "tfidf": {"features": ["word", "char"], "class_weights": ["none"]},
                         "fasttext": {"lrs": [0.5], "epochs": [10]}},
            "intrinsic": {"eval_blocks": 4, "micro_batch": 4},
            "gate": {"candidates": [], "min_macro_f1_margin": -1.0, "min_accuracy_margin": -1.0}}


@pytest.fixture(scope="module")
def workspace(models, tmp_path_factory):
    root = tmp_path_factory.mktemp("evaluate")
    params = write_params(root / "params.yaml", epochs=1)
    data = yaml.safe_load(params.read_text())
    data["evaluate"] = EVALUATE
    params.write_text(yaml.safe_dump(data))
    for p in PARADIGMS:
        for init in INITS:
            out = root / "finetune" / f"{p}-{init}"
            assert finetune_main(["--paradigm", p, "--init", init, "--params", str(params), "--task", str(models.task),
                                  "--model", str(models.models[p]), "--output", str(out),
                                  "--report", str(root / "gate.json"), "--no-progress",
                                  "--live", str(root / "live" / f"finetune-{p}-{init}")]) == 0
    return root, params


def args(models, root, params, finetuned=None):
    pretrained = models.models["bert"].parent
    return ["--params", str(params), "--task", str(models.task), "--finetuned", str(finetuned or root / "finetune"),
            "--pretrained", str(pretrained), "--dapt", str(pretrained),
            "--tokens", str(models.root / "data" / "tokens"), "--metrics", str(root / "out" / "evaluation.json"),
            "--plots", str(root / "out" / "plots"), "--report", str(root / "out" / "evaluation.md"),
            "--figures", str(root / "out" / "figures"), "--gate", str(root / "out" / "gate.json")]


def test_stage_writes_metrics_series_report_and_gate(models, workspace):
    root, params = workspace
    assert evaluate_main(args(models, root, params)) == 0
    out = root / "out"
    metrics = json.loads((out / "evaluation.json").read_text())
    assert sorted(metrics["finetune"]) == sorted(f"{p}-{i}" for p in PARADIGMS for i in INITS)
    assert 0 < metrics["majority"]["test_accuracy"] < 1

    # data efficiency: the sizes below the full sample, each over both seeds, then the finetune stage's seeds
    baselines = ("tfidf", "fasttext")
    for series in ("bert-pretrained", "bert-random", *baselines):
        rows = [line.split("\t") for line in (out / "plots" / f"{series}.tsv").read_text().splitlines()]
        assert rows[0][:2] == ["train_examples", "macro_f1"]
        full = metrics["finetune"]["bert-pretrained"]["train_examples"]
        assert [int(r[0]) for r in rows[1:]] == [10, 30, full]           # 1000 > the sample: skipped
        seeds = metrics["finetune"][series if series not in baselines else metrics["gate"]["selected"]]["seeds"]
        assert [int(r[-1]) for r in rows[1:]] == [2, 2, seeds]
        if series not in baselines:
            assert float(rows[-1][1]) == pytest.approx(metrics["finetune"][series]["test_macro_f1"], abs=1e-5)
        for r in rows[1:]:
            assert float(r[3]) <= float(r[1]) <= float(r[4])              # min <= mean <= max
    assert not (out / "plots" / "gpt-random.tsv").exists()
    assert set(metrics["baselines"]) == set(baselines)
    for name in baselines:
        assert set(metrics["baselines"][name]) == {"10", "30", str(full)}
        assert all(len(pt["settings"]) == pt["runs"] for pt in metrics["baselines"][name].values())
    assert metrics["baselines"]["tfidf"][str(full)]["test_macro_f1"] > 0.5
    assert metrics["baselines"]["tfidf"]["10"]["settings"][0]["features"] in ("word", "char")

    # every neural series against the best baseline on validation at each size; the nine at the full sample
    versus = metrics["versus_baselines"]
    for n, best in versus["best"].items():
        assert best["val_macro_f1"] == max(metrics["baselines"][b][n]["val_macro_f1"] for b in baselines)
    assert set(versus["series"]["bert-random"]) == {"10", "30", str(full)}
    assert all(str(full) in versus["series"][name] for name in metrics["finetune"]) and "gpt-random" in versus["series"]
    d = versus["series"]["bert-pretrained"][str(full)]
    best = versus["best"][str(full)]
    assert d["difference"] == pytest.approx(metrics["finetune"]["bert-pretrained"]["test_macro_f1"] - best["test_macro_f1"],
                                            abs=1e-4)

    # seeds and gains in the table, the cost of each paradigm from its training.json
    for name, row in metrics["finetune"].items():
        assert row["seeds"] >= 1 and row["test_macro_f1_std"] >= 0
    for p in PARADIGMS:
        g, cost = metrics["gains"][p], metrics["paradigms"][p]
        assert g["best_init"] in ("pretrained", "dapt") and {"difference", "pooled_std", "counts"} <= set(g["dapt"])
        assert cost["parameters"] > 0 and cost["flops"] == pytest.approx(cost["flops_per_token"] * cost["tokens"])
        assert cost["pretrain_eval_loss"] > 0 and not any("wall" in k or "second" in k for k in cost)

    # in-context learning for the GPT models asked for; intrinsic for every paradigm, stage and corpus
    assert set(metrics["icl"]) == {"gpt-pretrained", "gpt-dapt"}
    assert set(metrics["icl"]["gpt-pretrained"]) >= {"0", "1"}
    icl = metrics["icl"]["gpt-pretrained"]
    assert (icl["0"]["orderings"], icl["1"]["orderings"]) == (1, 2) and "macro_f1" in icl["1"]["calibrated"]
    for p in PARADIGMS:
        for stage in ("pretrain", "dapt"):
            assert set(metrics["intrinsic"][p][stage]) == {"general", "domain"}
    assert "eval_perplexity" in metrics["intrinsic"]["gpt"]["pretrain"]["domain"]

    # the gate: the best validation macro-F1 is selected, the verdict follows the (here permissive) margins
    gate = json.loads((out / "gate.json").read_text())
    best = max(metrics["finetune"], key=lambda n: (metrics["finetune"][n]["best_val_macro_f1"], n))
    assert gate["selected"] == best and gate["passed"] and metrics["gate"]["selected"] == best

    report = (out / "evaluation.md").read_text()
    for p in PARADIGMS:
        assert report.count(f"| {dict(bert='BERT', gpt='GPT', t5='T5')[p]} (") >= 3
    assert "| majority class |" in report and "Verdict: **passed**" in report
    assert "| baseline: TF-IDF + linear classifier |" in report and "| baseline: fastText |" in report
    assert "budget_flops" in report and "6N + 12" in report and "## Against the practitioner baselines" in report
    assert "Against the best baseline on the same" in report  # the shipped model against it, in the gate section
    verdict = report.split("## Verdict", 1)[1]
    assert "fine-tunes best" in verdict and verdict.count("DAPT ") >= 3 and "the best baseline on validation" in verdict
    assert "Pre-training beats the best baseline" in verdict or "Pre-training does not beat the best baseline" in verdict
    assert f"**{gate['selected']}**" in report and "chosen on the validation split" in report
    for name in ("finetune-loss.svg", "finetune-val-f1.svg", "data-efficiency.svg", "versus-baseline.svg"):
        assert f"(../out/figures/{name})" not in report and f"(figures/{name})" in report
        ET.fromstring((out / "figures" / name).read_text())              # well-formed SVG


def test_a_failing_gate_is_reported_not_raised(models, workspace):
    root, params = workspace
    data = yaml.safe_load(params.read_text())
    data["evaluate"] = {**EVALUATE, "curve": {**EVALUATE["curve"], "paradigms": []}, "icl": {**EVALUATE["icl"],
                        "inits": []}, "gate": {"candidates": ["gpt-random"], "min_macro_f1_margin": 2.0}}
    strict = root / "strict.yaml"
    strict.write_text(yaml.safe_dump(data))
    assert evaluate_main(args(models, root, strict)) == 0
    gate = json.loads((root / "out" / "gate.json").read_text())
    assert gate["selected"] == "gpt-random" and not gate["passed"]
    assert "Verdict: **FAILED**" in (root / "out" / "evaluation.md").read_text()


def test_missing_run_names_the_file(models, workspace, tmp_path, capsys):
    root, params = workspace
    assert evaluate_main(args(models, root, params, finetuned=tmp_path)) == 1
    assert f"{tmp_path / 'bert-pretrained' / 'finetune.json'}: missing" in capsys.readouterr().err


def test_wall_times_go_to_the_untracked_timings_file_only(models, workspace):
    from stages.common.live import LiveLog

    root, params = workspace
    with LiveLog(root / "live" / "dapt-gpt") as live:  # as the pretrain stage leaves it
        live.log(10, {"train/loss": 5.0, "train/tokens_per_second": 1234.5})
        live.summary({"tokens_per_second": 1234.5, "flops_per_second": 2.5e12, "mfu": None, "train_seconds": 75.0})
    timings = root / "out" / "timings.md"
    assert evaluate_main(args(models, root, params) + ["--timings", str(timings), "--live", str(root / "live")]) == 0
    text = timings.read_text()
    assert "| dapt-gpt | 1.2 min | 1,234 | 2.5 T | - |" in text
    for p in PARADIGMS:
        for init in INITS:  # one live folder per fine-tuning run: 2 rates of the grid are not asked here, 1 run each
            assert f"| finetune-{p}-{init} | 1 |" in text
    assert "| baselines, in-context learning, data-efficiency curve (2 at a time, one pool) |" in text
    assert "| data-efficiency curve (time summed over its jobs) |" in text
    assert "| baseline tfidf:" in text and "| baseline fasttext:" in text
    report = (root / "out" / "evaluation.md").read_text()
    assert "training time" not in report and "reports/timings.md" in report
    assert "second" not in (root / "out" / "evaluation.json").read_text()


def test_adaptation_runs_join_the_curve_the_gate_and_the_report(models, workspace, tmp_path):
    import shutil

    root, params = workspace
    finetuned = tmp_path / "finetune"
    shutil.copytree(root / "finetune", finetuned)
    data = yaml.safe_load(params.read_text())
    data["adapt"] = {"runs": {
        "bert-lora": {"paradigm": "bert", "method": "lora", "finetune": {"head": "pooled", "lora": {"r": 2}}},
        "bert-frozen": {"paradigm": "bert", "method": "frozen", "finetune": {"head": "pooled", "lr_grid": [0.03]}}}}
    data["evaluate"] = {**EVALUATE, "icl": {**EVALUATE["icl"], "inits": []}}
    adapted = tmp_path / "params.yaml"
    adapted.write_text(yaml.safe_dump(data))
    for name in data["adapt"]["runs"]:
        assert finetune_main(["--paradigm", "bert", "--variant", name, "--params", str(adapted), "--task",
                              str(models.task), "--choose-from", str(finetuned / "bert-pretrained"),
                              str(finetuned / "bert-dapt"), "--output", str(finetuned / name),
                              "--report", str(tmp_path / "gate.json"), "--no-progress"]) == 0
    assert evaluate_main(args(models, tmp_path, adapted, finetuned=finetuned)) == 0
    out = tmp_path / "out"
    metrics = json.loads((out / "evaluation.json").read_text())

    # each run's row: its method and init, fewer weights trained and fewer bytes stored than full fine-tuning
    rows = metrics["adapted"]
    assert set(rows) == {"bert-lora", "bert-frozen"}
    init = metrics["gains"]["bert"]["best_init"]
    assert {r["method"] for r in rows.values()} == {"lora", "frozen"} and {r["init"] for r in rows.values()} == {init}
    full_folder = finetuned / f"bert-{init}"
    full_bytes = sum(f.stat().st_size for f in full_folder.rglob("*") if f.is_file())
    assert rows["bert-frozen"]["trainable_parameters"] < rows["bert-lora"]["trainable_parameters"]
    assert all(r["stored_bytes"] < full_bytes for r in rows.values())

    # a curve series per method, the same label counts as full fine-tuning's
    full_n = metrics["finetune"]["bert-pretrained"]["train_examples"]
    for name in rows:
        tsv = [line.split("\t") for line in (out / "plots" / f"{name}.tsv").read_text().splitlines()]
        assert [int(r[0]) for r in tsv[1:]] == [10, 30, full_n]
        assert float(tsv[-1][1]) == pytest.approx(rows[name]["test_macro_f1"], abs=1e-5)

    # the gate chooses among every run on validation
    gate = json.loads((out / "gate.json").read_text())
    every = metrics["finetune"] | rows
    assert {"bert-lora", "bert-frozen"} <= set(gate["candidates"])
    assert gate["selected"] == max(every, key=lambda n: (every[n]["best_val_macro_f1"], n))

    # the report's table (methods, baselines) and a verdict per label count; metrics name the method to use
    report = (out / "evaluation.md").read_text()
    section = report.split("## Adaptation methods", 1)[1].split("\n## ", 1)[0]
    assert f"### BERT ({init})" in section
    for cells in (f"| full | bert-{init} |", "| lora | bert-lora |", "| frozen | bert-frozen |", "| baseline | tfidf |",
                  f"| {full_n} labels |"):
        assert cells in section
    for n in (10, 30, full_n):
        assert f"BERT at {n} labels: use **" in section
    assert set(metrics["adaptation"]["bert"]["use"]) == {"10", "30", str(full_n)}
    assert all(v in every for v in metrics["adaptation"]["bert"]["use"].values())


def test_published_runs_join_the_curve_the_gate_and_the_report(models, workspace, tmp_path):
    """A published base's full fine-tuning and its probe run: rows in the report's section, curve series from the
    folder each started from, lines against the best baseline, candidates of the gate."""
    import shutil

    root, params = workspace
    finetuned = tmp_path / "finetune"
    shutil.copytree(root / "finetune", finetuned)
    base = models.models["bert"]  # stands in for a published folder: the stages read only its model and tokenizer
    data = yaml.safe_load(params.read_text())
    data["published"] = {"bases": {"tiny": {"paradigm": "bert", "source": {"kind": "folder", "path": str(base)},
                                            "finetune": {"head": "pooled"}}},
                         "runs": {"tiny-probe": {"base": "tiny", "method": "probe", "init": "published"}}}
    data["evaluate"] = {**EVALUATE, "icl": {**EVALUATE["icl"], "inits": []}}
    published = tmp_path / "params.yaml"
    published.write_text(yaml.safe_dump(data))
    for init in ("published", "published-dapt"):
        assert finetune_main(["--paradigm", "bert", "--base", "tiny", "--init", init, "--params", str(published),
                              "--task", str(models.task), "--model", str(base), "--output",
                              str(finetuned / f"tiny-{init}"), "--report", str(tmp_path / "gate.json"),
                              "--no-progress"]) == 0
    assert finetune_main(["--published-run", "tiny-probe", "--params", str(published), "--task", str(models.task),
                          "--choose-from", str(finetuned / "tiny-published"), str(finetuned / "tiny-published-dapt"),
                          "--output", str(finetuned / "tiny-probe"), "--report", str(tmp_path / "gate.json"),
                          "--no-progress"]) == 0
    assert evaluate_main(args(models, tmp_path, published, finetuned=finetuned)) == 0
    out = tmp_path / "out"
    metrics = json.loads((out / "evaluation.json").read_text())
    rows = metrics["published"]
    assert set(rows) == {"tiny-published", "tiny-published-dapt", "tiny-probe"}
    assert rows["tiny-probe"]["method"] == "probe" and rows["tiny-published"]["method"] == "full"
    full_n = metrics["finetune"]["bert-pretrained"]["train_examples"]
    for name in rows:
        tsv = [line.split("\t") for line in (out / "plots" / f"{name}.tsv").read_text().splitlines()]
        assert [int(r[0]) for r in tsv[1:]] == [10, 30, full_n]
        assert float(tsv[-1][1]) == pytest.approx(rows[name]["test_macro_f1"], abs=1e-5)
        assert name in metrics["versus_baselines"]["series"]
    gate = json.loads((out / "gate.json").read_text())
    assert set(rows) <= set(gate["candidates"])
    report = (out / "evaluation.md").read_text()
    section = report.split("## Published checkpoints", 1)[1].split("\n## ", 1)[0]
    assert "| tiny-probe | tiny | bert | published | probe |" in section
