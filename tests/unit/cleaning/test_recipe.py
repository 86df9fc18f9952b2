"""The cleaning recipe: built from the config, a filter added as one class and one registry entry and run by
naming it in params, its drops reported like the built-in ones."""

from __future__ import annotations

import json

import pytest
import yaml

from stages.cleaning.base import Doc, Filter
from stages.cleaning.config import CleanerConfig
from stages.cleaning.recipe import FILTERS, FilterEntry, Recipe
from stages.config import ConfigError, build
from tests.helpers import english_page, seed_badwords


class BananaFilter(Filter):
    """A toy filter: drops a page that mentions a banana."""

    name = "banana"

    def apply(self, doc: Doc) -> str | None:
        return "mentions_banana" if "banana" in doc.text else None


@pytest.fixture
def banana(monkeypatch):
    monkeypatch.setitem(FILTERS, "banana", FilterEntry(lambda cfg: True,
                                                       lambda cfg, ctx: BananaFilter(None, ctx.reject_samples)))


def test_a_filter_added_to_the_registry_and_named_in_params_runs_and_is_reported(tmp_path, banana):
    from stages.clean import main

    rows = [{"text": english_page(i), "url": f"http://s{i}.example/"} for i in range(8)]
    for i in (2, 5):  # a line C4's rules keep (and line dedup: each its own), on two pages
        rows[i]["text"] += f"\nWe ate a ripe banana for lunch by the river on day {i} of the trip."
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"clean": {"defaults": {"workers": 1}, "web": {
        "filters": ["line_dedup", "language", "banana", "badwords"]}}}))
    seed_badwords(tmp_path / "cache")
    out = tmp_path / "out"
    assert main(["--input", str(inp), "--output", str(out), "--corpus", "web", "--params", str(params),
                 "--cache-dir", str(tmp_path / "cache")]) == 0
    stats = json.loads((out / "stats.json").read_text())
    assert stats["filter_order"] == ["page_length", "url_dedup", "c4_lines", "line_dedup", "language", "banana",
                                     "badwords"]
    assert stats["filters"]["banana"]["dropped_by_reason"] == {"mentions_banana": 2}
    assert stats["documents_out"] == 6
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    assert sorted(r["text"][-20:] for r in rejects if r["filter"] == "banana") == \
        sorted(rows[i]["text"][-20:] for i in (2, 5))


def test_the_recipe_follows_the_config():
    default = Recipe(CleanerConfig())
    assert default.rules == ("page_length", "c4_lines")
    assert default.filters == ("line_dedup", "language", "badwords")  # Gopher's filters are off by default
    assert default.steps == ("read", "url_dedup", "c4_rules", "line_table", "filters", "task_guard", "write")
    other = Recipe(build(CleanerConfig, {"url_dedup": False, "line_dedup": {"enabled": False},
                                         "minhash": {"enabled": True}, "filters": ["badwords", "language"]}, "c"))
    assert other.filters == ("badwords", "language")
    assert other.steps == ("read", "c4_rules", "filters", "corpus_dedup", "task_guard", "write")
    assert other.describe() == ("read -> c4_rules (page_length, c4_lines) -> filters (badwords, language) -> "
                                "corpus_dedup -> task_guard -> write")


@pytest.mark.parametrize("names, words", [(["language", "bananas"], "unknown filter 'bananas'"),
                                          (["language", "language"], "named twice")])
def test_a_filter_name_params_do_not_know_is_refused_naming_the_key(names, words):
    with pytest.raises(ConfigError, match=rf"clean\.web\.filters: .*{words}"):
        build(CleanerConfig, {"filters": names}, "clean.web")
