"""Method ``probe``: the frozen body's pooled features with the head a practitioner fits on them, a multinomial
logistic regression trained to convergence with its regularisation and class weights chosen on validation (the
linear probe of Alain & Bengio 2016; Kumar et al. 2022). The fit becomes the pooled head exactly: its BatchNorm
holds the training features' mean and variance, its linear layer the regression's weights, so the folder is a
``frozen`` folder that serving loads as any other."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

C_GRID = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0)  # inverse regularisation strengths
CLASS_WEIGHTS = (None, "balanced")
MAX_ITER = 1000  # L-BFGS iterations per fit (scikit-learn's tolerance); warm starts along the C grid need few
_FEATURES: dict[tuple[str, str], np.ndarray] = {}  # (model folder, text) -> pooled features, per process


def features(clf, tok, texts: list[str], cfg, paradigm: str, key: str) -> np.ndarray:
    """The masked mean of the body's top layer for each text (batches of similar lengths, the body in eval mode),
    cached per process by folder and text: the curve's runs of one model share their validation and test texts,
    and the head's scores on them come from these features (:func:`head_predictions`)."""
    import torch

    from stages.finetuning.core import encode, token_lengths
    from stages.training.device import bf16_autocast, bf16_enabled, to_device

    todo = sorted({t for t in texts if (key, t) not in _FEATURES})
    if todo:
        clf.model.eval()
        order = np.argsort(token_lengths(tok, todo, cfg, paradigm), kind="stable")
        with torch.no_grad(), bf16_autocast(clf.device, bf16_enabled(cfg.precision, clf.device)):
            for lo in range(0, len(todo), cfg.micro_batch * 2):
                idx = order[lo: lo + cfg.micro_batch * 2]
                batch = to_device(encode(tok, [todo[i] for i in idx], cfg, paradigm), clf.device)
                pooled = clf.model.pool(batch["input_ids"], batch["attention_mask"])[0].float().cpu().numpy()
                for i, row in zip(idx, pooled):
                    _FEATURES[(key, todo[i])] = row.astype(np.float64)
    return np.stack([_FEATURES[(key, t)] for t in texts]) if texts else np.empty((0, 0))


def head_predictions(clf, x: np.ndarray, cfg) -> np.ndarray:
    """The label ids the pooled head (in eval mode) gives the pooled features ``x``: what ``predict`` computes from
    the same texts, without a second pass through the body."""
    import torch

    from stages.training.device import bf16_autocast, bf16_enabled

    if len(x) == 0:
        return np.empty(0, dtype=np.int64)
    clf.model.eval()
    with torch.no_grad(), bf16_autocast(clf.device, bf16_enabled(cfg.precision, clf.device)):
        logits = clf.model.head(torch.from_numpy(x).to(device=clf.device, dtype=torch.float32))
    clf.model.train()
    return logits.float().argmax(-1).cpu().numpy()


def fit(x_train, y_train, x_val, y_val, n_labels: int):
    """The regression with the best validation macro-F1 over :data:`C_GRID` x :data:`CLASS_WEIGHTS` (ties: the
    stronger regularisation, listed first); returns (weights [n_labels, d], biases, settings, fits)."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    from stages.finetuning.metrics import scores

    best, tried = None, 0
    for weight in CLASS_WEIGHTS:
        # one path per class weighting, strongest regularisation first, each fit starting from the last one's
        model = LogisticRegression(class_weight=weight, max_iter=MAX_ITER, warm_start=True)
        for c in C_GRID:
            model.set_params(C=c)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                model.fit(x_train, y_train)
            tried += 1
            f1 = scores(y_val, model.predict(x_val), n_labels)["macro_f1"]
            if best is None or f1 > best[0]:
                best = (f1, (model.coef_.copy(), model.intercept_.copy(), model.classes_.copy()),
                        {"C": c, "class_weight": weight or "none"})
    _, (coef, intercept, classes), settings = best
    w = np.zeros((n_labels, x_train.shape[1]))
    b = np.full(n_labels, -1e4)  # a label absent from a small sample is never predicted
    classes = classes.astype(int)
    if len(classes) == 2:  # scikit-learn keeps one row for two classes: logit difference split as +/- half
        w[classes[1]], w[classes[0]] = coef[0] / 2, -coef[0] / 2
        b[classes[1]], b[classes[0]] = intercept[0] / 2, -intercept[0] / 2
    else:
        w[classes], b[classes] = coef, intercept
    return w, b, settings, tried


def probe(cfg, *, paradigm: str, init: str, model_dir: Path, df, train_examples: int | None = None,
          log=print) -> dict:
    """Method ``probe``'s run, shaped like :func:`stages.finetuning.core.finetune`'s result."""
    import torch
    from transformers import AutoTokenizer

    from stages.finetuning.core import head_spec, sample_train
    from stages.finetuning.heads import make_classifier
    from stages.finetuning.metrics import majority, scores

    started = time.perf_counter()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    label_id = {lab: i for i, lab in enumerate(cfg.labels)}
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    clf = make_classifier(paradigm, model_dir, list(cfg.labels), tok, init=init, seed=cfg.seed,
                          spec=head_spec(cfg, init))
    clf.to("cpu")
    train = sample_train(df, cfg, train_examples)
    val, test = df[df["split"] == "validation"], df[df["split"] == "test"]
    key = str(Path(model_dir).resolve())
    x_train = features(clf, tok, train["text"].tolist(), cfg, paradigm, key)
    x_val = features(clf, tok, val["text"].tolist(), cfg, paradigm, key)
    y_train, y_val = train["label"].map(label_id).to_numpy(), val["label"].map(label_id).to_numpy()
    norm = clf.model.norm
    mean, var = x_train.mean(axis=0), x_train.var(axis=0)
    scale = np.sqrt(var + norm.eps)
    w, b, settings, fits = fit((x_train - mean) / scale, y_train, (x_val - mean) / scale, y_val, len(cfg.labels))
    with torch.no_grad():  # the pooled head computes (x - mean) / sqrt(var + eps) @ w.T + b in eval mode
        norm.running_mean.copy_(torch.from_numpy(mean))
        norm.running_var.copy_(torch.from_numpy(var))
        norm.weight.fill_(1.0)
        norm.bias.zero_()
        clf.model.out.weight.copy_(torch.from_numpy(w))
        clf.model.out.bias.copy_(torch.from_numpy(b))

    def score(split, x) -> dict:
        return scores(split["label"].map(label_id).to_numpy(), head_predictions(clf, x, cfg), len(cfg.labels))

    x_test = features(clf, tok, test["text"].tolist(), cfg, paradigm, key)
    best, test_scores = score(val, x_val)["macro_f1"], score(test, x_test)
    baseline = majority(y_train, test["label"].map(label_id).to_numpy(), len(cfg.labels))
    result = {"paradigm": paradigm, "init": init, "train_examples": len(train), "steps": 0, "stopped_early": False,
              "best_val_macro_f1": best, "val_examples": len(val), "test_accuracy": test_scores["accuracy"],
              "test_macro_f1": test_scores["macro_f1"], "test_examples": test_scores["examples"],
              "majority_test_accuracy": baseline["accuracy"], "majority_test_macro_f1": baseline["macro_f1"],
              "probe": {**settings, "fits": fits}}
    log(f"[finetune] {paradigm}-{init} probe: {len(train)} examples, C {settings['C']:g}, class weights "
        f"{settings['class_weight']} chosen on validation ({fits} fits); val macro-F1 {best:.3f}; test macro-F1 "
        f"{result['test_macro_f1']:.3f} ({time.perf_counter() - started:.0f} s)")
    return {"metrics": result, "curve": [], "classifier": clf, "tokenizer": tok}
