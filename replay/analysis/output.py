"""Write a query's result as a table for people, or as CSV, JSON or Parquet for programs.

CSV and Parquet are DuckDB's own writers; JSON is one array of objects, serialised by DuckDB.
Everything is written to a temporary file first: ``--out FILE`` appears only when complete
(``atomic_file``), and nothing reaches stdout if the query fails half way.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import sys
import tempfile
from pathlib import Path

import duckdb

from replay.atomic import atomic_file
from replay.errors import ReplayError

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


def write_result(result: duckdb.DuckDBPyRelation, fmt: str, out: str | None) -> None:
    """Write ``result`` in ``fmt`` to the file ``out``, or to stdout when ``out`` is None."""
    if fmt == "parquet" and out is None:
        raise ReplayError("--format parquet writes a file: give --out FILE")
    if out is not None:
        with atomic_file(out) as tmp:
            _write_file(result, fmt, tmp)
        return
    with tempfile.TemporaryDirectory(prefix="replay-query-") as folder:
        tmp = Path(folder) / f"result.{fmt}"
        _write_file(result, fmt, tmp)
        with tmp.open("rb") as source:
            sys.stdout.flush()
            shutil.copyfileobj(source, sys.stdout.buffer)
            sys.stdout.buffer.flush()


def _write_file(result: duckdb.DuckDBPyRelation, fmt: str, path: Path) -> None:
    if fmt == "table":
        path.write_text(render_table(result))
    elif fmt == "csv":
        result.write_csv(str(path), header=True)
    elif fmt == "parquet":
        result.write_parquet(str(path), compression="zstd")
    elif fmt == "json":
        _write_json(result, path)
    else:
        raise ValueError(f"unknown format {fmt!r}")


def _write_json(result: duckdb.DuckDBPyRelation, path: Path) -> None:
    """A JSON array with one object per row; DuckDB turns each row into JSON."""
    rows = result.set_alias("row").project("to_json(row) AS json").to_arrow_reader()
    with path.open("w") as out:
        out.write("[")
        separator = "\n"
        for batch in rows:
            for line in batch.column(0).to_pylist():
                out.write(separator + line)
                separator = ",\n"
        out.write("\n]\n")
