"""The tokenizer stage: each paradigm's tokenizer loads with stock AutoTokenizer, is reproducible, and is
measured on held-out text."""

from __future__ import annotations

import json

import pytest
import yaml

from stages.config import ConfigError, build
from stages.tokenization.trainers import TokenizerConfig, train
from stages.tokenizer import main
from stages.tokenization.tokenizer import measure
from tests.helpers import english_page


def run(tmp_path, params, corpora, paradigm):
    out = tmp_path / "tok" / paradigm
    metrics = tmp_path / f"{paradigm}.json"
    rc = main(["--paradigm", paradigm, "--params", str(params), "--train", str(corpora["general"]),
               "--eval", f"general={corpora['general']}", "--eval", f"domain={corpora['domain']}",
               "--output", str(out), "--metrics", str(metrics)])
    return rc, out, metrics


@pytest.mark.parametrize("paradigm", ["bert", "gpt", "t5"])
def test_saved_tokenizer_loads_with_autotokenizer(tmp_path, params, corpora, paradigm):
    from transformers import AutoTokenizer

    rc, out, metrics = run(tmp_path, params, corpora, paradigm)
    assert rc == 0
    tok = AutoTokenizer.from_pretrained(str(out))
    assert tok.is_fast and tok.model_max_length == 32
    ids = tok("The careful farmer visited the river.")["input_ids"]
    if paradigm == "bert":
        assert (tok.pad_token_id, tok.unk_token_id, tok.cls_token_id, tok.sep_token_id, tok.mask_token_id) == (0, 1, 2, 3, 4)
        assert ids[0] == 2 and ids[-1] == 3
        assert tok.decode(ids, skip_special_tokens=True) == "the careful farmer visited the river."
    elif paradigm == "gpt":
        assert tok.eos_token_id == 0 and tok.unk_token_id is None
        assert tok.decode(ids) == "The careful farmer visited the river."
        assert tok.decode(tok("naïve café ☃")["input_ids"]) == "naïve café ☃"  # bytes: nothing is unknown
    else:
        assert (tok.pad_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2)
        assert ids[-1] == 1
        assert tok.convert_tokens_to_ids("<extra_id_0>") == len(tok) - 1 and len(tok) <= 300
        assert tok.convert_tokens_to_ids("<extra_id_99>") == len(tok) - 100
    m = json.loads(metrics.read_text())
    assert m["vocab_size"] == len(tok)
    for corpus in ("general", "domain"):
        h = m["heldout"][corpus]
        assert h["docs"] > 0 and h["fertility"] >= 1.0 and 0 < h["vocab_used_fraction"] <= 1
    assert m["train"]["documents"] + m["heldout"]["general"]["docs"] == 60
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["train"]["documents"] == m["train"]["documents"]
    assert [len(p["sha256"]) for p in prov["train"]["paths"]] == [64]


@pytest.mark.parametrize("kind", ["wordpiece", "byte_bpe", "unigram"])
def test_training_is_reproducible(kind):
    # Synthetic text is full of equally frequent pairs and characters: the ties that hash order decides.
    texts = [english_page(i, sentences=8) for i in range(40)]
    cfg = TokenizerConfig(kind=kind, vocab_size=400)
    runs = [train(texts, cfg) for _ in range(5)]
    assert all(r.to_str() == runs[0].to_str() for r in runs)  # the saved file byte for byte (DVC's hash)


def test_unknown_rate_counts_unseen_characters():
    cfg = TokenizerConfig(kind="wordpiece", vocab_size=300)
    tok = train([english_page(i) for i in range(30)], cfg)
    m = measure(tok, ["the river Ωmega ж"], unk_token="[UNK]")
    assert m["tokens"] == 4 and m["unknown_rate"] == 0.5  # "Ωmega" and "ж" are whole unknown words
    assert m["fertility"] == 1.0


def test_bad_params_name_the_key(tmp_path, params, corpora, capsys):
    data = yaml.safe_load(params.read_text())
    data["tokenizer"]["t5"]["vocab_size"] = 150  # below 100 sentinels + 3 specials + 100
    params.write_text(yaml.safe_dump(data))
    rc, out, _ = run(tmp_path, params, corpora, "t5")
    assert rc == 1 and not out.exists()
    assert "tokenizer.t5.vocab_size" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="tokenizer.bert.kind"):
        build(TokenizerConfig, {"kind": "bpe", "vocab_size": 300}, "tokenizer.bert")


def test_missing_input_is_a_clear_error(tmp_path, params, corpora, capsys):
    corpora = dict(corpora, general=tmp_path / "nope.parquet")
    rc, out, _ = run(tmp_path, params, corpora, "gpt")
    assert rc == 1 and "nope.parquet" in capsys.readouterr().err and not out.exists()
