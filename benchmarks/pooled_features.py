"""Why a pre-trained body fine-tunes badly through a LayerNorm head: the geometry of its mean-pooled states.

For each paradigm and initialisation of a workspace where the pipeline ran (data/models/pretrain, dapt),
mean-pools the last hidden states of 1,500 task training texts and all validation texts and prints: the
share of the average state's norm in the states' RMS norm (1 = every text has the same pooled state), the
mean cosine between texts, and the validation macro-F1 of a logistic-regression probe on the pooled
states normalised two ways: per text over its features (what a LayerNorm head sees) and per feature over
the texts (standardised; what a BatchNorm head sees). benchmarks/transfer.md, "Fine-tuning a pre-trained
body", has the figures.

    .venv/bin/python benchmarks/pooled_features.py bert,gpt,t5
"""
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from stages.finetuning.heads import PooledClassifier  # noqa: E402

torch.set_num_threads(2)
task = pd.read_parquet(ROOT / "data/ingested/task/documents.parquet")
labels = sorted(task.label.unique())
train = task[task.split == "train"].sample(1500, random_state=0)
val = task[task.split == "validation"]
label_id = {lab: i for i, lab in enumerate(labels)}


def pooled(clf, tok, texts, paradigm):
    from transformers import AutoTokenizer  # noqa: F401 (the tokenizer is passed in)

    out = []
    with torch.no_grad():
        for lo in range(0, len(texts), 64):
            batch = texts[lo: lo + 64]
            if paradigm == "t5":
                batch = ["classify: " + t for t in batch]
            enc = tok(batch, truncation=True, max_length=128, padding="longest", return_tensors="pt",
                      add_special_tokens=paradigm != "gpt")
            h = clf.model.hidden(enc["input_ids"], enc["attention_mask"])
            m = enc["attention_mask"].unsqueeze(-1).float()
            out.append(((h * m).sum(1) / m.sum(1)).numpy())
    return np.concatenate(out)


def probe(a, b, y, yv):
    clf = LogisticRegression(C=1.0, max_iter=2000).fit(a, y)
    return round(f1_score(yv, clf.predict(b), average="macro"), 3)


for paradigm in sys.argv[1].split(","):
    for init in ("random", "pretrained", "dapt"):
        from transformers import AutoTokenizer

        folder = ROOT / "data/models" / ("dapt" if init == "dapt" else "pretrain") / paradigm
        tok = AutoTokenizer.from_pretrained(str(folder))
        clf = PooledClassifier(paradigm, folder, labels, init=init, seed=0)
        start = time.time()
        x, xv = pooled(clf, tok, train.text.tolist(), paradigm), pooled(clf, tok, val.text.tolist(), paradigm)
        mu = x.mean(0)
        shared = np.linalg.norm(mu) / np.sqrt((x ** 2).sum(1).mean())
        unit = x / np.linalg.norm(x, axis=1, keepdims=True)
        y, yv = train.label.map(label_id).values, val.label.map(label_id).values
        per_text = lambda z: (z - z.mean(1, keepdims=True)) / z.std(1, keepdims=True)  # noqa: E731
        sd = x.std(0)
        print(f"{paradigm} {init}: shared-direction share {shared:.3f}, mean cosine {(unit @ unit.T).mean():.3f}, "
              f"probe macro-F1 per-text norm {probe(per_text(x), per_text(xv), y, yv)}, standardised "
              f"{probe((x - mu) / sd, (xv - mu) / sd, y, yv)} ({time.time() - start:.0f} s)", flush=True)
