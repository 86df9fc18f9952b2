"""Checks on the machine the tests run on, before any test."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def _signing_keys_stay_in_the_temporary_folder(tmp_path_factory):
    """The package stage makes its signing key on first use under $XDG_CONFIG_HOME (else ~/.config): the tests'
    runs (and the stage runs they start) keep theirs in a temporary folder, never in the user's home."""
    saved = {k: os.environ.get(k) for k in ("XDG_CONFIG_HOME", "LMPIPE_SIGNING_KEY")}
    os.environ["XDG_CONFIG_HOME"] = str(tmp_path_factory.mktemp("config"))
    os.environ.pop("LMPIPE_SIGNING_KEY", None)
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session", autouse=True)
def _no_workspace_above_the_temporary_folders(tmp_path_factory):
    """`stages.lineage` takes the nearest folder at or above the current one holding a dvc.lock as the workspace
    to verify against (as git finds its repository). The tests build projects in temporary folders and some
    check a Bento with no workspace at all: a stray dvc.lock above those folders (a copy left in /tmp, say)
    would make them verify against it and fail far from the cause. Say so instead."""
    from stages.provenance.record import find_workspace

    base = tmp_path_factory.getbasetemp()
    stray = find_workspace(base)
    if stray is not None:
        pytest.exit(f"{stray / 'dvc.lock'}: a dvc.lock above the tests' temporary folder ({base}); the lineage "
                    "tests would take it for their workspace. Move it away.", returncode=3)
