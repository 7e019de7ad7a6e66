"""Data contracts: a Great Expectations suite per artifact, checked on write and on read.

The pyarrow schema fixes column names and types; the contract fixes what types cannot say
(ids unique and non-empty, enums in their set, counts non-negative). A suite is declared
once, next to the artifact's schema, with `register(name, [...])`.

Great Expectations costs 2-4 s to import, more than most commands do. It is imported only
when a suite actually has to run: a file whose exact bytes already passed the same suite
(same expectations, same GE version, same code of this module, same schema) is recorded in
a per-user validation record (`validated_before` / `record_validated`), so re-reading it
(`rlvr tasks list`, the next stage) skips the import without skipping a check: the same
input to the same deterministic suite gives the same verdict. Any other file, and every
table checked before a write, goes through GE.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import pyarrow as pa

from rlvr.artifacts.digest import file_sha256
from rlvr.errors import ArtifactError

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")

# Where passed validations are recorded: a directory, or "off" to run every suite every time.
VALIDATED_ENV = "RLVR_CONTRACT_CACHE"


@dataclass(frozen=True)
class Expect:
    """One expectation: GE expectation class name (e.g. "ExpectColumnValuesToBeUnique") + kwargs."""

    kind: str
    kwargs: dict[str, Any] = field(default_factory=dict)


_SUITES: dict[str, tuple[Expect, ...]] = {}


def register(name: str, expectations: list[Expect]) -> None:
    _SUITES[name] = tuple(expectations)


def not_null(*columns: str) -> list[Expect]:
    return [Expect("ExpectColumnValuesToNotBeNull", {"column": c}) for c in columns]


def unique(column: str) -> Expect:
    return Expect("ExpectColumnValuesToBeUnique", {"column": column})


def unique_together(*columns: str) -> Expect:
    """No two rows share the values of all `columns` (a compound key)."""
    return Expect("ExpectCompoundColumnsToBeUnique", {"column_list": list(columns)})


def in_set(column: str, values) -> Expect:
    return Expect("ExpectColumnValuesToBeInSet", {"column": column, "value_set": list(values)})


def between(column: str, low=None, high=None) -> Expect:
    return Expect("ExpectColumnValuesToBeBetween",
                  {"column": column, "min_value": low, "max_value": high})


def nonempty_string(column: str) -> Expect:
    return Expect("ExpectColumnValueLengthsToBeBetween", {"column": column, "min_value": 1})


@lru_cache(maxsize=None)
def _context():
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    return ctx, ctx.data_sources.add_pandas("rlvr")


@lru_cache(maxsize=None)
def _suite_and_batch(name: str):
    import great_expectations as gx

    ctx, source = _context()
    suite = gx.ExpectationSuite(name=name)
    for exp in _SUITES[name]:
        suite.add_expectation(getattr(gx.expectations, exp.kind)(**exp.kwargs))
    suite = ctx.suites.add(suite)
    batch_def = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe("all")
    return suite, batch_def


def check(name: str, table: pa.Table, where: str) -> None:
    """Validate `table` against suite `name`; ArtifactError names the file and each failed rule."""
    if name not in _SUITES:
        raise KeyError(f"no data contract registered for artifact '{name}'")
    if table.num_rows == 0:
        return
    columns = sorted({e.kwargs["column"] for e in _SUITES[name] if "column" in e.kwargs}
                     | {c for e in _SUITES[name] for c in e.kwargs.get("column_list", ())})
    frame = table.select(columns).to_pandas()
    suite, batch_def = _suite_and_batch(name)
    result = batch_def.get_batch(batch_parameters={"dataframe": frame}).validate(suite)
    if result.success:
        return
    problems = []
    for res in result.results:
        if not res.success:
            cfg = res.expectation_config
            sample = (res.result or {}).get("partial_unexpected_list", [])[:3]
            column = cfg.kwargs.get("column") or ",".join(cfg.kwargs.get("column_list") or ())
            problems.append(f"{cfg.type}({column}) unexpected={sample}")
    raise ArtifactError(f"{where}: breaks the '{name}' data contract: " + "; ".join(problems))


# ------------------------------------------------------------------ validation record
def _record_dir() -> Path | None:
    value = os.environ.get(VALIDATED_ENV)
    if value == "off":
        return None
    if value:
        return Path(value)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rlvr" / "validated"


def _suite_fingerprint(name: str) -> str:
    """What a verdict depends on besides the data: the suite as registered now, GE's
    version, this module's code."""
    return _fingerprint(repr(_SUITES[name]))


@lru_cache(maxsize=None)
def _fingerprint(suite: str) -> str:
    from importlib.metadata import version

    code = Path(__file__).read_bytes()
    return hashlib.sha256(f"{suite}\0{version('great_expectations')}\0".encode()
                          + code).hexdigest()


def _record_path(name: str, path: Path | str, schema: pa.Schema) -> Path | None:
    where = _record_dir()
    if where is None or name not in _SUITES:
        return None
    try:
        digest = file_sha256(path)
    except OSError:
        return None
    key = hashlib.sha256("\0".join([name, _suite_fingerprint(name), schema.to_string(),
                                     digest]).encode()).hexdigest()
    return where / key[:2] / key


def validated_before(name: str, path: Path | str, schema: pa.Schema) -> bool:
    """These exact bytes, read with `schema`, already passed suite `name` here."""
    record = _record_path(name, path, schema)
    return record is not None and record.is_file()


def record_validated(name: str, path: Path | str, schema: pa.Schema) -> None:
    """Note that `path`'s bytes passed suite `name` (best effort: no record, no harm)."""
    record = _record_path(name, path, schema)
    if record is None:
        return
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(record, os.O_CREAT | os.O_WRONLY, 0o644))  # empty: its name is the fact
    except OSError:
        pass


def check_file(name: str, table: pa.Table, path: Path | str, schema: pa.Schema) -> None:
    """`check` for a table read from `path`, run only if these bytes have not passed before."""
    if validated_before(name, path, schema):
        return
    check(name, table, where=str(path))
    record_validated(name, path, schema)
