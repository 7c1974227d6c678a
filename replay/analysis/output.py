"""Write a query's result as a table for people, or as CSV, JSON or Parquet for programs.

CSV and Parquet are DuckDB's own writers; JSON is one array of objects, serialised by DuckDB.
Everything is written to a temporary file first: ``--out FILE`` appears only when complete
(``atomic_file``), and nothing reaches stdout if the query fails half way.  ``--out`` is refused
where it would touch what the query reads (``replay.outputs``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable

import duckdb

from replay.atomic import atomic_file, temporary_dir
from replay.errors import ReplayError, system_errors
from replay.interrupts import interruptible
from replay.outputs import check_output

FORMATS = ("table", "csv", "json", "parquet")
TABLE_ROWS = 40  # a table is for reading; the other formats hold every row
TABLE_DECIMALS = 3  # floats in a table: microseconds in milliseconds, core-seconds to 1/1000


def render_table(result: duckdb.DuckDBPyRelation) -> str:
    """The result as DuckDB draws it: at most TABLE_ROWS rows, as wide as the terminal, floats
    rounded to TABLE_DECIMALS places (the other formats keep every digit)."""
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else 10_000
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        _rounded(result).show(max_rows=TABLE_ROWS, max_width=width)
    return text.getvalue()


def _rounded(result: duckdb.DuckDBPyRelation) -> duckdb.DuckDBPyRelation:
    def column(name: str, kind) -> str:
        quoted = '"' + name.replace('"', '""') + '"'
        if str(kind) in ("DOUBLE", "FLOAT"):
            return f"round({quoted}, {TABLE_DECIMALS}) AS {quoted}"
        return quoted

    return result.project(", ".join(map(column, result.columns, result.types)))


def write_result(result: duckdb.DuckDBPyRelation, fmt: str, out: str | None,
                 inputs: Iterable[str | os.PathLike] = ()) -> None:
    """Write ``result`` in ``fmt`` to the file ``out``, or to stdout when ``out`` is None;
    ``out`` must not touch ``inputs`` (the run directories and the query file)."""
    if fmt == "parquet" and out is None:
        raise ReplayError("--format parquet writes a file: give --out FILE")
    if out is not None:
        check_output(out, inputs)
        with atomic_file(out) as tmp:
            _write_file(result, fmt, tmp)
        return
    scratch = tempfile.gettempdir()
    with temporary_dir(scratch, "replay-query") as folder:
        tmp = folder / f"result.{fmt}"
        try:
            _write_file(result, fmt, tmp)
        except OSError as err:
            raise ReplayError(f"{scratch}: {err.strerror or err} (the result waits there to be "
                              f"printed; TMPDIR names another folder)") from None
        with tmp.open("rb") as source:
            sys.stdout.flush()
            shutil.copyfileobj(source, sys.stdout.buffer)
            sys.stdout.buffer.flush()


def _write_file(result: duckdb.DuckDBPyRelation, fmt: str, path: os.PathLike) -> None:
    if fmt == "table":
        with open(path, "w", encoding="utf-8") as out:
            out.write(render_table(result))
    elif fmt in ("csv", "parquet"):
        _copy(result, fmt, path)
    elif fmt == "json":
        _write_json(result, path)
    else:
        raise ValueError(f"unknown format {fmt!r}")


def _copy(result: duckdb.DuckDBPyRelation, fmt: str, path: os.PathLike) -> None:
    """Write ``result`` with DuckDB's own CSV or Parquet writer, in a connection of its own
    that reads the result as it streams: the query's connection is sandboxed, and writes
    nothing."""
    writer = interruptible(duckdb.connect())
    try:
        writer.execute("SET TimeZone = 'UTC'")
        relation = writer.from_arrow(result.to_arrow_reader())
        with system_errors(path, duckdb.IOException):
            if fmt == "csv":
                relation.write_csv(str(path), header=True)
            else:
                relation.write_parquet(str(path), compression="zstd")
    finally:
        writer.close()


def _write_json(result: duckdb.DuckDBPyRelation, path: os.PathLike) -> None:
    """A JSON array with one object per row; DuckDB turns each row into JSON."""
    rows = result.set_alias("row").project("to_json(row) AS json").to_arrow_reader()
    with open(path, "w", encoding="utf-8") as out:
        out.write("[")
        separator = "\n"
        for batch in rows:
            for line in batch.column(0).to_pylist():
                out.write(separator + _strict(line))
                separator = ",\n"
        out.write("\n]\n")


def _strict(line: str) -> str:
    """A row's JSON with NaN and infinities as null, as JavaScript's ``JSON.stringify`` writes
    them: DuckDB writes them as the bare words ``NaN`` and ``Infinity``, which are not JSON, and
    which ``jq`` and browsers refuse.  Only a row that has those words is decoded again."""
    if "NaN" not in line and "Infinity" not in line:
        return line
    row = json.loads(line, parse_constant=lambda _: None)
    return json.dumps(row, ensure_ascii=False, separators=(",", ":"))
