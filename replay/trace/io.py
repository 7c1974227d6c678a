"""Reading and writing trace files.

``trace_writer`` streams tables into one Parquet file (zstd) under a temporary name and renames it
into place on success, so a failed producer never leaves a partial trace.  ``open_trace`` turns the
ways a file can fail to be a Parquet trace into one clear ``ReplayError``.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from replay import __version__
from replay.atomic import atomic_file
from replay.errors import ReplayError
from replay.limits import INT64_MAX
from replay.trace import schema

ROW_GROUP_ROWS = 256 * 1024
OBJECT_KEY = ("resource", "namespace", "name")  # one Kubernetes object, whatever its incarnation


def trace_metadata(source: str, source_args: Mapping[str, Any]) -> dict[bytes, bytes]:
    """The key-value metadata every trace carries: format version and provenance."""
    return {
        schema.META_VERSION.encode(): str(schema.TRACE_VERSION).encode(),
        schema.META_SOURCE.encode(): source.encode(),
        schema.META_SOURCE_ARGS.encode(): json.dumps(source_args, sort_keys=True).encode(),
        schema.META_CREATED_BY.encode(): f"replay {__version__}".encode(),
    }


def conform(table: pa.Table | pl.DataFrame) -> pa.Table:
    """Cast the trace columns to their v1 types, add missing nullable ones as nulls (not an
    optional one: it stays absent), keep extras.

    The trace columns come first in the documented order; extra columns follow in their own order.
    """
    if isinstance(table, pl.DataFrame):
        table = table.to_arrow()
    columns, fields = [], []
    for col in schema.COLUMNS:
        if col.name in table.column_names:
            array = table.column(col.name)
            if array.type != col.type:
                array = array.cast(col.type)
        elif col.optional:
            continue
        elif col.nullable:
            array = pa.nulls(table.num_rows, col.type)
        else:
            raise ValueError(f"trace table lacks the required column {col.name!r}")
        columns.append(array)
        fields.append(pa.field(col.name, col.type, nullable=col.nullable))
    for name in table.column_names:
        if name not in schema.BY_NAME:
            columns.append(table.column(name))
            fields.append(table.schema.field(name))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


class TraceWriter:
    """Appends tables to one Parquet trace file; made by ``trace_writer``."""

    def __init__(self, path: Path, metadata: dict[bytes, bytes]):
        self._path = path
        self._metadata = metadata
        self._writer: pq.ParquetWriter | None = None
        self.rows = 0
        self.resource_totals = dict.fromkeys(schema.RESOURCE_COLUMNS, 0.0)  # over every row

    def write(self, table: pa.Table | pl.DataFrame) -> None:
        table = conform(table).replace_schema_metadata(self._metadata)
        if self._writer is None:
            self._writer = pq.ParquetWriter(self._path, table.schema, compression="zstd")
        self._writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
        self.rows += table.num_rows
        for name in schema.RESOURCE_COLUMNS:
            rounded = table[name].cast(pa.float64(), safe=False)  # (beyond 2**53: to the nearest)
            self.resource_totals[name] += pc.sum(rounded).as_py() or 0.0

    def close(self) -> None:
        if self._writer is None:
            self.write(pa.Table.from_pylist([], schema=schema.SCHEMA))
        assert self._writer is not None  # opened by the first write
        self._writer.close()


@contextlib.contextmanager
def trace_writer(path: str | os.PathLike, *, source: str,
                 source_args: Mapping[str, Any]) -> Iterator[TraceWriter]:
    """Write a trace in pieces; the file appears, complete, only when the block succeeds."""
    with atomic_file(path) as tmp:
        writer = TraceWriter(tmp, trace_metadata(source, source_args))
        try:
            yield writer
        finally:
            writer.close()
        if max(writer.resource_totals.values()) > INT64_MAX / 2:  # (a margin for rounding)
            problems = resource_sum_problems(pl.scan_parquet(tmp, glob=False),
                                             schema.COLUMN_NAMES)
            if problems:
                raise ReplayError(f"{path}: {problems[0]}")


def resource_sum_problems(frame: pl.LazyFrame, columns: Collection[str]) -> list[str]:
    """A sentence for each resource column whose values could wrap replay's 64-bit sums.

    The free capacity of a node, and the gap between two views of it, add the requests of the
    node's pods and its allocatable in int64.  No such sum can exceed the sum over the trace's
    objects of each one's largest value, so that is what must fit.  Over every row (a node's
    allocatable repeated by each status update) is the first, quick bound; only a trace that
    exceeds it is grouped by object (if the frame has the object's key: a model reading fewer
    columns is held to the first bound)."""
    resources = [name for name in schema.RESOURCE_COLUMNS if name in columns]
    if not resources:
        return []
    totals = _sums(frame, resources)
    over = [name for name in resources if totals[name] > INT64_MAX]
    if over and set(OBJECT_KEY) <= set(columns):
        totals = _sums(frame.group_by(OBJECT_KEY).agg(pl.col(over).max()), over)
    return [f"the {name} of the trace's objects (each one's largest) add up to "
            f"{totals[name]:.4g}, more than the {INT64_MAX:.4g} that replay's 64-bit sums of "
            f"a node's requests can hold" for name in over if totals[name] > INT64_MAX]


def _sums(frame: pl.LazyFrame, names: list[str]) -> dict[str, int]:
    """Each column's exact sum (in 128 bits)."""
    sums = frame.select(pl.col(names).cast(pl.Int128).sum()).collect()
    return {name: int(sums[name][0] or 0) for name in names}


def write_trace(table: pa.Table | pl.DataFrame, path: str | os.PathLike, *, source: str,
                source_args: Mapping[str, Any]) -> int:
    """Write a whole table as a trace file; returns the number of rows."""
    with trace_writer(path, source=source, source_args=source_args) as writer:
        writer.write(table)
    return writer.rows


def open_trace(path: str | os.PathLike) -> pq.ParquetFile:
    """Open a trace file, or raise a one-line ``ReplayError`` saying why it cannot be read."""
    path = Path(path)
    if not path.exists():
        raise ReplayError(f"{path}: no such file")
    if path.is_dir():
        raise ReplayError(f"{path}: is a directory, not a trace file")
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as err:
        raise ReplayError(f"{path}: not a readable Parquet file ({first_line(err)})") from None


def source_of(path: str | os.PathLike) -> dict[str, str]:
    """The provenance metadata of a trace file (``replay.*`` keys, decoded)."""
    meta = open_trace(path).schema_arrow.metadata or {}
    return {k.decode(): v.decode() for k, v in meta.items() if k.startswith(b"replay.")}


def first_line(err: BaseException) -> str:
    """The first line of an exception's message (its type if it has none)."""
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0]
