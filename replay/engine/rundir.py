"""The run directory: the tables a replay writes, their columns, and how they are written.

One Parquet file per table (zstd; integer and time columns delta-encoded, which is both smaller
and several times faster to write than the default for these sorted columns) and a
``manifest.json``; then the derived tables, computed from the others by SQL
(``replay.analysis.derive``).  The whole directory is built under a temporary name and renamed
into place, so an interrupted run never leaves a directory that looks complete.
``docs/run-directory.md`` describes every column.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from replay import __version__
from replay.atomic import atomic_dir, atomic_file
from replay.engine.cluster import Outcome
from replay.errors import ReplayError

TS = pa.timestamp("us", tz="UTC")

TABLES: dict[str, pa.Schema] = {
    "events": pa.schema([
        ("rv", pa.int64()), ("commit_ts", TS), ("verb", pa.string()), ("resource", pa.string()),
        ("subresource", pa.string()), ("namespace", pa.string()), ("name", pa.string()),
        ("node", pa.string()), ("cpu_milli", pa.int64()), ("memory_bytes", pa.int64()),
        ("gpu_milli", pa.int64()), ("code", pa.int32()), ("component", pa.string()),
        ("origin", pa.string()), ("attempt_id", pa.int64()), ("pod_state", pa.string()),
    ]),
    "deliveries": pa.schema([
        ("rv", pa.int64()), ("watcher", pa.string()), ("role", pa.string()),
        ("commit_ts", TS), ("cached_ts", TS), ("dispatched_ts", TS), ("sent_ts", TS),
        ("received_ts", TS), ("dequeued_ts", TS), ("applied_ts", TS),
    ]),
    "attempts": pa.schema([
        ("attempt_id", pa.int64()), ("pod", pa.string()), ("scheduler", pa.string()),
        ("enqueued_ts", TS), ("started_ts", TS), ("decided_ts", TS), ("committed_ts", TS),
        ("node", pa.string()), ("outcome", pa.string()), ("reason", pa.string()),
        ("view_lag_ms", pa.float64()), ("forgotten_ts", TS), ("cycle_id", pa.int64()),
        ("throttled_ms", pa.float64()),
    ]),
    "pods": pa.schema([
        ("pod", pa.string()), ("created_ts", TS), ("first_attempt_ts", TS), ("bound_ts", TS),
        ("bound_rv", pa.int64()), ("node", pa.string()), ("deleted_ts", TS),
        ("deleted_rv", pa.int64()), ("attempts", pa.int64()),
        ("cpu_milli", pa.int64()), ("memory_bytes", pa.int64()), ("gpu_milli", pa.int64()),
    ]),
    "watchers": pa.schema([
        ("watcher", pa.string()), ("role", pa.string()), ("resources", pa.string()),
        ("node", pa.string()),
    ]),
}
# Computed from the tables above by queries/derived/NAME.sql, with the same conventions.
DERIVED_TABLES = ("capacity_windows",)
OUTCOMES = tuple(outcome.value for outcome in Outcome)


@dataclass
class RunTables:
    """What a model's replay produced, one entry per table in ``TABLES``."""

    events: pa.Table | pl.DataFrame
    deliveries: pa.Table | pl.DataFrame
    attempts: pa.Table | pl.DataFrame
    pods: pa.Table | pl.DataFrame
    watchers: pa.Table | pl.DataFrame

    def items(self) -> Iterator[tuple[str, pa.Table | pl.DataFrame]]:
        return ((name, getattr(self, name)) for name in TABLES)


def conform_table(name: str, table: pa.Table | pl.DataFrame) -> pa.Table:
    """Select and cast ``table`` to the columns of run table ``name``, in order.

    Strings keep whatever Arrow layout they arrive in (string, large_string, string_view or
    dictionary): Parquet has one string type, and converting millions of them costs seconds.
    """
    if isinstance(table, pl.DataFrame):
        table = table.to_arrow(compat_level=pl.CompatLevel.newest())  # zero-copy
    schema = TABLES[name]
    missing = [f.name for f in schema if f.name not in table.column_names]
    if missing:
        raise ValueError(f"the {name} table lacks columns {missing}")
    columns = [_cast(table.column(f.name), f.type) for f in schema]
    return pa.Table.from_arrays(columns, names=schema.names)


def _cast(column: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    if pa.types.is_string(target) and _is_string_like(column.type):
        return column
    return column.cast(target)


def _is_string_like(kind: pa.DataType) -> bool:
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind)
                or pa.types.is_string_view(kind))


class TableFile:
    """One run table's Parquet file: zstd, delta-encoded integers and times, dictionary-encoded
    strings.  The Arrow schema is not stored, so every reader sees the Parquet types: strings as
    strings (not as Arrow dictionaries) and times as UTC microsecond timestamps.

    Parts are written in order by a thread of the file's own (pyarrow releases the GIL while it
    encodes), so the caller computes the next part, or the next table, meanwhile.
    """

    def __init__(self, path: Path):
        self.path = path
        self._thread = ThreadPoolExecutor(max_workers=1)
        self._writer: pq.ParquetWriter | None = None
        self._done: list[Future[None]] = []

    def add(self, part: pa.Table) -> None:
        self._done.append(self._thread.submit(self._write, part))

    def close(self) -> None:
        """Wait until every part is written, and raise the first error if any."""
        self._done.append(self._thread.submit(self._finish))
        self._thread.shutdown()
        for future in self._done:
            future.result()

    def _write(self, part: pa.Table) -> None:
        if self._writer is None:
            delta = [f.name for f in part.schema
                     if pa.types.is_integer(f.type) or pa.types.is_timestamp(f.type)]
            strings = [f.name for f in part.schema if f.name not in delta]
            # Min/max statistics cost a sixth of the writing for plain strings and would prune
            # no row group (no table is sorted by one); Arrow dictionaries (a delivery's watcher
            # and role, by which the deliveries are sorted) keep theirs.
            summarised = [f.name for f in part.schema
                          if not _is_string_like(f.type) or pa.types.is_dictionary(f.type)]
            self._writer = pq.ParquetWriter(
                self.path, part.schema, compression="zstd", use_dictionary=strings,
                column_encoding={name: "DELTA_BINARY_PACKED" for name in delta},
                write_statistics=summarised, store_schema=False)
        self._writer.write_table(part, row_group_size=1 << 20)

    def _finish(self) -> None:
        if self._writer is not None:
            self._writer.close()


def sha256_of(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_run(dest: str | os.PathLike[str],
              tables: RunTables | Iterable[tuple[str, pa.Table | pl.DataFrame]],
              manifest: Mapping[str, Any], *, force: bool = False,
              derive: Callable[[Path], dict[str, int]] | None = None) -> dict[str, int]:
    """Write the run directory ``dest`` atomically; returns the row count of each table.

    ``tables`` may also come one at a time as (name, table) pairs, e.g. from a generator that
    computes each table after the previous one: each is written in the background as soon as it
    comes, while the next is computed.  A table may come in parts, as several pairs with its
    name: they are written, in order, as one table.  An existing ``dest`` is replaced only with
    ``force``, and only once the new one is complete.  ``derive``, if given, computes the
    derived tables in the complete directory (manifest included) before it is renamed into place,
    and returns their row counts.
    """
    dest = Path(dest)
    if dest.exists() and not force:
        raise ReplayError(f"{dest}: already exists; choose another --out or pass --force")
    if dest.exists() and not (dest / "manifest.json").exists() and any(dest.iterdir()):
        raise ReplayError(f"{dest}: exists and is not a run directory; not replacing it")
    rows: dict[str, int] = {}
    with atomic_dir(dest, replace=force) as tmp:
        files: dict[str, TableFile] = {}
        try:
            for name, table in tables.items() if isinstance(tables, RunTables) else tables:
                part = conform_table(name, table)
                rows[name] = rows.get(name, 0) + part.num_rows
                files.setdefault(name, TableFile(tmp / f"{name}.parquet")).add(part)
        finally:
            for file in files.values():
                file.close()
        write_manifest(tmp, {**manifest, "tables": rows, "replay_version": __version__})
        if derive is not None:
            rows.update(derive(tmp))
    return rows


def write_manifest(run_dir: str | os.PathLike[str], document: Mapping[str, Any]) -> None:
    """Write (or replace, atomically) the run directory's ``manifest.json``."""
    with atomic_file(Path(run_dir) / "manifest.json") as tmp:
        tmp.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")


def read_manifest(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(run_dir) / "manifest.json"
    try:
        document: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        raise ReplayError(f"{run_dir}: not a run directory (no manifest.json)") from None
    except (OSError, json.JSONDecodeError) as err:
        raise ReplayError(f"{path}: unreadable manifest ({err})") from None
    return document
