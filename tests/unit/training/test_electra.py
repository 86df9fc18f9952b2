"""ELECTRA's replaced-token detection (Clark et al. 2020): the objective's batch, the sampling of replacements
from the generator, the discriminator's targets and loss, and a pre-training stage run end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml

from stages.objectives import for_paradigm, training_view
from stages.objectives.electra import RTD_HEAD_FILE, ReplacedTokenDetection, attach_rtd_head, electra_flops_per_token
from stages.training.data import generators, make_batch
from stages.training.models import build_model, flops_per_token, save_model
from tests.unit.objectives.test_masked_lm import LAYOUT, MASK, make_rows, near
from tests.unit.training.test_schedule_and_flops import BERT, SMALL


def test_selected_positions_are_all_masked_and_originals_and_uniforms_come_along():
    rows = make_rows()
    out = ReplacedTokenDetection(LAYOUT, select=0.15)(rows, generators(3, 0, [0] * len(rows), np.arange(len(rows))))
    ids, inputs, labels = rows.astype(np.int64), out["input_ids"].numpy(), out["labels"].numpy()
    selected = labels != -100
    assert np.array_equal(out["original_ids"].numpy(), ids)
    assert (inputs[selected] == MASK).all(), "ELECTRA masks every selected position (no 80/10/10)"
    assert np.array_equal(inputs[~selected], ids[~selected]) and np.array_equal(labels[selected], ids[selected])
    maskable = ~np.isin(ids, [0, 2, 3, 4])
    assert near(selected.sum() / maskable.sum(), 0.15, int(maskable.sum()))
    u = out["sample_u"].numpy()
    assert u.dtype == np.float32 and u.shape == ids.shape and 0 <= u.min() and u.max() < 1
    assert abs(u.mean() - 0.5) < 0.01


def test_for_paradigm_picks_the_objective_and_refuses_unknown_ones():
    assert for_paradigm(LAYOUT, objective="electra", select=0.2, rtd_weight=30.0).rtd_weight == 30.0
    assert for_paradigm(LAYOUT, objective="masked_lm", select=0.2, rtd_weight=30.0).name == "masked_lm"
    with pytest.raises(ValueError, match="objective"):
        for_paradigm(LAYOUT, objective="span_corruption")
    with pytest.raises(ValueError, match="rtd_weight"):
        ReplacedTokenDetection(LAYOUT, rtd_weight=0)


def electra_batch(rows: int = 6, seed: int = 3) -> dict:
    rng = np.random.default_rng(seed)
    blocks = rng.integers(5, BERT.vocab_size, size=(rows, BERT.block_len)).astype(np.uint32)
    blocks[:, 0], blocks[:, -1] = BERT.cls_id, BERT.sep_id
    blocks[1, 20:] = BERT.pad_id
    blocks[1, 19] = BERT.sep_id
    ids = np.arange(rows)
    return make_batch(for_paradigm(BERT, objective="electra", select=0.3), blocks, ids,
                      generators(seed, 0, [0] * rows, ids))


def test_replacements_are_sampled_from_the_generator_and_the_discriminator_learns_which():
    model = build_model(BERT, SMALL, seed=1)
    attach_rtd_head(model, seed=0)
    batch = electra_batch()
    view, prepare = training_view(model, for_paradigm(BERT, objective="electra", rtd_weight=50.0))
    seen = {}
    real_head = model.rtd_head.forward

    def spy(hidden):  # record what the discriminator saw
        seen["called"] = True
        return real_head(hidden)

    model.rtd_head.forward = spy
    out = view(**prepare(batch))
    assert seen.get("called")
    mlm_view, mlm_prepare = training_view(model, for_paradigm(BERT))
    mlm = mlm_view(**mlm_prepare({k: batch[k] for k in ("input_ids", "attention_mask", "labels")}))
    torch.testing.assert_close(out.mlm_loss, mlm.loss)  # the generator's loss is the masked-LM loss
    torch.testing.assert_close(out.loss, out.mlm_loss + 50.0 * out.rtd_loss)
    out.loss.backward()
    assert model.rtd_head[2].weight.grad is not None and model.rtd_head[2].weight.grad.abs().sum() > 0
    model.eval()
    evaluated = view(**prepare(batch))
    torch.testing.assert_close(evaluated.loss, out.mlm_loss.detach())  # evaluation: the masked-LM loss alone


def test_inverse_cdf_sampling_follows_the_generator_distribution():
    # A generator that always puts all its mass on token 7 replaces every selected position with 7; the
    # discriminator's targets are then "replaced" exactly where the original was not 7.
    model = build_model(BERT, SMALL, seed=1)
    attach_rtd_head(model, seed=0)
    with torch.no_grad():
        model.cls.predictions.bias.fill_(-30.0)
        model.cls.predictions.bias[7] = 30.0
    batch = electra_batch()
    captured = {}
    body = model.deberta if hasattr(model, "deberta") else model.bert
    real = body.forward

    def record(input_ids=None, **kw):
        captured.setdefault("inputs", []).append(input_ids.clone())
        return real(input_ids=input_ids, **kw)

    body.forward = record
    view, prepare = training_view(model, for_paradigm(BERT, objective="electra"))
    view(**prepare(batch))
    corrupted = captured["inputs"][1]
    selected = batch["labels"] != -100
    assert (corrupted[selected] == 7).all() and torch.equal(corrupted[~selected], batch["original_ids"][~selected])


def test_saved_model_is_the_stock_class_with_the_head_beside_it(tmp_path):
    from transformers import AutoModelForMaskedLM

    model = build_model(BERT, SMALL, seed=1)
    attach_rtd_head(model, seed=5)
    save_model(model, tmp_path)
    assert hasattr(model, "rtd_head") and (tmp_path / RTD_HEAD_FILE).is_file()
    loaded = AutoModelForMaskedLM.from_pretrained(str(tmp_path))
    assert not hasattr(loaded, "rtd_head")
    attach_rtd_head(loaded, seed=99, init=tmp_path)  # DAPT continues the trained head, not a fresh one
    for a, b in zip(model.rtd_head.parameters(), loaded.rtd_head.parameters()):
        assert torch.equal(a, b)


def test_flops_count_a_second_pass_of_the_transformer():
    model = build_model(BERT, SMALL, seed=1)
    mlm = flops_per_token(model, BERT, predicted_fraction=0.15)
    attach_rtd_head(model, seed=0)
    electra = electra_flops_per_token(model, BERT, select=0.15)
    assert mlm < electra < 2.2 * mlm


def electra_params(tmp_path, pretrain: dict, dapt: dict | None = None):
    """A params file whose BERT pre-training and DAPT use these train settings."""
    from tests.unit.training.conftest import BASE_PARAMS

    params = json.loads(json.dumps(BASE_PARAMS))
    params["pretrain"]["bert"] = {"train": pretrain}
    params["dapt"]["bert"] = {"train": dapt if dapt is not None else pretrain}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def test_pretrain_and_dapt_stages_train_electra(datasets, tmp_path):
    from stages.pretrain import main

    path = electra_params(tmp_path, {"objective": "electra", "mlm_select": 0.25})
    out, dapt = tmp_path / "general", tmp_path / "dapt"
    assert main(datasets.args("bert", out, path, metrics=tmp_path / "m.json")) == 0
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert metrics["eval_loss"] > 0 and (out / RTD_HEAD_FILE).is_file()
    training = json.loads((out / "training.json").read_text())
    assert training["config"]["train"]["objective"] == "electra"
    assert main(datasets.args("bert", dapt, path, section="dapt", corpus="domain", init=out)) == 0
    assert (dapt / RTD_HEAD_FILE).is_file()


def test_pretrain_and_dapt_stages_train_electra_with_a_separate_generator(datasets, tmp_path, capsys):
    from stages.pretrain import main
    from stages.objectives.electra import GENERATOR_FILE

    path = electra_params(tmp_path, {"objective": "electra", "generator_size": 0.25})
    out, dapt = tmp_path / "general", tmp_path / "dapt"
    assert main(datasets.args("bert", out, path, metrics=tmp_path / "m.json")) == 0
    assert (out / GENERATOR_FILE).is_file() and (out / RTD_HEAD_FILE).is_file()
    assert json.loads((out / "training.json").read_text())["config"]["train"]["generator_size"] == 0.25
    before = (out / GENERATOR_FILE).read_bytes()
    assert main(datasets.args("bert", dapt, path, section="dapt", corpus="domain", init=out)) == 0
    assert (dapt / GENERATOR_FILE).read_bytes() != before  # continued and trained further
    # DAPT without it: refused, not silently tied
    path = electra_params(tmp_path, {"objective": "electra", "generator_size": 0.25}, {"objective": "electra"})
    capsys.readouterr()
    assert main(datasets.args("bert", tmp_path / "tied", path, section="dapt", corpus="domain", init=out)) == 1
    assert "separate ELECTRA generator" in capsys.readouterr().err


def test_electra_is_refused_for_other_paradigms(datasets, tmp_path, capsys):
    from stages.pretrain import main
    from tests.unit.training.conftest import BASE_PARAMS

    params = json.loads(json.dumps(BASE_PARAMS))
    params["pretrain"]["gpt"] = {"train": {"objective": "electra"}}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    assert main(datasets.args("gpt", tmp_path / "out", path)) == 1
    assert "electra" in capsys.readouterr().err


def test_a_separate_generator_is_smaller_shares_the_word_embeddings_and_trains():
    from stages.objectives.electra import attach_generator

    model = build_model(BERT, SMALL, seed=1)
    attach_rtd_head(model, seed=0)
    attach_generator(model, size=0.5, seed=2)
    gen = model.electra_generator
    assert gen.hidden == 16 and gen.body.config.num_hidden_layers == SMALL.layers
    assert not any(p is model.bert.embeddings.word_embeddings.weight for p in gen.parameters())  # shared, not copied
    batch = electra_batch()
    view, prepare = training_view(model, for_paradigm(BERT, objective="electra", rtd_weight=50.0))
    out = view(**prepare(batch))
    torch.testing.assert_close(out.loss, out.mlm_loss + 50.0 * out.rtd_loss)
    out.loss.backward()
    # the generator's loss reaches the shared embeddings through its input and its output layer
    assert gen.body.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0
    assert model.bert.embeddings.word_embeddings.weight.grad.abs().sum() > 0
    assert model.cls.predictions.transform.dense.weight.grad is None  # the tied MLM head is not used
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    first = None
    for _ in range(30):
        opt.zero_grad()
        out = view(**prepare(batch))
        out.mlm_loss.backward()
        opt.step()
        first = first if first is not None else out.mlm_loss.item()
    assert out.mlm_loss.item() < first - 1.0  # the generator learns the batch's masked tokens


def test_a_separate_generator_saves_beside_the_model_and_dapt_continues_it(tmp_path):
    from transformers import AutoModelForMaskedLM

    from stages.objectives.electra import GENERATOR_CONFIG, GENERATOR_FILE, attach_generator

    model = build_model(BERT, SMALL, seed=1)
    attach_rtd_head(model, seed=0)
    attach_generator(model, size=0.25, seed=2)
    save_model(model, tmp_path)
    assert (tmp_path / GENERATOR_FILE).is_file() and json.loads((tmp_path / GENERATOR_CONFIG).read_text())["size"] == 0.25
    assert hasattr(model, "electra_generator")  # restored after saving
    loaded = AutoModelForMaskedLM.from_pretrained(str(tmp_path))  # still the stock class
    attach_rtd_head(loaded, seed=9, init=tmp_path)
    attach_generator(loaded, size=0.25, seed=9, init=tmp_path)
    for a, b in zip(model.electra_generator.parameters(), loaded.electra_generator.parameters()):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="generator_size: 0.5 but .* size 0.25"):
        attach_generator(loaded, size=0.5, seed=9, init=tmp_path)


def test_flops_of_a_separate_generator_replace_the_tied_masked_lm_pass():
    from stages.objectives.electra import attach_generator

    model = build_model(BERT, SMALL, seed=1)
    attach_rtd_head(model, seed=0)
    tied = electra_flops_per_token(model, BERT, select=0.15)
    attach_generator(model, size=0.25, seed=2)
    separate = electra_flops_per_token(model, BERT, select=0.15)
    mlm = flops_per_token(build_model(BERT, SMALL, seed=1), BERT, predicted_fraction=0.15)
    assert separate < tied and separate > 0.5 * mlm


def test_generator_size_is_checked():
    from stages.training.config import TrainConfig

    with pytest.raises(ValueError, match="generator_size: must be in"):
        TrainConfig(objective="electra", generator_size=1.5)
    with pytest.raises(ValueError, match="generator_size: for objective electra only"):
        TrainConfig(generator_size=0.25)
