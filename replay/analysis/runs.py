"""Open run directories in DuckDB and run queries on them, with parameters as DuckDB variables.

The views come from ``queries/views.sql``, pointed at the runs through the ``run_dirs`` variable;
query parameters (``from_ts``, ``to_ts``, ``watcher``, and any ``--var``) are set with
``SET VARIABLE`` and bound values, never pasted into SQL.  DuckDB's errors become one-line
``ReplayError``s that say which query failed.
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from replay.analysis.catalog import Query, views_sql
from replay.engine.rundir import DERIVED_TABLES, TABLES
from replay.errors import ReplayError

RUNS_VARIABLE = "run_dirs"
SWEEP_INDEX = "sweep.parquet"  # in a sweep's directory (replay sweep): one row per point
PARAMETERS = ("from_ts", "to_ts", "watcher")  # optional in every shipped query
_GETVARIABLE = re.compile(r"getvariable\s*\(\s*'([^']*)'\s*\)", re.IGNORECASE)


def check_run_dir(path: str, derived: bool = True) -> None:
    """A run directory has a manifest and every table (the derived ones too, unless not
    ``derived``); say what is missing otherwise."""
    run = Path(path)
    if not run.is_dir():
        raise ReplayError(f"{path}: no such run directory")
    if not (run / "manifest.json").is_file():
        raise ReplayError(f"{path}: not a run directory (no manifest.json)")
    missing = [t for t in TABLES if not (run / f"{t}.parquet").is_file()]
    if missing:
        raise ReplayError(f"{path}: incomplete run directory (no {', '.join(missing)} table)")
    for table, schema in TABLES.items():
        _check_columns(run / f"{table}.parquet", schema)
    missing = [t for t in DERIVED_TABLES if derived and not (run / f"{t}.parquet").is_file()]
    if missing:
        raise ReplayError(f"{path}: no {', '.join(missing)} table; `replay derive {path}` "
                          f"computes it from the run's other tables")


def _check_columns(path: Path, schema: pa.Schema) -> None:
    """A run table has the columns of its schema (a run written by an older version may not)."""
    try:
        present = set(pq.read_schema(path).names)
    except (OSError, pa.ArrowInvalid) as err:
        raise ReplayError(f"{path}: not a Parquet file ({err})") from None
    missing = [name for name in schema.names if name not in present]
    if missing:
        raise ReplayError(f"{path}: lacks {', '.join(missing)}; the run was written by an older "
                          f"version of replay: replay its trace again")


def open_runs(run_dirs: list[str], derived: bool = True) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the views of ``views.sql`` over these runs (which
    need not have their derived tables yet, if not ``derived``).

    Times are shown in UTC whatever the machine's time zone, so output is the same everywhere."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    point_at(con, run_dirs, derived)
    with duckdb_errors("queries/views.sql"):
        con.execute(views_sql(derived))
    return con


def point_at(con: duckdb.DuckDBPyConnection, run_dirs: list[str], derived: bool = True) -> None:
    """Point the views at these run directories (a sweep's directory stands for its finished
    points): they read them when a query runs, so one connection serves one set of runs after
    another."""
    run_dirs = [run for path in run_dirs for run in points_of(path)]
    for path in run_dirs:
        check_run_dir(path, derived)
    names = Counter(Path(p).resolve().name for p in run_dirs)
    twice = sorted(name for name, count in names.items() if count > 1)
    if twice:
        raise ReplayError(f"two run directories are named {twice[0]!r}: a run is known by its "
                          f"directory's name, so give them different names")
    con.execute(f"SET VARIABLE {RUNS_VARIABLE} = ?", [[str(Path(p)) for p in run_dirs]])


def points_of(path: str) -> list[str]:
    """``path`` itself, or for a sweep's directory, the run directory of each point its index
    records as done, in the index's order."""
    index = Path(path) / SWEEP_INDEX
    if (Path(path) / "manifest.json").exists() or not index.is_file():
        return [path]
    try:
        points = pq.read_table(index, columns=["point", "status"]).to_pylist()
    except (OSError, pa.ArrowInvalid, KeyError) as err:
        raise ReplayError(f"{index}: not a sweep's index ({err})") from None
    done = [str(Path(path) / p["point"]) for p in points if p["status"] == "done"]
    if not done:
        raise ReplayError(f"{path}: a sweep with no finished point yet")
    return done


def set_variables(con: duckdb.DuckDBPyConnection, values: Mapping[str, Any]) -> None:
    """``SET VARIABLE name = value`` for each value that is given; ``RESET`` the others."""
    for name, value in values.items():
        if not name.isidentifier():
            raise ReplayError(f"--var {name}=...: a variable name is letters, digits and _")
        if value is None:
            con.execute(f"RESET VARIABLE {name}")
        else:
            con.execute(f"SET VARIABLE {name} = ?", [value])


def run_query(con: duckdb.DuckDBPyConnection, query: Query,
              variables: Mapping[str, Any]) -> duckdb.DuckDBPyRelation:
    """The query's result as a relation (run when it is read), after setting its variables.

    A variable the query reads that is neither given nor optional is an error, not a silent
    NULL."""
    optional = {RUNS_VARIABLE, *PARAMETERS}
    given = {name for name, value in variables.items() if value is not None}
    missing = sorted(set(_GETVARIABLE.findall(query.sql)) - optional - given)
    if missing:
        raise ReplayError(f"{query.name}: reads the variable {missing[0]!r}; "
                          f"set it with --var {missing[0]}=VALUE")
    set_variables(con, variables)
    with duckdb_errors(query.name):
        return con.sql(query.sql)


@contextlib.contextmanager
def duckdb_errors(where: str) -> Iterator[None]:
    """Turn a DuckDB error into a one-line ``ReplayError`` naming ``where`` it happened."""
    try:
        yield
    except duckdb.Error as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ReplayError(f"{where}: {first}") from None
