"""A tiny corpus and params made in code for the tokenizer and token-dataset stages."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from stages.common.documents import doc_id
from tests.helpers import english_page

PARAMS = {
    "split": {"heldout_fraction": 0.2, "salt": ""},
    "tokenizer": {
        "bert": {"kind": "wordpiece", "vocab_size": 300, "model_max_length": 32},
        "gpt": {"kind": "byte_bpe", "vocab_size": 400, "model_max_length": 32},
        "t5": {"kind": "unigram", "vocab_size": 300, "sentinels": 100, "model_max_length": 32},
    },
    "tokens": {
        "defaults": {"seq_len": 32, "batch_docs": 7,
                     "gate": {"min_train_blocks": 5, "min_heldout_blocks": 1, "max_unk_fraction": 0.01,
                              "max_pad_fraction": 0.5, "corruption_sample": 16}},
        "bert": {}, "gpt": {}, "t5": {"noise_density": 0.15, "mean_span": 3.0},
    },
}


def write_docs(path, texts):
    table = pa.table({"id": [doc_id(t) for t in texts], "text": texts, "source": ["test"] * len(texts),
                      "url": pa.array([None] * len(texts), pa.string()), "meta": ["{}"] * len(texts)})
    pq.write_table(table, path)
    return path


@pytest.fixture()
def corpora(tmp_path):
    general = write_docs(tmp_path / "general.parquet", [english_page(i, sentences=8) for i in range(60)])
    domain = write_docs(tmp_path / "domain.parquet",
                        [english_page(1000 + i, sentences=5).replace("teacher", "kernel") for i in range(30)])
    return {"general": general, "domain": domain}


@pytest.fixture()
def params(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(PARAMS))
    return path
