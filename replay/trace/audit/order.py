"""Put rows in trace order with bounded memory: first of duplicates kept, sorted by (ts, seq).

An audit log is only nearly sorted (each request's goroutine writes its own event), rotated files
may overlap, and the same event can appear twice (a log shipper's retry).  Rather than hold every
row in memory, ``RowSpill`` appends the rows, in input order, to a temporary Parquet file; at the
end DuckDB drops every event whose ``(auditID, stage)`` was already seen (the earliest ``seq``
wins) and sorts by ``ts`` and then ``seq``, both with a memory limit, spilling to disk beyond it.
The sort key is unique, so the order (and the output file) is deterministic, and rows with equal
``ts`` keep their input order across files.  Rows are small (no bodies), so this pass costs far
less than decoding the log.  The spill is an Arrow IPC file, the cheapest format to write, which
DuckDB scans as a pyarrow dataset.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds

from replay.trace.io import ROW_GROUP_ROWS, TraceWriter

DUCKDB_MEMORY = "256MB"
# Rows are written by ResponseComplete events only, so the audit ID alone identifies the
# (auditID, stage) pair; events without an audit ID are never taken for duplicates.
FIRST_OF_DUPLICATES = """
    WITH repeated AS (
        SELECT audit_id, min(seq) AS first FROM spill
        WHERE audit_id IS NOT NULL GROUP BY audit_id HAVING count(*) > 1)
    SELECT * EXCLUDE (seq) FROM spill AS row
    ANTI JOIN repeated ON row.audit_id = repeated.audit_id AND row.seq <> repeated.first
    ORDER BY ts, seq
"""


class RowSpill:
    """Rows in input order on disk, until ``drain`` writes them in trace order."""

    def __init__(self, folder: Path):
        self._folder = folder
        self._path = folder / "rows.arrow"
        self._writer: pa.ipc.RecordBatchFileWriter | None = None
        self.rows = 0

    def add(self, table: pa.Table) -> None:
        if self._writer is None:
            self._writer = pa.ipc.new_file(self._path, table.schema)
        self._writer.write_table(table)
        self.rows += table.num_rows

    def drain(self, writer: TraceWriter) -> int:
        """Write the unique rows in trace order to ``writer``; returns the number of duplicates."""
        if self._writer is None:
            return 0
        self._writer.close()
        written = 0
        for table in _exact_chunks(self._sorted_unique(), ROW_GROUP_ROWS):
            writer.write(table)
            written += table.num_rows
        return self.rows - written

    def _sorted_unique(self) -> Iterator[pa.RecordBatch]:
        con = duckdb.connect(config={
            "memory_limit": DUCKDB_MEMORY, "threads": 2, "temp_directory": str(self._folder),
            "preserve_insertion_order": False})
        try:
            con.register("spill", ds.dataset(self._path, format="arrow"))
            yield from con.sql(FIRST_OF_DUPLICATES).to_arrow_reader()
        finally:
            con.close()


def _exact_chunks(batches: Iterator[pa.RecordBatch], size: int) -> Iterator[pa.Table]:
    """Tables of exactly ``size`` rows (the last may be shorter), whatever sizes come in.

    DuckDB's batch sizes may vary from run to run; fixed row groups keep the output identical.
    """
    pending: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        pending.append(batch)
        count += batch.num_rows
        while count >= size:
            table = pa.Table.from_batches(pending)
            yield table.slice(0, size)
            rest = table.slice(size)
            pending, count = rest.to_batches(), rest.num_rows
    if count:
        yield pa.Table.from_batches(pending)
