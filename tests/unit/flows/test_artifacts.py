"""What the Prefect UI gets to show: the evaluation report with its figures inline, links only where a browser
can open them, and the file server behind those links reaching nothing but reports/ and dist/."""

from __future__ import annotations

import base64
import json
import threading
import urllib.error
import urllib.request

import pytest

SVG = '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect width="10" height="10"/></svg>'


def test_figures_are_inlined_and_nothing_else_changes(tmp_path):
    from flows.artifacts import embed_figures

    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "curve.svg").write_text(SVG)
    text = ("# Report\n\n![data efficiency](figures/curve.svg)\n\n![gone](figures/missing.svg) "
            "![remote](https://example.invalid/x.svg) ![notes](notes.txt) [a link](figures/curve.svg)\n")
    out = embed_figures(text, tmp_path)
    inline = "data:image/svg+xml;base64," + base64.b64encode(SVG.encode()).decode()
    assert f"![data efficiency]({inline})" in out
    assert out.replace(f"![data efficiency]({inline})", "![data efficiency](figures/curve.svg)") == text


def test_links_point_at_the_file_server_only_when_there_is_one(tmp_path, monkeypatch):
    from flows.artifacts import REPORTS_URL, file_link

    (tmp_path / "reports" / "quality").mkdir(parents=True)
    (tmp_path / "reports" / "evaluation.md").write_text("# r\n")
    monkeypatch.delenv(REPORTS_URL, raising=False)
    assert file_link(tmp_path, tmp_path / "reports" / "evaluation.md") is None  # no file:// links
    monkeypatch.setenv(REPORTS_URL, "http://127.0.0.1:4201/")
    assert file_link(tmp_path, tmp_path / "reports" / "evaluation.md") == "http://127.0.0.1:4201/reports/evaluation.md"
    assert file_link(tmp_path, tmp_path / "reports" / "quality") == "http://127.0.0.1:4201/reports/quality/"


@pytest.fixture
def file_server(tmp_path):
    from flows.files import make_server

    (tmp_path / "reports" / "figures").mkdir(parents=True)
    (tmp_path / "reports" / "evaluation.md").write_text("# Evaluation\n")
    (tmp_path / "reports" / "figures" / "curve.svg").write_text(SVG)
    (tmp_path / "dist").mkdir()
    (tmp_path / "dist" / "lm-pipeline-v1.bento").write_bytes(b"bento")
    (tmp_path / "params.yaml").write_text("secret: 1\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.parquet").write_bytes(b"x")
    (tmp_path / "reports" / "escape").symlink_to(tmp_path / "data")
    server = make_server(tmp_path, 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read()
    except urllib.error.HTTPError as e:
        return e.code, "", b""


def test_the_file_server_serves_reports_and_bentos_and_nothing_else(file_server):
    status, kind, body = _get(f"{file_server}/reports/evaluation.md")
    assert (status, body) == (200, b"# Evaluation\n") and kind.startswith("text/plain")
    assert _get(f"{file_server}/reports/figures/curve.svg")[1] == "image/svg+xml"
    assert _get(f"{file_server}/dist/lm-pipeline-v1.bento")[2] == b"bento"
    assert b"evaluation.md" in _get(f"{file_server}/reports/")[2]  # a folder lists its files
    root = _get(f"{file_server}/")[2]
    assert b"reports/" in root and b"dist/" in root and b"params.yaml" not in root and b"data/" not in root
    for path in ("/params.yaml", "/data/x.parquet", "/reports/../params.yaml", "/reports/%2e%2e/params.yaml",
                 "/reports/escape/x.parquet"):
        assert _get(file_server + path)[0] == 404, path


def test_publish_run_makes_links_that_open_and_a_table_of_paths(prefect_harness, tmp_path, monkeypatch):
    import asyncio

    from prefect import flow
    from prefect.client.orchestration import get_client

    from flows.artifacts import REPORTS_URL, publish_run

    (tmp_path / "reports" / "quality").mkdir(parents=True)
    (tmp_path / "reports" / "figures").mkdir()
    (tmp_path / "reports" / "figures" / "curve.svg").write_text(SVG)
    (tmp_path / "reports" / "evaluation.md").write_text("# Evaluation\n\n![curve](figures/curve.svg)\n")
    (tmp_path / "reports" / "metrics").mkdir()
    (tmp_path / "reports" / "metrics" / "package.json").write_text(json.dumps({"exported": "dist/lm-v1.bento"}))
    docs = tmp_path / "reports" / "gx" / "uncommitted" / "data_docs" / "local_site" / "index.html"
    docs.parent.mkdir(parents=True)
    docs.write_text("<html>Data Docs</html>")

    @flow
    def publish(served: bool) -> int:
        return publish_run(tmp_path)

    async def latest() -> dict:
        async with get_client() as client:
            return {a.key: a for a in await client.read_latest_artifacts()}

    monkeypatch.delenv(REPORTS_URL, raising=False)
    assert publish(False) == 2  # the report and the table of paths: no links a browser would refuse
    table = asyncio.run(latest())["run-files"].data
    assert f"`{tmp_path.resolve() / 'dist/lm-v1.bento'}`" in table and "[open]" not in table
    assert "data:image/svg+xml;base64," in asyncio.run(latest())["evaluation-report"].data
    monkeypatch.setenv(REPORTS_URL, "http://127.0.0.1:4201")
    assert publish(True) == 6
    found = asyncio.run(latest())
    assert found["link-evaluation-report"].data.endswith("(http://127.0.0.1:4201/reports/evaluation.md)")
    assert found["link-gate-results"].data.endswith("(http://127.0.0.1:4201/reports/quality/)")
    assert found["link-bento"].data.endswith("(http://127.0.0.1:4201/dist/lm-v1.bento)")
    assert found["link-data-docs"].data.endswith(
        "(http://127.0.0.1:4201/reports/gx/uncommitted/data_docs/local_site/index.html)")
    assert "[open](http://127.0.0.1:4201/dist/lm-v1.bento)" in found["run-files"].data
