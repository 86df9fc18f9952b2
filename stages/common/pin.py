"""How a pinned upstream state (an entry of pins.yaml) is named in errors, the lineage and model cards."""

from __future__ import annotations

from typing import Any


def describe(pin: dict[str, Any]) -> str:
    """One phrase: ``name@version sha512-...`` for a package, ``codename version of date (Release sha256 ...)`` for
    an archive suite."""
    if "files_sha256" in pin:  # a published base: its files, by one digest
        return f"base {pin.get('base')}, files sha256 {str(pin['files_sha256'])[:16]}..."
    if "integrity" in pin:
        return f"{pin.get('name')}@{pin.get('version')} {str(pin.get('integrity'))[:24]}..."
    return (f"{pin.get('codename', pin.get('suite', '?'))} {pin.get('version', '')} of {pin.get('date', '?')} "
            f"(Release sha256 {str(pin.get('release_sha256', '?'))[:16]}...)")
