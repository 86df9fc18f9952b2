"""Fault injection on the tiny pipeline: each kind of input file a stage reads is corrupted (cut in half, or
overwritten with bytes that are not its format), and the stage run as `dvc.yaml` runs it.

What must hold (the data contract in docs/stages.md): exit status 1 and one `error:` line that names the
file, no traceback, the stage's previous outputs untouched and no temporary or scratch folder left behind.

Runs in a copy of the session's tiny project (tests/integration/conftest.py), so the other tests see theirs
unchanged.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(3600)]

PY = sys.executable
LEFTOVER = (".*.tmp-*", ".*.old-*", ".*.work-*")


def _env(project: Path) -> dict:
    return {**os.environ, "PATH": f"{Path(PY).parent}:{os.environ['PATH']}", "GX_ANALYTICS_ENABLED": "false",
            "BENTOML_HOME": str(project / ".bentoml"), "BENTOML_DO_NOT_TRACK": "True", "HF_HUB_OFFLINE": "1",
            "LMPIPE_DEBUG": ""}


@pytest.fixture(scope="module")
def project(tiny_project, tmp_path_factory):
    dest = tmp_path_factory.mktemp("faults") / "project"
    shutil.copytree(tiny_project, dest, symlinks=True)
    return dest


def _stages(project: Path) -> dict:
    """DVC's own view of each stage: its command and its outputs."""
    from dvc.repo import Repo

    with Repo(str(project)) as repo:
        return {st.name: {"cmd": st.cmd if isinstance(st.cmd, str) else " && ".join(st.cmd),
                          "outs": [Path(str(o.fs_path)) for o in st.outs]}
                for st in repo.index.stages}


def _files(path: Path) -> dict[str, str]:
    """sha256 of every file under ``path`` (or of ``path`` itself), by relative name."""
    if path.is_file():
        return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()}
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def _leftovers(project: Path) -> list[str]:
    found = []
    for top in ("data", "reports", "dist"):
        for pattern in LEFTOVER:
            found += [str(p.relative_to(project)) for p in (project / top).rglob(pattern)]
    return found


def _one_line_error(proc: subprocess.CompletedProcess, named: Path) -> str:
    err = proc.stderr
    assert proc.returncode == 1, (proc.returncode, err[-3000:])
    assert "Traceback" not in err, err[-3000:]
    line = next((ln for ln in err.splitlines() if ln.startswith("error:")), "")
    assert line, err[-3000:]
    assert named.name in line, f"the error does not name {named}: {line}"
    return line


# Each kind of input file a stage reads: (stage, the input, relative to the project).
CORRUPTED = [
    ("clean@domain", "data/ingested/domain/documents.parquet"),
    ("clean@domain", "data/ingested/task/documents.parquet"),
    ("tokenizer@bert", "data/cleaned/general/documents.parquet"),
    ("tokens@gpt", "data/tokenizers/gpt/tokenizer.json"),
    ("pretrain@t5", "data/tokens/t5/general/train.npy"),
    ("dapt@bert", "data/models/pretrain/bert/model.safetensors"),
    ("dapt@bert", "data/models/pretrain/bert/config.json"),
    ("finetune@gpt-random", "data/models/pretrain/gpt/tokenizer.json"),
    ("evaluate", "data/models/finetune/t5-dapt/finetune.json"),
    ("package", "reports/quality/model-gate.json"),
    ("finetune@bert-pretrained", "params.yaml"),
]


@pytest.mark.parametrize("how", ["truncated", "garbage"])
@pytest.mark.parametrize(("stage", "rel"), CORRUPTED)
def test_a_corrupt_input_is_one_error_line_naming_it_and_outputs_stay(project, stage, rel, how):
    info = _stages(project)[stage]
    target = project / rel
    assert target.is_file(), f"{rel} is not an input of the tiny run (its layout changed?)"
    outs = {out: _files(out) for out in info["outs"] if out.exists()}
    original = target.read_bytes()
    bad = original[: len(original) // 2] if how == "truncated" else b"\x00\xffnot this format\x9c" * 64
    try:
        target.write_bytes(bad)
        proc = subprocess.run(shlex.split(info["cmd"]), cwd=project, env=_env(project), capture_output=True,
                              text=True, timeout=1200)
    finally:
        target.write_bytes(original)
    _one_line_error(proc, target)
    for out, files in outs.items():
        assert _files(out) == files, f"{out} changed after {stage} failed on a {how} {rel}"
    assert not _leftovers(project), _leftovers(project)
