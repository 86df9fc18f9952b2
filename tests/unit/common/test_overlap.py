"""Every stage refuses an output that is, holds or lies inside one of its inputs, before touching anything."""

from __future__ import annotations

import importlib

import pytest

from stages.common.atomic import refuse_overlap


def test_refuse_overlap_names_both_options_and_how(tmp_path):
    data = tmp_path / "data"
    with pytest.raises(ValueError, match=r"--output .*: is the input --model"):
        refuse_overlap({"output": data}, {"model": data})
    with pytest.raises(ValueError, match="contains the input --input"):
        refuse_overlap({"output": tmp_path}, {"input": data / "docs.jsonl"})
    with pytest.raises(ValueError, match="lies inside the input --tokens"):
        refuse_overlap({"output": data / "tokens" / "out"}, {"tokens": data / "tokens"})
    with pytest.raises(ValueError, match="is the input"):  # the same place by another spelling
        refuse_overlap({"output": tmp_path / "a" / ".." / "data"}, {"model": data})
    refuse_overlap({"output": data / "cleaned", "metrics": None}, {"input": data / "docs.jsonl", "task": None})


CASES = {
    "tokenizer": lambda d: ["--paradigm", "bert", "--train", str(d / "c" / "documents.parquet"), "--output", str(d / "c")],
    "tokens": lambda d: ["--paradigm", "gpt", "--tokenizer", str(d / "tok"), "--corpus", f"general={d / 'c.parquet'}",
                         "--output", str(d / "tok" / "blocks")],
    "pretrain": lambda d: ["--paradigm", "gpt", "--tokens", str(d / "tokens"), "--tokenizer", str(d / "tok"),
                           "--init", str(d / "model"), "--output", str(d / "model")],
    "finetune": lambda d: ["--paradigm", "bert", "--init", "pretrained", "--task", str(d / "task.parquet"),
                           "--model", str(d / "model"), "--output", str(d / "model")],
    "evaluate": lambda d: ["--task", str(d / "task.parquet"), "--finetuned", str(d / "ft"), "--pretrained",
                           str(d / "pre"), "--dapt", str(d / "dapt"), "--tokens", str(d / "tokens"), "--metrics",
                           str(d / "m.json"), "--plots", str(d / "plots"), "--report", str(d / "ft" / "r.md"),
                           "--figures", str(d / "fig"), "--gate", str(d / "gate.json")],
    "package": lambda d: ["--finetuned", str(d / "ft"), "--metrics", str(d / "ft" / "package.json")],
    "ingest": lambda d: ["--corpus", "task", "--cache-dir", str(d / "cache"), "--output", str(d),
                         "--report", str(d / "r.json"), "--metrics", str(d / "m.json")],
}


@pytest.mark.parametrize("stage", sorted(CASES))
def test_each_stage_cli_refuses_an_overlapping_output_and_leaves_the_input(tmp_path, capsys, stage):
    for folder in ("c", "tok", "model", "ft", "cache"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "keep.txt").write_text("mine")
    main = importlib.import_module(f"stages.{stage}").main
    assert main(CASES[stage](tmp_path)) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: --") and " the input --" in err
    for folder in ("c", "tok", "model", "ft", "cache"):
        assert (tmp_path / folder / "keep.txt").read_text() == "mine"


def test_evaluate_refuses_figures_over_the_live_logs_it_reads(tmp_path, capsys):
    from stages.evaluate import main

    live = tmp_path / "live"
    live.mkdir()
    (live / "keep.txt").write_text("mine")
    args = CASES["evaluate"](tmp_path) + ["--live", str(live)]
    args[args.index("--figures") + 1] = str(live)
    args[args.index("--report") + 1] = str(tmp_path / "r.md")  # the case above overlaps here on purpose
    assert main(args) == 1
    assert "is the input --live" in capsys.readouterr().err
    assert (live / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize(("path", "output"), [("corpus/docs.jsonl", "corpus"), ("corpus/*.jsonl", "corpus"),
                                              ("corpus", "corpus"), ("corpus/**/*.jsonl", "corpus/docs.jsonl")])
def test_ingest_refuses_an_output_over_a_local_source_named_in_params(tmp_path, capsys, monkeypatch, path, output):
    # The source's path comes from params.yaml, not from an option: it is an input all the same, and an
    # output folder over it would be replaced whole, deleting the user's files.
    import yaml

    from stages.ingest import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "docs.jsonl").write_text('{"text": "A page of text."}\n')
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"ingest": {"mine": {"sources": [
        {"kind": "files", "path": path}]}}}))
    assert main(["--corpus", "mine", "--output", output, "--report", "r.json", "--metrics", "m.json"]) == 1
    err = capsys.readouterr().err
    assert "the input ingest.mine.sources[0].path corpus" in err
    assert (tmp_path / "corpus" / "docs.jsonl").read_text() == '{"text": "A page of text."}\n'
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "m.json").exists()


def test_ingest_lets_an_output_sit_beside_what_a_glob_reads(tmp_path, monkeypatch):
    import yaml

    from stages.ingest import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs.jsonl").write_text('{"text": "A page of text."}\n')
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"ingest": {"mine": {
        "sources": [{"kind": "files", "path": "*.jsonl"}], "gate": {"min_rows": 1}}}}))
    out = ["--corpus", "mine", "--output", "data/ingested/mine", "--report", "r.json", "--metrics", "m.json"]
    assert main(out) == 0 and (tmp_path / "data" / "ingested" / "mine" / "documents.parquet").is_file()
    assert (tmp_path / "docs.jsonl").is_file()
