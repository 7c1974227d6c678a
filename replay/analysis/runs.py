"""Open run directories in DuckDB and run queries on them, with parameters as DuckDB variables.

The views come from ``queries/views.sql``, pointed at the runs through the ``run_dirs`` variable;
query parameters (``from_ts``, ``to_ts``, ``watcher``, and any ``--var``) are set with
``SET VARIABLE`` and bound values, never pasted into SQL.  DuckDB's errors become one-line
``ReplayError``s that say which query failed.

A query runs in a sandbox, since a ``.sql`` file may come from anyone: once the views exist, the
connection may read files only inside the run directories it was opened on
(``enable_external_access = false`` with ``allowed_directories``) and its configuration is
locked (``lock_configuration``), so no extension can be installed or loaded, no database
attached, no setting changed; and a query may hold only reads (SELECT, WITH, FROM, VALUES,
DESCRIBE, SUMMARIZE, SHOW, ...) and ``SET VARIABLE``/``RESET VARIABLE``, checked statement by
statement with DuckDB's own parser (``check_statements``), since the allowed directories alone
would still let ``COPY ... TO 'RUN/events.parquet'`` overwrite a table.  Opening a run also
verifies it cheaply (``replay.engine.rundir.verify_run``), so a damaged table is an error rather
than numbers.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from replay.analysis.catalog import Query, views_sql
from replay.engine.rundir import DERIVED_TABLES, TABLES, verify_run
from replay.errors import ReplayError
from replay.interrupts import interruptible

RUNS_VARIABLE = "run_dirs"
SWEEP_INDEX = "sweep.parquet"  # in a sweep's directory (replay sweep): one row per point
PARAMETERS = ("from_ts", "to_ts", "watcher", "bucket_minutes")  # optional in every shipped query
_GETVARIABLE = re.compile(r"getvariable\s*\(\s*'([^']*)'\s*\)", re.IGNORECASE)
_LEADING_COMMENTS = re.compile(r"(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)*", re.DOTALL)
_COMMENT = re.compile(r"--[^\n]*")
_CREATE = re.compile(r"CREATE\s+OR\s+REPLACE\s+(?:VIEW|MACRO)\s+(\w+)", re.IGNORECASE)
_SETS_A_VARIABLE = re.compile(r"(?:SET|RESET)\s+VARIABLE\b", re.IGNORECASE)
_GLOB_SPECIAL = re.compile(r"([*?\[])")  # what DuckDB's glob reads as a pattern
_GLOB_CLASS_OF_ONE = re.compile(r"\[([*?\[])\]")


def check_run_dir(path: str, derived: bool = True, full: bool = False,
                  verify: bool = True) -> None:
    """A run directory has a manifest and every table (the derived ones too, unless not
    ``derived``), none of them damaged (``verify_run``, ``full`` or cheap, unless not
    ``verify``); say what is wrong otherwise."""
    run = Path(path)
    if run.exists() and not run.is_dir():
        raise ReplayError(f"{path}: a file, not a run directory (`replay run TRACE --out DIR` "
                          f"makes one)")
    if not run.is_dir():
        raise ReplayError(f"{path}: no such run directory")
    manifest = run / "manifest.json"
    if not manifest.is_file():
        raise ReplayError(f"{path}: not a run directory (" + (
            "its manifest.json is not a file)" if manifest.exists() else "no manifest.json)"))
    missing = [t for t in TABLES if not (run / f"{t}.parquet").is_file()]
    if missing:
        raise ReplayError(f"{path}: incomplete run directory (no {', '.join(missing)} table)")
    missing = [t for t in DERIVED_TABLES if derived and not (run / f"{t}.parquet").is_file()]
    if missing:
        raise ReplayError(f"{path}: no {', '.join(missing)} table; `replay derive {path}` "
                          f"computes it from the run's other tables")
    _check_inside(run, ["manifest.json", *(f"{t}.parquet" for t in TABLES),
                        *(f"{t}.parquet" for t in DERIVED_TABLES if derived)])
    if verify:
        verify_run(run, full, tables=[*TABLES, *(DERIVED_TABLES if derived else ())])
    for table, schema in TABLES.items():
        _check_columns(run / f"{table}.parquet", schema)


def _check_inside(run: Path, names: list[str]) -> None:
    """Each file is inside the run directory, not a symbolic link out of it: the sandbox lets
    the views read only inside (``sandbox``), and DuckDB's refusal would name no cause."""
    inside = os.path.join(os.path.realpath(run), "")
    for name in names:
        if not os.path.realpath(run / name).startswith(inside):
            raise ReplayError(f"{run / name}: a symbolic link out of the run directory, which "
                              f"queries may not follow (docs/reliability.md); copy the file "
                              f"into the run directory instead")


def _check_columns(path: Path, schema: pa.Schema) -> None:
    """A run table has the columns of its schema, of its types (a run written by an older
    version may not, nor a table edited and accepted with ``replay derive --accept-edits``)."""
    try:
        present = pq.read_schema(path)
    except (OSError, pa.ArrowInvalid) as err:
        raise ReplayError(f"{path}: not a Parquet file ({err})") from None
    twice = sorted(name for name, count in Counter(present.names).items() if count > 1)
    if twice:
        raise ReplayError(f"{path}: names the column {twice[0]} more than once; the table was "
                          f"edited: replay its trace again")
    missing = [name for name in schema.names if name not in present.names]
    if missing:
        raise ReplayError(f"{path}: lacks {', '.join(missing)}; the run was written by an older "
                          f"version of replay, or the table was edited: replay its trace again")
    for field in schema:
        found = present.field(field.name).type
        if _kind(found) != _kind(field.type):
            raise ReplayError(f"{path}: column {field.name} is {found}, where a run's table has "
                              f"{field.type}; the run was written by an older version of "
                              f"replay, or the table was edited: replay its trace again")


def _kind(arrow_type: pa.DataType) -> str:
    """What a column's type means to the queries: an integer of any width, a float, a string
    however stored (a table edited with polars has large strings, a categorical a dictionary),
    else the type itself (a timestamp with its unit and zone)."""
    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    if pa.types.is_integer(arrow_type):
        return "integer"
    if pa.types.is_floating(arrow_type):
        return "float"
    if (pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
            or pa.types.is_string_view(arrow_type)):
        return "string"
    return str(arrow_type)


def open_runs(run_dirs: list[str], derived: bool = True, *, verify: bool = False,
              settings: Mapping[str, str] | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the views of ``views.sql`` over these runs (which
    need not have their derived tables yet, if not ``derived``), sandboxed to them.

    Each run is verified, in full with ``verify``.  ``settings`` are DuckDB settings to make
    before the configuration is locked (``temp_directory``, ``memory_limit``).  Times are shown
    in UTC whatever the machine's time zone, so output is the same everywhere; and insertion
    order is preserved, which the window queries' order relies on."""
    con = interruptible(duckdb.connect())
    con.execute("SET TimeZone = 'UTC'")
    # the window queries' order is the stored order, which DuckDB keeps only with this (views.sql,
    # stored_rows); it is the default, set here so that no configuration can unset it
    con.execute("SET preserve_insertion_order = true")
    for name, value in (settings or {}).items():
        con.execute(f"SET {name} = ?", [value])
    point_at(con, run_dirs, derived, verify=verify)
    with duckdb_errors("queries/views.sql"):
        con.execute(views_sql(derived))
    sandbox(con, run_dirs)
    return con


def sandbox(con: duckdb.DuckDBPyConnection, run_dirs: list[str]) -> None:
    """From now on ``con`` reads files only inside ``run_dirs``, and its settings are final.

    DuckDB checks a path as the view gives it, before expanding the glob, so each directory is
    allowed as ``as_glob`` writes it too (``r[[]1]`` for ``r[1]``)."""
    allowed = sorted({os.path.join(os.path.abspath(form), "") for path in run_dirs
                      for literal in (path, os.path.realpath(path))
                      for form in (literal, as_glob(literal))})
    con.execute("SET allowed_directories = ?", [allowed])
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def check_statements(query: Query) -> None:
    """Refuse a query that is empty, or holds anything but reads and ``SET VARIABLE``, or does
    not end with a read (whose rows are the answer); the error names what was refused."""
    try:
        statements = duckdb.extract_statements(query.sql)
    except duckdb.Error as err:
        raise ReplayError(f"{query.name}: {_first_line(err)}") from None
    if not statements:
        raise ReplayError(f"{query.name}: holds no SQL statement (it is empty, or only comments)")
    for number, statement in enumerate(statements, 1):
        text = _LEADING_COMMENTS.sub("", statement.query, count=1)
        if statement.type == duckdb.StatementType.SELECT or (
                statement.type == duckdb.StatementType.SET and _SETS_A_VARIABLE.match(text)):
            continue
        keyword = " ".join(text.split()[:2]).rstrip(";") or statement.type.name
        raise ReplayError(
            f"{query.name}: statement {number} ({keyword} ...) is refused: replay query runs "
            f"only reads (SELECT, WITH, FROM, ...) and SET VARIABLE, never COPY, CREATE, "
            f"INSERT, ATTACH, INSTALL, LOAD, PRAGMA or other statements; for those, open the "
            f"views in the duckdb shell (queries/README.md)")
    if statements[-1].type != duckdb.StatementType.SELECT:
        raise ReplayError(f"{query.name}: ends with a SET VARIABLE; the last statement must be "
                          f"a query, whose rows are the answer")


def point_at(con: duckdb.DuckDBPyConnection, run_dirs: list[str], derived: bool = True, *,
             verify: bool = False) -> None:
    """Point the views at these run directories (a sweep's directory stands for its finished
    points): they read them when a query runs, so one connection serves one set of runs after
    another (inside the directories it was opened on: the sandbox allows no other)."""
    run_dirs = runs_of(run_dirs)
    for path in run_dirs:
        check_run_dir(path, derived, full=verify)
    names = Counter(Path(p).resolve().name for p in run_dirs)
    twice = sorted(name for name, count in names.items() if count > 1)
    if twice:
        raise ReplayError(f"two run directories are named {twice[0]!r}: a run is known by its "
                          f"directory's name, so give them different names")
    con.execute(f"SET VARIABLE {RUNS_VARIABLE} = ?", [[as_glob(str(Path(p))) for p in run_dirs]])


def as_glob(path: str) -> str:
    """``path`` as a DuckDB glob that matches it and nothing else: each ``*``, ``?`` and ``[``
    in a class of its own (``[*]``).  The views read ``run_dirs`` as globs, so that a notebook
    may name ``runs/*``; a run directory named ``r[1]`` would otherwise read the tables of
    ``r1``, and one named ``r*`` those of every run beside it."""
    return _GLOB_SPECIAL.sub(r"[\1]", path)


def run_dirs_of(con: duckdb.DuckDBPyConnection) -> list[Path]:
    """The run directories ``point_at`` pointed the connection's views at."""
    globs = con.sql(f"SELECT getvariable('{RUNS_VARIABLE}')").fetchall()[0][0]
    return [Path(_GLOB_CLASS_OF_ONE.sub(r"\1", glob)) for glob in globs]


def one_run(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the connection's views point at one run (the derivation's arrays handle one run
    only, and leave several to the SQL)."""
    return bool(con.sql("SELECT count(*) FROM manifests").fetchall()[0][0] == 1)


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
    for point in points:
        name = point["point"]
        if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
            raise ReplayError(f"{index}: the point {name!r} is not the name of a run directory "
                              f"in the sweep's directory")
    done = [str(Path(path) / p["point"]) for p in points if p["status"] == "done"]
    if not done:
        raise ReplayError(f"{path}: a sweep with no finished point yet")
    return done


SELECTABLE = """
    SELECT DISTINCT name FROM (SELECT watcher AS name FROM watchers UNION ALL
                               SELECT scheduler FROM attempts UNION ALL
                               SELECT component FROM events)
    WHERE name IS NOT NULL ORDER BY name
"""


def check_watcher(con: duckdb.DuckDBPyConnection, glob: str | None) -> None:
    """Refuse a ``--watcher`` that matches no watcher, scheduler (conflicts) or component
    (reaction lags) of the runs open in ``con``: every query would answer with no rows, as if
    the runs had no delays or conflicts to show."""
    if glob is None:
        return
    names = [name for (name,) in con.sql(SELECTABLE).fetchall()]
    (matched,), = con.execute("SELECT count(*) FROM unnest(?::VARCHAR[]) AS n(name) "
                              "WHERE name GLOB ?", [names, glob]).fetchall()
    if not matched:
        shown = ", ".join(names[:6]) + (f", ... ({len(names)} in all)" if len(names) > 6 else "")
        raise ReplayError(f"--watcher {glob!r} matches no watcher, scheduler or component of "
                          f"the runs ({shown or 'none'})")


def check_window_overlaps(con: duckdb.DuckDBPyConnection, from_ts: datetime | None,
                          to_ts: datetime | None) -> None:
    """Refuse ``--from``/``--to`` that hold no time of any run open in ``con`` (a mistyped
    year): every answer would be empty, as if the runs had nothing to show."""
    if from_ts is None and to_ts is None:
        return
    (start, end, overlaps), = con.execute(  # fetched to the end: the connection is free again
        "SELECT min(start_ts), max(end_ts), bool_or(($1 IS NULL OR $1 <= end_ts) "
        "AND ($2 IS NULL OR $2 > start_ts)) FROM run_bounds", [from_ts, to_ts]).fetchall()
    if overlaps is not False:
        return
    window = " ".join(f"{option} {value.isoformat()}" for option, value
                      in (("--from", from_ts), ("--to", to_ts)) if value is not None)
    raise ReplayError(f"{window}: holds no time of the runs, which span "
                      f"{start.isoformat()} to {end.isoformat()}")


def runs_of(paths: Iterable[str | os.PathLike]) -> list[str]:
    """Each path, or for a sweep's directory the run directory of each finished point
    (``points_of``): what every command that reads runs takes."""
    return [run for path in paths for run in points_of(str(path))]


def set_variables(con: duckdb.DuckDBPyConnection, values: Mapping[str, Any]) -> None:
    """``SET VARIABLE name = value`` for each value that is given; ``RESET`` the others."""
    for name, value in values.items():
        if not name.isidentifier():
            raise ReplayError(f"--var {name}=...: a variable name is letters, digits and _")
        if value is None:  # quoted: a name such as ``limit`` is an SQL keyword
            con.execute(f'RESET VARIABLE "{name}"')
        else:
            con.execute(f'SET VARIABLE "{name}" = ?', [value])


def variables_read(query: Query) -> set[str]:
    """The names of the DuckDB variables ``query`` reads, in lower case as DuckDB compares
    them: with ``getvariable('name')``, or through a view or macro of views.sql that does
    (``in_time_window`` reads ``from_ts`` and ``to_ts``, ``bucket_of`` ``bucket_minutes``)."""
    sql = _COMMENT.sub("", query.sql)
    through = [read for name, read in _view_variables().items()
               if re.search(rf"\b{name}\b", sql, re.IGNORECASE)]
    return {name.lower() for name in _GETVARIABLE.findall(sql)}.union(*through)


@functools.cache
def _view_variables() -> dict[str, frozenset[str]]:
    """Each view and macro of views.sql, and the variables it reads, itself or through the
    others it uses."""
    sql = _COMMENT.sub("", views_sql())
    starts = list(_CREATE.finditer(sql))
    bodies = {start.group(1).lower(): sql[start.end():end.start() if end else len(sql)]
              for start, end in zip(starts, [*starts[1:], None])}
    read = {name: {v.lower() for v in _GETVARIABLE.findall(body)} for name, body in bodies.items()}
    uses = {name: [other for other in bodies if other != name
                   and re.search(rf"\b{other}\b", body, re.IGNORECASE)]
            for name, body in bodies.items()}
    changed = True
    while changed:  # until every object holds what the objects it uses read
        changed = False
        for name, others in uses.items():
            more = set().union(*(read[other] for other in others)) - read[name]
            read[name] |= more
            changed |= bool(more)
    return {name: frozenset(variables) for name, variables in read.items()}


def run_query(con: duckdb.DuckDBPyConnection, query: Query,
              variables: Mapping[str, Any]) -> duckdb.DuckDBPyRelation:
    """The query's result as a relation (run when it is read), after setting its variables.

    A variable the query reads that is neither given nor optional is an error, not a silent
    NULL; a statement that is not a read is refused (``check_statements``)."""
    check_statements(query)
    optional = {RUNS_VARIABLE, *PARAMETERS}
    given = {name.lower() for name, value in variables.items() if value is not None}
    missing = sorted(variables_read(query) - optional - given)
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
        raise ReplayError(f"{where}: {_first_line(err)}") from None


def _first_line(err: BaseException) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
