"""Put rows in trace order with bounded memory: first of duplicates kept, sorted by (ts, seq).

An audit log is only nearly sorted (each request's goroutine writes its own event), rotated files
may overlap, and the same event can appear twice (a log shipper's retry).  Rather than hold every
row in memory, ``RowSpill`` appends the rows of each block, sorted (``in_order``), to a temporary
Arrow IPC file, the cheapest format to write, and notes each batch's first and last ``ts``.  At
the end DuckDB finds every event whose ``(auditID, stage)`` was already seen (the earliest ``seq``
wins), and the batches are merged in one pass: after each batch, the rows no later than the
earliest ``ts`` of all the batches still to come are final.  A nearly sorted log keeps only a few
blocks' worth of rows pending; when the batches' ranges say more than ``MERGE_MEMORY`` could be
pending (rotated files given out of order), DuckDB sorts everything instead, with a memory limit,
spilling to disk beyond it.  The sort key is unique, so the order (and the output file) is the
same either way and deterministic, and rows with equal ``ts`` keep their input order across
files.
"""

from __future__ import annotations

import concurrent.futures
import heapq
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from replay.interrupts import interruptible
from replay.trace.audit.collections import PodCollections, holds_collections
from replay.trace.io import ROW_GROUP_ROWS, TraceWriter

DUCKDB_MEMORY = "256MB"
MERGE_MEMORY = 256 << 20  # bytes of rows the merge may hold pending
ORDER = [("ts", "ascending"), ("seq", "ascending")]
# Rows are written by ResponseComplete events only, so the audit ID alone identifies the
# (auditID, stage) pair; events without an audit ID are never taken for duplicates.
REPEATED = """
    WITH repeated AS (
        SELECT audit_id, min(seq) AS first FROM spill
        WHERE audit_id IS NOT NULL GROUP BY audit_id HAVING count(*) > 1)
"""
LATER_COPIES = REPEATED + """
    SELECT row.seq FROM spill AS row
    JOIN repeated ON row.audit_id = repeated.audit_id AND row.seq <> repeated.first
"""
FIRST_OF_DUPLICATES = REPEATED + """
    SELECT * FROM spill AS row
    ANTI JOIN repeated ON row.audit_id = repeated.audit_id AND row.seq <> repeated.first
    ORDER BY ts, seq
"""


def in_order(table: pa.Table) -> pa.Table:
    """``table``'s rows sorted by (ts, seq), as ``RowSpill.add`` wants them."""
    return table.take(pc.sort_indices(table, ORDER))


class RowSpill:
    """Rows on disk, batch by batch in input order, until ``drain`` writes them in trace order."""

    def __init__(self, folder: Path):
        self._folder = folder
        self._path = folder / "rows.arrow"
        self._writer: pa.ipc.RecordBatchFileWriter | None = None
        self._spans: list[tuple[int, int, int]] = []  # each batch's first and last ts, and bytes
        self.rows = 0
        self.collections = PodCollections()
        self._has_collections = False  # then they are expanded as the rows are drained

    def add(self, table: pa.Table) -> None:
        """Append the rows of a block, sorted by ``in_order``."""
        if self._writer is None:
            self._writer = pa.ipc.new_file(self._path, table.schema)
        self._has_collections = self._has_collections or holds_collections(table)
        for batch in filter(len, table.to_batches()):
            ts = batch.column("ts").cast(pa.int64())
            self._spans.append((ts[0].as_py(), ts[-1].as_py(), batch.nbytes))
            self._writer.write_batch(batch)
        self.rows += table.num_rows

    def drain(self, writer: TraceWriter) -> Counter:
        """Write the unique rows in trace order to ``writer``; returns how many by verb and
        resource (``pods/binding`` for subresources).

        A row group is written (zstd, most of the time here) in a thread while the next is
        merged; pyarrow lets go of the GIL meanwhile.  Pod deletecollections become the deletes
        they made (``collections.py``).
        """
        kept: Counter = Counter()
        if self._writer is None:
            return kept
        self._writer.close()
        with concurrent.futures.ThreadPoolExecutor(1) as background:
            writing = None
            unique = self._sorted_unique()
            if self._has_collections:
                unique = self.collections.expand(unique)
            for table in _exact_chunks(unique, ROW_GROUP_ROWS):
                table = table.drop_columns(["seq"]).combine_chunks()
                kept.update(_by_verb_resource(table))
                if writing is not None:
                    writing.result()
                writing = background.submit(writer.write, table)
            if writing is not None:
                writing.result()
        return kept

    def _sorted_unique(self) -> Iterator[pa.Table]:
        """The rows without later copies of an event, in (ts, seq) order."""
        with self._duckdb() as con:
            if _pending_bound(self._spans) > MERGE_MEMORY:
                self._load(con)
                for batch in con.sql(FIRST_OF_DUPLICATES).to_arrow_reader():
                    yield pa.Table.from_batches([batch])
                return
            self._load(con, ["audit_id", "seq"])
            later_copies = con.sql(LATER_COPIES).to_arrow_table().column("seq")
        with pa.OSFile(str(self._path)) as file:
            spill = pa.ipc.open_file(file)
            batches = (spill.get_batch(i) for i in range(spill.num_record_batches))
            yield from _merged(batches, _floors(self._spans), later_copies.combine_chunks())

    def _duckdb(self) -> duckdb.DuckDBPyConnection:
        return interruptible(duckdb.connect(config={
            "memory_limit": DUCKDB_MEMORY, "threads": 2, "temp_directory": str(self._folder),
            "preserve_insertion_order": False}))

    def _load(self, con: duckdb.DuckDBPyConnection, columns: list[str] | None = None) -> None:
        """Copy the spilled rows (``columns`` of them) into DuckDB's table ``spill``, which it
        keeps within its memory limit and spills to disk beyond it.

        The file is read here, a batch after another.  DuckDB scanning it as a pyarrow dataset
        crashed the process now and then (a segmentation fault in Arrow's
        ``FileBlockFromFlatbuffer``: the dataset's reader pre-buffers the file's metadata on
        Arrow's I/O threads, and one was still reading when the scan had freed it), the more
        likely the more batches the file holds.
        """
        with pa.memory_map(str(self._path)) as source:
            spill = pa.ipc.open_file(source)
            names = columns or spill.schema.names
            batches = (spill.get_batch(i).select(names)
                       for i in range(spill.num_record_batches))
            reader = pa.RecordBatchReader.from_batches(
                pa.schema([spill.schema.field(name) for name in names]), batches)
            con.register("spilled", reader)
            con.execute("CREATE TEMPORARY TABLE spill AS SELECT * FROM spilled")
            con.unregister("spilled")


def _by_verb_resource(table: pa.Table) -> Counter:
    counts = table.group_by(["verb", "resource", "subresource"]).aggregate([([], "count_all")])
    return Counter({(verb, resource if sub is None else f"{resource}/{sub}"): n
                    for verb, resource, sub, n in zip(*counts.to_pydict().values())})


def _floors(spans: list[tuple[int, int, int]]) -> list[float]:
    """For each batch, the earliest ts of the batches after it: rows up to it are final."""
    floors, floor = [], float("inf")
    for first, _, _ in reversed(spans):
        floors.append(floor)
        floor = min(floor, first)
    return floors[::-1]


def _pending_bound(spans: list[tuple[int, int, int]]) -> int:
    """The most bytes of rows ``_merged`` may hold pending at once.

    After each batch, at most the batches read so far whose last ts is past the floor.
    """
    pending, bound = 0, 0
    late: list[tuple[int, int]] = []  # (last ts, size) of the batches past the floor
    for (_, last, size), floor in zip(spans, _floors(spans)):
        heapq.heappush(late, (last, size))
        pending += size
        while late and late[0][0] <= floor:
            pending -= heapq.heappop(late)[1]
        bound = max(bound, pending)
    return bound


def _merged(batches: Iterator[pa.RecordBatch], floors: list[float], later_copies: pa.Array
            ) -> Iterator[pa.Table]:
    """The rows of batches each in (ts, seq) order, in that order, less the later copies."""
    pending: pa.Table | None = None
    for batch, floor in zip(batches, floors):
        table = pa.Table.from_batches([batch])
        if len(later_copies):
            table = table.filter(pc.invert(pc.is_in(table["seq"], value_set=later_copies)))
        pending = table if pending is None else _merge(pending, table)
        final = int(np.searchsorted(_ts(pending), floor, side="right"))
        yield pending.slice(0, final)
        pending = pending.slice(final)


def _merge(early: pa.Table, late: pa.Table) -> pa.Table:
    """Two tables in (ts, seq) order, merged; every seq of ``early`` is below those of ``late``.

    Only the rows of ``late`` within the ts span of ``early`` need sorting.
    """
    if early.num_rows == 0:
        return late
    span, ts = _ts(early), _ts(late)
    start = int(np.searchsorted(ts, span[0], side="left"))
    end = int(np.searchsorted(ts, span[-1], side="right"))
    middle = pa.concat_tables([early, late.slice(start, end - start)])
    return pa.concat_tables([late.slice(0, start), middle.take(pc.sort_indices(middle, ORDER)),
                             late.slice(end)])


def _ts(table: pa.Table) -> np.ndarray:
    return table.column("ts").cast(pa.int64()).to_numpy()


def _exact_chunks(tables: Iterator[pa.Table], size: int) -> Iterator[pa.Table]:
    """Tables of exactly ``size`` rows (the last may be shorter), whatever sizes come in.

    Batch sizes vary (with DuckDB's, from run to run); fixed row groups, each written as one
    chunk (Parquet pages break where chunks do), keep the output identical.
    """
    pending: list[pa.Table] = []
    count = 0
    for table in tables:
        pending.append(table)
        count += table.num_rows
        while count >= size:
            table = pa.concat_tables(pending)
            yield table.slice(0, size)
            rest = table.slice(size)
            pending, count = [rest], rest.num_rows
    if count:
        yield pa.concat_tables(pending)
