"""A table with trace format v1's columns, written by another tool (``replay import parquet``).

A trace cut with polars or DuckDB, or a table built from a cluster's own records, holds the right
values in types the format does not take (polars writes ``large_string``, pandas nanosecond times
and floats for integers with nulls) and lacks the format's metadata, so ``replay validate``
refuses it.  This importer casts each column the format names to its type where no value changes,
and refuses a value that would change, naming the column and the row:

- times: a timestamp of any unit to microseconds, nanoseconds rounded to the nearest, halves up
  (as ``replay ingest`` rounds audit times); a timestamp without a time zone is UTC;
- text: ``string``, ``large_string``, ``string_view`` or dictionary-encoded (polars' categorical);
- integers: any integer type within the column's range, or floats holding whole numbers;
- a column holding nulls alone (pandas' ``None``) is nulls of the column's type.

A nullable column the table lacks is written as nulls; extra columns are kept as they are, except
pandas' index (``__index_level_0__``), which is not data.  Rows out of ``ts`` order are sorted,
ties kept in the table's order.  Each of these is said in a warning.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa

from replay.errors import ReplayError
from replay.limits import INT64_MAX, TRACE_TIMES
from replay.trace import schema
from replay.trace.importers.base import Imported, Importer
from replay.trace.io import first_line, open_trace, source_of
from replay.trace.validate import value_problems

PANDAS_INDEX = re.compile(r"__index_level_\d+__")
MICROSECONDS_PER = {"s": 1_000_000, "ms": 1_000, "us": 1}  # nanoseconds are rounded instead


@dataclass(frozen=True)
class ParquetOptions:
    table: Path = field(metadata={
        "metavar": "PARQUET", "help": "a Parquet file with the trace's columns by name "
        "(traces/README.md), as polars, pandas, DuckDB or Spark write it"})


class ParquetTable(Importer[ParquetOptions]):
    name = "parquet"
    help = "make a trace of a table with the trace's columns that another tool wrote"
    description = ("Make a trace of a Parquet table that holds the trace's columns (a trace cut "
                   "with polars or DuckDB, a table of your own records): each column is cast "
                   "to the format's type where no value changes (times to microseconds in UTC, "
                   "any text type to string, whole numbers to the format's integers), missing "
                   "nullable columns are nulls, rows are sorted by ts, and the format's metadata "
                   "is added.")
    options = ParquetOptions

    def inputs(self, options: ParquetOptions) -> list[Path]:
        return [options.table]

    def source_args(self, options: ParquetOptions) -> dict[str, str]:
        args = {"table": options.table.name}
        origin = source_of(options.table).get(schema.META_SOURCE)
        return args | {"from_source": origin} if origin else args

    def rows(self, options: ParquetOptions) -> Imported:
        path = options.table
        table = _read(path)
        warnings: list[str] = []
        columns, fields = [], []
        for column in schema.COLUMNS:
            if column.name in table.column_names:
                columns.append(_convert(path, column, table.column(column.name), warnings))
                fields.append(pa.field(column.name, column.type))
        naive = [name for name in ("ts", "received_ts") if name in table.column_names
                 and pa.types.is_timestamp(kind := table.schema.field(name).type) and not kind.tz]
        if naive:
            warnings.append(f"{path}: {' and '.join(naive)} without a time zone: taken as UTC")
        missing = [c.name for c in schema.REQUIRED if c.name not in table.column_names]
        required = [name for name in missing if not schema.BY_NAME[name].nullable]
        if required:
            raise ReplayError(f"{path}: no column {', '.join(map(repr, required))}, which a trace "
                              f"needs (found: {', '.join(table.column_names)})")
        if missing:
            warnings.append(f"{path}: no column {', '.join(missing)}; written as nulls")
        index = [name for name in table.column_names if PANDAS_INDEX.fullmatch(name)]
        if index:
            warnings.append(f"{path}: {', '.join(index)} is pandas' index, not data; left out")
        for name in table.column_names:
            if name not in schema.BY_NAME and name not in index:
                columns.append(table.column(name))
                fields.append(table.schema.field(name))
        return Imported(_checked(path, pa.Table.from_arrays(columns, schema=pa.schema(fields)),
                                 warnings), warnings)


def _read(path: Path) -> pa.Table:
    """The whole table; a column named twice is refused (a trace's columns are named once)."""
    parquet = open_trace(path)
    names = parquet.schema_arrow.names
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ReplayError(f"{path}: column {', '.join(map(repr, twice))} appears more than once")
    try:
        return parquet.read()
    except Exception as err:  # pyarrow raises many types for damaged data pages
        raise ReplayError(f"{path}: cannot read the table ({first_line(err)})") from None


def _convert(path: Path, column: schema.Column, values: pa.ChunkedArray,
             warnings: list[str]) -> pa.ChunkedArray:
    """``values`` as the column's type, every value unchanged (times rounded below a µs)."""
    if values.type == column.type:
        return values
    if pa.types.is_null(values.type):
        return pa.chunked_array([pa.nulls(len(values), column.type)])
    converter: Callable[[Path, str, pa.ChunkedArray, list[str]], pa.ChunkedArray] = (
        _times if column.type == schema.TIMESTAMP
        else _text if column.type == pa.string() else _integers)
    return converter(path, column.name, values, warnings)


def _times(path: Path, name: str, values: pa.ChunkedArray,
           warnings: list[str]) -> pa.ChunkedArray:
    """Timestamps of any unit and zone as microseconds in UTC."""
    if not pa.types.is_timestamp(values.type):
        raise ReplayError(f"{path}: column {name!r} is {values.type}; a time column must be a "
                          "timestamp (of any unit; UTC if it has no time zone)")
    null = values.is_null().to_numpy(zero_copy_only=False)
    ticks = values.cast(pa.int64()).fill_null(0).to_numpy()
    if values.type.unit == "ns":
        micros = ticks // 1000 + (ticks % 1000 >= 500)  # (floor division: halves up before 1970)
        rounded = int(np.count_nonzero(ticks % 1000))
        if rounded:
            warnings.append(f"{path}: column {name}: {rounded:,} times rounded to the nearest "
                            "microsecond, halves up")
    else:
        factor = MICROSECONDS_PER[values.type.unit]
        beyond = np.flatnonzero(np.abs(ticks) > INT64_MAX // factor)
        if beyond.size:
            raise ReplayError(f"{path}: column {name!r}, row index {beyond[0]}: outside the "
                              f"times replay handles ({TRACE_TIMES})")
        micros = ticks * factor
    return pa.chunked_array([pa.array(micros, type=schema.TIMESTAMP, mask=null)])


def _text(path: Path, name: str, values: pa.ChunkedArray, warnings: list[str]) -> pa.ChunkedArray:
    """Any text type, or dictionary-encoded text, as ``string``."""
    kind = values.type.value_type if pa.types.is_dictionary(values.type) else values.type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)
            or pa.types.is_string_view(kind)):
        raise ReplayError(f"{path}: column {name!r} is {values.type}; it must hold text")
    try:
        return values.cast(pa.string())
    except pa.ArrowException as err:  # (more than 2 GiB of text in one piece)
        raise ReplayError(f"{path}: column {name!r}: {first_line(err)}") from None


def _integers(path: Path, name: str, values: pa.ChunkedArray,
              warnings: list[str]) -> pa.ChunkedArray:
    """Integers of any width, or floats, as the column's integer type, if each value is one."""
    target = schema.BY_NAME[name].type
    if not (pa.types.is_integer(values.type) or pa.types.is_floating(values.type)):
        raise ReplayError(f"{path}: column {name!r} is {values.type}; it must hold integers")
    series = pl.Series(values)
    whole = series.cast(pl.Int32 if target == pa.int32() else pl.Int64, strict=False)
    changed = series.is_not_null() & (whole.is_null() | (whole != series).fill_null(True))
    if changed.any():
        row = int(changed.arg_true()[0])
        raise ReplayError(f"{path}: column {name!r}, row index {row}: {series[row]!r} is not a "
                          f"whole number that {target} holds")
    return pa.chunked_array([whole.to_arrow().cast(target)])


def _checked(path: Path, table: pa.Table, warnings: list[str]) -> pl.DataFrame:
    """The rows, refused with the first problem ``replay validate`` would find (rows in the
    table's order: out of ``ts`` order is not one, ``run_import`` sorts them)."""
    try:
        frame = pl.DataFrame(table)
    except (pl.exceptions.PolarsError, pa.ArrowException) as err:
        raise ReplayError(f"{path}: cannot read the table ({first_line(err)})") from None
    present = [c.name for c in schema.COLUMNS if c.name in frame.columns]
    problems = value_problems(frame, present, ordered=False)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ReplayError(f"{path}: {problems[0]}{more}")
    earlier = frame.select((pl.col("ts").diff() < pl.duration(microseconds=0)).sum()).item()
    if earlier:
        warnings.append(f"{path}: {earlier:,} rows earlier than the row before them; sorted by "
                        "ts, rows with equal times in the table's order")
    return frame
