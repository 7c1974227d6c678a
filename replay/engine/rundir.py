"""The run directory: the tables a replay writes, their columns, and how they are written.

One Parquet file per table (zstd; integer and time columns delta-encoded, which is both smaller
and several times faster to write than the default for these sorted columns; a CRC32 checksum in
every page) and a ``manifest.json``, which records each table's rows, size and SHA-256; then the
derived tables, computed from the others by SQL (``replay.analysis.derive``).  The whole
directory is built under a temporary name and renamed into place, so an interrupted run never
leaves a directory that looks complete.  ``verify_run`` finds a table damaged since it was
written.  ``docs/run-directory.md`` describes every column.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from replay import __version__, interrupts, parquetparts
from replay.atomic import TEMPORARY_SUFFIX, atomic_dir, atomic_file
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
        ("max_pods", pa.int64()),
    ]),
    "deliveries": pa.schema([
        ("rv", pa.int64()), ("watcher", pa.string()), ("role", pa.string()),
        ("commit_ts", TS), ("cached_ts", TS), ("dispatched_ts", TS), ("sent_ts", TS),
        ("received_ts", TS), ("dequeued_ts", TS), ("applied_ts", TS),
        ("source", pa.string()), ("coalesced", pa.bool_()),
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
        ("node", pa.string()), ("client_queue", pa.string()), ("terminal_pods", pa.bool_()),
    ]),
    "dispatch_waits": pa.schema([
        ("resource", pa.string()), ("watcher", pa.string()), ("rv", pa.int64()),
        ("start_ts", TS), ("end_ts", TS), ("terminated", pa.bool_()),
    ]),
    "watch_terminations": pa.schema([
        ("watcher", pa.string()), ("resource", pa.string()), ("ts", TS), ("rv", pa.int64()),
        ("reason", pa.string()), ("recovery", pa.string()), ("recovered_ts", TS),
        ("resume_rv", pa.int64()), ("missed", pa.int64()),
    ]),
    "relists": pa.schema([
        ("watcher", pa.string()), ("resource", pa.string()), ("start_ts", TS), ("end_ts", TS),
        ("objects", pa.int64()), ("rv", pa.int64()),
    ]),
}
# Computed from the tables above by queries/derived/NAME.sql, with the same conventions, but
# for their strings, handed to the writer as Arrow dictionaries, each batch's numbered in the
# order of first appearance (``replay.analysis.derive``), without statistics.
DERIVED_TABLES = ("capacity_windows",)
MANIFEST = "manifest.json"
OWN_FILES = frozenset([MANIFEST, *(f"{name}.parquet" for name in (*TABLES, *DERIVED_TABLES))])
# A table whose every column is a number, a time, a flag or an Arrow dictionary of at most this
# many bytes (the deliveries: watcher, role, source) is handed to the Parquet encoder in batches of
# WIDE_BATCH rows rather than pyarrow's 1,024, the same bytes (``TableFile._batch_size``).
SMALL_DICTIONARY_BYTES = 256 << 10
WIDE_BATCH = 1 << 16
# Tables up to this size have their checksum verified whenever a run is opened; larger ones their
# size and footer only (a full verification reads them all: ``verify_run(..., full=True)``).
SMALL_TABLE_BYTES = 8 << 20
ROW_GROUP_ROWS = 1 << 20  # rows per Parquet row group (a table given in parts of this many
# rows is written with the same row groups as whole)
OUTCOMES = tuple(outcome.value for outcome in Outcome)


@dataclass
class RunTables:
    """What a model's replay produced, one entry per table in ``TABLES``."""

    events: pa.Table | pl.DataFrame
    deliveries: pa.Table | pl.DataFrame
    attempts: pa.Table | pl.DataFrame
    pods: pa.Table | pl.DataFrame
    watchers: pa.Table | pl.DataFrame
    dispatch_waits: pa.Table | pl.DataFrame = field(
        default_factory=lambda: TABLES["dispatch_waits"].empty_table())
    watch_terminations: pa.Table | pl.DataFrame = field(
        default_factory=lambda: TABLES["watch_terminations"].empty_table())
    relists: pa.Table | pl.DataFrame = field(
        default_factory=lambda: TABLES["relists"].empty_table())

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
    if column.type == target or pa.types.is_string(target) and _is_string_like(column.type):
        return column  # (a cast to its own type is a no-op, but loads pyarrow.compute: 0.2 s)
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
    encodes), so the caller computes the next part, or the next table, meanwhile; that thread
    also hashes each part's bytes once written (``_Digest``).
    """

    def __init__(self, path: Path, ahead: int | None = None, *,
                 summarise_dictionaries: bool = True):
        """``ahead``: at most this many parts are added and not yet written (``add`` waits for
        the writer beyond it), so that a caller quicker than the encoder does not queue a whole
        table.  ``summarise_dictionaries``: whether strings handed over as Arrow dictionaries
        get min/max statistics (plain strings get none)."""
        self.path = path
        self.ahead = ahead
        self.summarise_dictionaries = summarise_dictionaries
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="replay-table-file")
        self._writer: pq.ParquetWriter | None = None
        self._digest = _Digest(path)
        self._done: list[Future[None]] = []
        self.digest: dict[str, Any] = {}  # once closed: {"bytes": size, "sha256": hex digest}

    def add(self, part: pa.Table) -> None:
        with interrupts.deferred():  # not inside the executor's locks
            self._done.append(self._thread.submit(self._write, part))
        self._wait_for_room()

    def close(self) -> None:
        """Wait until every part is written (and the file's digest taken), and raise the first
        error if any.  Ctrl-C waits for the end of the part being written."""
        with interrupts.deferred():
            self._done.append(self._thread.submit(self._finish))
            self._shutdown(cancel=False)
        for future in self._done:
            future.result()

    def abandon(self) -> None:
        """Stop writing: drop the parts not yet begun, wait for the one being written (Ctrl-C
        waits too), and close the file, which its caller deletes."""
        with interrupts.deferred():
            self._shutdown(cancel=True)
        if self._writer is not None:
            with contextlib.suppress(Exception):  # the error being raised matters, not this one
                self._writer.close()

    def _wait_for_room(self) -> None:
        if self.ahead is not None and len(self._done) > self.ahead:
            self._done[-self.ahead - 1].result()

    def _shutdown(self, cancel: bool) -> None:
        self._thread.shutdown(cancel_futures=cancel)

    def _write(self, part: pa.Table) -> None:
        if self._writer is None:
            self._writer = pq.ParquetWriter(
                self.path, part.schema, **writer_options(part, self.summarise_dictionaries))
        self._writer.write_table(part, row_group_size=ROW_GROUP_ROWS)
        self._digest.catch_up()

    def _finish(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self.digest = self._digest.result()


class JoinedTableFile(TableFile):
    """A ``TableFile`` whose parts are encoded on ``encoders`` threads, each as a Parquet file
    of its own in memory, then appended in order by the file's own thread, which writes the
    footer last (``replay.parquetparts``): the bytes ``TableFile`` writes, for a caller that
    makes parts faster than one thread encodes them while a core is free (the derived tables).

    The encoded parts cost memory of their own, and copying them: one encoder is slower than
    ``TableFile`` (the 1M-pod observe replay step took a median 0.48 s more with its run tables
    written so; benchmarks/ROUNDS.md, twenty-seventh round)."""

    def __init__(self, path: Path, ahead: int | None = None, *,
                 summarise_dictionaries: bool = True, encoders: int = 2):
        super().__init__(path, ahead, summarise_dictionaries=summarise_dictionaries)
        self._encoders = ThreadPoolExecutor(max_workers=encoders,
                                            thread_name_prefix="replay-table-encoder")
        self._options: dict[str, Any] | None = None
        self._file: BinaryIO | None = None
        self._hash, self._written = hashlib.sha256(), 0
        self._footers: list[parquetparts.Struct] = []
        self._sizes: list[int] = []

    def add(self, part: pa.Table) -> None:
        if self._options is None:
            self._options = writer_options(part, self.summarise_dictionaries)
        with interrupts.deferred():  # not inside the executors' locks
            encoded = self._encoders.submit(parquetparts.encode, part, self._options,
                                            ROW_GROUP_ROWS)
            self._done.append(self._thread.submit(self._append, encoded))
        self._wait_for_room()

    def abandon(self) -> None:
        super().abandon()
        if self._file is not None:
            with contextlib.suppress(OSError):  # the error being raised matters, not this one
                self._file.close()

    def _shutdown(self, cancel: bool) -> None:
        super()._shutdown(cancel)
        self._encoders.shutdown(cancel_futures=cancel)

    def _append(self, encoded: Future[parquetparts.EncodedPart]) -> None:
        part = encoded.result()
        if self._file is None:
            self._file = open(self.path, "wb")  # (closed by _finish or abandon)
            self._append_bytes(parquetparts.MAGIC)
        self._append_bytes(part.body)
        self._footers.append(part.footer)
        self._sizes.append(len(part.body))

    def _finish(self) -> None:
        if self._file is None:
            return
        try:
            self._append_bytes(parquetparts.joined_footer(self._footers, self._sizes))
        finally:
            self._file.close()
        self.digest = {"bytes": self._written, "sha256": self._hash.hexdigest()}

    def _append_bytes(self, data: bytes | memoryview) -> None:
        assert self._file is not None
        self._file.write(data)
        self._hash.update(data)
        self._written += len(data)


def writer_options(part: pa.Table, summarise_dictionaries: bool = True) -> dict[str, Any]:
    """The Parquet writer's settings for a table whose first part is ``part`` (``TableFile``)."""
    delta = [f.name for f in part.schema
             if pa.types.is_integer(f.type) or pa.types.is_timestamp(f.type)]
    strings = [f.name for f in part.schema if f.name not in delta]
    # Min/max statistics cost a sixth of the writing for plain strings and would prune no row
    # group (no table is sorted by one); Arrow dictionaries (a delivery's watcher and role, by
    # which the deliveries are sorted) keep theirs, unless told otherwise.
    summarised = [f.name for f in part.schema if not _is_string_like(f.type)
                  or pa.types.is_dictionary(f.type) and summarise_dictionaries]
    return {"compression": "zstd", "use_dictionary": strings,
            "column_encoding": {name: "DELTA_BINARY_PACKED" for name in delta},
            "write_statistics": summarised, "store_schema": False,
            "write_page_checksum": True, "write_batch_size": _batch_size(part)}


def _batch_size(part: pa.Table) -> int | None:
    """How many rows the Parquet encoder takes at a time: ``WIDE_BATCH`` where that cannot change
    a byte of the file, else pyarrow's default (None).

    The encoder computes an Arrow dictionary column's min/max statistics per batch (a kernel call
    each: two thirds of the cost of writing the column in batches of 1,024), and otherwise
    decides two things per batch: where a page ends, and when a dictionary grown past its limit
    (1 MiB) falls back to plain.  Pages end at 20,000 rows (``max_rows_per_page``) whatever the
    batch, unless their bytes reach 1 MiB first, which 20,000 numbers or dictionary indices
    cannot; an Arrow dictionary, which the writer takes whole, never grows, so one under the
    limit never falls back.  Plain strings may do both, so a table with any keeps the default.
    The first part decides for the whole file: every part of a table carries the same
    dictionaries (observe's and the what-if models' parts each hold the run's whole dictionary
    of watchers' names)."""
    for column in part.columns:
        kind = column.type
        if pa.types.is_dictionary(kind):
            if sum(chunk.dictionary.nbytes for chunk in column.chunks) > SMALL_DICTIONARY_BYTES:
                return None
        elif not (pa.types.is_integer(kind) or pa.types.is_timestamp(kind)
                  or pa.types.is_boolean(kind)):
            return None
    return WIDE_BATCH


class _Digest:
    """A file's size and SHA-256, taken as it grows: ``catch_up`` hashes what was appended since
    the last call.  A Parquet writer only appends, so the bytes hashed never change after.

    A table file's writer thread catches up after each part, while the caller computes the
    next, so that closing the file hashes only its footer: hashing the whole deliveries' file
    after its last part (a twentieth of its writer's time) was the end of the replay step."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path, self.size, self._hash = path, 0, hashlib.sha256()

    def catch_up(self) -> None:
        with open(self.path, "rb") as handle:
            handle.seek(self.size)
            for block in iter(lambda: handle.read(1 << 20), b""):
                self._hash.update(block)
                self.size += len(block)

    def result(self) -> dict[str, Any]:
        """The whole file's size in bytes and SHA-256, once it is complete."""
        self.catch_up()
        return {"bytes": self.size, "sha256": self._hash.hexdigest()}


def file_digest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """What the manifest records of a table file: its size in bytes and its SHA-256."""
    return _Digest(path).result()


def sha256_of(path: str | os.PathLike[str]) -> str:
    return str(_Digest(path).result()["sha256"])


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
    check_replaceable(dest, force)
    rows: dict[str, int] = {}
    pairs = iter(tables.items() if isinstance(tables, RunTables) else tables)
    # the first table before the directory: a replay that gives its tables as it goes has no
    # run directory in the making until it has something to write (a small one: until its end)
    first = next(pairs, None)
    with atomic_dir(dest, replace=force) as tmp:
        files: dict[str, TableFile] = {}
        try:
            for name, table in itertools.chain([first] if first is not None else [], pairs):
                part = conform_table(name, table)
                rows[name] = rows.get(name, 0) + part.num_rows
                files.setdefault(name, TableFile(tmp / f"{name}.parquet")).add(part)
            for name in TABLES:  # a table nobody produced (nothing was re-listed...) is empty
                if name not in files:
                    rows[name] = 0
                    files[name] = TableFile(tmp / f"{name}.parquet")
                    files[name].add(TABLES[name].empty_table())
            _close_all(files.values())
        except BaseException:
            # no thread may outlive the run it writes: a second Ctrl-C waits until every file
            # is abandoned, not only the one it lands in
            with interrupts.deferred():
                for file in files.values():
                    file.abandon()
            raise
        digests = {name: file.digest for name, file in files.items()}
        write_manifest(tmp, {**manifest, "tables": rows, "files": digests,
                             "replay_version": __version__})
        if derive is not None:
            rows.update(derive(tmp))
    return rows


def _close_all(files: Iterable[TableFile]) -> None:
    """Close every file (each waits for its thread), then raise the first error if any."""
    errors = []
    for file in files:
        try:
            file.close()
        except Exception as error:
            errors.append(error)
    if errors:
        raise errors[0]


def check_replaceable(dest: Path, force: bool) -> None:
    """Refuse to write the run directory ``dest`` over anything but a run directory this tool
    wrote (``force``), or an empty directory: ``--force`` must never delete a user's files."""
    if not dest.exists() and not dest.is_symlink():
        return
    if not force:
        raise ReplayError(f"{dest}: already exists; choose another --out or pass --force")
    if dest.is_symlink():
        raise ReplayError(f"{dest}: is a symbolic link; not replacing it (name the directory it "
                          f"points to, or another --out)")
    if not dest.is_dir():
        raise ReplayError(f"{dest}: exists and is not a directory; not replacing it")
    entries = [entry.name for entry in dest.iterdir()]
    if not entries:
        return
    if MANIFEST not in entries or "replay_version" not in _manifest_or_none(dest):
        raise ReplayError(f"{dest}: is not a run directory written by replay (no manifest.json "
                          f"of its own); not replacing it")
    foreign = sorted(name for name in entries
                     if name not in OWN_FILES and not name.endswith(TEMPORARY_SUFFIX))
    if foreign:
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        raise ReplayError(f"{dest}: holds files replay did not write ({', '.join(foreign[:3])}"
                          f"{more}); not replacing it")


def _manifest_or_none(run_dir: Path) -> dict[str, Any]:
    try:
        document = json.loads((run_dir / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return document if isinstance(document, dict) else {}


def write_manifest(run_dir: str | os.PathLike[str], document: Mapping[str, Any]) -> None:
    """Write (or replace, atomically) the run directory's ``manifest.json``."""
    with atomic_file(Path(run_dir) / MANIFEST) as tmp:
        tmp.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def read_manifest(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(run_dir) / MANIFEST
    try:
        document: Any = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ReplayError(f"{run_dir}: not a run directory (no manifest.json)") from None
    except (OSError, ValueError) as err:
        raise ReplayError(f"{path}: unreadable manifest ({str(err).splitlines()[0]})") from None
    if not isinstance(document, dict):
        raise ReplayError(f"{path}: unreadable manifest (not a JSON object)")
    problem = _manifest_problem(document)
    if problem:
        raise ReplayError(f"{path}: unreadable manifest ({problem})")
    return document


# What the commands and the views read of a manifest, and the JSON type of each: "key" at the
# top, "key.inner" inside an object.  A key marked optional may be missing ("files" in a run
# written before checksums were recorded; "sweep" outside a sweep).
_MANIFEST_TYPES: dict[str, tuple[type, bool]] = {
    "model": (dict, True), "model.name": (str, True), "model.params": (dict, True),
    "seed": (int, True),
    "config": (dict, True), "config.profile": (str, True), "config.model": (dict, True),
    "trace": (dict, True), "trace.path": (str, True), "trace.sha256": (str, True),
    "tables": (dict, True), "files": (dict, False), "sweep": (dict, False),
    "watchers": (int, False), "replay_version": (str, False),
}
_JSON_NAMES = {dict: "an object", int: "an integer", str: "a string"}
MANIFEST_EXTRA = ("sweep",)  # the entries ``run_replay``'s ``manifest_extra`` adds (a sweep's)


def _manifest_problem(document: dict[str, Any]) -> str | None:
    """What is wrong with the shape of a manifest (an edited one), or None."""
    for key, (kind, required) in _MANIFEST_TYPES.items():
        outer, _, inner = key.partition(".")
        holder = document.get(outer) if inner else document
        if not isinstance(holder, dict):
            continue  # (the outer key's own problem was reported first)
        value = holder.get(inner or outer)
        if value is None and not required:
            continue
        if not isinstance(value, kind) or isinstance(value, bool):
            return f"{key!r} must be {_JSON_NAMES[kind]}"
    counts = document["tables"].values()
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts):
        return "'tables' must map each table to its number of rows"
    files = document.get("files") or {}
    if not all(isinstance(f, dict) and isinstance(f.get("bytes"), int)
               and isinstance(f.get("sha256"), str) for f in files.values()):
        return "'files' must give each table's bytes and sha256"
    return None


def verify_run(run_dir: str | os.PathLike[str], full: bool = False,
               tables: Iterable[str] | None = None) -> None:
    """Refuse a run directory a table of which changed since it was written, naming the table
    and how to regenerate it.

    Checks each table's size against the manifest, and its footer; then the SHA-256 of every
    table up to ``SMALL_TABLE_BYTES`` (``full``: of every table).  Cheap enough to run whenever
    a run is opened; ``full`` reads every byte.  A run written before checksums were recorded
    passes the cheap check, and fails the full one, which cannot vouch for it.
    """
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    recorded = manifest.get("files")
    if not isinstance(recorded, dict):
        if full:
            raise ReplayError(f"{run_dir}: written by an older version of replay, without "
                              f"checksums; replay its trace again to have a run that can be "
                              f"verified")
        return
    wanted = set(recorded if tables is None else tables)
    for name, expected in sorted(recorded.items()):
        if name not in wanted:
            continue
        problem = _damage(run_dir / f"{name}.parquet", expected, full)
        if problem:
            raise ReplayError(f"{run_dir}: the {name} table is damaged ({problem}); "
                              f"{_regenerate(run_dir, name, manifest)}")


def record_files(run_dir: str | os.PathLike[str], tables: Iterable[str]) -> None:
    """Record the present size and checksum of these tables in the manifest, as if this tool had
    written them: for tables edited on purpose (``replay derive --accept-edits``)."""
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    files = manifest.get("files")
    recorded: dict[str, Any] = files if isinstance(files, dict) else {}
    manifest["files"] = {**recorded, **{name: file_digest(run_dir / f"{name}.parquet")
                                        for name in tables
                                        if (run_dir / f"{name}.parquet").is_file()}}
    write_manifest(run_dir, manifest)


def _damage(path: Path, expected: Any, full: bool) -> str | None:
    """What is wrong with the table file ``path`` whose manifest entry is ``expected``."""
    if not isinstance(expected, dict) or not isinstance(expected.get("bytes"), int):
        return "manifest.json's entry for it is not a size and checksum"
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return "the file is missing"
    if size != expected["bytes"]:
        return f"{size:,} bytes, where manifest.json records {expected['bytes']:,}"
    if full or size <= SMALL_TABLE_BYTES:
        if sha256_of(path) != expected.get("sha256"):
            return "its SHA-256 differs from the one manifest.json records"
        return None
    try:
        pq.read_metadata(path)
    except (pa.ArrowException, OSError) as err:
        return f"unreadable footer: {str(err).splitlines()[0]}"
    return None


def _regenerate(run_dir: Path, table: str, manifest: dict[str, Any]) -> str:
    if table in DERIVED_TABLES:
        return f"`replay derive {run_dir}` computes it again"
    trace = manifest.get("trace", {}).get("path", "its trace") \
        if isinstance(manifest.get("trace"), dict) else "its trace"
    return (f"replay {trace} again with the configuration manifest.json records "
            f"(`replay run {trace} --out {run_dir} --force` with the same --model, --config and "
            f"-p options)")
