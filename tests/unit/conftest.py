"""Session fixtures shared by several test folders (built once per session)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    """Tiny pre-trained models (one per paradigm) and a labeled task made in code (tests/unit/finetuning)."""
    from tests.unit.finetuning.conftest import Models

    return Models(tmp_path_factory.mktemp("finetune"))
