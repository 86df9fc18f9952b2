"""A published base in the lineage: the record's sources name it (origin, licence, pin, every file) and the SLSA
provenance lists each of its files and the wheel it came from as resolved dependencies; the stage that wrote a
published run's folder is found by its output."""

from __future__ import annotations

import json

from stages.provenance.record import Lock, classifier_stage, sources
from stages.provenance.signing import source_dependencies

MANIFEST = {"name": "minilm", "paradigm": "bert", "licence": "apache-2.0",
            "origin": {"kind": "wheel", "package": "pkg==0.1.0", "wheel": "pkg-0.1.0-py3-none-any.whl",
                       "wheel_sha256": "a" * 64, "folder": "pkg/model"},
            "files": {"config.json": "b" * 64, "model.safetensors": "c" * 64}, "files_sha256": "d" * 64,
            "facts": {"model_type": "bert", "fresh_head": True}}


def test_the_base_is_a_source_of_the_record_and_each_file_a_resolved_dependency(tmp_path):
    (tmp_path / "data/base/minilm").mkdir(parents=True)
    (tmp_path / "data/base/minilm/base.json").write_text(json.dumps(MANIFEST))
    lock = Lock(stages={"base@minilm": {"outs": [{"path": "data/base/minilm"}]}})
    got = sources(tmp_path, ["base@minilm"], lock)
    src = got["base minilm"]["sources"][0]
    assert src["licence"] == "apache-2.0" and "pkg==0.1.0" in src["description"] and "fresh" in src["description"]
    assert src["pin"] == {"base": "minilm", "files_sha256": "d" * 64}
    deps = source_dependencies({"sources": got})
    digests = {d["digest"]["sha256"] for d in deps}
    assert {"a" * 64, "b" * 64, "c" * 64} <= digests            # the wheel and every file
    assert all(d["annotations"]["licence"] == "apache-2.0" for d in deps)


def test_a_published_runs_stage_is_found_by_its_folder():
    lock = Lock(stages={"finetune-published@minilm": {"outs": [{"path": "data/models/finetune/minilm-published"}]},
                        "adapt-published@minilm-probe": {"outs": [{"path": "data/models/finetune/minilm-probe"}]},
                        "finetune@bert-dapt": {"outs": [{"path": "data/models/finetune/bert-dapt"}]}})
    assert classifier_stage(lock, "minilm-published") == "finetune-published@minilm"
    assert classifier_stage(lock, "minilm-probe") == "adapt-published@minilm-probe"
    assert classifier_stage(lock, "bert-dapt") == "finetune@bert-dapt"
