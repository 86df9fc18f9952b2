"""The fine-tuning core: the recipe's configuration, batching, prediction and one training run (:func:`finetune`,
early stopping on validation, the best checkpoint restored), used by the finetune stage, the evaluate stage and
the service's classifier."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from stages.config import ConfigError, build, check, check_seed, deep_merge, load_params, section
from stages.finetuning.adapt import LORA_TARGETS, METHODS, effective_method
from stages.training.config import PRECISIONS

INITS = ("pretrained", "dapt", "random")
PUBLISHED_INITS = ("published", "published-dapt")  # a published checkpoint (params published.bases), then its DAPT


@dataclass(frozen=True, kw_only=True)
class TaskGateConfig:
    """The labeled task's check before training: each label's share of the training split."""

    min_class_share: float = 0.005
    """Smallest share of the training examples a label may have (the gate fails below it)."""
    max_class_share: float = 0.3
    """Largest share of the training examples a label may have."""


@dataclass(frozen=True, kw_only=True)
class LoraConfig:
    """LoRA's low-rank adapters on the body (``method: lora``)."""

    r: int = 8
    """Rank of each adapter's update."""
    alpha: int = 16
    """The update's scale is ``alpha / r``."""
    dropout: float = 0.1
    """Dropout on each adapter's input while training."""
    targets: tuple[str, ...] = ()
    """The modules that get an adapter, by the last part of their names ([] = the paradigm's attention and
    feed-forward projections: BERT ``query, key, value, dense`` (DeBERTa-v2 ``query_proj, key_proj, value_proj,
    dense``), GPT ``c_attn, c_proj, c_fc``, T5 ``q, k, v, o, wi, wo``)."""

    def __post_init__(self) -> None:
        check(self.r >= 1, "r: must be >= 1")
        check(self.alpha > 0, "alpha: must be > 0")
        check(0 <= self.dropout < 1, "dropout: must be in [0, 1)")
        check(len(set(self.targets)) == len(self.targets), "targets: each module name once")


@dataclass(frozen=True, kw_only=True)
class FinetuneConfig:
    """The fine-tuning recipe, the same for every initialisation of a paradigm."""

    labels: tuple[str, ...]
    """The expected label set, in order; the gate fails on any other label in the data."""
    max_len: int = 64
    """Tokens per example; longer texts are cut."""
    max_train_examples: int = 0
    """A seeded sample of this many training examples (0 = all)."""
    epochs: int = 2
    """Passes over the training examples, at most."""
    min_steps: int = 0
    """More passes when a small sample would otherwise give fewer updates than this (0 = off)."""
    micro_batch: int = 32
    """Examples per update."""
    length_pool: int = 0
    """Batches of similar lengths: each run of this many batches is sorted by length, then shuffled (0 = off)."""
    lr: float = 5e-4
    """Peak learning rate (AdamW), used when ``lr_grid`` is empty."""
    warmup_fraction: float = 0.06
    """Share of the updates spent on linear warmup before the cosine decay to 0."""
    weight_decay: float = 0.01
    """AdamW weight decay on matrices."""
    eval_every: int = 50
    """Updates between validation scores."""
    patience: int = 3
    """Validation scores without a better macro-F1 before the run stops (the best weights are restored)."""
    max_eval_examples: int = 0
    """Validation examples scored during training (0 = all); the best checkpoint is then scored on all of them."""
    val_select: str = "full"
    """``full``: choose rates, seeds and models on the best checkpoint's whole-split validation score;
    ``sample``: keep the sampled score (the evaluate stage's data-efficiency curve runs use it)."""
    aux_lm_weight: float = 0.5
    """GPT only: weight of GPT-1's auxiliary language-model loss beside the classifier's (0 = off)."""
    aux_lm_fraction: float = 1.0
    """GPT only: share of positions the auxiliary loss is estimated on each update (1 = all)."""
    t5_prefix: str = "classify: "
    """T5 only: the task prefix put before each text."""
    head: str = "stock"
    """``pooled``: masked mean of the top layer (T5: the encoder's), a BatchNorm and a linear layer; ``stock``: each
    model's own classification head ([CLS], last token, text to text); ``prompt``: BERT only, a cloze over label
    words, for a user with few labeled examples (tens per class), where PET and LM-BFF found a cloze ahead of a
    new head."""
    seed: int = 0
    """Seed of one run: head initialisation, sample and order."""
    seeds: tuple[int, ...] = (0,)
    """The stage's runs: mean and std reported, the best on validation saved."""
    lr_grid: tuple[float, ...] = ()
    """Learning rates tried with the first seed, per initialisation; the best on validation is used ([] = ``lr``)."""
    scale_lr_by_rms: bool = False
    """Each tensor's rate is ``lr`` times its root mean square (as pre-training's option); rates are then ~10x."""
    embedding_rms: float = 0.0
    """BERT only: word embeddings rescaled to this RMS before the first update, the function unchanged (0 = off)."""
    reinit_layers: int = 0
    """BERT only: the top this many transformer layers drawn anew before the first update (0 = off)."""
    workers: int = 1
    """The stage's runs at a time (more than 1: spawned processes of one torch thread each)."""
    threads: int = 0
    """CPU threads for torch in one run (0 = torch's default)."""
    precision: str = "auto"
    """``auto``: bf16 autocast where the device multiplies bf16 natively, else fp32; ``fp32`` or ``bf16`` force it."""
    gate: TaskGateConfig = field(default_factory=TaskGateConfig)
    """The labeled task's check."""
    method: str = "full"
    """How a pre-trained body (init ``pretrained``, ``dapt``) is adapted: ``full``: every weight trains;
    ``frozen``: the body fixed (and without dropout), the pooled head trains; ``probe``: the body fixed, the pooled head
    fit as a logistic regression, its regularisation and class weights chosen on validation; ``lora``: low-rank
    adapters on the
    body's projections and the head train. ``frozen`` and ``lora`` need head ``pooled``; their folder holds the head
    (and adapter) only and names the base folder it needs. Init ``random`` has no base to adapt: it trains in full."""
    lora: LoraConfig = field(default_factory=LoraConfig)
    """The adapters of method ``lora``."""

    @property
    def optim(self):
        """The optimizer and schedule (``stages.training.optim``): the cosine decays to 0; AdamW's betas are
        pre-training's default."""
        from stages.training.optim import OptimConfig

        return OptimConfig(lr=self.lr, warmup_fraction=self.warmup_fraction, min_lr_ratio=0.0,
                           weight_decay=self.weight_decay, betas=(0.9, 0.98), scale_lr_by_rms=self.scale_lr_by_rms)

    def __post_init__(self) -> None:
        check(len(self.labels) >= 2 and len(set(self.labels)) == len(self.labels), "labels: need 2+ distinct labels")
        check(self.max_len >= 4, "max_len: must be >= 4")
        check(self.epochs >= 1 and self.micro_batch >= 1 and self.eval_every >= 1 and self.patience >= 1,
              "epochs: epochs, micro_batch, eval_every and patience must be >= 1")
        check(self.lr > 0, "lr: must be > 0")
        check(self.min_steps >= 0, "min_steps: must be >= 0")
        check(self.length_pool >= 0, "length_pool: must be >= 0")
        check(self.aux_lm_weight >= 0, "aux_lm_weight: must be >= 0")
        check(0 < self.aux_lm_fraction <= 1, "aux_lm_fraction: must be in (0, 1]")
        check(self.head in ("stock", "pooled", "prompt"), "head: one of stock, pooled, prompt")
        check(len(self.seeds) >= 1 and len(set(self.seeds)) == len(self.seeds), "seeds: one or more distinct seeds")
        check_seed("seed", self.seed)
        for s in self.seeds:
            check_seed("seeds", s)
        check(all(lr > 0 for lr in self.lr_grid), "lr_grid: each learning rate must be > 0")
        check(self.workers >= 1, "workers: must be >= 1")
        check(self.precision in PRECISIONS, f"precision: one of {', '.join(PRECISIONS)}")
        check(self.val_select in ("full", "sample"), "val_select: one of full, sample")
        check(self.embedding_rms >= 0, "embedding_rms: must be >= 0 (0 = off)")
        check(not self.embedding_rms or self.head != "prompt",
              "embedding_rms: not with head prompt (its output layer is the tied word embeddings)")
        check(self.reinit_layers >= 0, "reinit_layers: must be >= 0 (0 = off)")
        check(not self.reinit_layers or self.head != "prompt",
              "reinit_layers: not with head prompt (it reads the top layer through the masked-LM head)")
        check(self.method in METHODS, f"method: one of {', '.join(METHODS)}")
        check(self.method == "full" or self.head == "pooled", f"method: {self.method} needs head pooled")
        check(self.method == "full" or not self.embedding_rms,
              f"embedding_rms: not with method {self.method} (the base is kept as saved; set 0)")
        check(self.method == "full" or not self.reinit_layers,
              f"reinit_layers: not with method {self.method} (the base is kept as saved; set 0)")


def head_spec(cfg: FinetuneConfig, init: str | None = None, base: Path | None = None):
    """The classifier's :class:`~stages.finetuning.heads.HeadSpec` from the config, for training and serving: the
    method's ``adapt`` options for ``init`` (none when the run trains in full, or ``init`` is None: a saved
    folder's own adaptation.json then says), ``base`` a packaged base."""
    from stages.finetuning.heads import HeadSpec

    method = "full" if init is None else effective_method(cfg.method, init)
    adapt = None if method == "full" else {"method": method, "r": cfg.lora.r, "alpha": cfg.lora.alpha,
                                           "dropout": cfg.lora.dropout, "targets": list(cfg.lora.targets)}
    return HeadSpec(head=cfg.head, aux_lm_weight=cfg.aux_lm_weight, aux_lm_fraction=cfg.aux_lm_fraction, adapt=adapt,
                    base=base)


def config_record(cfg: FinetuneConfig) -> dict:
    """The config as finetune.json records it; method ``full`` leaves ``method`` and ``lora`` out, so a full
    run's record reads as before methods existed."""
    from dataclasses import asdict

    out = asdict(cfg)
    if cfg.method == "full":
        del out["method"], out["lora"]
    return out


def load_config(params_path: Path, paradigm: str) -> FinetuneConfig:
    params = load_params(params_path)
    merged = deep_merge(section(params, "finetune.defaults"), section(params, f"finetune.{paradigm}") or {})
    cfg = build(FinetuneConfig, merged, f"finetune.{paradigm}")
    bad = [t for t in cfg.lora.targets if t not in LORA_TARGETS.get(paradigm, ())]
    if bad:
        raise ConfigError(f"finetune.{paradigm}.lora.targets: {', '.join(map(repr, bad))} is not a module of the "
                          f"{paradigm} model (one of {', '.join(LORA_TARGETS.get(paradigm, ()))})")
    return cfg


def load_base_config(params_path: Path, name: str) -> FinetuneConfig:
    """The fine-tuning config of published base ``name``: ``finetune.defaults`` with the base's ``finetune`` over
    it (the paradigm's ``finetune.<paradigm>`` is the from-scratch models' recipe)."""
    from stages.published.config import load_base

    merged = deep_merge(section(load_params(params_path), "finetune.defaults"),
                        load_base(params_path, name, "finetune").get("finetune") or {})
    return build(FinetuneConfig, merged, f"published.bases.{name}.finetune")


def read_task(path: Path):
    from stages.common.documents import read_parquet_columns

    if not path.is_file():
        raise FileNotFoundError(f"{path}: no task data (run ingest@task first)")
    return read_parquet_columns(path, ["id", "text", "label", "split"])


def sample_train(df, cfg: FinetuneConfig, n: int | None = None):
    train = df[df["split"] == "train"]
    n = n if n is not None else cfg.max_train_examples
    if n and n < len(train):
        train = train.sample(n=n, random_state=cfg.seed)
    return train.reset_index(drop=True)


def _tokenize(tok, texts: list[str], cfg: FinetuneConfig, paradigm: str, **kwargs):
    """``texts`` (after T5's task prefix) through ``tok``, cut at ``max_len``."""
    if paradigm == "t5":
        texts = [cfg.t5_prefix + t for t in texts]
    return tok(texts, truncation=True, max_length=cfg.max_len, add_special_tokens=paradigm != "gpt", **kwargs)


def encode(tok, texts: list[str], cfg: FinetuneConfig, paradigm: str) -> dict:
    enc = _tokenize(tok, texts, cfg, paradigm, padding="longest", return_tensors="pt")
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}


def token_lengths(tok, texts: list[str], cfg: FinetuneConfig, paradigm: str) -> np.ndarray:
    """Each text's length in tokens as :func:`encode` will see it (after the prefix and truncation)."""
    ids = _tokenize(tok, texts, cfg, paradigm)["input_ids"]
    return np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(texts))


def length_batches(order: np.ndarray, lengths: np.ndarray, batch: int, pool: int, rng) -> list[np.ndarray]:
    """``order`` cut into batches of ``batch`` whose members have similar lengths, so padding to the longest
    costs little: each run of ``pool`` batches of the (random) order is sorted by length before it is cut,
    then the batches are shuffled (``pool`` 0 or 1: plain consecutive batches). Every index appears once."""
    if pool <= 1:
        return [order[lo: lo + batch] for lo in range(0, len(order), batch)]
    out = []
    for lo in range(0, len(order), batch * pool):
        chunk = order[lo: lo + batch * pool]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        out += [chunk[i: i + batch] for i in range(0, len(chunk), batch)]
    return [out[i] for i in rng.permutation(len(out))]


def save_tokenizer(tok, folder: Path) -> None:
    """``tok.save_pretrained(folder)`` with ``local_files_only`` written as false: transformers records there how
    this process loaded the tokenizer (true under ``HF_HUB_OFFLINE=1``), which would make the folder's bytes
    depend on the environment."""
    if "local_files_only" in tok.init_kwargs:
        tok.init_kwargs["local_files_only"] = False
    tok.save_pretrained(str(folder))


def predict(clf, tok, texts: list[str], cfg: FinetuneConfig, paradigm: str) -> np.ndarray:
    """The predicted label ids of ``texts``, scored in batches of similar lengths (the same predictions as
    in order: each text's score depends on its own tokens only), returned in the order of ``texts``."""
    import torch

    from stages.training.device import bf16_autocast, bf16_enabled, to_device

    clf.model.eval()
    order = np.argsort(token_lengths(tok, texts, cfg, paradigm), kind="stable") if texts else np.empty(0, int)
    pred = np.empty(len(texts), dtype=np.int64)
    with torch.no_grad(), bf16_autocast(clf.device, bf16_enabled(cfg.precision, clf.device)):
        for lo in range(0, len(texts), cfg.micro_batch * 2):
            idx = order[lo: lo + cfg.micro_batch * 2]
            batch = to_device(encode(tok, [texts[i] for i in idx], cfg, paradigm), clf.device)
            pred[idx] = clf.predict(batch).cpu().numpy()
    clf.model.train()
    return pred


def _classifier(cfg: FinetuneConfig, paradigm: str, init: str, model_dir: Path) -> tuple:
    """The run's classifier on its device (the body as ``init`` and the method say, with its head), its tokenizer
    and the device."""
    import torch
    from transformers import AutoTokenizer

    from stages.finetuning.heads import make_classifier, reinit_top_layers, rescale_embeddings

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    clf = make_classifier(paradigm, model_dir, list(cfg.labels), tok, init=init, seed=cfg.seed,
                          spec=head_spec(cfg, init))
    if cfg.embedding_rms:
        rescale_embeddings(clf.model, cfg.embedding_rms)
    if cfg.reinit_layers:
        reinit_top_layers(clf.model, cfg.reinit_layers, seed=cfg.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    clf.to(device)
    return clf, tok, device


def _splits(df, cfg: FinetuneConfig, train_examples: int | None) -> tuple:
    """The training sample, the validation examples scored during training and all of them, and the test split."""
    train = sample_train(df, cfg, train_examples)
    val = val_all = df[df["split"] == "validation"]
    if cfg.max_eval_examples and cfg.max_eval_examples < len(val):
        val = val.sample(n=cfg.max_eval_examples, random_state=cfg.seed)
    return train, val, val_all, df[df["split"] == "test"]


@dataclass(frozen=True)
class Body:
    """What a run fine-tunes: the paradigm, the initialisation (``INITS``, or a published base's) and the model
    folder it starts from."""

    paradigm: str
    init: str
    model_dir: Path


def finetune(cfg: FinetuneConfig, body: Body, *, df, train_examples: int | None = None, log=print,
             progress: bool = False, live_dir: Path | None = None) -> dict:
    """Train a classifier on ``body``; returns scores, the curve and the model (best validation state restored).
    ``live_dir``: the run's live log (its curve as it trains, and its wall time; :mod:`stages.common.live`)."""
    paradigm, init, model_dir = body.paradigm, body.init, Path(body.model_dir)
    import torch

    from stages.common.live import LiveLog
    from stages.finetuning.metrics import majority, scores
    from stages.training.distributed import Dist
    from stages.training.device import bf16_enabled, peak_flops
    from stages.training.optim import lr_at, make_optimizer
    from stages.training.trainer import EarlyStopping, Hooks, LoopConfig, Steps, Trainer, progress_bar

    from stages.common.memory import current_mib, peak_mib, reset_peak

    if effective_method(cfg.method, init) == "probe":  # no training loop: a regression on the frozen features
        from stages.finetuning.probe import probe

        return probe(cfg, paradigm=paradigm, init=init, model_dir=model_dir, df=df, train_examples=train_examples,
                     log=log)
    reset_peak()  # the run's own peak memory, for the live log (a worker process runs several)
    started = time.perf_counter()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    label_id = {lab: i for i, lab in enumerate(cfg.labels)}
    clf, tok, device = _classifier(cfg, paradigm, init, model_dir)
    train, val, val_all, test = _splits(df, cfg, train_examples)
    y_train = train["label"].map(label_id).to_numpy()
    steps_per_epoch = -(-len(train) // cfg.micro_batch)
    epochs = max(cfg.epochs, -(-cfg.min_steps // steps_per_epoch))
    total = steps_per_epoch * epochs
    optimizer = make_optimizer(clf.model, cfg.optim, device)
    rng = np.random.default_rng(cfg.seed)
    texts = train["text"].tolist()
    lengths = token_lengths(tok, texts, cfg, paradigm)

    def epochs_of_batches():  # each epoch a new order, cut into batches of similar lengths
        for _ in range(epochs):
            for idx in length_batches(rng.permutation(len(train)), lengths, cfg.micro_batch, cfg.length_pool, rng):
                batch = encode(tok, [texts[i] for i in idx], cfg, paradigm)
                batch["labels"] = torch.from_numpy(y_train[idx].astype(np.int64))
                yield [batch]

    def score(split) -> dict:
        gold = split["label"].map(label_id).to_numpy()
        return scores(gold, predict(clf, tok, split["text"].tolist(), cfg, paradigm), len(cfg.labels))

    stream = epochs_of_batches()
    loaded_mib = current_mib()  # model, data and libraries in memory: what training adds is the peak minus this
    # Throughput for the live log: 6N FLOPs per real token (Kaplan et al. 2020; attention left out)
    flops_per_token = 6 * sum(p.numel() for p in clf.model.parameters())
    with LiveLog(live_dir) as live:
        with progress_bar(total, progress, desc=f"{paradigm}-{init}") as bar:
            loop_cfg = LoopConfig(total=total, log_every=cfg.eval_every, clip=1.0,
                                  bf16=bf16_enabled(cfg.precision, device), eval_every=cfg.eval_every,
                                  flops_per_token=flops_per_token, peak=peak_flops(device))
            hooks = Hooks(row=lambda step: {"epoch": (step - 1) // steps_per_epoch + 1},
                          evaluate=lambda step: {f"val_{k}": v for k, v in score(val).items() if k != "examples"},
                          early=EarlyStopping("val_macro_f1", cfg.patience), live=live, bar=bar, log=log)
            steps = Steps(batches=lambda step: next(stream), loss=clf.loss, lr=lambda step: lr_at(step, total, cfg.optim),
                          tokens=lambda batch: int(batch["attention_mask"].sum()))
            run = Trainer(clf.model, optimizer, loop_cfg, steps, hooks, Dist(device=device)).train()
        best, step, val_examples = run.best, run.steps, len(val)
        if cfg.val_select == "full" and len(val) < len(val_all):
            best, val_examples = score(val_all)["macro_f1"], len(val_all)
        test_scores = score(test)
        clf.to("cpu")  # returned and saved on the CPU
        baseline = majority(y_train, test["label"].map(label_id).to_numpy(), len(cfg.labels))
        result = _metrics(paradigm, init, len(train), run, (best, val_examples, len(val)), test_scores, baseline)
        log(f"[finetune] {paradigm}-{init}: {len(train)} examples, {step} steps"
            f"{' (stopped early)' if run.stopped_early else ''}; best val macro-F1 {best:.3f}; test accuracy "
            f"{result['test_accuracy']:.3f}, macro-F1 {result['test_macro_f1']:.3f} (majority "
            f"{result['majority_test_accuracy']:.3f})")
        live.summary({"seconds": round(time.perf_counter() - started, 1), "steps": step,
                      "best_val_macro_f1": best, "test_macro_f1": result["test_macro_f1"],
                      "loaded_rss_mib": loaded_mib, **{f"peak_{k}": v for k, v in peak_mib().items()}})
    curve = [{"step": h["step"], "epoch": h["epoch"], "loss": h["loss"], "val_accuracy": e["val_accuracy"],
              "val_macro_f1": e["val_macro_f1"]} for h, e in zip(run.history, run.evals)]
    return {"metrics": result, "curve": curve, "classifier": clf, "tokenizer": tok}


def _metrics(paradigm: str, init: str, n_train: int, run, val: tuple[float, int, int], test: dict,
             baseline: dict) -> dict:
    """A run's record: ``val`` = (the best validation macro-F1, the examples it is over, those scored during
    training, whose best is the run's own)."""
    best, val_examples, sampled = val
    return {"paradigm": paradigm, "init": init, "train_examples": n_train, "steps": run.steps,
            "stopped_early": run.stopped_early, "best_val_macro_f1": best, "val_examples": val_examples,
            **({"sample_val_macro_f1": run.best} if val_examples != sampled else {}),
            "test_accuracy": test["accuracy"], "test_macro_f1": test["macro_f1"], "test_examples": test["examples"],
            "majority_test_accuracy": baseline["accuracy"], "majority_test_macro_f1": baseline["macro_f1"]}


def _mean_std(values: list[float]) -> tuple[float, float]:
    a = np.asarray(values, dtype=np.float64)
    return round(float(a.mean()), 5), round(float(a.std(ddof=1)) if len(a) > 1 else 0.0, 5)
