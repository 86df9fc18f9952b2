"""The token-dataset stage end to end on a tiny corpus: layout per paradigm, split, gate, atomic output."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from stages.tokenizer import main as train_main
from stages.tokens import main
from tests.unit.tokenization.conftest import write_docs


def tokenizer(tmp_path, params, corpora, paradigm):
    out = tmp_path / "tok" / paradigm
    assert train_main(["--paradigm", paradigm, "--params", str(params), "--train", str(corpora["general"]),
                       "--output", str(out)]) == 0
    return out


def run(tmp_path, params, corpora, paradigm, tok_dir):
    out = tmp_path / "tokens" / paradigm
    args = ["--paradigm", paradigm, "--params", str(params), "--tokenizer", str(tok_dir), "--output", str(out),
            "--report", str(tmp_path / f"gate-{paradigm}.json"), "--metrics", str(tmp_path / f"m-{paradigm}.json")]
    for name, path in corpora.items():
        args += ["--corpus", f"{name}={path}"]
    return main(args), out


@pytest.mark.parametrize("paradigm", ["bert", "gpt", "t5"])
def test_blocks_per_paradigm(tmp_path, params, corpora, paradigm):
    from transformers import AutoTokenizer

    tok_dir = tokenizer(tmp_path, params, corpora, paradigm)
    rc, out = run(tmp_path, params, corpora, paradigm, tok_dir)
    assert rc == 0
    manifest = json.loads((out / "manifest.json").read_text())
    layout = manifest["layout"]
    width = 32
    if paradigm == "t5":
        width = 34  # seq_len 32 at density 0.15, mean span 3: 34 raw tokens -> 32 inputs, 8 targets
        assert (layout["block_len"], layout["targets_len"]) == (34, 8)
    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    for corpus in ("general", "domain"):
        counts = manifest["corpora"][corpus]
        assert counts["train"]["documents"] + counts["heldout"]["documents"] == (60 if corpus == "general" else 30)
        for split in ("train", "heldout"):
            blocks = np.load(out / corpus / f"{split}.npy", mmap_mode="r")
            assert isinstance(blocks, np.memmap) and blocks.shape == (counts[split]["blocks"], width)
            assert blocks.dtype == np.uint16 and int(blocks.max()) < len(tok)
    train = np.load(out / "general" / "train.npy")
    if paradigm == "bert":
        assert (train[:, 0] == tok.cls_token_id).all()
        text = tok.decode(train[0], skip_special_tokens=True)
        assert text.startswith("the ") and text.endswith(".")  # whole sentences
    elif paradigm == "gpt":
        stream = train.reshape(-1)
        assert (stream == tok.eos_token_id).sum() >= 1  # documents joined by <|endoftext|>
        first_doc = tok.decode(stream[: int(np.argmax(stream == tok.eos_token_id))])
        assert first_doc.startswith("The ")
    else:
        assert (train == tok.eos_token_id).any() and not (train >= len(tok) - 100).any()
    gate = json.loads((tmp_path / f"gate-{paradigm}.json").read_text())
    assert gate["success"] is True
    metrics = json.loads((tmp_path / f"m-{paradigm}.json").read_text())
    assert metrics["corpora"]["general"]["train"]["blocks"] == len(train)


def test_literal_special_tokens_in_text_stay_text(tmp_path, params, corpora):
    tok_dir = tokenizer(tmp_path, params, corpora, "bert")
    data = yaml.safe_load(params.read_text())
    data["tokens"]["defaults"]["gate"]["max_unk_fraction"] = 1.0  # "[" and "]" never occur in the training text
    params.write_text(yaml.safe_dump(data))
    corpora = dict(corpora, general=write_docs(tmp_path / "g2.parquet", [
        f"The old farmer said [MASK] and [CLS] aloud near the station on day {i}. It rained." for i in range(200)]))
    rc, out = run(tmp_path, params, corpora, "bert", tok_dir)
    assert rc == 0
    blocks = np.load(out / "general" / "train.npy")
    assert not (blocks == 4).any()                  # [MASK] never comes from text
    assert not (blocks[:, 1:] == 2).any()           # [CLS] only at position 0


def test_failed_gate_keeps_previous_output(tmp_path, params, corpora, capsys):
    tok_dir = tokenizer(tmp_path, params, corpora, "gpt")
    rc, out = run(tmp_path, params, corpora, "gpt", tok_dir)
    assert rc == 0
    before = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    data = yaml.safe_load(params.read_text())
    data["tokens"]["defaults"]["gate"]["min_train_blocks"] = 10**6
    params.write_text(yaml.safe_dump(data))
    rc, _ = run(tmp_path, params, corpora, "gpt", tok_dir)
    assert rc == 1
    err = capsys.readouterr().err
    assert "general_train.ExpectTableRowCountToBeBetween" in err
    assert {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    report = json.loads((tmp_path / "gate-gpt.json").read_text())
    assert report["success"] is False


def test_wrong_tokenizer_or_missing_corpus_is_a_clear_error(tmp_path, params, corpora, capsys):
    tok_dir = tokenizer(tmp_path, params, corpora, "gpt")
    rc, out = run(tmp_path, params, corpora, "bert", tok_dir)   # a GPT tokenizer for BERT blocks
    err = capsys.readouterr().err
    assert rc == 1 and "missing; is this a bert tokenizer?" in err and not out.exists()
    rc, out = run(tmp_path, params, {"general": tmp_path / "none.parquet"}, "gpt", tok_dir)
    assert rc == 1 and "none.parquet" in capsys.readouterr().err and not out.exists()
