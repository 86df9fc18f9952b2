"""The model card a training stage writes into its folder: made of the stage's inputs only, rendered from its
``card.json`` and from nothing else, carried from pre-training through DAPT to fine-tuning, and checked."""

from __future__ import annotations

import json

from stages.finetuning.core import Body
from stages.provenance import stagecard


def manifest(path, corpus: str, licence: str, kind: str = "npm_brown", documents: int = 500):
    path.mkdir(parents=True, exist_ok=True)
    (path / "manifest.json").write_text(json.dumps({
        "corpus": corpus, "counts": {"documents": documents},
        "sources": [{"kind": kind, "description": f"{corpus} text", "licence": licence, "records": documents,
                     "files": [{"path": "x.tgz", "sha256": "0" * 64}], "packages": [{"name": "p"}]}]}))
    return path / "manifest.json"


MODEL = {"arch": "deberta_v2", "layers": 2, "d_model": 128, "heads": 2, "d_ff": 512, "dropout": 0.0}


def general_and_dapt(tmp_path):
    general = stagecard.corpora([manifest(tmp_path / "ing/general", "general", "MIT; research use")])
    pre = tmp_path / "pretrain"
    pre.mkdir()
    stagecard.write(pre, stagecard.pretrain_facts(
        kind="pretrain", paradigm="bert", corpus="general", config={"model": MODEL, "train": {"mlm_select": 0.3}},
        metrics={"tokens": 800_000, "parameters": 1_540_000, "train_loss": 5.9, "eval_loss": 5.7,
                 "eval_accuracy": 0.163}, sources=general, init=None))
    domain = stagecard.corpora([manifest(tmp_path / "ing/domain", "domain", "DFSG-free, per package",
                                         kind="debian_descriptions", documents=48_000)])
    dapt = tmp_path / "dapt"
    dapt.mkdir()
    stagecard.write(dapt, stagecard.pretrain_facts(
        kind="dapt", paradigm="bert", corpus="domain", config={"train": {"mlm_select": 0.3}},
        metrics={"tokens": 4_000_000, "parameters": 1_540_000, "eval_loss": 4.3}, sources=domain, init=pre))
    return pre, dapt


def test_a_pretrained_folder_card_states_its_data_terms_objective_and_tokens(tmp_path):
    pre, _ = general_and_dapt(tmp_path)
    card = (pre / "README.md").read_text()
    assert card == stagecard.render(json.loads((pre / "card.json").read_text()))
    assert "licence: MIT; research use" in card
    assert "masked language modelling, 30% of the positions selected for prediction" in card
    assert "| pretrain | general | masked language modelling, 30% of the positions selected for prediction | " \
           "800,000 |" in card
    assert "deberta_v2, 2 layers, 128 d_model, 2 heads, 512 d_ff" in card
    assert "| held-out loss | 5.700 |" in card and "1,540,000" in card


def test_dapt_carries_the_general_runs_tokens_and_corpora(tmp_path):
    _, dapt = general_and_dapt(tmp_path)
    facts = stagecard.read_facts(dapt)
    assert [t["stage"] for t in facts["training"]] == ["pretrain", "dapt"]
    assert set(facts["corpora"]) == {"general", "domain"}
    assert facts["model_config"] == MODEL  # DAPT's config holds no model: it comes from the folder it continued
    card = (dapt / "README.md").read_text()
    assert "| training tokens | 4,800,000 |" in card
    assert "licence: MIT; research use" in card and "licence: DFSG-free, per package" in card
    assert "pre-trained, then domain-adapted (DAPT) (corpus: domain)" in card


def finetuned(tmp_path, init: str, model_dir):
    task = stagecard.corpora([manifest(tmp_path / "ing/task", "task", "DFSG-free, per package",
                                       kind="debian_descriptions", documents=11_773)])
    seeds = [{"seed": s, "test_macro_f1": 0.77 + s / 100, "test_accuracy": 0.8} for s in (0, 1, 2)]
    facts = stagecard.finetune_facts(
        Body("bert", init, model_dir), labels=["net", "games"], config={"head": "pooled", "max_len": 128},
        metrics={"train_examples": 9274, "steps": 310, "lr": 0.001, "test_macro_f1": 0.778,
                 "test_macro_f1_std": 0.014, "seeds": seeds, "saved_seed": 1, "test_examples": 1101},
        sources=task, parameters=1_560_000)
    out = tmp_path / f"ft-{init}"
    out.mkdir()
    stagecard.write(out, facts)
    return out


def test_a_finetuned_card_has_the_pretraining_behind_it_and_says_the_gate_comes_later(tmp_path):
    _, dapt = general_and_dapt(tmp_path)
    card = (finetuned(tmp_path, "dapt", dapt) / "README.md").read_text()
    assert "Debian package section classification: a package description in, one of its 2 sections out" in card
    assert "Total: 4,800,000 tokens." in card
    assert "0.778 ± 0.014 (mean ± std over 3 seeds)" in card
    assert "seed 1: test macro-F1 0.780" in card
    assert "Not known when this folder was written" in card and "**PASSED**" not in card
    assert card.count("licence: ") == 3  # general, domain, task


def test_a_random_init_card_claims_no_pretraining(tmp_path):
    pre, _ = general_and_dapt(tmp_path)
    card = (finetuned(tmp_path, "random", pre) / "README.md").read_text()
    assert "none (random initialisation: no pre-trained weights)" in card
    assert "No pre-training: the weights were initialised at random" in card
    assert "| pretrain |" not in card
    assert "licence: MIT; research use" in card  # its tokenizer was still trained on the general corpus


def test_a_task_without_an_ingest_manifest_says_its_terms_are_unknown(tmp_path):
    (tmp_path / "mine").mkdir()
    corpora = stagecard.corpora([tmp_path / "mine" / "manifest.json"])
    assert corpora == {"mine": {"documents": None, "sources": None}}
    assert "sources and licences: unknown" in "\n".join(stagecard.corpora_lines(corpora))


def test_check_finds_an_edited_card_and_a_licence_that_is_not_the_manifests(tmp_path):
    pre, _ = general_and_dapt(tmp_path)
    record_sources = {"general": json.loads((tmp_path / "ing/general/manifest.json").read_text())}
    problems, verified = stagecard.check(pre, record_sources)
    assert problems == [] and len(verified) == 2

    (pre / "README.md").write_text((pre / "README.md").read_text().replace("MIT", "CC0"))
    problems, _ = stagecard.check(pre, record_sources)
    assert len(problems) == 1 and "README.md: not the card its card.json renders" in problems[0]

    stagecard.write(pre, stagecard.read_facts(pre))
    record_sources["general"]["sources"][0]["licence"] = "proprietary"
    problems, _ = stagecard.check(pre, record_sources)
    assert len(problems) == 1 and "sources of corpus 'general' (licences included) differ" in problems[0]
    problems, _ = stagecard.check(pre, {})
    assert "corpus 'general' is not upstream of this folder" in problems[0]


def test_a_folder_without_card_json_is_noted_not_failed(tmp_path):
    problems, verified = stagecard.check(tmp_path)
    assert problems == [] and "no folder card to check" in verified[0]


def test_the_electra_objective_says_whether_its_generator_is_tied_or_separate():
    from stages.provenance.stagecard import objective_text

    tied = objective_text("bert", "electra", 0.15)
    separate = objective_text("bert", "electra", 0.15, 0.25)
    assert "generator and discriminator tied" in tied and "15% of the positions masked" in tied
    assert "a separate generator 0.25 of the discriminator's width" in separate and "tied" not in separate
    assert objective_text("bert", "electra", 0.15, 0.0) == tied
    assert objective_text("bert", "masked_lm", 0.3, 0.25) == objective_text("bert", "masked_lm", 0.3)


def test_a_pinned_source_names_its_pin_in_the_card():
    pin = {"kind": "debian_descriptions", "codename": "bookworm", "version": "12.15",
           "date": "Sat, 11 Jul 2026 10:16:37 UTC", "release_sha256": "ab" * 32, "indices": {}}
    lines = stagecard.corpora_lines({"task": {"documents": 3, "sources": [
        {"kind": "debian_descriptions", "description": "d", "licence": "l", "pin": pin, "records": 3}]}})
    assert "    - pinned: bookworm 12.15 of Sat, 11 Jul 2026 10:16:37 UTC (Release sha256 abababababababab...)" in lines
