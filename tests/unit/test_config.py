"""params.yaml is validated into typed configs: unknown keys and wrong types name the dotted key."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Union

import pytest

from stages.config import ConfigError, build, check, load_params, section
from stages.sources.config import CorpusConfig
from stages.sources.config import load_config
from stages.sources import FilesSource, SpamAssassinSource


@dataclass(frozen=True, kw_only=True)
class Inner:
    rate: float = 0.5
    names: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class A:
    kind: Literal["a"]
    size: int


@dataclass(frozen=True, kw_only=True)
class B:
    kind: Literal["b"]
    flag: bool = False


@dataclass(frozen=True, kw_only=True)
class Outer:
    count: int
    mode: Literal["fast", "slow"] = "fast"
    inner: Inner = field(default_factory=Inner)
    parts: tuple[Union[A, B], ...] = ()
    maybe: str | None = None

    def __post_init__(self) -> None:
        check(self.count >= 0, "count: must be >= 0")


def test_valid_section_builds_typed_frozen_objects():
    cfg = build(Outer, {"count": 3, "inner": {"rate": 1, "names": ["x"]}, "parts": [{"kind": "a", "size": 2},
                                                                               {"kind": "b"}]}, "top")
    assert cfg.count == 3 and cfg.inner.rate == 1.0 and isinstance(cfg.inner.rate, float)
    assert cfg.inner.names == ("x",)
    assert cfg.parts == (A(kind="a", size=2), B(kind="b", flag=False))
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.count = 4  # frozen


@pytest.mark.parametrize(
    "data, message",
    [
        ({"count": 1, "colour": "red"}, "top.colour: unknown key"),
        ({}, "top.count: missing key"),
        ({"count": "3"}, "top.count: expected an integer"),
        ({"count": True}, "top.count: expected an integer"),
        ({"count": 1, "mode": "medium"}, "top.mode: expected one of ['fast', 'slow']"),
        ({"count": 1, "inner": {"rate": "high"}}, "top.inner.rate: expected a number"),
        ({"count": 1, "inner": {"names": "x"}}, "top.inner.names: expected a list"),
        ({"count": 1, "parts": [{"kind": "c"}]}, "top.parts[0].kind: expected one of ['a', 'b']"),
        ({"count": 1, "parts": [{"kind": "a", "size": 1, "flag": True}]}, "top.parts[0].flag: unknown key"),
        ({"count": 1, "parts": [{"kind": "b", "flag": "yes"}]}, "top.parts[0].flag: expected true/false"),
        ({"count": -1}, "top.count: must be >= 0"),
        ({"count": 1, "maybe": 5}, "top.maybe: expected a string"),
    ],
)
def test_bad_values_name_the_dotted_key(data, message):
    with pytest.raises(ConfigError) as err:
        build(Outer, data, "top")
    assert message in str(err.value)


def test_load_params_errors_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match="params file not found"):
        load_params(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("ingest: [unclosed\n")
    with pytest.raises(ConfigError, match="bad.yaml: invalid YAML"):
        load_params(bad)
    with pytest.raises(ConfigError, match="ingest.general: missing section"):
        section({"ingest": {}}, "ingest.general")


def test_repository_params_yaml_is_valid_for_every_corpus():
    for corpus in ("general", "domain", "task"):
        cfg = load_config("params.yaml", corpus)
        assert isinstance(cfg, CorpusConfig)
    general = load_config("params.yaml", "general")
    assert isinstance(general.sources[0], SpamAssassinSource)
    assert load_config("params.yaml", "task").labeled


def test_ingest_source_kinds_are_a_tagged_union():
    cfg = build(CorpusConfig, {"sources": [{"kind": "files", "path": "x.jsonl", "on_error": "skip"}]}, "ingest.x")
    assert cfg.sources == (FilesSource(kind="files", path="x.jsonl", on_error="skip"),)
    with pytest.raises(ConfigError, match=r"ingest.x.sources\[0\].on_error: expected one of"):
        build(CorpusConfig, {"sources": [{"kind": "files", "path": "x", "on_error": "ignore"}]}, "ingest.x")
    with pytest.raises(ConfigError, match="ingest.x.sources: at least one source"):
        build(CorpusConfig, {"sources": []}, "ingest.x")
    with pytest.raises(ConfigError, match=r"ingest.x.sources\[0\].name: set exactly one of name"):
        build(CorpusConfig, {"sources": [{"kind": "hf"}]}, "ingest.x")


@pytest.mark.parametrize("seed", [-1, 2**32, 2**64])
@pytest.mark.parametrize("where", ["pretrain.gpt.train", "finetune.bert", "evaluate"])
def test_an_out_of_range_seed_names_its_key(tmp_path, where, seed):
    import yaml

    from stages.evaluation.config import load_evaluate_config as evaluate_config
    from stages.finetuning.core import load_config as finetune_config
    from stages.training.config import TrainConfig

    with pytest.raises(ConfigError) as err:
        if where == "pretrain.gpt.train":
            build(TrainConfig, {"seed": seed}, where)
        else:
            params = yaml.safe_load(open("params.yaml"))
            if where == "evaluate":
                params["evaluate"]["curve"]["seeds"] = [0, seed]
            else:
                params["finetune"]["bert"] = {"seeds": [seed]}
            (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
            (evaluate_config if where == "evaluate" else lambda p: finetune_config(p, "bert"))(tmp_path / "params.yaml")
    assert "seed" in str(err.value) and f"from 0 to {2**32 - 1}, got {seed}" in str(err.value)
    assert str(err.value).startswith(where)


def test_an_empty_section_stands_for_its_defaults():
    """``inner:`` with nothing after it is YAML null: the section's defaults, as ``{}`` gives them; a null for
    a field that is not a section stays an error."""
    import yaml

    cfg = build(Outer, yaml.safe_load("count: 2\ninner:\n"), "top")
    assert cfg.inner == Inner() and build(Inner, None, "top.inner") == Inner()
    with pytest.raises(ConfigError, match="top.count: expected an integer, got None"):
        build(Outer, {"count": None}, "top")


@pytest.mark.parametrize(
    "data, message",
    [
        ({"count": 1, "parts": [5]}, "top.parts[0]: expected a mapping with a 'kind' key"),
        ({"count": 1, "parts": [{"size": 1}]}, "top.parts[0]: expected a mapping with a 'kind' key"),
        ({"count": 1, "parts": [{"kind": ["a"]}]}, "top.parts[0].kind: expected one of ['a', 'b'], got ['a']"),
        ({"count": 1, "parts": [{"kind": "b"}, {"kind": "a"}]}, "top.parts[1].size: missing key"),
        ({"count": 1, "inner": 3}, "top.inner: expected a mapping, got int"),
        ({"count": 1.0}, "top.count: expected an integer, got 1.0"),
    ],
)
def test_tagged_union_errors_name_the_member_the_kind_picks(data, message):
    with pytest.raises(ConfigError) as err:
        build(Outer, data, "top")
    assert str(err.value).startswith(message)


def test_yaml_dates_read_as_the_text_written_and_odd_values_are_named():
    import datetime

    @dataclass(frozen=True, kw_only=True)
    class Dated:
        day: str

    assert build(Dated, {"day": datetime.date(2024, 1, 31)}, "top").day == "2024-01-31"
    with pytest.raises(ConfigError, match="top: set value"):
        build(Dated, {"day": {1, 2}}, "top")
