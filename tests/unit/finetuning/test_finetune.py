"""Fine-tuning: metrics, the three heads, early stopping, the task gate and the stage's outputs."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from stages.finetuning.core import Body, finetune, load_config, read_task
from stages.finetune import main
from stages.finetuning.metrics import majority, scores
from tests.unit.finetuning.conftest import LABELS, task_rows, write_params, write_task


def test_scores_and_majority():
    gold = np.array([0, 0, 1, 1, 2, 2])
    pred = np.array([0, 1, 1, 1, 2, 0])
    s = scores(gold, pred, 4)  # class 3 is absent from gold: not in the macro average
    assert s["accuracy"] == pytest.approx(4 / 6, abs=1e-5)
    f1 = [2 * 1 / (2 + 1 + 1), 2 * 2 / (4 + 1 + 0), 2 * 1 / (2 + 0 + 1)]
    assert s["macro_f1"] == pytest.approx(np.mean(f1), abs=1e-5)
    m = majority(np.array([1, 1, 0]), gold, 4)
    assert m["accuracy"] == pytest.approx(2 / 6, abs=1e-5)


def run(models, tmp_path, paradigm, init, params=None, task=None, extra=()):
    params = params or write_params(tmp_path / "params.yaml")
    out = tmp_path / f"{paradigm}-{init}"
    args = ["--paradigm", paradigm, "--init", init, "--params", str(params), "--task", str(task or models.task),
            "--model", str(models.models[paradigm]), "--output", str(out), "--metrics", str(tmp_path / "m.json"),
            "--plot", str(tmp_path / "curve.tsv"), "--report", str(tmp_path / "gate.json"), *extra]
    return main(args), out


@pytest.mark.parametrize("paradigm", ["bert", "gpt", "t5"])
def test_stage_trains_and_saves_a_classifier(models, tmp_path, paradigm):
    rc, out = run(models, tmp_path, paradigm, "pretrained")
    assert rc == 0
    m = json.loads((tmp_path / "m.json").read_text())
    assert m["test_examples"] == 24
    assert m["majority_test_accuracy"] == pytest.approx(1 / 3, abs=1e-3)
    # the reported test score is the saved model's own on the test split (reloaded as the service loads it)
    from transformers import AutoTokenizer

    from stages.finetuning.core import predict
    from stages.finetuning.heads import HeadSpec, make_classifier

    cfg = load_config(tmp_path / "params.yaml", paradigm)
    tok = AutoTokenizer.from_pretrained(str(out))
    again = make_classifier(paradigm, out, LABELS, tok, init="pretrained", seed=0, spec=HeadSpec(head=cfg.head))
    again.model.eval()
    test = read_task(models.task).query("split == 'test'")
    got = scores(test["label"].map(LABELS.index).to_numpy(), predict(again, tok, test["text"].tolist(), cfg,
                                                                     paradigm), len(LABELS))
    seed = next(s for s in m["seeds"] if s["seed"] == m["saved_seed"])
    assert got["macro_f1"] == pytest.approx(seed["test_macro_f1"], abs=1e-4)
    assert got["accuracy"] == pytest.approx(seed["test_accuracy"], abs=1e-4)
    saved = json.loads((out / "finetune.json").read_text())
    assert saved["labels"] == LABELS and saved["curve"]
    assert (tmp_path / "curve.tsv").read_text().startswith("step\tepoch\tloss")
    # its model card: the scores over the seeds, the task's terms (no ingest manifest beside this task file)
    from stages.provenance import stagecard

    card = (out / "README.md").read_text()
    assert card == stagecard.render(stagecard.read_facts(out))
    assert f"{m['test_macro_f1']:.3f} ± {m['test_macro_f1_std']:.3f} (mean ± std over {len(m['seeds'])} seeds)" in card
    assert "sources and licences: unknown" in card and "Not known when this folder was written" in card
    assert stagecard.read_facts(out)["parameters"] == stagecard.count_parameters(out)
    if paradigm != "t5":
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        model = AutoModelForSequenceClassification.from_pretrained(str(out))
        tok = AutoTokenizer.from_pretrained(str(out))
        assert model.config.id2label[0] == "river"
        logits = model(**tok(["The farmer visited the castle."], return_tensors="pt")).logits
        assert logits.shape == (1, 3)


@pytest.mark.parametrize("paradigm", ["bert", "gpt", "t5"])
def test_random_init_learns_the_easy_task(models, tmp_path, paradigm):
    cfg = load_config(write_params(tmp_path / "p.yaml", epochs=8, lr=1e-3, patience=100), paradigm)
    task = write_task(tmp_path / "task.parquet", task_rows(80))
    out = finetune(cfg, Body(paradigm, "random", models.models[paradigm]), df=read_task(task), log=lambda m: None)
    losses = [row["loss"] for row in out["curve"]]
    assert out["metrics"]["steps"] == 8 * 18 and not out["metrics"]["stopped_early"]
    if paradigm == "t5":  # a random T5 learns the target format first; the label words take longer
        assert losses[-1] < losses[0] / 4
    else:
        assert losses[-1] < losses[0] * 0.8
        assert out["metrics"]["best_val_macro_f1"] > 0.5  # chance on three balanced classes is about 0.33


def test_t5_predictions_are_always_labels(models, tmp_path):
    cfg = load_config(write_params(tmp_path / "p.yaml", epochs=1), "t5")
    out = finetune(cfg, Body("t5", "pretrained", models.models["t5"]), df=read_task(models.task), log=lambda m: None)
    clf, tok = out["classifier"], out["tokenizer"]
    from stages.finetuning.core import encode

    pred = clf.predict(encode(tok, ["anything at all", "the castle"], cfg, "t5"))
    assert pred.dtype == torch.int64 and set(pred.tolist()) <= {0, 1, 2}
    assert clf.candidates.shape[0] == 3 and (clf.candidates[:, 0] != -100).all()


def test_gpt_auxiliary_lm_loss_is_added(models, tmp_path):
    from stages.finetuning.core import encode
    from stages.finetuning.heads import HeadSpec, make_classifier
    from transformers import AutoTokenizer

    cfg = load_config(write_params(tmp_path / "p.yaml"), "gpt")
    tok = AutoTokenizer.from_pretrained(str(models.models["gpt"]))
    batch = encode(tok, ["The farmer visited the castle.", "A market."], cfg, "gpt")
    batch["labels"] = torch.tensor([2, 1])
    with_aux = make_classifier("gpt", models.models["gpt"], LABELS, tok, init="pretrained", seed=0, spec=HeadSpec(aux_lm_weight=0.5))
    without = make_classifier("gpt", models.models["gpt"], LABELS, tok, init="pretrained", seed=0, spec=HeadSpec(aux_lm_weight=0.0))
    a, b = with_aux.loss(batch).item(), without.loss(batch).item()
    assert a > b  # the LM loss of a barely trained model is positive
    # the auxiliary term is exactly the causal-LM loss of the text
    lm = torch.nn.functional.cross_entropy
    logits = with_aux.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                            output_hidden_states=True).hidden_states[-1][:, :-1] @ with_aux.model.transformer.wte.weight.T
    target = batch["input_ids"][:, 1:].masked_fill(batch["attention_mask"][:, 1:] == 0, -100)
    expected = b + 0.5 * lm(logits.reshape(-1, logits.size(-1)), target.reshape(-1), ignore_index=-100).item()
    assert a == pytest.approx(expected, rel=1e-5)


def test_sampled_auxiliary_lm_loss_is_unbiased(models, tmp_path):
    from stages.finetuning.core import encode
    from stages.finetuning.heads import HeadSpec, make_classifier
    from transformers import AutoTokenizer

    cfg = load_config(write_params(tmp_path / "p.yaml"), "gpt")
    tok = AutoTokenizer.from_pretrained(str(models.models["gpt"]))
    texts = [r["text"] for r in task_rows(4)][:8]
    batch = encode(tok, texts, cfg, "gpt")
    batch["labels"] = torch.zeros(len(texts), dtype=torch.long)
    full = make_classifier("gpt", models.models["gpt"], LABELS, tok, init="pretrained", seed=0, spec=HeadSpec(aux_lm_weight=1.0))
    sampled = make_classifier("gpt", models.models["gpt"], LABELS, tok, init="pretrained", seed=0, spec=HeadSpec(aux_lm_weight=1.0, aux_lm_fraction=0.25))
    with torch.no_grad():
        exact = full.loss(batch).item()
        draws = np.array([sampled.loss(batch).item() for _ in range(400)])
    assert draws.std() > 0                                   # positions are drawn afresh each step
    assert abs(draws.mean() - exact) < 4 * draws.std() / np.sqrt(len(draws))


def test_early_stopping_stops_after_patience_evaluations_without_gain(models, tmp_path):
    cfg = load_config(write_params(tmp_path / "p.yaml", lr=1e-9, patience=1, epochs=5), "bert")
    out = finetune(cfg, Body("bert", "pretrained", models.models["bert"]), df=read_task(models.task), log=lambda m: None)
    assert out["metrics"]["stopped_early"] is True and len(out["curve"]) == 2


def test_the_returned_model_is_the_best_on_validation_not_the_last(models, tmp_path, monkeypatch):
    import stages.finetuning.core as ft
    import stages.finetuning.metrics as metrics

    # Validation scores scripted to peak at the second evaluation; the weights each prediction saw are recorded.
    script = iter([0.2, 0.9, 0.5, 0.4, 0.3, 0.2, 0.1, 0.1, 0.1, 0.1])
    seen, real_predict, real_scores = [], ft.predict, metrics.scores

    def recording_predict(clf, *args, **kwargs):
        seen.append({k: v.detach().clone() for k, v in clf.model.state_dict().items()})
        return real_predict(clf, *args, **kwargs)

    def scripted_scores(gold, pred, num_labels):
        out = real_scores(gold, pred, num_labels)
        return dict(out, macro_f1=next(script)) if len(seen) <= 6 else out  # the 7th prediction is the test's

    monkeypatch.setattr(ft, "predict", recording_predict)
    monkeypatch.setattr(metrics, "scores", scripted_scores)
    cfg = load_config(write_params(tmp_path / "p.yaml", lr=0.003, patience=100, epochs=2, eval_every=3), "bert")
    out = finetune(cfg, Body("bert", "random", models.models["bert"]), df=read_task(models.task), log=lambda m: None)
    assert [row["val_macro_f1"] for row in out["curve"]] == [0.2, 0.9, 0.5, 0.4, 0.3, 0.2]  # 18 steps, every 3
    assert out["metrics"]["best_val_macro_f1"] == 0.9 and len(seen) == 7
    changed = [k for k in seen[1] if not torch.equal(seen[1][k], seen[5][k])]
    assert changed, "precondition: training moved the weights after the best evaluation"
    for name, value in seen[6].items():  # the model scored on test (and returned) is the one of evaluation 2
        assert torch.equal(value, seen[1][name]), name
    final = out["classifier"].model.state_dict()
    assert all(torch.equal(final[k], seen[1][k]) for k in final)


@pytest.mark.parametrize("val_select", ["full", "sample"])
def test_validation_score_is_the_best_checkpoint_on_the_whole_split_or_the_sample(models, tmp_path, val_select):
    import stages.finetuning.core as ft

    df = read_task(models.task)
    n_val = int((df["split"] == "validation").sum())
    cfg = load_config(write_params(tmp_path / "p.yaml", max_eval_examples=5, val_select=val_select, epochs=1), "bert")
    out = finetune(cfg, Body("bert", "pretrained", models.models["bert"]), df=df, log=lambda m: None)
    m = out["metrics"]
    sample_best = max(row["val_macro_f1"] for row in out["curve"])
    if val_select == "sample":
        assert m["best_val_macro_f1"] == sample_best and m["val_examples"] == 5 and "sample_val_macro_f1" not in m
    else:
        # The returned (restored best) classifier, scored on every validation example, gives the reported score.
        val = df[df["split"] == "validation"]
        gold = val["label"].map({lab: i for i, lab in enumerate(LABELS)}).to_numpy()
        pred = ft.predict(out["classifier"], out["tokenizer"], val["text"].tolist(), cfg, "bert")
        assert m["val_examples"] == n_val > 5 and m["sample_val_macro_f1"] == sample_best
        assert m["best_val_macro_f1"] == scores(gold, pred, len(LABELS))["macro_f1"]


def test_unknown_val_select_is_refused(tmp_path):
    from stages.config import ConfigError

    with pytest.raises(ConfigError, match="val_select"):
        load_config(write_params(tmp_path / "p.yaml", val_select="test"), "bert")


def test_task_gate_rejects_unknown_labels_and_leaks(models, tmp_path, capsys):
    rows = task_rows()
    rows[0] = dict(rows[0], label="volcano")
    previous = tmp_path / "live" / "lr0.001-seed0" / "metrics.json"  # the last good run's live log
    previous.parent.mkdir(parents=True)
    previous.write_text("{}")
    two = write_params(tmp_path / "two-seeds.yaml", seeds=[0, 1])  # two workers: the gate runs while they start
    rc, out = run(models, tmp_path, "bert", "random", params=two, task=write_task(tmp_path / "bad.parquet", rows),
                  extra=["--live", str(tmp_path / "live")])
    assert rc == 1 and "finetune-task" in capsys.readouterr().err and not out.exists()
    assert previous.is_file()
    rows = task_rows()
    leak = next(r for r in rows if r["split"] == "test")
    rows.append(dict(leak, split="train", id="leak"))
    rc, out = run(models, tmp_path, "bert", "random", task=write_task(tmp_path / "leak.parquet", rows))
    assert rc == 1 and "split_overlap" in capsys.readouterr().err


@pytest.mark.parametrize("paradigm", ["bert", "gpt", "t5"])
def test_pooled_head_saves_and_reloads_the_same_scores(models, tmp_path, paradigm):
    from stages.finetuning.core import encode
    from stages.finetuning.heads import HEAD_FILE, HeadSpec, PooledClassifier, make_classifier

    cfg = load_config(write_params(tmp_path / "p.yaml", epochs=2, head="pooled"), paradigm)
    out = finetune(cfg, Body(paradigm, "pretrained", models.models[paradigm]), df=read_task(models.task), log=lambda m: None)
    clf, tok = out["classifier"], out["tokenizer"]
    assert isinstance(clf, PooledClassifier)
    clf.model.save_pretrained(str(tmp_path / "saved"))
    tok.save_pretrained(str(tmp_path / "saved"))
    assert (tmp_path / "saved" / HEAD_FILE).is_file()
    again = make_classifier(paradigm, tmp_path / "saved", LABELS, tok, init="pretrained", seed=7, spec=HeadSpec(head="pooled"))
    batch = encode(tok, ["The farmer visited the castle.", "a market"], cfg, paradigm)
    clf.model.eval()
    again.model.eval()
    assert torch.allclose(clf.scores(batch), again.scores(batch), atol=1e-5)
    # padding does not change a text's score: the mean runs over real tokens only
    alone = clf.scores(encode(tok, ["a market"], cfg, paradigm))
    assert torch.allclose(alone[0], clf.scores(batch)[1], atol=1e-4)


def test_pooled_random_init_differs_from_pretrained_only_in_the_body(models, tmp_path):
    from stages.finetuning.heads import HeadSpec, make_classifier

    tok = None
    pre = make_classifier("bert", models.models["bert"], LABELS, tok, init="pretrained", seed=3, spec=HeadSpec(head="pooled"))
    rnd = make_classifier("bert", models.models["bert"], LABELS, tok, init="random", seed=3, spec=HeadSpec(head="pooled"))
    a, b = pre.model.state_dict(), rnd.model.state_dict()
    emb = "body.embeddings.word_embeddings.weight"
    assert not torch.equal(a[emb], b[emb])
    with pytest.raises(ValueError, match="head"):
        make_classifier("bert", models.models["bert"], LABELS, tok, init="random", seed=3, spec=HeadSpec(head="cls"))


def test_stage_runs_every_seed_and_picks_the_rate_on_validation(models, tmp_path):
    params = write_params(tmp_path / "params.yaml", epochs=1, seeds=[0, 1, 2], lr_grid=[0.003, 1e-7])
    rc, out = run(models, tmp_path, "bert", "random", params=params)
    assert rc == 0
    m = json.loads((tmp_path / "m.json").read_text())
    assert [s["seed"] for s in m["seeds"]] == [0, 1, 2]
    assert [t["lr"] for t in m["lr_grid"]] == [0.003, 1e-7]
    # a rate of 1e-7 cannot beat 0.003 on validation (it barely moves the head)
    best = max(m["lr_grid"], key=lambda t: t["best_val_macro_f1"])
    assert m["lr"] == best["lr"] and all(s["lr"] == m["lr"] for s in m["seeds"])
    f1s = [s["test_macro_f1"] for s in m["seeds"]]
    assert m["test_macro_f1"] == pytest.approx(np.mean(f1s), abs=1e-4)
    assert m["test_macro_f1_std"] == pytest.approx(np.std(f1s, ddof=1), abs=1e-4)
    saved = json.loads((out / "finetune.json").read_text())
    assert saved["config"]["lr"] == m["lr"]
    assert m["saved_seed"] == max(m["seeds"], key=lambda s: s["best_val_macro_f1"])["seed"]


@pytest.mark.parametrize("lr_grid", [[], [0.003, 0.001]])  # one batch of seeds; a grid, then the seeds
def test_seeds_in_two_worker_processes_give_the_same_runs(models, tmp_path, lr_grid):
    from stages.finetuning.seeds import finetune_seeds

    results = []
    for workers in (1, 2):
        cfg = load_config(write_params(tmp_path / f"p{workers}.yaml", epochs=1, seeds=[0, 1], threads=1,
                                       workers=workers, head="pooled", lr_grid=lr_grid), "gpt")
        out = finetune_seeds(cfg, Body("gpt", "random", models.models["gpt"]), df=read_task(models.task), log=lambda m: None)
        results.append(out)
    one, two = results
    assert one["metrics"]["seeds"] == two["metrics"]["seeds"]
    for a, b in zip(one["classifier"].model.state_dict().values(), two["classifier"].model.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-5)


class _ConstantPlusSignal(torch.nn.Module):
    """A body whose states are one large shared vector plus a small per-example signal (a pre-trained body's
    mean-pooled states look like this: mean cosine 0.95-0.999 between task examples)."""

    def __init__(self, signal: torch.Tensor) -> None:
        super().__init__()
        self.signal = signal

    def forward(self, input_ids, attention_mask):
        from types import SimpleNamespace

        shared = torch.linspace(5.0, 50.0, self.signal.size(1))
        return SimpleNamespace(last_hidden_state=(shared + self.signal[input_ids[:, 0]]).unsqueeze(1).repeat(
            1, input_ids.size(1), 1))


def test_pooled_batch_norm_removes_the_shared_direction():
    from stages.finetuning.heads import _Pooled

    torch.manual_seed(0)
    signal = 0.01 * torch.randn(8, 16)
    head = _Pooled(_ConstantPlusSignal(signal), 16, 3)
    ids, mask = torch.arange(8).unsqueeze(1).repeat(1, 4), torch.ones(8, 4, dtype=torch.long)
    pooled = head.body(ids, mask).last_hidden_state.mean(1)
    normed = head.norm(pooled)
    spread = normed.std(0).mean().item()  # how far apart the examples are after the norm, per feature
    assert spread == pytest.approx(1.0, abs=0.1)  # standardised over the examples: what differs is kept
    assert torch.allclose(normed.mean(0), torch.zeros(16), atol=1e-3)


def test_pooled_batch_norm_trains_on_a_batch_of_one():
    from stages.finetuning.heads import _Pooled

    head = _Pooled(_ConstantPlusSignal(torch.randn(4, 8)), 8, 2)
    head.train()
    logits = head(torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 3, dtype=torch.long))
    assert logits.shape == (1, 2) and torch.isfinite(logits).all()  # running statistics, not a crash


def test_length_batches_cover_every_example_once_with_similar_lengths():
    from stages.finetuning.core import length_batches

    rng = np.random.default_rng(0)
    lengths = rng.integers(5, 128, size=1000)
    order = rng.permutation(1000)
    plain = length_batches(order, lengths, 32, 0, np.random.default_rng(1))
    assert np.array_equal(np.concatenate(plain), order) and len(plain) == 32
    pooled = length_batches(order, lengths, 32, 10, np.random.default_rng(1))
    assert len(pooled) == len(plain) and sorted(np.concatenate(pooled).tolist()) == list(range(1000))
    padded = lambda batches: sum(len(b) * lengths[b].max() for b in batches)  # noqa: E731
    assert padded(pooled) < 0.75 * padded(plain)  # far less padding
    # each pool of 10 batches holds the same examples as that stretch of the shuffled order
    assert sorted(np.concatenate(pooled).tolist()) == sorted(order.tolist())
    again = length_batches(order, lengths, 32, 10, np.random.default_rng(1))
    assert all(np.array_equal(a, b) for a, b in zip(pooled, again))  # seeded: the same batches


@pytest.mark.parametrize("paradigm", ["bert", "t5"])
def test_predict_in_length_order_returns_the_texts_own_predictions(models, tmp_path, paradigm):
    from stages.finetuning.core import encode, predict
    from stages.finetuning.heads import HeadSpec, make_classifier

    cfg = load_config(write_params(tmp_path / "p.yaml", head="pooled"), paradigm)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(models.models[paradigm]))
    clf = make_classifier(paradigm, models.models[paradigm], LABELS, tok, init="random", seed=0, spec=HeadSpec(head="pooled"))
    texts = ["a", "the farmer visited the castle by the river at dawn and stayed", "market", "the castle",
             "a river runs through the old market town where farmers sell grain"] * 3
    got = predict(clf, tok, texts, cfg, paradigm)
    clf.model.eval()
    one_by_one = [int(clf.predict(encode(tok, [t], cfg, paradigm))[0]) for t in texts]
    assert got.tolist() == one_by_one


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_precision_sets_autocast_for_training_and_prediction(models, tmp_path, monkeypatch, precision):
    """bf16 runs every forward pass (training and scoring) under autocast; weights stay fp32."""
    from stages.finetuning.heads import PooledClassifier

    seen = {"loss": set(), "scores": set()}
    loss, score = PooledClassifier.loss, PooledClassifier.scores

    def recording_loss(self, batch):
        seen["loss"].add(torch.is_autocast_enabled("cpu"))
        return loss(self, batch)

    def recording_scores(self, batch):
        seen["scores"].add(torch.is_autocast_enabled("cpu"))
        return score(self, batch)

    monkeypatch.setattr(PooledClassifier, "loss", recording_loss)
    monkeypatch.setattr(PooledClassifier, "scores", recording_scores)
    cfg = load_config(write_params(tmp_path / "p.yaml", head="pooled", epochs=1, precision=precision), "bert")
    out = finetune(cfg, Body("bert", "random", models.models["bert"]), df=read_task(models.task), log=lambda m: None)
    assert seen == {"loss": {precision == "bf16"}, "scores": {precision == "bf16"}}
    assert all(p.dtype == torch.float32 for p in out["classifier"].model.parameters())
    assert 0 <= out["metrics"]["test_macro_f1"] <= 1


def test_unknown_precision_is_refused(tmp_path):
    from stages.config import ConfigError

    with pytest.raises(ConfigError, match="precision"):
        load_config(write_params(tmp_path / "p.yaml", precision="fp16"), "bert")


def test_live_log_has_the_curve_and_the_throughput_of_each_evaluation(models, tmp_path):
    cfg = load_config(write_params(tmp_path / "p.yaml", epochs=2, patience=100), "bert")
    out = finetune(cfg, Body("bert", "random", models.models["bert"]), df=read_task(models.task), log=lambda m: None,
                   live_dir=tmp_path / "live")
    plots = tmp_path / "live" / "plots" / "metrics"
    f1_rows = (plots / "val" / "macro_f1.tsv").read_text().splitlines()[1:]
    tps_rows = (plots / "train" / "tokens_per_second.tsv").read_text().splitlines()[1:]
    flops_rows = (plots / "train" / "flops_per_second.tsv").read_text().splitlines()[1:]
    assert len(f1_rows) == len(tps_rows) == len(flops_rows) == len(out["curve"]) > 1
    assert all(float(row.split("\t")[-1]) > 0 for row in tps_rows)
    assert not (plots / "train" / "mfu.tsv").exists()  # no known peak on a CPU


def test_prompt_head_scores_the_label_words_at_a_mask_before_the_final_sep(models, tmp_path):
    from stages.finetuning.core import encode
    from stages.finetuning.heads import HeadSpec, PromptClassifier, make_classifier

    cfg = load_config(write_params(tmp_path / "p.yaml", epochs=2, head="prompt"), "bert")
    out = finetune(cfg, Body("bert", "pretrained", models.models["bert"]), df=read_task(models.task), log=lambda m: None)
    clf, tok = out["classifier"], out["tokenizer"]
    assert isinstance(clf, PromptClassifier)
    assert [tok.convert_ids_to_tokens(int(w)) for w in clf.words] == [
        tok.tokenize(lab)[0] for lab in LABELS]
    # the model sees [CLS] text [MASK] [SEP]: recorded from the body's input
    seen = {}
    body = getattr(clf.model, clf.body_name)
    hook = body.register_forward_pre_hook(lambda mod, args, kw: seen.update(kw), with_kwargs=True)
    texts = ["The farmer visited the castle.", "a market"]
    batch = encode(tok, texts, cfg, "bert")
    clf.model.eval()
    scores_batch = clf.scores(batch)
    hook.remove()
    for row, text in zip(seen["input_ids"].tolist(), texts):
        want = tok(text)["input_ids"]
        assert row[: len(want) + 1] == want[:-1] + [tok.mask_token_id, tok.sep_token_id]
    assert seen["attention_mask"].sum(1).tolist() == [len(tok(t)["input_ids"]) + 1 for t in texts]
    # the scores are the masked-LM logits of the label words there; padding does not change them
    alone = clf.scores(encode(tok, ["a market"], cfg, "bert"))
    assert torch.allclose(alone[0], scores_batch[1], atol=1e-4)
    ids = torch.tensor([tok(texts[1])["input_ids"][:-1] + [tok.mask_token_id, tok.sep_token_id]])
    full = clf.model(input_ids=ids).logits[0, -2]
    assert torch.allclose(full[clf.words], alone[0], atol=1e-4)
    # saved as a stock masked LM, reloaded with the same scores
    clf.model.save_pretrained(str(tmp_path / "saved"))
    tok.save_pretrained(str(tmp_path / "saved"))
    again = make_classifier("bert", tmp_path / "saved", LABELS, tok, init="pretrained", seed=7, spec=HeadSpec(head="prompt"))
    again.model.eval()
    assert torch.allclose(again.scores(batch), scores_batch, atol=1e-5)


def test_prompt_head_refuses_other_paradigms_and_labels_sharing_a_word(models, tmp_path):
    from transformers import AutoTokenizer

    from stages.finetuning.heads import HeadSpec, make_classifier

    tok = AutoTokenizer.from_pretrained(str(models.models["bert"]))
    with pytest.raises(ValueError, match="river, river"):
        make_classifier("bert", models.models["bert"], ["river", "river"], tok, init="random", seed=0, spec=HeadSpec(head="prompt"))
    with pytest.raises(ValueError, match="bert paradigm"):
        make_classifier("gpt", models.models["gpt"], LABELS, tok, init="random", seed=0, spec=HeadSpec(head="prompt"))


def test_embedding_rms_rescales_bert_embeddings_without_changing_what_the_model_computes(models, tmp_path):
    from transformers import AutoTokenizer

    from stages.finetuning.heads import HeadSpec, make_classifier, rescale_embeddings

    tok = AutoTokenizer.from_pretrained(str(models.models["bert"]))
    clf = make_classifier("bert", models.models["bert"], LABELS, tok, init="pretrained", seed=0, spec=HeadSpec(head="pooled"))
    clf.model.eval()
    emb = clf.model.body.embeddings.word_embeddings.weight
    ids = torch.randint(5, emb.shape[0], (3, 12))
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0
    with torch.no_grad():
        before = clf.model(ids, mask)
        scale = float(emb.pow(2).mean().sqrt())
        factor = rescale_embeddings(clf.model, 0.5 * scale)
        after = clf.model(ids, mask)
    assert factor == pytest.approx(0.5, rel=1e-5)
    assert float(emb.detach().pow(2).mean().sqrt()) == pytest.approx(0.5 * scale, rel=1e-4)
    torch.testing.assert_close(after, before, atol=1e-4, rtol=1e-4)
    gpt = make_classifier("gpt", models.models["gpt"], LABELS, AutoTokenizer.from_pretrained(
        str(models.models["gpt"])), init="pretrained", seed=0, spec=HeadSpec(head="pooled"))
    with pytest.raises(ValueError, match="BERT-style"):
        rescale_embeddings(gpt.model, 0.02)


def test_bert_reparametrisations_are_applied_before_training_in_order_and_refused_with_the_cloze_head(
        models, tmp_path, monkeypatch):
    from stages.config import ConfigError
    from stages.finetuning import heads

    refused = [({"head": "prompt", "embedding_rms": 0.02}, "embedding_rms"),
               ({"head": "prompt", "reinit_layers": 1}, "reinit_layers"),
               ({"head": "pooled", "reinit_layers": -1}, "reinit_layers")]
    for i, (overrides, key) in enumerate(refused):
        with pytest.raises(ConfigError, match=key):
            load_config(write_params(tmp_path / f"bad{i}.yaml", **overrides), "bert")
    seen = []
    rescale, reinit = heads.rescale_embeddings, heads.reinit_top_layers
    monkeypatch.setattr(heads, "rescale_embeddings", lambda m, rms: seen.append(("rescale", rms)) or rescale(m, rms))
    monkeypatch.setattr(heads, "reinit_top_layers",
                        lambda m, n, seed: seen.append(("reinit", n, seed)) or reinit(m, n, seed=seed))
    cfg = load_config(write_params(tmp_path / "q.yaml", head="pooled", embedding_rms=0.02, reinit_layers=1, epochs=1,
                                   seed=3), "bert")
    out = finetune(cfg, Body("bert", "pretrained", models.models["bert"]), df=read_task(models.task), log=lambda m: None)
    assert seen == [("rescale", 0.02), ("reinit", 1, 3)] and out["metrics"]["steps"] > 0


def test_reinit_top_layers_draws_only_the_top_layers_anew_per_seed(models):
    from transformers import AutoTokenizer

    from stages.finetuning.heads import HeadSpec, make_classifier, reinit_top_layers

    tok = AutoTokenizer.from_pretrained(str(models.models["bert"]))

    def body(seed=None):
        clf = make_classifier("bert", models.models["bert"], LABELS, tok, init="pretrained", seed=0, spec=HeadSpec(head="pooled"))
        if seed is not None:
            reinit_top_layers(clf.model, 1, seed=seed)
        return clf.model.body

    kept, fresh, fresh_again, other = body(), body(0), body(0), body(1)
    top = f"encoder.layer.{len(kept.encoder.layer) - 1}."
    params, again, others = (dict(b.named_parameters()) for b in (fresh, fresh_again, other))
    changed = []
    for name, p in kept.named_parameters():
        q = params[name]
        if name.startswith(top):
            if name.endswith("LayerNorm.weight"):
                assert torch.all(q == 1.0)
            elif name.endswith("bias"):
                assert torch.all(q == 0.0)
            else:  # a weight matrix, drawn at the config's initializer_range
                assert float(q.detach().std()) == pytest.approx(kept.config.initializer_range, rel=0.2)
                changed.append(name)
                assert not torch.equal(q, others[name])  # each seed its own draw
            assert torch.equal(q, again[name])  # the same seed, the same draw
        else:  # embeddings, lower layers, the convolution and the relative positions are kept
            assert torch.equal(p, q), name
    assert changed and not torch.equal(dict(kept.named_parameters())[changed[0]], params[changed[0]])
    with pytest.raises(ValueError, match="between 1 and"):
        reinit_top_layers(make_classifier("bert", models.models["bert"], LABELS, tok, init="pretrained", seed=0, spec=HeadSpec(head="pooled")).model, len(kept.encoder.layer) + 1)
    gpt = make_classifier("gpt", models.models["gpt"], LABELS, AutoTokenizer.from_pretrained(
        str(models.models["gpt"])), init="pretrained", seed=0, spec=HeadSpec(head="pooled"))
    with pytest.raises(ValueError, match="BERT-style"):
        reinit_top_layers(gpt.model, 1)
