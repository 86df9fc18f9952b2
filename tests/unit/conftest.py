"""Session fixtures shared by several test folders (built once per session)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def _ephemeral_gates():
    """The gates validate in an ephemeral GX context in unit tests: a file-backed project under reports/gx/ is
    what a workspace run gets (tests/unit/quality/test_gate.py checks it on its own temporary project; the
    integration tests on the tiny project). Set from the first unit test on (session fixtures included) and
    not at import, so the integration tests' processes, which run first, never inherit it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LMPIPE_GX_PROJECT", "")
        mp.setenv("LMPIPE_DOCS_ASSETS", "cdn")  # offline: Data Docs keep their CDN addresses (no npm fetch)
        yield


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    """Tiny pre-trained models (one per paradigm) and a labeled task made in code (tests/unit/finetuning)."""
    from tests.unit.finetuning.conftest import Models

    return Models(tmp_path_factory.mktemp("finetune"))
