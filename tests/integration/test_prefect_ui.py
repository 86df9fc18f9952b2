"""End to end: a real Prefect server on localhost, the served deployment run once on the tiny profile, then
the UI opened in headless Chromium: the flow run shows as Completed with its artifacts. The screenshot is
written to the project copy's reports/ui/flow-run.png."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from tests.integration.conftest import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]  # the tiny pipeline runs in the first test

PY = sys.executable


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def served(tiny_project, tmp_path_factory):
    from flows.ui import server_env, start_server, stop

    home = tmp_path_factory.mktemp("prefect-home")
    port = free_port()
    server = start_server(home, port)
    env = {**server_env(home, port), "BENTOML_HOME": str(tiny_project / ".bentoml"), "BENTOML_DO_NOT_TRACK": "True",
           "GX_ANALYTICS_ENABLED": "false"}
    log = open(home / "deploy.log", "wb")
    deploy = subprocess.Popen([PY, "-m", "flows.deploy", "--root", str(tiny_project), "--profile", "tiny"],
                              cwd=tiny_project, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield {"port": port, "env": env, "home": home}
    finally:
        stop(deploy)
        stop(server)


def _api(port: int, method: str, path: str, body: dict | None = None):
    import httpx

    r = httpx.request(method, f"http://127.0.0.1:{port}/api{path}", json=body, timeout=30)
    r.raise_for_status()
    return r.json()


def _deployment_id(port: int, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = _api(port, "POST", "/deployments/filter", {"deployments": {"name": {"any_": ["scheduled"]}}})
        if found:
            return found[0]["id"]
        time.sleep(1)
    raise AssertionError("the deployment was not registered")


def test_deployment_has_a_cron_schedule_and_parameters(served):
    dep = _api(served["port"], "GET", f"/deployments/{_deployment_id(served['port'])}")
    assert dep["parameters"]["profile"] == "tiny"
    assert [s["schedule"]["cron"] for s in dep["schedules"]] == ["0 3 * * *"]


def test_a_run_completes_and_the_ui_shows_it_with_its_artifacts(served, tiny_project):
    port = served["port"]
    run = _api(port, "POST", f"/deployments/{_deployment_id(port)}/create_flow_run", {"parameters": {}})
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        state = _api(port, "GET", f"/flow_runs/{run['id']}")["state"]
        if state["type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
            break
        time.sleep(2)
    assert state["type"] == "COMPLETED", (state, (served["home"] / "deploy.log").read_text()[-3000:])
    keys = {a["key"] for a in _api(port, "POST", "/artifacts/filter",
                                   {"artifacts": {"flow_run_id": {"any_": [run["id"]]}}}) if a.get("key")}
    assert {"gate-clean-general", "metrics-package", "evaluation-report", "link-bento"} <= keys
    gate = _api(port, "POST", "/artifacts/latest/filter", {"artifacts": {"key": {"any_": ["gate-model-gate"]}}})
    assert gate and json.loads(gate[0]["data"])

    chromium = _chromium()
    if chromium is None:
        pytest.skip("no chromium (Debian's `chromium` package) for the UI check")
    url = f"http://127.0.0.1:{port}/runs/flow-run/{run['id']}"
    common = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=20000",
              "--window-size=1400,1000"]
    dom = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
    assert "Completed" in dom and run["name"] in dom
    shot = tiny_project / "reports" / "ui" / "flow-run.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([*common, f"--screenshot={shot}", url], capture_output=True, timeout=120)
    assert shot.stat().st_size > 20_000
    artifacts = subprocess.run([*common, "--dump-dom", f"http://127.0.0.1:{port}/artifacts"], capture_output=True,
                               text=True, timeout=120).stdout
    assert "gate-clean-general" in artifacts and "evaluation-report" in artifacts
    if os.environ.get("LMPIPE_UI_SCREENSHOT"):  # where to keep a copy (the committed reports/ui/flow-run.png)
        shutil.copy2(shot, os.environ["LMPIPE_UI_SCREENSHOT"])
