"""Tiny tokenizers and token datasets for gpt, bert and t5, built once per session, and helpers to write the
params of, and run, the pre-training stage with a tiny model and budget (a few seconds each on a CPU)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from tests.helpers import english_page

SEQ_LEN = 32
MICRO_BATCH = 4

BASE_PARAMS = {
    "split": {"heldout_fraction": 0.2, "salt": ""},
    "tokenizer": {
        "bert": {"kind": "wordpiece", "vocab_size": 300, "model_max_length": SEQ_LEN},
        "gpt": {"kind": "byte_bpe", "vocab_size": 400, "model_max_length": SEQ_LEN},
        "t5": {"kind": "unigram", "vocab_size": 300, "sentinels": 100, "model_max_length": SEQ_LEN},
    },
    "tokens": {
        "defaults": {"seq_len": SEQ_LEN, "batch_docs": 16,
                     "gate": {"min_train_blocks": 5, "min_heldout_blocks": 1, "max_unk_fraction": 0.01,
                              "max_pad_fraction": 0.5, "corruption_sample": 16}},
        "bert": {}, "gpt": {}, "t5": {"noise_density": 0.15, "mean_span": 3.0},
    },
    "pretrain": {
        "defaults": {
            "model": {"layers": 1, "d_model": 32, "heads": 2, "d_ff": 64, "dropout": 0.0},
            # 24 steps of 4 blocks x 32 tokens
            "train": {"budget_tokens": 24 * MICRO_BATCH * SEQ_LEN, "micro_batch": MICRO_BATCH, "grad_accum": 1,
                      "lr": 0.003, "warmup_fraction": 0.1, "min_lr_ratio": 0.1, "weight_decay": 0.01,
                      "betas": [0.9, 0.98], "clip": 1.0, "precision": "fp32", "compile": False,
                      "eval_every": 12, "eval_blocks": 8, "checkpoint_every": 8, "log_every": 4, "seed": 0,
                      "peak_tflops": 0, "threads": 1},  # tiny models: one thread is fastest
        },
        "bert": {}, "gpt": {}, "t5": {},
    },
    "dapt": {
        "defaults": {"train": {"budget_tokens": 8 * MICRO_BATCH * SEQ_LEN, "micro_batch": MICRO_BATCH,
                               "lr": 0.001, "warmup_fraction": 0.1, "precision": "fp32", "eval_every": 4,
                               "eval_blocks": 8, "checkpoint_every": 4, "log_every": 2}},
        "bert": {}, "gpt": {}, "t5": {},
    },
}


def params_dict(**train_overrides) -> dict:
    """A copy of the params with ``pretrain.defaults.train`` updated."""
    data = copy.deepcopy(BASE_PARAMS)
    data["pretrain"]["defaults"]["train"].update(train_overrides)
    return data


def write_params(path: Path, data: dict | None = None, **train_overrides) -> Path:
    data = copy.deepcopy(data) if data is not None else params_dict()
    data["pretrain"]["defaults"]["train"].update(train_overrides)
    path.write_text(yaml.safe_dump(data))
    return path


def write_docs(path, texts):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from stages.common.documents import doc_id

    table = pa.table({"id": [doc_id(t) for t in texts], "text": texts, "source": ["test"] * len(texts),
                      "url": pa.array([None] * len(texts), pa.string()), "meta": ["{}"] * len(texts)})
    pq.write_table(table, path)
    return path


class Datasets:
    """Paths of the session's tokenizers and token datasets (``tok[paradigm]``, ``tokens[paradigm]``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.tok: dict[str, Path] = {}
        self.tokens: dict[str, Path] = {}

    def args(self, paradigm: str, out: Path, params: Path, *, checkpoints: Path | None = None,
             metrics: Path | None = None, corpus: str = "general", section: str = "pretrain",
             init: Path | None = None, tokens: Path | None = None, plot: Path | None = None,
             live: Path | None = None) -> list[str]:
        """The command line of ``stages.pretrain`` (without the program)."""
        a = ["--paradigm", paradigm, "--section", section, "--params", str(params),
             "--tokens", str(tokens or self.tokens[paradigm]), "--corpus", corpus,
             "--tokenizer", str(self.tok[paradigm]), "--output", str(out), "--no-progress"]
        if checkpoints is not None:
            a += ["--checkpoints", str(checkpoints)]
        if metrics is not None:
            a += ["--metrics", str(metrics)]
        if plot is not None:
            a += ["--plot", str(plot)]
        if init is not None:
            a += ["--init", str(init)]
        if live is not None:
            a += ["--live", str(live)]
        return a


def build_datasets(root: Path, paradigms=("gpt", "bert", "t5")) -> Datasets:
    from stages.tokenizer import main as tokenizer_main
    from stages.tokens import main as tokens_main

    root.mkdir(parents=True, exist_ok=True)
    general = write_docs(root / "general.parquet", [english_page(i, sentences=8) for i in range(60)])
    domain = write_docs(root / "domain.parquet",
                        [english_page(1000 + i, sentences=5).replace("teacher", "kernel") for i in range(30)])
    params = root / "params.yaml"
    params.write_text(yaml.safe_dump(BASE_PARAMS))
    ds = Datasets(root)
    for p in paradigms:
        tok = root / "tok" / p
        assert tokenizer_main(["--paradigm", p, "--params", str(params), "--train", str(general),
                               "--output", str(tok)]) == 0
        out = root / "tokens" / p
        assert tokens_main(["--paradigm", p, "--params", str(params), "--tokenizer", str(tok), "--output", str(out),
                            "--report", str(root / f"gate-{p}.json"), "--corpus", f"general={general}",
                            "--corpus", f"domain={domain}"]) == 0
        ds.tok[p], ds.tokens[p] = tok, out
    return ds


@pytest.fixture(autouse=True)
def _restore_torch_threads():
    """The stage sets torch's thread count (``train.threads``); give other tests the default back."""
    import torch

    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def datasets(tmp_path_factory) -> Datasets:
    return build_datasets(tmp_path_factory.mktemp("training-data"))


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def weights(folder: Path) -> dict:
    """The tensors of ``folder/model.safetensors``."""
    from safetensors.torch import load_file

    return load_file(str(Path(folder) / "model.safetensors"))
