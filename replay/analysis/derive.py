"""Derived tables: tables of a run directory computed from its other tables by the SQL in
``queries/derived/``.

A derived table is what several queries would otherwise each compute again and again: the
capacity windows of a 1M-pod run take DuckDB about 20 s, five times all the other queries
together, and three shipped queries read them.  ``replay run`` derives them once, when it writes
the run; ``replay derive`` does it again after a table or a derived query has changed.  The SQL
stays the definition: a derived table is exactly what its file's query returns (the tests
compare the two), computed one common table expression at a time (``replay.analysis.steps``),
which takes a third of the memory and three quarters of the time of the query run whole.  The
capacity windows' costliest expressions are computed in numpy instead, each in a fraction of
DuckDB's time for it: the claims of ``every_change`` (``replay.analysis.claims``), the window
functions of the changes, ``truths`` (``replay.analysis.changes``), the sweep,
from ``received`` to ``windows`` (``replay.analysis.windows``), ``pending``
(``replay.analysis.pending``), ``wasted`` (``replay.analysis.wasted``), and the final query, whose
result is written from the sweep's order (``replay.analysis.window_rows``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from replay import memory
from replay.analysis.catalog import queries_dir
from replay.analysis.runs import check_run_dir, duckdb_errors, open_runs
from replay.analysis.steps import run_steps, split_steps
from replay.atomic import atomic_file, temporary_dir
from replay.engine.rundir import (
    DERIVED_TABLES,
    TABLES,
    JoinedTableFile,
    read_manifest,
    record_files,
    write_manifest,
)
from replay.progress import progress

if TYPE_CHECKING:
    from replay.analysis.pending import Sizes
    from replay.analysis.windows import SweepSteps

BATCH_ROWS = 1 << 20
# parts queued for the file's writer at most: the capacity windows' final query computes its
# batches (122,880 rows) faster than they are encoded, and queued they raised the 1M-pod
# observe derivation's peak by 0.4 GB
WRITER_AHEAD = 4
# threads encoding the derived table's batches (``JoinedTableFile``): its final step waited for one
# encoder for 2.9 s of the 1M-pod observe derivation; with two, the derivation took a median
# 0.4 s less (of 12.3 s) on both 1M-pod runs (benchmarks/ROUNDS.md, twenty-seventh round)
ENCODERS = 2
# DuckDB's memory for a derivation, at most, so that its peak does not grow with the run: the 1M-pod
# observe run's took 4.7 GB without it, a 1M-pod what-if run's would take about twice that.  The
# capacity windows' sweep holds its arrays beside DuckDB's (replay.analysis.windows), so DuckDB
# gets 1 GiB: the 1M-pod observe derivation peaked at 6.0 GB with 3 GiB, 5.2 GB with 2, 4.0 GB
# with 1, and took no more CPU (72.9, 60.4, 71.6 s, on the loaded machine).
MEMORY_CAP_MIB = 1024


def derived_sql(name: str) -> str:
    return (queries_dir() / "derived" / f"{name}.sql").read_text(encoding="utf-8")


def derive(run_dir: str | os.PathLike, accept_edits: bool = False) -> dict[str, int]:
    """Compute every derived table of ``run_dir`` and write it in place of the old one (each
    file atomically), then record their row counts, sizes and checksums in the manifest;
    returns the row counts.

    A table that differs from what the manifest records is refused, unless ``accept_edits``
    (it was edited on purpose): then its new size and checksum are recorded first.  DuckDB
    spills to a scratch folder inside the run directory (on the disk that holds the run, not in
    a small /tmp), which a killed derivation leaves for the next one to remove.  glibc's malloc
    keeps what the derivation frees for its next arrays meanwhile, and numpy asks for no huge
    pages (``replay.memory``)."""
    run_dir = Path(run_dir)
    if accept_edits:
        check_run_dir(str(run_dir), derived=False, verify=False)
        record_files(run_dir, TABLES)
    check_run_dir(str(run_dir), derived=False)
    with (temporary_dir(run_dir, "spill") as spill, memory.without_huge_pages(),
          memory.keeping_freed_memory()):
        con = open_runs([str(run_dir)], derived=False, settings=_memory_settings(spill))
        try:
            files = {name: _write(con, name, run_dir / f"{name}.parquet")
                     for name in DERIVED_TABLES}
        finally:
            con.close()
    _record(run_dir, files)
    return {name: rows for name, (rows, _) in files.items()}


def _memory_settings(spill: Path) -> dict[str, str]:
    """Let DuckDB use at most ``MEMORY_CAP_MIB``, or three quarters of the memory available now
    if that is less, and spill the rest to ``spill``.  Its default, 80 % of all memory, ignores
    what this process and others hold: the windows of a 1M-pod what-if run took 12 GB on top of
    the replay's own.  Computed step by step, the windows spill cheaply: at 300k pods a limit of
    1 GiB cost 5 % more CPU than none."""
    settings = {"temp_directory": str(spill)}
    available = available_mib()
    limit = MEMORY_CAP_MIB if available is None else min(available * 3 // 4, MEMORY_CAP_MIB)
    settings["memory_limit"] = f"{max(limit, 1024)}MiB"
    return settings


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


def _write(con: duckdb.DuckDBPyConnection, name: str, dest: Path) -> tuple[int, dict]:
    """Compute the query one expression at a time (``replay.analysis.steps``: a fraction of the
    memory of the query run whole) and stream its result into ``dest`` in batches, so that a
    table of millions of rows is never whole in memory; returns its rows and its digest for the
    manifest.

    Each batch's strings go to the writer as Arrow dictionaries numbered in the order of first
    appearance (``_named``): the dictionary the writer would build, handed over, so that it
    does not hash every name, and without statistics, as the writer gives plain strings none.
    The file holds the same rows as with plain strings, and its bytes differ only in the pages'
    index widths, which are the whole dictionary's from a row group's first page on.  The
    writer of the 1M-pod runs' windows (16.6M and 18.6M rows) took 2.9-3.0 and 3.1 s instead
    of 3.3-3.4 and 3.8 s, and the files stayed within 0.1 MB of their size."""
    rows = 0
    steps = split_steps(derived_sql(name))
    with (duckdb_errors(f"queries/derived/{name}.sql"), atomic_file(dest) as tmp,
          progress(len(steps), f"deriving {name}", unit="step") as bar):
        swept = _sweep_steps(con) if name == "capacity_windows" else None
        result = run_steps(con, steps, done=bar.update, replace=_replace(con, swept))
        file = JoinedTableFile(tmp, ahead=WRITER_AHEAD, summarise_dictionaries=False,
                               encoders=ENCODERS)
        try:
            for part in _final_rows(con, swept) or _batches(result):
                file.add(part)
                rows += part.num_rows
            file.close()
        except BaseException:
            file.abandon()  # its thread ends before the file is removed
            raise
        bar.update(1)
    return rows, file.digest


def _batches(result: duckdb.DuckDBPyRelation) -> Iterator[pa.Table]:
    """The final query's result a batch at a time, its strings ``_named``; one empty table if
    it has no rows."""
    reader = result.to_arrow_reader(BATCH_ROWS)
    empty = True
    for batch in reader:
        empty = False
        yield _named(pa.Table.from_batches([batch]))
    if empty:
        yield _named(reader.schema.empty_table())


def _named(table: pa.Table) -> pa.Table:
    """``table`` with each string column an Arrow dictionary, numbered in the order in which
    its names first appear (``dictionary_encode``'s order), as ``replay.analysis.window_rows``
    makes them from numbers."""
    return pa.table([pc.dictionary_encode(column) if pa.types.is_string(column.type) else column
                     for column in table.columns], names=table.column_names)


def _record(run_dir: Path, files: dict[str, tuple[int, dict]]) -> None:
    manifest = read_manifest(run_dir)
    manifest["tables"] = {**manifest.get("tables", {}),
                          **{name: rows for name, (rows, _) in files.items()}}
    if isinstance(manifest.get("files"), dict):  # a run written with checksums keeps them whole
        manifest["files"] = {**manifest["files"],
                             **{name: digest for name, (_, digest) in files.items()}}
    write_manifest(run_dir, manifest)


def _sweep_steps(con: duckdb.DuckDBPyConnection) -> SweepSteps:
    """``replay.analysis.windows``' sweep, imported on first use: its numba import (0.15 s) is
    for derivations only, and every command, ``replay --help`` too, imports this module."""
    from replay.analysis.windows import sweep_steps
    return sweep_steps(con)


def _replace(con: duckdb.DuckDBPyConnection,
             swept: SweepSteps | None) -> Callable[[str], bool]:
    """The step runner's hook for the capacity windows: their claims
    (``replay.analysis.claims``), truths (``replay.analysis.changes``), sweep, ``pending``
    (``replay.analysis.pending``) and ``wasted`` (``replay.analysis.wasted``, from the pending
    pods as ``pending`` sorted them) in numpy; none for another table."""
    if swept is None:
        return lambda step: False
    from replay.analysis.changes import truths
    from replay.analysis.claims import capacity_changes
    from replay.analysis.pending import pending
    from replay.analysis.wasted import wasted
    made: dict[str, Sizes | None] = {}

    def replace(step: str) -> bool:
        if step == "pending":
            made[step] = pending(con)
            return made[step] is not None
        return ((step == "every_change" and capacity_changes(con))
                or (step == "truths" and truths(con))
                or (step == "wasted" and wasted(con, swept.swept(), made.get("pending")))
                or swept.replace(step))
    return replace


def _final_rows(con: duckdb.DuckDBPyConnection,
                swept: SweepSteps | None) -> Iterator[pa.Table] | None:
    """The capacity windows' final query from the sweep (``replay.analysis.window_rows``), or
    None to let its SQL run."""
    done = swept.swept() if swept else None
    if done is None:
        return None
    from replay.analysis.window_rows import rows
    return rows(con, done)
