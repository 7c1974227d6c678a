"""Check a file against trace format v1 and report every problem, not just the first.

Schema problems (missing or mistyped columns, missing version metadata) are found from the footer;
value problems (nulls where none are allowed, unsorted ``ts``, negative resources, unknown verbs)
in one streaming pass over the columns concerned.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import cast

import polars as pl
import pyarrow as pa

from replay.errors import ReplayError
from replay.limits import FIRST_TIME, INT64_MAX, TRACE_END, TRACE_TIMES
from replay.trace import schema
from replay.trace.io import first_line, open_trace, resource_sum_problems


def validate(path: str | os.PathLike) -> list[str]:
    """Every way ``path`` departs from the format, one sentence each; empty when it is valid.

    A file that is not Parquet at all raises ``ReplayError`` instead.
    """
    arrow_schema = open_trace(path).schema_arrow
    problems, well_typed = schema_problems(arrow_schema)
    if len(set(arrow_schema.names)) < len(arrow_schema.names):
        return problems  # polars reads no file that names a column twice, so no value either
    return problems + value_problems(pl.scan_parquet(os.fspath(path), glob=False), well_typed)


def schema_problems(arrow_schema: pa.Schema) -> tuple[list[str], list[str]]:
    """Problems found in a trace's schema and metadata, and the columns that are well typed."""
    problems = _metadata_problems(arrow_schema.metadata or {})
    counts = Counter(arrow_schema.names)
    problems += [f"column {name!r} appears {count} times" for name, count in sorted(counts.items())
                 if count > 1]
    well_typed = []
    for col in schema.COLUMNS:
        if col.name not in arrow_schema.names:
            if not col.optional:
                problems.append(f"missing column {col.name!r}")
        elif counts[col.name] > 1:
            continue
        elif arrow_schema.field(col.name).type != col.type:
            found = arrow_schema.field(col.name).type
            problems.append(f"column {col.name!r} has type {found}, expected {col.type}")
        else:
            well_typed.append(col.name)
    return problems, well_typed


def conversion_hint(path: str | os.PathLike, arrow_schema: pa.Schema) -> str:
    """A sentence pointing to ``replay import parquet`` when the schema's problems are types or
    metadata alone (a table another tool wrote), else nothing."""
    problems, _ = schema_problems(arrow_schema)
    names = arrow_schema.names
    whole = all(names.count(c.name) == 1 for c in schema.COLUMNS if not c.nullable)
    if not problems or not whole or len(set(names)) < len(names):
        return ""
    return (f"a table other tools wrote (polars, pandas, DuckDB) is made a trace by "
            f"`replay import parquet --table {path} --out TRACE`")


def _metadata_problems(metadata: dict[bytes, bytes]) -> list[str]:
    version = metadata.get(schema.META_VERSION.encode())
    if version is None:
        return [f"no {schema.META_VERSION} in the file's key-value metadata"]
    if version.decode(errors="replace") != str(schema.TRACE_VERSION):
        return [f"{schema.META_VERSION} is {version.decode(errors='replace')!r}; "
                f"this version of replay reads version {schema.TRACE_VERSION}"]
    return []


def value_problems(frame: pl.LazyFrame | pl.DataFrame, columns: list[str], *,
                   ordered: bool = True) -> list[str]:
    """Problems in the values of the well-typed ``columns``, found in one pass (for a frame in
    memory, only when quick summaries of its columns do not already rule them all out).
    ``ordered=False`` leaves out ``ts``'s order, for rows yet to be sorted.  A column the frame
    lacks (an optional one) has no problems."""
    names = frame.collect_schema().names()
    columns = [name for name in columns if name in names]
    if isinstance(frame, pl.DataFrame):
        if _clean(frame, columns, ordered):
            return []
        frame = frame.lazy()
    checks: list[tuple[str, pl.Expr, str]] = []  # (name, boolean "bad row" expression, sentence)
    for name in columns:
        if not schema.BY_NAME[name].nullable:
            checks.append((f"null {name}", pl.col(name).is_null(), f"null in column {name!r}"))
    if "ts" in columns and ordered:
        checks.append(("unsorted", pl.col("ts").diff() < pl.duration(microseconds=0),
                       "ts is not sorted (a row earlier than the row before it)"))
    if {"ts", "received_ts"} <= set(columns):
        checks.append(("received after ts", pl.col("received_ts") > pl.col("ts"),
                       "received_ts is later than ts"))
    for name in ("ts", "received_ts"):
        if name in columns:
            checks.append((f"{name} out of range",
                           ~pl.col(name).is_between(FIRST_TIME, TRACE_END, closed="left"),
                           f"{name} outside the times replay handles ({TRACE_TIMES})"))
    for name in schema.COUNT_COLUMNS:
        if name in columns:
            checks.append((f"negative {name}", pl.col(name) < 0, f"negative {name}"))
    if "verb" in columns:
        checks.append(("unknown verb", ~pl.col("verb").is_in(schema.VERBS),
                       f"verb not one of {', '.join(schema.VERBS)}"))
    if "code" in columns:
        checks.append(("bad code", ~pl.col("code").is_between(100, 599),
                       "code is not an HTTP status (100-599)"))
    if "phase" in columns:
        checks.append(("unknown phase", ~pl.col("phase").is_in(schema.PHASES),
                       f"phase not one of {', '.join(schema.PHASES)}"))
    if not checks:
        return []
    aggregates = []
    for key, bad, _ in checks:
        bad = bad.fill_null(False)
        aggregates += [bad.sum().alias(f"{key}:count"), bad.arg_true().first().alias(f"{key}:first")]
    try:
        found = frame.select(aggregates).collect().row(0, named=True)
    except (pl.exceptions.PolarsError, pa.ArrowException, OSError) as err:
        return [f"cannot read the column data ({str(err).strip().splitlines()[0]})"]
    problems = []
    for key, _, sentence in checks:
        count = found[f"{key}:count"] or 0
        if count:
            rows = "row" if count == 1 else "rows"
            problems.append(f"{sentence}: {count} {rows}, first at row index {found[f'{key}:first']}")
    if not any(problem.startswith("negative") for problem in problems):
        problems += resource_sum_problems(frame, columns)
    return problems


def _clean(frame: pl.DataFrame, columns: list[str], ordered: bool) -> bool:
    """Whether ``frame`` has none of the problems ``value_problems`` looks for, judged from
    what polars keeps or finds in a blink: null counts, sortedness, minima and maxima, the
    distinct verbs (a tenth of the cost of counting and locating every kind of bad row)."""
    present = set(columns)
    if any(frame[c].null_count() for c in present if not schema.BY_NAME[c].nullable):
        return False
    if "ts" in present and ordered and not frame["ts"].is_sorted():
        return False
    if {"ts", "received_ts"} <= present and (frame["received_ts"] > frame["ts"]).any():
        return False
    for name in present & {"ts", "received_ts"}:  # (a minimum before the year 1 is no datetime)
        if not frame[name].is_between(FIRST_TIME, TRACE_END, closed="left").fill_null(True).all():
            return False
    resources = present & set(schema.RESOURCE_COLUMNS)  # integers, nullable
    if any((cast("int | None", frame[c].min()) or 0) < 0
           for c in present & set(schema.COUNT_COLUMNS)):
        return False
    if any((cast("int | None", frame[c].max()) or 0) * frame.height > INT64_MAX
           for c in resources):  # then resource_sum_problems must look
        return False
    if "verb" in present and not set(frame["verb"].unique().to_list()) <= set(schema.VERBS):
        return False
    if "phase" in present and not set(frame["phase"].drop_nulls().unique().to_list()) <= set(
            schema.PHASES):
        return False
    if "code" in present and frame.height:
        codes = frame["code"]  # integers, not nullable (checked above)
        return 100 <= cast(int, codes.min()) and cast(int, codes.max()) <= 599
    return True


def read_trace(path: str | os.PathLike, columns: list[str] | None = None) -> pl.DataFrame:
    """Read a trace into a polars DataFrame (all columns by default, an optional one the file
    leaves out as nulls), refusing one that does not pass validation with the first problem
    found."""
    arrow_schema = open_trace(path).schema_arrow
    problems, well_typed = schema_problems(arrow_schema)
    absent = [c for c in schema.COLUMNS if c.optional and c.name not in arrow_schema.names
              and (columns is None or c.name in columns)]
    if columns is not None:
        columns = [name for name in columns if name in arrow_schema.names]
    if not problems:
        try:
            frame = pl.read_parquet(os.fspath(path), columns=columns, glob=False)
        except Exception as err:  # pyarrow and polars raise many types for damaged data pages
            raise ReplayError(f"{path}: cannot read the trace ({first_line(err)})") from None
        present = [c for c in well_typed if c in frame.columns]
        problems = value_problems(frame, present)  # (in memory: summaries first)
    if problems:
        others = len(problems) - 1
        more = f" (and {others} more problem{'s' if others > 1 else ''})" if others else ""
        hint = conversion_hint(path, arrow_schema)
        raise ReplayError(f"{path}: {problems[0]}{more}; " + (hint or "`replay validate` lists "
                                                              "them all"))
    if not absent:
        return frame
    frame = frame.with_columns(_nulls(column) for column in absent)
    order = columns + [c.name for c in absent] if columns is not None else [
        *(name for name in schema.COLUMN_NAMES if name in frame.columns),
        *(name for name in frame.columns if name not in schema.BY_NAME)]
    return frame.select(order)


def _nulls(column: schema.Column) -> pl.Expr:
    """An optional column the trace leaves out: all null, of its type."""
    return pl.lit(None, pl.Series(pa.nulls(0, column.type)).dtype).alias(column.name)
