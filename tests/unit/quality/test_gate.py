"""Behaviour of the quality gate runner and the standard suites.

Every "violation" test builds a frame that breaks exactly one contract and asserts that exactly the
matching check fails, so a check that fires for the wrong reason (or not at all) is caught.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")

from stages.quality.gate import (  # noqa: E402
    CheckResult,
    Expect,
    GateFailed,
    GateResult,
    enforce,
    gx_project,
    validate,
    write_report,
)
from stages.quality.suites import combine, documents_suite, labeled_suite  # noqa: E402

LABELS = ("pos", "neg")
SPLITS = ("train", "test")
DOC_LIMITS = {"min_rows": 4, "max_rows": 100, "min_nonempty_ratio": 0.75}
LABEL_LIMITS = {"labels": LABELS, "splits": SPLITS, "min_class_share": 0.2, "max_class_share": 0.8}

UNIQUE_ID = "documents.ExpectColumnValuesToBeUnique(id)"
ROW_COUNT = "documents.ExpectTableRowCountToBeBetween"
COLUMNS = "documents.ExpectTableColumnsToMatchSet"
NONEMPTY = "document_features.ExpectColumnValuesToBeBetween(text_chars)"
META_JSON = "document_features.ExpectColumnValuesToBeInSet(meta_is_json)"
SOURCE = "documents.ExpectColumnValuesToNotBeNull(source)"
LABEL_IN_SET = "labeled.ExpectColumnValuesToBeInSet(label)"
SPLIT_IN_SET = "labeled.ExpectColumnValuesToBeInSet(split)"
LABEL_NOT_NULL = "labeled.ExpectColumnValuesToNotBeNull(label)"
TRAIN_HAS_LABELS = "labeled_train.ExpectColumnDistinctValuesToContainSet(label)"
CLASS_SHARE = "class_shares.ExpectColumnValuesToBeBetween(share)"
NO_LEAK = "split_overlap.ExpectColumnValuesToBeInSet(n_splits)"


def documents() -> pd.DataFrame:
    """Four good documents."""
    return pd.DataFrame(
        {
            "id": ["d1", "d2", "d3", "d4"],
            "text": ["alpha beta", "gamma", "delta epsilon", "zeta"],
            "source": ["pkg-a", "pkg-a", "pkg-b", "pkg-c"],
            "url": ["https://x/1", None, None, "https://x/4"],
            "meta": ['{"lang": "en"}', "{}", '{"n": 1}', "[]"],
        }
    )


def labeled() -> pd.DataFrame:
    """Six good labeled examples: both labels in train, shares 1/2 each, no text in two splits."""
    return pd.DataFrame(
        {
            "id": [f"e{i}" for i in range(6)],
            "text": ["good", "bad", "fine", "awful", "great", "poor"],
            "source": ["s1", "s1", "s2", "s2", "s3", "s3"],
            "url": [None] * 6,
            "meta": ["{}"] * 6,
            "label": ["pos", "neg", "pos", "neg", "pos", "neg"],
            "split": ["train", "train", "train", "train", "test", "test"],
        }
    )


def run_documents(df: pd.DataFrame, **overrides) -> GateResult:
    limits = {**DOC_LIMITS, **overrides}
    tables, expectations = documents_suite(df, **limits)
    return validate("documents", tables, expectations)


def run_labeled(df: pd.DataFrame, **overrides) -> GateResult:
    tables, expectations = labeled_suite(df, **{**LABEL_LIMITS, **overrides})
    return validate("labeled", tables, expectations)


def failed(result: GateResult) -> set[str]:
    return {check.name for check in result.failures()}


# --- good data passes ---------------------------------------------------------------------------


def test_good_documents_pass() -> None:
    result = run_documents(documents())
    assert result.success, [(c.name, c.observed) for c in result.failures()]
    assert sorted(c.name for c in result.checks) == [
        "document_features.ExpectColumnValuesToBeBetween(text_chars)",
        "document_features.ExpectColumnValuesToBeInSet(meta_is_json)",
        "documents.ExpectColumnValuesToBeUnique(id)", "documents.ExpectColumnValuesToNotBeNull(id)",
        "documents.ExpectColumnValuesToNotBeNull(source)", "documents.ExpectTableColumnsToMatchSet",
        "documents.ExpectTableRowCountToBeBetween"]
    assert result.stats == {"documents": 4, "document_features": 4}


def test_good_labeled_examples_pass_documents_and_labeled_checks_together() -> None:
    df = labeled()
    tables, expectations = combine(
        documents_suite(df, **DOC_LIMITS, extra_columns=("label", "split")),
        labeled_suite(df, **LABEL_LIMITS),
    )
    result = validate("labeled", tables, expectations)
    assert result.success, [(c.name, c.observed) for c in result.failures()]
    # every check of both suites ran, once, together
    alone = [validate("x", *suite).checks for suite in (documents_suite(df, **DOC_LIMITS, extra_columns=(
        "label", "split")), labeled_suite(df, **LABEL_LIMITS))]
    names = [c.name for c in result.checks]
    assert sorted(names) == sorted(c.name for checks in alone for c in checks) and len(set(names)) == len(names)
    assert {c.table for c in result.checks} >= {"documents", "document_features"} and len(alone[1]) > 0


# --- each documents check fails on exactly its violation ---------------------------------------


def test_too_few_rows_fails_row_count_only() -> None:
    result = run_documents(documents().head(3))
    assert failed(result) == {ROW_COUNT}
    (check,) = result.failures()
    assert check.observed == {"observed_value": 3}


def test_too_many_rows_fails_row_count_only() -> None:
    assert failed(run_documents(documents(), min_rows=1, max_rows=3)) == {ROW_COUNT}


def test_duplicate_id_fails_uniqueness_only() -> None:
    df = documents()
    df.loc[1, "id"] = "d1"
    result = run_documents(df)
    assert failed(result) == {UNIQUE_ID}
    (check,) = result.failures()
    assert check.observed["partial_unexpected_list"] == ["d1", "d1"]


def test_null_id_fails_not_null() -> None:
    df = documents()
    df.loc[2, "id"] = None
    assert "documents.ExpectColumnValuesToNotBeNull(id)" in failed(run_documents(df))


def test_empty_texts_within_ratio_pass_and_beyond_ratio_fail() -> None:
    one_blank = documents()
    one_blank.loc[0, "text"] = "   "  # 3/4 non-empty == min_nonempty_ratio 0.75
    assert run_documents(one_blank).success

    two_blank = one_blank.copy()
    two_blank.loc[1, "text"] = None  # null counts as empty: 2/4 < 0.75
    result = run_documents(two_blank)
    assert failed(result) == {NONEMPTY}
    assert result.failures()[0].observed["unexpected_count"] == 2


def test_extra_column_fails_column_set_only() -> None:
    df = documents().assign(label="pos")
    result = run_documents(df)
    assert failed(result) == {COLUMNS}
    assert "label" in json.dumps(result.failures()[0].observed)


def test_extra_columns_parameter_accepts_declared_columns() -> None:
    assert run_documents(documents().assign(label="pos"), extra_columns=("label",)).success


def test_missing_column_fails_column_set_and_its_own_checks_without_crashing() -> None:
    result = run_documents(documents().drop(columns=["source"]))
    assert failed(result) == {COLUMNS, SOURCE}
    source_check = next(c for c in result.checks if c.name == SOURCE)
    assert "source" in source_check.observed["exception"]


def test_bad_meta_json_fails_meta_check_only_and_names_the_document() -> None:
    df = documents()
    df.loc[2, "meta"] = "{not json"
    result = run_documents(df)
    assert failed(result) == {META_JSON}
    assert "d3" in result.failures()[0].why()


def test_null_source_fails_source_check_only() -> None:
    df = documents()
    df.loc[0, "source"] = None
    assert failed(run_documents(df)) == {SOURCE}


# --- each labeled check fails on exactly its violation -----------------------------------------


def test_good_labeled_suite_passes() -> None:
    assert run_labeled(labeled()).success


def test_label_outside_set_fails_label_in_set_only() -> None:
    df = pd.concat([labeled(), labeled().iloc[[0]].assign(id="x", text="meh", label="neutral")])
    result = run_labeled(df)
    assert failed(result) == {LABEL_IN_SET}
    assert result.failures()[0].observed["partial_unexpected_list"] == ["neutral"]


def test_null_label_is_caught_although_in_set_skips_nulls() -> None:
    df = pd.concat([labeled(), labeled().iloc[[0]].assign(id="x", text="meh", label=None)])
    assert failed(run_labeled(df)) == {LABEL_NOT_NULL}


def test_unknown_split_fails_split_in_set_only() -> None:
    df = labeled()
    df.loc[5, "split"] = "dev"
    assert failed(run_labeled(df)) == {SPLIT_IN_SET}


def test_label_missing_from_train_fails_train_coverage_only() -> None:
    df = labeled()
    df["split"] = ["train", "test", "train", "test", "train", "test"]  # every "neg" is in test
    result = run_labeled(df)
    assert failed(result) == {TRAIN_HAS_LABELS}
    assert result.failures()[0].observed["partial_missing_list"] == ["neg"]


def test_text_in_train_and_test_fails_leak_check_only_after_normalising() -> None:
    df = labeled()
    df.loc[4, "text"] = "  GOOD "  # same as row 0 ("good", train) after strip+lower, but in test
    result = run_labeled(df)
    assert failed(result) == {NO_LEAK}
    assert "good" in result.failures()[0].why()


def test_class_above_max_share_fails_share_check_only() -> None:
    df = labeled()
    df.loc[1, "label"] = "pos"  # pos: 4/6 = 0.67
    assert run_labeled(df).success
    result = run_labeled(df, max_class_share=0.6)
    assert failed(result) == {CLASS_SHARE}
    assert result.failures()[0].observed["partial_unexpected_list"] == [pytest.approx(4 / 6)]


def test_labeled_suite_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError, match="train_split"):
        labeled_suite(labeled(), **{**LABEL_LIMITS, "splits": ("a", "b")})
    with pytest.raises(ValueError, match="min_class_share"):
        labeled_suite(labeled(), **{**LABEL_LIMITS, "min_class_share": 0.9})


# --- enforce and the report ---------------------------------------------------------------------


def test_enforce_raises_naming_the_failed_check_and_still_writes_report(tmp_path: Path) -> None:
    df = documents()
    df.loc[1, "id"] = "d1"
    tables, expectations = documents_suite(df, **DOC_LIMITS)
    report = tmp_path / "reports" / "quality" / "documents.json"

    with pytest.raises(GateFailed) as raised:
        enforce("clean.documents", tables, expectations, report)

    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("gate clean.documents failed: ")
    assert UNIQUE_ID in message
    assert ROW_COUNT not in message  # only failures are named
    assert message.endswith(f"(report: {report})")
    body = json.loads(report.read_text())
    assert body["success"] is False
    assert body["failed"] == [UNIQUE_ID]


def test_a_failed_bound_names_the_params_key_and_value_that_set_it(tmp_path: Path) -> None:
    """Three balanced classes against the default max_class_share 0.3: the error line says which key to change;
    the report holds the bounds as the check's kwargs, as before."""
    df = pd.DataFrame({"text": [f"text {i}" for i in range(9)], "label": ["a", "b", "c"] * 3,
                       "split": ["train"] * 3 + ["validation"] * 3 + ["test"] * 3})
    tables, expectations = labeled_suite(df, labels=["a", "b", "c"], splits=["train", "validation", "test"],
                                         min_class_share=0.005, max_class_share=0.3, where="finetune.defaults.gate")
    report = tmp_path / "task.json"
    with pytest.raises(GateFailed) as raised:
        enforce("finetune-task", tables, expectations, report)
    assert "(set by finetune.defaults.gate.min_class_share=0.005, finetune.defaults.gate.max_class_share=0.3)" \
        in str(raised.value)
    body = json.loads(report.read_text())
    assert all("param" not in check for check in body["checks"])


def test_enforce_writes_report_and_returns_result_on_success(tmp_path: Path) -> None:
    tables, expectations = documents_suite(documents(), **DOC_LIMITS)
    report = tmp_path / "ok.json"
    result = enforce("clean.documents", tables, expectations, report)
    assert result.success
    assert json.loads(report.read_text())["success"] is True
    assert [p.name for p in tmp_path.iterdir()] == ["ok.json"]  # no temp file left behind


def test_report_is_valid_sorted_json_with_every_check(tmp_path: Path) -> None:
    df = documents()
    df.loc[0, "source"] = None  # a null in the observed values must still give valid JSON
    tables, expectations = documents_suite(df, **DOC_LIMITS)
    result = validate("documents", tables, expectations)
    report = tmp_path / "r.json"
    write_report(result, report)

    text = report.read_text()
    body = json.loads(text, parse_constant=lambda name: pytest.fail(f"non-JSON constant {name}"))
    assert text == json.dumps(body, indent=2, sort_keys=True) + "\n"
    assert [check["name"] for check in body["checks"]] == [e.name for e in expectations]
    assert body["stats"] == {"documents": 4, "document_features": 4}
    assert body["summary"] == {"checks": 7, "failed": 1}
    assert body == result.to_json()


def test_write_report_replaces_previous_report(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    report.write_text("old")
    write_report(GateResult(gate="g", success=True, checks=(), stats={}), report)
    assert json.loads(report.read_text())["gate"] == "g"


# --- the runner itself --------------------------------------------------------------------------


def test_callers_dataframe_is_not_mutated() -> None:
    df = labeled()
    before = df.copy(deep=True)
    columns_before = list(df.columns)
    tables, expectations = combine(
        documents_suite(df, **DOC_LIMITS, extra_columns=("label", "split")),
        labeled_suite(df, **LABEL_LIMITS),
    )
    validate("labeled", tables, expectations)
    assert list(df.columns) == columns_before
    pd.testing.assert_frame_equal(df, before)


def test_checks_come_back_in_the_callers_order() -> None:
    # GX evaluates table-level expectations first; the result must still follow our order.
    df = pd.DataFrame({"x": [1, 2, 3]})
    expectations = [
        Expect(table="t", kind="ExpectColumnValuesToBeBetween", kwargs={"column": "x", "min_value": 0}),
        Expect(table="t", kind="ExpectTableRowCountToBeBetween", kwargs={"min_value": 1}),
        Expect(table="u", kind="ExpectTableRowCountToEqual", kwargs={"value": 3}),
        Expect(table="t", kind="ExpectColumnValuesToNotBeNull", kwargs={"column": "x"}),
    ]
    result = validate("order", {"t": df, "u": df}, expectations)
    assert [(c.table, c.expectation) for c in result.checks] == [(e.table, e.kind) for e in expectations]
    assert all(isinstance(c, CheckResult) and c.success for c in result.checks)


def test_unknown_kind_is_a_value_error_naming_it() -> None:
    with pytest.raises(ValueError, match="ExpectNothingInParticular"):
        validate("g", {"t": documents()}, [Expect(table="t", kind="ExpectNothingInParticular")])


def test_expectation_on_missing_table_is_a_value_error_naming_it() -> None:
    expectation = Expect(table="nope", kind="ExpectTableRowCountToBeBetween", kwargs={"min_value": 1})
    with pytest.raises(ValueError, match="nope"):
        validate("g", {"t": documents()}, [expectation])


def test_bad_kwargs_and_duplicates_are_value_errors() -> None:
    with pytest.raises(ValueError, match="ExpectColumnValuesToBeInSet"):
        validate("g", {"t": documents()}, [Expect(table="t", kind="ExpectColumnValuesToBeInSet")])
    twice = Expect(table="t", kind="ExpectColumnValuesToNotBeNull", kwargs={"column": "id"})
    with pytest.raises(ValueError, match="duplicate"):
        validate("g", {"t": documents()}, [twice, twice])


def test_expect_copies_its_kwargs() -> None:
    kwargs = {"column": "id"}
    expectation = Expect(table="t", kind="ExpectColumnValuesToBeUnique", kwargs=kwargs)
    kwargs["column"] = "text"
    assert expectation.kwargs == {"column": "id"}


def test_importing_gate_does_not_import_great_expectations() -> None:
    code = "import sys, stages.quality.gate, stages.quality.suites; print('great_expectations' in sys.modules)"
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- the file-backed project: stored suites, a checkpoint per gate table, Data Docs ----------------------


def test_a_workspace_gate_stores_its_suite_and_checkpoint_and_shows_failing_values_in_data_docs(tmp_path: Path) -> None:
    df = documents()
    df.loc[1, "id"] = "d1"
    tables, expectations = documents_suite(df, **DOC_LIMITS)
    project = tmp_path / "reports"
    stored = validate("clean-general", tables, expectations, project)
    assert failed(stored) == failed(validate("clean-general", tables, expectations)) == {UNIQUE_ID}
    gx_dir = project / "gx"
    suite = json.loads((gx_dir / "expectations" / "clean-general" / "documents.json").read_text())
    kinds = [e["type"] for e in suite["expectations"]]
    assert len(kinds) == sum(e.table == "documents" for e in expectations)
    assert "expect_column_values_to_be_unique" in kinds
    for table in tables:  # one checkpoint and one validation definition per gate table
        assert (gx_dir / "checkpoints" / f"clean-general.{table}.json").is_file()
        assert (gx_dir / "validation_definitions" / f"clean-general.{table}.json").is_file()
    assert stored.data_docs == str(project / "gx/uncommitted/data_docs/local_site/index.html")
    index = Path(stored.data_docs).read_text()
    assert "clean-general" in index
    pages = sorted((gx_dir / "uncommitted/data_docs/local_site/validations/clean-general/documents").rglob("*.html"))
    assert len(pages) == 1 and "Unexpected Value" in pages[0].read_text()  # the failing ids are on the page

    # the next run stores today's suite (nothing older survives) and adds its own validation page
    fewer = [e for e in expectations if e.kind != "ExpectColumnValuesToBeUnique"]
    assert validate("clean-general", tables, fewer, project).success
    suite = json.loads((gx_dir / "expectations" / "clean-general" / "documents.json").read_text())
    assert "expect_column_values_to_be_unique" not in [e["type"] for e in suite["expectations"]]
    pages = list((gx_dir / "uncommitted/data_docs/local_site/validations/clean-general/documents").rglob("*.html"))
    assert len(pages) == 2


def test_enforce_names_the_data_docs_in_the_error_and_the_report(tmp_path: Path, monkeypatch) -> None:
    df = documents()
    df.loc[1, "id"] = "d1"
    tables, expectations = documents_suite(df, **DOC_LIMITS)
    monkeypatch.setenv("LMPIPE_GX_PROJECT", str(tmp_path / "reports"))
    report = tmp_path / "reports" / "quality" / "documents.json"
    with pytest.raises(GateFailed) as raised:
        enforce("clean.documents", tables, expectations, report)
    docs = str(tmp_path / "reports" / "gx/uncommitted/data_docs/local_site/index.html")
    assert str(raised.value).endswith(f"(report: {report}; Data Docs: {docs})")
    assert json.loads(report.read_text())["data_docs"] == docs


def test_gx_project_follows_the_env_then_the_workspace(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LMPIPE_GX_PROJECT", raising=False)
    assert gx_project() is None                                  # not a pipeline workspace: ephemeral
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    assert gx_project() == Path("reports")                       # `dvc repro` in a workspace: reports/gx/
    monkeypatch.setenv("LMPIPE_GX_PROJECT", "")
    assert gx_project() is None
    monkeypatch.setenv("LMPIPE_GX_PROJECT", str(tmp_path / "elsewhere"))
    assert gx_project() == tmp_path / "elsewhere"


def test_the_stored_history_stays_bounded(tmp_path: Path, monkeypatch) -> None:
    import stages.quality.gate as gate_module

    monkeypatch.setattr(gate_module, "KEEP_VALIDATIONS", 2)
    monkeypatch.setattr(gate_module._prune_history, "__defaults__", (1,))
    tables, expectations = documents_suite(documents(), **DOC_LIMITS)
    for _ in range(3):
        assert validate("g", tables, expectations, tmp_path).success
    local = tmp_path / "gx" / "uncommitted"
    for base in (local / "validations" / "g" / "documents", local / "data_docs/local_site/validations/g/documents"):
        assert len(list(base.glob("*/*T*Z"))) == 2, base     # the kept one and this run's


def test_gx_preloaded_in_the_background_is_what_the_gate_imports() -> None:
    # A fresh interpreter, so that GX is not imported yet: preload() starts the import in a thread, and the
    # gate's own import waits for that thread instead of importing a second time.
    code = ("import sys, threading\n"
            "from stages.quality import gate\n"
            "gate.preload()\n"
            "t = gate._preloading\n"
            "assert t is not None and t.name == 'gx-preload'\n"
            "gx = gate._import_gx()\n"
            "assert not t.is_alive() and gx is sys.modules['great_expectations']\n"
            "gate.preload()\n"
            "assert gate._preloading is t\n"
            "print('ok')\n")
    env = {**os.environ, "GX_ANALYTICS_ENABLED": "false"}
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[3], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_a_gate_report_is_written_under_a_temporary_name_the_sweep_knows(tmp_path: Path, monkeypatch) -> None:
    # A run killed between writing and renaming leaves the temporary file; its name must carry the writer so
    # that the next stage's sweep (stages.common.atomic.sweep_dead) removes it.
    from stages.common import atomic

    renamed = []
    real = os.replace

    def spy(src, dst):
        renamed.append(Path(src).name)
        return real(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    write_report(GateResult(gate="g", success=True, checks=(), stats={}), tmp_path / "g.json")
    assert len(renamed) == 1 and renamed[0].startswith(".g.json.tmp-")
    match = atomic._OWNED.match(renamed[0])
    assert match and match.group(1) == str(os.getpid()) and match.group(2) == atomic._HOST
    assert json.loads((tmp_path / "g.json").read_text())["gate"] == "g"
