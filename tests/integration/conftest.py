"""The project run once on the tiny profile (`dvc repro package` in a copy), shared by the packaging, published,
own-data and Prefect UI tests, and the deployer's steps they share: a command against a BentoML store, and an
exported Bento imported into an empty store and served."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from tests.integration.test_ingest_pipeline import ROOT, _copy_project, _dvc, registries


BIN = Path(sys.executable).parent


def bento_env(store: Path) -> dict:
    """This environment's tools first, BentoML's store at ``store``, the offline flags; Python writes byte-code
    as in a user's shell (no PYTHONDONTWRITEBYTECODE: the served Bento must still verify)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PATH": f"{BIN}:{os.environ['PATH']}", "BENTOML_HOME": str(store),
            "BENTOML_DO_NOT_TRACK": "True", "GX_ANALYTICS_ENABLED": "false", "HF_HUB_OFFLINE": "1"}


def run_with_store(args: list, cwd: Path, store: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], cwd=cwd, env=bento_env(store), capture_output=True, text=True,
                          timeout=timeout)


@contextmanager
def serving(exported: Path, elsewhere: Path, ready_timeout: int = 180):
    """``exported`` imported into an empty store under ``elsewhere`` and served there by `bentoml serve` (no
    --host: the service's own default, loopback); yields bentoml's HTTP client and the store. The server's log
    goes to ``elsewhere/serve.log`` (a file, not a pipe nobody reads: it logs every request)."""
    import bentoml

    from flows.ui import stop

    store = elsewhere / "bentoml"
    proc = run_with_store([BIN / "bentoml", "import", exported], elsewhere, store)
    assert proc.returncode == 0, proc.stderr[-2000:]
    port = free_port()
    with open(elsewhere / "serve.log", "wb") as log:
        server = subprocess.Popen([str(BIN / "bentoml"), "serve", "lm-pipeline:latest", "--port", str(port)],
                                  cwd=elsewhere, env=bento_env(store), stdout=log, stderr=subprocess.STDOUT)
        try:
            client = bentoml.SyncHTTPClient(f"http://127.0.0.1:{port}", timeout=60,
                                            server_ready_timeout=ready_timeout)
            yield client, store
            client.close()
        finally:
            stop(server)


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
