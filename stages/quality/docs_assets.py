"""Data Docs that render offline: the CSS and JavaScript Great Expectations' pages load from public CDNs, taken
from their npm packages (fetched once through the npm registry, checked against their integrity, cached under
``.cache/sources/npm``), copied into the site's ``static/vendor/`` and the pages pointed at those copies.

A CDN address not in :data:`ASSETS` stays as it is (a test checks the installed Great Expectations' pages use
none); without a registry the pages keep their CDN addresses and one line says so.
"""

from __future__ import annotations

import os
import re
import tarfile
from pathlib import Path
from typing import Callable

from stages.common.atomic import write_bytes_atomic

# A CDN address in Great Expectations 1.x's page templates -> (npm package, file in its tarball's package/).
# jsdelivr's bare ``npm/vega@5`` serves the newest 5.x: the versions below are the newest of those majors.
ASSETS: dict[str, tuple[str, str]] = {
    "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css": ("bootstrap@4.3.1", "dist/css/bootstrap.min.css"),
    "https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js": ("bootstrap@4.3.1", "dist/js/bootstrap.min.js"),
    "https://code.jquery.com/jquery-3.7.1.min.js": ("jquery@3.7.1", "dist/jquery.min.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js": ("popper.js@1.12.9", "dist/umd/popper.min.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css": (
        "@fortawesome/fontawesome-free@6.6.0", "css/all.min.css"),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/css/bootstrap-datepicker.min.css": (
        "bootstrap-datepicker@1.9.0", "dist/css/bootstrap-datepicker.min.css"),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/js/bootstrap-datepicker.min.js": (
        "bootstrap-datepicker@1.9.0", "dist/js/bootstrap-datepicker.min.js"),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.css": ("bootstrap-table@1.19.1", "dist/bootstrap-table.min.css"),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.js": ("bootstrap-table@1.19.1", "dist/bootstrap-table.min.js"),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/extensions/filter-control/bootstrap-table-filter-control.min.js": (
        "bootstrap-table@1.19.1", "dist/extensions/filter-control/bootstrap-table-filter-control.min.js"),
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.css": (
        "bootstrap-table@1.19.0", "dist/extensions/filter-control/bootstrap-table-filter-control.css"),
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.min.css": (
        "bootstrap-table@1.19.0", "dist/extensions/filter-control/bootstrap-table-filter-control.min.css"),
    "https://cdn.jsdelivr.net/npm/@forevolve/bootstrap-dark@1.1.0/dist/css/bootstrap-prefers-dark.css": (
        "@forevolve/bootstrap-dark@1.1.0", "dist/css/bootstrap-prefers-dark.css"),
    "https://cdn.jsdelivr.net/npm/vega@5": ("vega@5.33.1", "build/vega.min.js"),
    "https://cdn.jsdelivr.net/npm/vega-lite@5": ("vega-lite@5.23.0", "build/vega-lite.min.js"),
    "https://cdn.jsdelivr.net/npm/vega-embed@6": ("vega-embed@6.29.0", "build/vega-embed.min.js"),
}
# Folders a stylesheet loads relative to itself (Font Awesome's ../webfonts/).
ALSO: dict[str, tuple[str, ...]] = {"@fortawesome/fontawesome-free@6.6.0": ("webfonts/",)}
VENDOR = "static/vendor"
CDN = re.compile(r'(?<=["\'])https://(?:maxcdn\.bootstrapcdn\.com|stackpath\.bootstrapcdn\.com|code\.jquery\.com|'
                 r'cdnjs\.cloudflare\.com|unpkg\.com|cdn\.jsdelivr\.net)/[^"\']+(?=["\'])')


def folder_of(spec: str) -> str:
    """``@scope/name@1.2.3`` -> ``scope-name@1.2.3`` (one folder name under static/vendor/)."""
    return spec.lstrip("@").replace("/", "-")


def vendor(site: Path, fetch: Callable[[str], Path], log: Callable[[str], None] = print) -> int:
    """Copy every asset of :data:`ASSETS` into ``site/static/vendor/`` (once: what is there stays) from the npm
    tarballs ``fetch(spec)`` returns, then point each page of ``site`` at the copies. Returns the pages changed."""
    vendor_dir = site / VENDOR
    for spec in sorted({spec for spec, _ in ASSETS.values()}):
        wanted = {member for s, member in ASSETS.values() if s == spec}
        folders = ALSO.get(spec, ())
        dest = vendor_dir / folder_of(spec)
        if all((dest / m).is_file() for m in wanted) and all((dest / f).is_dir() for f in folders):
            continue
        with tarfile.open(fetch(spec), "r:gz") as tar:
            for info in tar.getmembers():
                rel = info.name.removeprefix("package/")
                if info.isfile() and (rel in wanted or rel.startswith(folders)) and ".." not in Path(rel).parts:
                    write_bytes_atomic(dest / rel, tar.extractfile(info).read())  # type: ignore[union-attr]
    changed = 0
    for page in sorted(site.rglob("*.html")):
        text = page.read_text(encoding="utf-8")
        here = page.parent

        def local(match: re.Match) -> str:
            if match.group(0) not in ASSETS:
                return match.group(0)
            spec, member = ASSETS[match.group(0)]
            return os.path.relpath(vendor_dir / folder_of(spec) / member, here).replace(os.sep, "/")

        new = CDN.sub(local, text)
        if new != text:
            write_bytes_atomic(page, new.encode("utf-8"))
            changed += 1
    return changed


def vendor_site(site: Path, cache_dir: Path = Path(".cache/sources"), log: Callable[[str], None] = print) -> None:
    """:func:`vendor` with the npm packages fetched through the registry (and cached); without one, the pages
    keep their CDN addresses and one line says so."""
    from stages.sources import Provenance, SourceContext, SourceError
    from stages.sources.npm import fetch_npm

    try:
        vendor(site, lambda spec: fetch_npm(spec, SourceContext(cache_dir=cache_dir), Provenance(kind="npm")), log)
    except (SourceError, OSError, tarfile.TarError) as exc:
        log(f"[gate] Data Docs keep their CDN addresses (they render unstyled offline): {exc}")
