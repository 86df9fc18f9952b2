"""A thin runner of Great Expectations (GX 1.x, imported lazily) checks on pandas DataFrames: a *gate* is a named
set of `Expect` checks between two stages; `enforce` writes a JSON report and raises `GateFailed` on a failed check.
In a file-backed project (``reports/gx/``) a Checkpoint ``<gate>.<table>`` also stores the result and Data Docs."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import sys
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stages.common.atomic import write_bytes_atomic

if TYPE_CHECKING:  # only for annotations; pandas is imported lazily like GX
    import pandas

# Keys of a GX result worth keeping: enough to see why a check failed.
_OBSERVED_KEYS = ("observed_value", "element_count", "unexpected_count", "missing_count", "partial_unexpected_list",
                  "partial_unexpected_index_list", "partial_missing_list", "details")
# Long texts (e.g. a leaked document used as an index) would bloat the report and the error line.
_MAX_STR_CHARS = 200
_MAX_WHY_CHARS = 160
_BATCH = "whole"
# The Data Docs site of a file-backed project, relative to the project root (GX's default local site).
DATA_DOCS_INDEX = "gx/uncommitted/data_docs/local_site/index.html"
_NO_RESULT = {"exception": "great_expectations returned no result for this expectation"}


def gx_project() -> Path | None:
    """The GX project root: ``LMPIPE_GX_PROJECT`` when set (empty: None, ephemeral), else ``reports``
    in a pipeline workspace (a ``dvc.yaml`` here), else None."""
    value = os.environ.get("LMPIPE_GX_PROJECT")
    if value is not None:
        return Path(value) if value else None
    return Path("reports") if Path("dvc.yaml").is_file() else None


class GateFailed(RuntimeError):
    """Raised by `enforce` when at least one check of a gate failed; the report is already written."""


def set_by(where: str, **values) -> str:
    """:attr:`Expect.param` for bounds under the params section ``where``: ``where.key=value, ...``; "" without
    a section (a suite used outside a stage)."""
    return ", ".join(f"{where}.{key}={value!r}" for key, value in values.items()) if where else ""


@dataclass(frozen=True)
class Expect:
    """One expectation without GX objects: ``table`` (a key of `tables`), ``kind`` (a GX expectation
    class name, e.g. "ExpectTableRowCountToBeBetween") and that class's ``kwargs``."""

    table: str
    kind: str
    kwargs: dict = field(default_factory=dict)
    param: str = ""
    """The params keys that set this check's bounds, with their values (``clean.domain.gate.max_kept_fraction=0.8``):
    a failure names them, so the user knows what to change."""

    def __post_init__(self) -> None:
        if not self.table or not isinstance(self.table, str):
            raise ValueError(f"Expect.table must be a non-empty string, got {self.table!r}")
        if not self.kind or not isinstance(self.kind, str):
            raise ValueError(f"Expect.kind must be a non-empty string, got {self.kind!r}")
        object.__setattr__(self, "kwargs", dict(self.kwargs))  # a caller's later change must not reach the suite

    @property
    def name(self) -> str:
        """Short label used in reports and error messages, e.g. "documents.ExpectColumnValuesToBeUnique(id)"."""
        column = self.kwargs.get("column")
        return f"{self.table}.{self.kind}({column})" if column is not None else f"{self.table}.{self.kind}"


@dataclass(frozen=True, kw_only=True)
class CheckResult:
    """Outcome of one expectation; ``observed`` is a JSON-safe summary of what GX saw, or
    {"exception": message} when GX could not evaluate it (e.g. a missing column)."""

    table: str
    expectation: str
    kwargs: dict
    success: bool
    observed: object
    param: str = ""
    """As :attr:`Expect.param`; in error lines, not in the report (its checks list the bounds as kwargs)."""

    @property
    def name(self) -> str:
        return Expect(self.table, self.expectation, self.kwargs).name

    def why(self) -> str:
        """One-line reason for a failure, for error messages: the error, the unexpected values, what is missing."""
        observed = self.observed
        if not isinstance(observed, Mapping):
            return _clip(repr(observed))
        if "exception" in observed:
            return _clip(f"error: {observed['exception']}")
        parts: list[str] = []
        if "observed_value" in observed:
            parts.append(f"observed {observed['observed_value']!r}")
        details = observed.get("details")
        mismatched = details.get("mismatched") if isinstance(details, Mapping) else None
        if mismatched:
            parts.append(f"mismatched {mismatched!r}")
        if observed.get("unexpected_count"):
            # With a named index GX lists unexpected rows as {index_name: value, column: value} dicts: show those.
            index_list = observed.get("partial_unexpected_index_list") or []
            named = bool(index_list) and isinstance(index_list[0], Mapping)
            examples = (index_list if named else observed.get("partial_unexpected_list")) or []
            parts.append(f"{observed['unexpected_count']} unexpected, e.g. {examples[:3]!r}")
        if observed.get("partial_missing_list"):
            parts.append(f"missing {observed['partial_missing_list']!r}")
        return _clip(", ".join(parts) or "failed")

    def to_json(self) -> dict:
        return {"name": self.name, **{k: v for k, v in dataclasses.asdict(self).items() if k != "param"}}


@dataclass(frozen=True, kw_only=True)
class GateResult:
    """Outcome of a gate: every check in the caller's order, rows per table (``stats``), and the
    Data Docs index of a file-backed project (else None). No checks: success."""

    gate: str
    success: bool
    checks: tuple[CheckResult, ...]
    stats: dict
    data_docs: str | None = None

    def failures(self) -> tuple[CheckResult, ...]:
        return tuple(check for check in self.checks if not check.success)

    def to_json(self) -> dict:
        failures = self.failures()
        return {"gate": self.gate, "success": self.success, "stats": dict(self.stats),
                "summary": {"checks": len(self.checks), "failed": len(failures)},
                "failed": [check.name for check in failures], "checks": [check.to_json() for check in self.checks],
                **({"data_docs": self.data_docs} if self.data_docs else {})}


def validate(gate: str, tables: Mapping[str, pandas.DataFrame], expectations: Sequence[Expect],
             project: Path | None = None) -> GateResult:
    """Every check's outcome over `tables` (bad data never raises), stored with Data Docs in the GX ``project`` (None:
    ephemeral). ValueError for a bad suite (unknown class or table, rejected kwargs, a duplicate), TypeError for a
    table that is not a DataFrame."""
    import pandas as pd

    for table, frame in tables.items():
        if not isinstance(frame, pd.DataFrame):
            raise TypeError(f"gate {gate}: table {table!r} is {type(frame).__name__}, not a DataFrame")
    for expect in expectations:
        if expect.table not in tables:
            raise ValueError(f"gate {gate}: expectation {expect.kind} is on table {expect.table!r}, "
                             f"which is not among the tables given: {sorted(tables)}")

    with _quiet_gx(), _project_lock(project) if project is not None else contextlib.nullcontext():
        gx = _import_gx()
        # Build every GX expectation before touching data, so a bad suite fails fast and whole.
        built = [_build_expectation(expect) for expect in expectations]
        context = (gx.get_context(mode="ephemeral") if project is None  # the lock made the project's folder
                   else gx.get_context(mode="file", project_root_dir=str(project)))
        # GX draws a tqdm "Calculating Metrics" bar per validation on stderr; a GX without the config: keep going.
        with contextlib.suppress(ImportError):
            from great_expectations.data_context.types.base import ProgressBarsConfig

            context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
        datasource = context.data_sources.add_or_update_pandas(name="gate")
        index_by_id: dict[str, int] = {}
        results: dict[int, Any] = {}
        rendered: list[Any] = []  # each stored validation and its suite, for one Data Docs build at the end
        for table in dict.fromkeys(expect.table for expect in expectations):  # first-seen order: deterministic
            # One GX batch per table; the suite replaces the stored one of its name (today's checks, nothing older).
            name = f"{gate}.{table}"
            asset = _get_or_add(lambda: datasource.get_asset(name), lambda: datasource.add_dataframe_asset(name=name))
            batch_definition = _get_or_add(lambda: asset.get_batch_definition(_BATCH),
                                           lambda: asset.add_batch_definition_whole_dataframe(name=_BATCH))
            suite = context.suites.add_or_update(gx.ExpectationSuite(name=name))
            for i, expect in enumerate(expectations):
                if expect.table == table:
                    added = suite.add_expectation(built[i])
                    # GX silently drops an expectation equal to one already in the suite (no id): say so.
                    if added.id is None or added.id in index_by_id:
                        raise ValueError(f"gate {gate}: duplicate expectation {expect.name}")
                    index_by_id[added.id] = i
            if project is not None:  # a checkpoint stores the result and renders Data Docs
                _prune_history(Path(context.root_directory), gate, table)
                definition = context.validation_definitions.add_or_update(
                    gx.ValidationDefinition(name=name, data=batch_definition, suite=suite))
                checkpoint = context.checkpoints.add_or_update(gx.Checkpoint(
                    name=name, validation_definitions=[definition], result_format="SUMMARY", actions=[]))
                run = checkpoint.run(batch_parameters={"dataframe": tables[table]})
                identifier, validation = next(iter(run.run_results.items()))
                rendered += [identifier, _suite_identifier(name)]
            else:
                batch = batch_definition.get_batch(batch_parameters={"dataframe": tables[table]})
                validation = batch.validate(suite, result_format="SUMMARY")
            results.update((index_by_id[result.expectation_config.id], result) for result in validation.results)
        if rendered:  # the pages of this gate's validations and suites, and the index, rendered once
            context.build_data_docs(resource_identifiers=rendered, dry_run=False, build_index=True)
            if os.environ.get("LMPIPE_DOCS_ASSETS", "npm") != "cdn":  # their CSS and JS from the workspace
                from stages.quality.docs_assets import vendor_site

                vendor_site((project / DATA_DOCS_INDEX).parent, cache_dir=project.parent / ".cache" / "sources",
                            log=lambda line: print(line, file=sys.stderr))

    # A check GX returned nothing for must not pass by omission.
    checks = tuple(
        CheckResult(table=expect.table, expectation=expect.kind, kwargs=_jsonable(expect.kwargs),
                    success=result is not None and bool(result.success),
                    observed=_NO_RESULT if result is None else _observed(result.result, result.exception_info),
                    param=expect.param)
        for expect, result in ((expect, results.get(i)) for i, expect in enumerate(expectations)))
    return GateResult(gate=gate, success=all(check.success for check in checks), checks=checks,
                      stats={table: int(len(frame)) for table, frame in tables.items()},
                      data_docs=str(project / DATA_DOCS_INDEX) if project is not None else None)


def write_report(result: GateResult, path: str | Path) -> None:
    """Write `result` as pretty JSON with sorted keys, atomically; a stray NaN (invalid JSON) raises."""
    text = json.dumps(result.to_json(), indent=2, sort_keys=True, allow_nan=False) + "\n"
    write_bytes_atomic(path, text.encode("utf-8"))


def enforce(gate: str, tables: Mapping[str, pandas.DataFrame], expectations: Sequence[Expect],
            report_path: str | Path) -> GateResult:
    """Validate in `gx_project`, write the report even on failure (the evidence), raise `GateFailed` on a failure."""
    result = validate(gate, tables, expectations, gx_project())
    write_report(result, report_path)
    if not result.success:
        reasons = "; ".join(f"{check.name}: {check.why()}" + (f" (set by {check.param})" if check.param else "")
                            for check in result.failures())
        docs = f"; Data Docs: {result.data_docs}" if result.data_docs else ""
        raise GateFailed(f"gate {gate} failed: {reasons} (report: {report_path}{docs})")
    return result


@dataclass(frozen=True)
class Gate:
    """A gate's name, tables and checks, returned by a stage's core; the entry checks it before publishing."""

    name: str
    tables: Mapping[str, Any]
    checks: Sequence[Expect]

    def check(self, report_path: str | Path) -> GateResult:
        return enforce(self.name, self.tables, self.checks, report_path)


# --- GX plumbing -----------------------------------------------------------------------------


_preloading: threading.Thread | None = None


def preload() -> None:
    """Start importing GX (seconds) in a background thread while the stage's workers run."""
    global _preloading
    if _preloading is None and "great_expectations" not in sys.modules:
        _preloading = threading.Thread(target=_try_import_gx, name="gx-preload", daemon=True)
        _preloading.start()


def _try_import_gx() -> None:
    with contextlib.suppress(Exception):  # raised again, with its traceback, by the gate's own import
        _import_gx()


def _import_gx() -> Any:
    if _preloading is not None and _preloading is not threading.current_thread():
        _preloading.join()
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")  # analytics would reach the network
    with warnings.catch_warnings():  # GX imports the deprecated `sre_constants`: not an error under -W error
        warnings.simplefilter("ignore", DeprecationWarning)
        import great_expectations as gx

    return gx


@contextlib.contextmanager
def _quiet_gx() -> Iterator[None]:
    """Raise GX's logger to WARNING for the duration of a gate (its INFO is noise), then restore it."""
    logger = logging.getLogger("great_expectations")
    previous = logger.level
    if logger.getEffectiveLevel() < logging.WARNING:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(previous)


def _build_expectation(expect: Expect) -> Any:
    import great_expectations.expectations as gxe

    cls = getattr(gxe, expect.kind, None) if expect.kind.startswith("Expect") else None
    if not isinstance(cls, type) or not issubclass(cls, gxe.Expectation) or cls is gxe.Expectation:
        raise ValueError(f"unknown expectation kind {expect.kind!r}: not a class in great_expectations.expectations")
    try:
        return cls(**expect.kwargs)
    except Exception as error:  # pydantic validation errors: re-raise naming the check
        raise ValueError(f"bad kwargs for {expect.name}: {error}".replace("\n", " ")) from error


# Validation results kept per gate table in a file-backed project (each run adds one; Data Docs index them all).
KEEP_VALIDATIONS = 20


def _prune_history(gx_root: Path, gate: str, table: str, keep: int = KEEP_VALIDATIONS - 1) -> None:
    """Drop all but the newest ``keep`` stored results of this gate table and their Data Docs pages (run folders
    are named by UTC time, so names sort by age)."""
    import shutil

    for base in (gx_root / "uncommitted" / "validations", gx_root / "uncommitted" / "data_docs" / "local_site" /
                 "validations"):
        runs = sorted((base / gate / table).glob("*/*T*Z"), key=lambda p: p.name)
        for old in runs[:-keep] if keep else runs:
            shutil.rmtree(old, ignore_errors=True)


def _suite_identifier(name: str) -> Any:
    from great_expectations.data_context.types.resource_identifiers import ExpectationSuiteIdentifier

    return ExpectationSuiteIdentifier(name=name)


def _get_or_add(get: Any, add: Any) -> Any:
    try:
        return get()
    except (LookupError, ValueError):  # GX 1.x raises LookupError subclasses for a missing asset / definition
        return add()


@contextlib.contextmanager
def _project_lock(project: Path) -> Iterator[None]:
    """One gate at a time writes a file-backed project (stages the flow runs side by side share it)."""
    import fcntl

    (project / "gx").mkdir(parents=True, exist_ok=True)
    with open(project / "gx" / ".lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes, on any exit
        yield


# --- turning GX results into small JSON ------------------------------------------------------


def _observed(result: Mapping[str, Any] | None, exception_info: Any) -> dict:
    """Keep the informative part of a GX result; surface evaluation errors as {"exception": ...}."""
    messages = _exception_messages(exception_info)
    if messages:
        return {"exception": "; ".join(dict.fromkeys(messages))}
    result = result or {}
    # Distinct-value set checks report observed_value=None in GX 1.24; drop the useless key.
    return _jsonable({key: result[key] for key in _OBSERVED_KEYS
                      if key in result and not (key == "observed_value" and result[key] is None)})


def _exception_messages(info: Any) -> list[str]:
    # GX reports errors flat ({"raised_exception": True, ...}) or keyed by metric id; read both.
    if not isinstance(info, Mapping):
        return []
    if "raised_exception" in info:
        return [str(info.get("exception_message") or "evaluation error")] if info["raised_exception"] else []
    return [message for value in info.values() for message in _exception_messages(value)]


def _jsonable(value: Any) -> Any:
    """Convert GX / numpy / pandas values into plain JSON types (NaN and NA become null)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return value if len(value) <= _MAX_STR_CHARS else value[:_MAX_STR_CHARS] + "..."
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else float(value)
    if isinstance(value, Mapping):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted((_jsonable(item) for item in value), key=repr)
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    # numpy scalars expose .item(); pandas NA / NaT are "missing" values.
    item = getattr(value, "item", None)
    if callable(item):
        with contextlib.suppress(Exception):
            return _jsonable(item())
    with contextlib.suppress(Exception):
        import pandas as pd

        if pd.isna(value):
            return None
    return _jsonable(str(value))


def _clip(text: str) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= _MAX_WHY_CHARS else one_line[: _MAX_WHY_CHARS - 3] + "..."
