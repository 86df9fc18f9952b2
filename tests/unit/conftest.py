"""Session fixtures shared by several test folders (built once per session)."""

from __future__ import annotations

import os

import pytest

# The gates validate in an ephemeral GX context in unit tests (a file-backed project under reports/gx/ is
# what a workspace run gets: tests/unit/quality/test_gate.py checks that path on its own temporary project).
os.environ.setdefault("LMPIPE_GX_PROJECT", "")


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    """Tiny pre-trained models (one per paradigm) and a labeled task made in code (tests/unit/finetuning)."""
    from tests.unit.finetuning.conftest import Models

    return Models(tmp_path_factory.mktemp("finetune"))
