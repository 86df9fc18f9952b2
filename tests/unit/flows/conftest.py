"""A Prefect test harness (a temporary local server) once per session, offline, with its own PREFECT_HOME."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory):
    home = tmp_path_factory.mktemp("prefect-home")
    os.environ.setdefault("PREFECT_HOME", str(home))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield
