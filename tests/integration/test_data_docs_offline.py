"""The tiny run's Great Expectations Data Docs render with the network off: their CSS and JavaScript were copied
from npm packages into the site (stages.quality.docs_assets), so Chromium styles the pages and fills the
validations list from the workspace alone."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from stages.quality.docs_assets import CDN
from stages.quality.gate import DATA_DOCS_INDEX

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]


def test_data_docs_render_styled_with_the_validations_list_offline(tiny_project, tmp_path):
    site = (tiny_project / "reports" / DATA_DOCS_INDEX).parent
    pages = list(site.rglob("*.html"))
    assert pages and not [p for p in pages if CDN.search(p.read_text(encoding="utf-8"))]  # no CDN asset left
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no chromium (Debian's `chromium` package) for the browser check")
    offline = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000",
               "--host-resolver-rules=MAP * ~NOTFOUND", "--virtual-time-budget=8000",
               f"--user-data-dir={tmp_path / 'profile'}"]
    url = (site / "index.html").as_uri()
    dom = subprocess.run([*offline, "--dump-dom", url], capture_output=True, text=True, timeout=180).stdout
    # bootstrap-table (from the site's own copy) styled the validations table and built its rows
    assert 'ge-index-page-validation-results-table table table-bordered' in dom, dom[:2000]
    assert len(re.findall(r'<tr [^>]*data-index="', dom)) >= 5 and "clean-general" in dom
    shot = tmp_path / "data-docs.png"
    subprocess.run([*offline, f"--screenshot={shot}", url], capture_output=True, timeout=180)
    assert shot.stat().st_size > 50_000
