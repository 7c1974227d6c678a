"""Derived tables: tables of a run directory computed from its other tables by the SQL in
``queries/derived/``.

A derived table is what several queries would otherwise each compute again and again: the
capacity windows of a 1M-pod run take DuckDB about 20 s, five times all the other queries
together, and three shipped queries read them.  ``replay run`` derives them once, when it writes
the run; ``replay derive`` does it again after a table or a derived query has changed.  The SQL
stays the definition: a derived table is exactly what its file's query returns.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import duckdb
import pyarrow as pa

from replay.analysis.catalog import queries_dir
from replay.analysis.runs import duckdb_errors, open_runs
from replay.atomic import atomic_file
from replay.engine.rundir import DERIVED_TABLES, TableFile, read_manifest, write_manifest

BATCH_ROWS = 1 << 20


def derived_sql(name: str) -> str:
    return (queries_dir() / "derived" / f"{name}.sql").read_text()


def derive(run_dir: str | os.PathLike) -> dict[str, int]:
    """Compute every derived table of ``run_dir`` and write it in place of the old one (each
    file atomically), then record their row counts in the manifest; returns them."""
    run_dir = Path(run_dir)
    con = open_runs([str(run_dir)], derived=False)
    with tempfile.TemporaryDirectory(prefix="replay-derive-") as spill:
        _limit_memory(con, spill)
        rows = {name: _write(con, name, run_dir / f"{name}.parquet") for name in DERIVED_TABLES}
    con.close()
    _record_rows(run_dir, rows)
    return rows


def _limit_memory(con: duckdb.DuckDBPyConnection, spill: str) -> None:
    """Let DuckDB use at most three quarters of the memory available now, and spill the rest to
    ``spill``.  Its default, 80 % of all memory, ignores what this process and others hold: the
    windows of a 1M-pod what-if run took 12 GB on top of the replay's own."""
    con.execute("SET temp_directory = ?", [spill])
    available = available_mib()
    if available is not None:
        con.execute(f"SET memory_limit = '{max(available * 3 // 4, 1024)}MiB'")


def available_mib() -> int | None:
    """MemAvailable from /proc/meminfo (Linux), in MiB; None elsewhere."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _write(con: duckdb.DuckDBPyConnection, name: str, dest: Path) -> int:
    """Stream the query's result into ``dest`` in batches, so that a table of millions of rows
    is never whole in memory."""
    rows = 0
    with duckdb_errors(f"queries/derived/{name}.sql"), atomic_file(dest) as tmp:
        reader = con.sql(derived_sql(name)).to_arrow_reader(BATCH_ROWS)
        file = TableFile(tmp)
        try:
            for batch in reader:
                file.add(pa.Table.from_batches([batch]))
                rows += batch.num_rows
            if rows == 0:
                file.add(reader.schema.empty_table())
        finally:
            file.close()
    return rows


def _record_rows(run_dir: Path, rows: dict[str, int]) -> None:
    manifest = read_manifest(run_dir)
    manifest["tables"] = {**manifest.get("tables", {}), **rows}
    write_manifest(run_dir, manifest)
