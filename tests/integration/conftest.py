"""The project run once on the tiny profile (`dvc repro package` in a copy), shared by the packaging and the
Prefect UI tests."""

from __future__ import annotations

import socket

import pytest
import yaml

from tests.integration.test_ingest_pipeline import ROOT, _copy_project, _dvc, registries


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def tiny_project(tmp_path_factory):
    fetch_from = registries()
    from stages.config import load_params
    from stages.profile import apply, load_profile

    dest = tmp_path_factory.mktemp("tiny-project")
    _copy_project(dest)
    params = apply(load_params(ROOT / "params.yaml"), load_profile("tiny", ROOT))
    (dest / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    if (ROOT / ".cache" / "sources").is_dir():  # a download cache from an earlier run saves the registry trip
        (dest / ".cache").mkdir()
        (dest / ".cache" / "sources").symlink_to(ROOT / ".cache" / "sources")
    store = dest / ".bentoml"
    proc = _dvc(dest, "repro", "package",
                env={**fetch_from, "BENTOML_HOME": str(store), "BENTOML_DO_NOT_TRACK": "True"})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return dest
