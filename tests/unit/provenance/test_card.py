"""Model cards are rendered from the lineage record alone: they state its values, say "unknown" where it has
none, and ``--verify`` names a card that is not the one the record renders."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

from stages.provenance.card import UNKNOWN, bento_card, classifier_card, generative_card
from stages.provenance.hashing import folder_manifest
from stages.provenance.record import collect, count_parameters
from stages.provenance.targets import Target
from stages.provenance.verify import verify
from tests.unit.provenance.workspace import make_workspace

LABELS = ["net", "games", "fonts"]


def _out(path: str) -> dict:
    return {"path": path, "md5": "0" * 32}


def lineage() -> dict:
    """A record shaped as ``collect`` writes it, for a pre-trained BERT fine-tuned on Debian sections, with a
    DAPT T5 beside it (only what the cards read; values chosen so that none is a default)."""
    stages = {
        "ingest@general": {"outs": [_out("data/ingested/general")]},
        "ingest@task": {"outs": [_out("data/ingested/task")]},
        "pretrain@bert": {"deps": [_out("data/ingested/general")],
                          "params": {"params.yaml": {
                              "pretrain.defaults": {"model": {"layers": 2, "d_model": 128, "heads": 2},
                                                    "train": {"mlm_select": 0.15}},
                              "pretrain.bert": {"model": {"arch": "deberta_v2"}, "train": {"mlm_select": 0.3}}}},
                          "outs": [_out("data/models/pretrain/bert"), _out("reports/metrics/pretrain-bert.json")]},
        "pretrain@t5": {"deps": [_out("data/ingested/general")],
                        "params": {"params.yaml": {"pretrain.t5": {"train": {"objective": "ul2"}}}},
                        "outs": [_out("data/models/pretrain/t5"), _out("reports/metrics/pretrain-t5.json")]},
        "dapt@t5": {"deps": [_out("data/models/pretrain/t5")],
                    "outs": [_out("data/models/dapt/t5"), _out("reports/metrics/dapt-t5.json")]},
        "finetune@bert-pretrained": {
            "deps": [_out("data/ingested/task"), _out("data/models/pretrain/bert")],
            "params": {"params.yaml": {"finetune.defaults": {"max_len": 96, "head": "pooled"}, "finetune.bert": {}}},
            "outs": [_out("data/models/finetune/bert-pretrained"),
                     _out("reports/metrics/finetune-bert-pretrained.json")]},
        "evaluate": {"deps": [_out("data/models/finetune/bert-pretrained"), _out("data/models/dapt/t5")],
                     "outs": [_out("reports/metrics/evaluation.json"), _out("reports/quality/model-gate.json")]},
    }
    return {
        "schema": 1, "created": "2030-01-02T03:04:05+00:00",
        "model": {"name": "bert-pretrained", "path": "data/models/finetune/bert-pretrained", "paradigm": "bert",
                  "init": "pretrained", "labels": LABELS, "stage": "finetune@bert-pretrained", "parameters": 1234567,
                  "files": {"config.json": "a" * 32}, "md5": "b" * 32 + ".dir"},
        "git": {"commit": "c0ffee" * 6 + "abcd", "dirty": False, "dirty_paths": []},
        "stages": stages, "files": {}, "params": {},
        "sources": {
            "general": {"stage": "ingest@general", "counts": {"documents": 6546},
                        "sources": [{"kind": "npm_brown", "description": "Brown corpus via npm",
                                     "licence": "non-commercial research use", "records": 500},
                                    {"kind": "npm_mystery", "description": "a source without terms"}]},
            "task": {"stage": "ingest@task", "counts": {"documents": 11773},
                     "sources": [{"kind": "debian_descriptions", "description": "Debian package descriptions",
                                  "licence": "each package's own licence", "records": 11803}]},
        },
        "metrics": {
            "reports/metrics/pretrain-bert.json": {"corpus": "general", "parameters": 1500000, "tokens": 800768,
                                                   "eval_loss": 5.8},
            "reports/metrics/pretrain-t5.json": {"corpus": "general", "parameters": 1967744, "tokens": 401408,
                                                 "eval_loss": 6.12358},
            "reports/metrics/dapt-t5.json": {"corpus": "domain", "parameters": 1967744, "tokens": 2000896,
                                             "train_loss": 5.1, "eval_loss": 5.37633, "eval_accuracy": 0.26536},
            "reports/metrics/finetune-bert-pretrained.json": {
                "test_macro_f1": 0.74515, "test_macro_f1_std": 0.01259, "test_accuracy": 0.77717,
                "test_accuracy_std": 0.01888, "best_val_macro_f1": 0.8165, "best_val_macro_f1_std": 0.02288,
                "majority_test_macro_f1": 0.0201, "majority_test_accuracy": 0.19164, "train_examples": 9274,
                "test_examples": 1101, "steps": 290, "lr": 0.001, "saved_seed": 2,
                "seeds": [{"seed": 0, "test_macro_f1": 0.73536, "test_accuracy": 0.75568},
                          {"seed": 1, "test_macro_f1": 0.74073, "test_accuracy": 0.78474},
                          {"seed": 2, "test_macro_f1": 0.75935, "test_accuracy": 0.7911}]},
            "reports/metrics/evaluation.json": {
                "intrinsic": {"t5": {"dapt": {"domain": {"blocks": 128, "eval_loss": 5.4321}}}},
                "versus_baselines": {"best": {"300": {"series": "fasttext", "test_macro_f1": 0.5},
                                              "9274": {"series": "tfidf", "test_macro_f1": 0.81234,
                                                       "test_macro_f1_std": 0.0}}}},
        },
        "gates": {},
        "model_gate": {"passed": True, "selected": "bert-pretrained", "selected_by": "best validation macro-F1",
                       "checks": [{"check": "test macro-F1 - majority macro-F1", "minimum": 0.05, "passed": True,
                                   "value": 0.72505}]},
        "model_gate_path": "reports/quality/model-gate.json",
    }


def test_the_classifier_card_states_the_records_values():
    card = classifier_card(lineage())
    for part in (
        "# Model card: bert-pretrained (lm-pipeline classifier)",
        "Debian package section classification: a package description in, one of its 3 sections out",
        "| labels | net, games, fonts |",
        "| parameters | 1,234,567 |",  # the model's own count, not its backbone's (1,500,000)
        "| architecture | deberta_v2, 2 layers, 128 d_model, 2 heads (params of pretrain@bert) |",
        "| pretrain@bert | general | masked language modelling, 30% of the positions selected for prediction | "
        "800,768 |",  # the stage's own mlm_select over the defaults' 0.15
        "| pre-training tokens | 800,768 |",
        "9,274 training examples, 290 steps per seed, learning rate 0.001, 3 seeds",
        "| test macro-F1 | 0.745 ± 0.013 (mean ± std over 3 seeds) |",
        "| test accuracy | 0.777 ± 0.019 (mean ± std over 3 seeds) |",
        "| majority-class baseline, test macro-F1 | 0.020 |",
        "| majority-class baseline, test accuracy | 0.192 |",
        # the best baseline on the same 9,274 labels, not the one at another label count
        "| best practitioner baseline (no pre-training), test macro-F1 | 0.812 ± 0.000 (mean ± std over the seeds) "
        "(tfidf) |",
        "| these weights (seed) | seed 2: test macro-F1 0.759, accuracy 0.791 |",
        "Verdict: **PASSED**; selected `bert-pretrained` by best validation macro-F1",
        "| test macro-F1 - majority macro-F1 | 0.725 | 0.050 | passed |",
        "- licence: non-commercial research use", "- licence: each package's own licence",
        "Texts longer than 96 tokens are cut",
        "test split of its task data (1,101 examples)",
        "git c0ffee", "clean tree", "2030-01-02T03:04:05+00:00",
    ):
        assert part in card, part
    assert "1,500,000" not in card and "@t5" not in card and "domain" not in card  # only what trained this model


def test_the_card_follows_the_record_and_invents_nothing_it_lacks():
    rec = lineage()
    rec["metrics"]["reports/metrics/finetune-bert-pretrained.json"]["test_macro_f1"] = 0.5
    assert "| test macro-F1 | 0.500 ± 0.013" in classifier_card(rec)
    bare = {"schema": 1, "model": {"name": "m", "stage": "finetune@m", "files": {}, "md5": "x"},
            "stages": {"ingest@t": {"outs": [_out("data/t")]}, "finetune@m": {"deps": [_out("data/t")]}},
            "files": {}, "git": {}, "metrics": {}, "gates": {},
            "sources": {"t": {"stage": "ingest@t", "sources": [{"kind": "k", "description": "d"}]}}}
    card = classifier_card(bare)
    for field in ("parameters", "labels", "architecture", "test macro-F1", "test accuracy", "test examples",
                  "majority-class baseline, test macro-F1", "these weights (seed)"):
        assert f"| {field} | {UNKNOWN} |" in card, field
    assert f"Verdict: {UNKNOWN}." in card and f"code at git {UNKNOWN}" in card
    assert "- licence: unknown (not recorded for this source" in card
    assert "Debian" not in card and "± 0" not in card  # no task or score the record does not name


def test_a_random_init_model_claims_no_pre_training():
    rec = lineage()
    rec["model"]["init"] = "random"  # its folder still depends on the pre-trained one, for the config only
    card = classifier_card(rec)
    assert "| pre-training tokens | none (random initialisation" in card and "800,768" not in card
    assert "(params of pretrain@bert)" in card  # the architecture is the pre-trained model's config


def test_a_generative_card_sums_pre_training_and_dapt_and_is_not_gated():
    card = generative_card(lineage(), "data/models/dapt/t5")
    for part in ("| source | `data/models/dapt/t5`, written by dapt@t5 |", "| parameters | 1,967,744 |",
                 "| training tokens | 2,402,304 |",  # 401,408 general + 2,000,896 domain
                 "| pretrain@t5 | general | UL2 mixture (span corruption and prefix LM) | 401,408 |",
                 "| weights | pre-trained, then domain-adapted (DAPT) (corpus: domain) |",
                 "| held-out loss | 5.376 |", "| evaluation on held-out domain blocks | eval_loss 5.432 |",
                 "the Bento's `text2text` endpoint", "Not judged by the model gate",
                 "the classifier `bert-pretrained`, whose verdict was **PASSED**"):
        assert part in card, part
    # rendered for a workspace folder (python -m stages.lineage --card), it claims no Bento
    folder = generative_card(lineage(), "data/models/dapt/t5", by="`python -m stages.lineage --card`")
    assert "Generated by `python -m stages.lineage --card` from the classifier" in folder
    assert "is upstream of the classifier `bert-pretrained`" in folder and "ships beside" not in folder
    assert "where the package stage ships it" in folder
    unknown = generative_card(lineage(), "data/models/pretrain/gpt")  # not in the record
    assert f"| parameters | {UNKNOWN} |" in unknown and f"| training tokens | {UNKNOWN} |" in unknown


def test_the_bento_card_holds_the_runtime_the_classifier_card_and_the_chain():
    served = {"name": "lm-pipeline", "classifier": "lm-pipeline-classifier:v1",
              "generative": {"t5": {"tag": "lm-pipeline-t5:v2", "source": "data/models/dapt/t5"}},
              "image": {"python_version": "3.11", "distro": "debian", "system_packages": [],
                        "python_packages": ["torch==2.13.0+cpu"], "extra_index_url": None},
              "resources": {"cpu": "2", "memory": "2Gi"}}
    card = bento_card(lineage(), served)
    for part in ("| classify | the classifier `lm-pipeline-classifier:v1` |", "| text2text | the pre-trained t5",
                 "| python | 3.11 |", "| resources | cpu 2, memory 2Gi |", "| python packages | torch==2.13.0+cpu |",
                 "## Classifier: Evaluation", "| test macro-F1 | 0.745 ± 0.013", "2,402,304 training tokens",
                 "1. Raw sources", "model gate: PASSED"):
        assert part in card, part


def test_count_parameters_reads_safetensors_headers_and_refuses_a_partial_count(tmp_path):
    import numpy as np
    from safetensors.numpy import save_file

    save_file({"a": np.zeros((3, 4), dtype=np.float32), "b": np.zeros(5, dtype=np.float32)},
              str(tmp_path / "model.safetensors"))
    save_file({"head.w": np.zeros((2, 7), dtype=np.float32), "norm.running_mean": np.zeros(9, dtype=np.float32),
               "norm.num_batches_tracked": np.zeros((), dtype=np.int64)}, str(tmp_path / "head.safetensors"))
    assert count_parameters(tmp_path) == 12 + 5 + 14  # BatchNorm's statistics are not parameters
    (tmp_path / "pytorch_model.bin").write_bytes(b"weights in another format")
    assert count_parameters(tmp_path) is None
    (tmp_path / "pytorch_model.bin").unlink()
    (tmp_path / "head.safetensors").write_bytes(b"not a header")
    assert count_parameters(tmp_path) is None
    assert count_parameters(tmp_path / "nothing") is None


def test_verify_checks_a_packaged_card_against_the_record(tmp_path):
    root = make_workspace(tmp_path)
    rec = json.loads(json.dumps(collect(root, model_name="m1", model_dir=Path("data/models/finetune/m1"),
                                        gate_report=Path("reports/quality/model-gate.json"))))
    files = folder_manifest(root / "data/models/finetune/m1")
    files["README.md"] = hashlib.md5(classifier_card(rec).encode("utf-8")).hexdigest()
    item = {"name": "lm-classifier:v1", "role": "classifier", "source": None, "files": files}
    verdict = verify(Target(rec, packaged=[item], all_files=[f"models/lm-classifier/v1/{f}" for f in files]))
    assert verdict.ok, verdict.mismatches
    assert not any("README.md" in n for n in verdict.notes)  # checked, so covered
    edited = copy.deepcopy(item)
    edited["files"]["README.md"] = hashlib.md5(b"# a card that claims more").hexdigest()
    assert verify(Target(rec, packaged=[edited])).mismatches == [
        "lm-classifier:v1 (packaged)/README.md: not the model card its lineage record renders (edited after "
        "packaging, or rendered by another version of stages.provenance.card)"]
    other = copy.deepcopy(rec)
    other["model"]["labels"] = ["river", "market", "sea"]  # a record the card was not rendered from
    assert not verify(Target(other, packaged=[item])).ok


def test_each_card_says_whose_record_it_comes_from():
    rec = lineage()
    assert "from this model's lineage record" in classifier_card(rec)
    assert "from the classifier `bert-pretrained`'s lineage record" in generative_card(rec, "data/models/dapt/t5")
    assert "from the served classifier's lineage record" in bento_card(rec, {})


def test_a_card_does_not_depend_on_the_order_of_the_records_keys():
    """lineage.json is written with sorted keys; the card rendered at packaging must be the one a verifier renders
    from the file."""
    rec = lineage()
    rec["sources"] = dict(reversed(list(rec["sources"].items())))  # task before general
    rec["stages"] = dict(reversed(list(rec["stages"].items())))
    stored = json.loads(json.dumps(rec, sort_keys=True))
    assert classifier_card(rec) == classifier_card(stored)
    assert generative_card(rec, "data/models/dapt/t5") == generative_card(stored, "data/models/dapt/t5")
    card = classifier_card(rec)
    assert card.index("**general**") < card.index("**task**")


def test_the_objective_line_names_electra_when_bert_pre_trained_with_it():
    from stages.provenance.card import _objective

    def record(train: dict) -> dict:
        return {"stages": {"pretrain@bert": {"params": {"params.yaml": {
            "pretrain.defaults": {"train": {"mlm_select": 0.15}}, "pretrain.bert": {"train": train}}}}}}

    assert _objective(record({"mlm_select": 0.3}), "pretrain@bert") == \
        "masked language modelling, 30% of the positions selected for prediction"
    electra = _objective(record({"objective": "electra"}), "pretrain@bert")
    assert electra.startswith("replaced-token detection (ELECTRA") and "15% of the positions masked" in electra
    assert _objective(record({"objective": "sop", "mlm_select": 0.3}), "pretrain@bert") == (
        "masked language modelling with sentence-order prediction (ALBERT's), 30% of the positions selected "
        "for prediction")
    assert "next-sentence prediction (BERT's)" in _objective(record({"objective": "nsp"}), "pretrain@bert")
