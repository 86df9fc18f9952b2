"""The params reference (docs/params.md) is generated from the config classes' field docstrings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from stages import reference


@dataclass(frozen=True, kw_only=True)
class Inner:
    """An inner section."""

    depth: int = 3
    """How deep, in metres."""


@dataclass(frozen=True, kw_only=True)
class Outer:
    mode: Literal["a", "b"] = "a"
    """Which mode."""
    sizes: tuple[int, ...] = (1, 2)
    """Sizes to try, largest first."""
    inner: Inner = field(default_factory=Inner)
    """The inner settings."""
    note: str | None = None


def test_field_docstrings_are_read_and_rendered_with_type_and_default():
    assert reference.field_docs(Outer) == {"mode": "Which mode.", "sizes": "Sizes to try, largest first.",
                                           "inner": "The inner settings."}
    missing: list[str] = []
    text = "\n".join(reference.describe(Outer, "x.", missing))
    assert "| `mode` | one of `a`, `b` | `\"a\"` | Which mode. |" in text
    assert "| `sizes` | list of integer | `[1, 2]` | Sizes to try, largest first. |" in text
    assert "### `x.inner`" in text and "An inner section." in text
    assert "| `depth` | integer | `3` | How deep, in metres. |" in text
    assert missing == [f"{__name__}.Outer.note"]  # a field without a docstring is reported, not skipped


def test_every_field_is_documented_and_the_committed_page_is_current():
    page, missing = reference.render()
    assert missing == [], f"config fields without a docstring: {missing}"
    committed = reference.PAGE.read_text(encoding="utf-8")
    assert committed == page, "docs/params.md is out of date: run python -m stages.reference"
    assert reference.main(["--check"]) == 0
