"""Tiny pre-trained models (one per paradigm) and a labeled task made in code, built once per session."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from stages.common.documents import doc_id
from tests.unit.training.conftest import BASE_PARAMS, build_datasets

LABELS = ["river", "market", "castle"]
WORDS = {"river": ["river", "harbour", "bridge"], "market": ["market", "factory", "station"],
         "castle": ["castle", "museum", "theatre"]}


def task_rows(n_per_label: int = 40, seed: int = 0) -> list[dict]:
    """Short descriptions whose label is given away by their place words (a learnable task)."""
    rng = random.Random(seed)
    rows = []
    for label in LABELS:
        for i in range(n_per_label):
            w = rng.choice(WORDS[label])
            text = f"The old farmer visited the {w} near the {rng.choice(WORDS[label])} on day {i} of the year."
            split = "test" if i % 5 == 0 else "validation" if i % 5 == 1 else "train"
            rows.append({"id": doc_id(text + label), "text": text, "label": label, "split": split})
    return rows


def write_task(path: Path, rows: list[dict]) -> Path:
    n = len(rows)
    pq.write_table(pa.table({"id": [r["id"] for r in rows], "text": [r["text"] for r in rows],
                             "source": ["test"] * n, "url": pa.array([None] * n, pa.string()), "meta": ["{}"] * n,
                             "label": [r["label"] for r in rows], "split": [r["split"] for r in rows]}), path)
    return path


FINETUNE = {"defaults": {"labels": LABELS, "max_len": 24, "max_train_examples": 0, "epochs": 3, "micro_batch": 8,
                         "lr": 0.003, "warmup_fraction": 0.1, "weight_decay": 0.01, "eval_every": 4, "patience": 3,
                         "max_eval_examples": 0, "aux_lm_weight": 0.5, "t5_prefix": "classify: ", "seed": 0,
                         "threads": 1, "precision": "fp32", "gate": {"min_class_share": 0.1, "max_class_share": 0.5}},
            "bert": {}, "gpt": {}, "t5": {}}


def write_params(path: Path, **overrides) -> Path:
    data = dict(BASE_PARAMS, finetune={**FINETUNE, "defaults": {**FINETUNE["defaults"], **overrides}})
    path.write_text(yaml.safe_dump(data))
    return path


class Models:
    def __init__(self, root: Path) -> None:
        from stages.pretrain import main

        self.root = root
        ds = build_datasets(root / "data")
        params = root / "params.yaml"
        params.write_text(yaml.safe_dump(BASE_PARAMS))
        self.models = {}
        for p in ("bert", "gpt", "t5"):
            out = root / "models" / p
            assert main(ds.args(p, out, params)) == 0
            self.models[p] = out
        self.task = write_task(root / "task.parquet", task_rows())
