"""Read the CSV files of public traces strictly, with errors that name file, line and column."""

from __future__ import annotations

import codecs
import csv
from pathlib import Path

import polars as pl

from replay.errors import ReplayError, unreadable

TEXT_PEEK = 1 << 16  # bytes read to tell text from a binary file


def read_csv(path: str | Path, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """The columns ``schema`` names from a CSV file with a header; errors name file, line, column.

    Other columns are ignored; an empty field is null.  Reading is strict: a value that is not of
    its column's type is an error, not a null, and so is a row with more fields than the header
    (a comma in an unquoted name, which shifts every value after it).  A row with fewer is read
    with nulls for the fields it lacks, which the importers refuse where a value is required.
    """
    path = Path(path)
    try:
        _check_text(path)
        text = pl.read_csv(path, infer_schema=False, glob=False)  # every column: rows are checked
    except FileNotFoundError:
        raise ReplayError(f"{path}: no such file") from None
    except pl.exceptions.ComputeError as err:
        raise ReplayError(_ragged_row(path) or f"{path}: cannot read as CSV "
                          f"({_first_line(err)})") from None
    except (OSError, pl.exceptions.PolarsError) as err:
        raise ReplayError(f"{path}: cannot read as CSV ({_first_line(err)})") from None
    missing = [name for name in schema if name not in text.columns]
    if missing:
        raise ReplayError(f"{path}: no column {', '.join(map(repr, missing))} in the header "
                          f"(found: {', '.join(text.columns)})")
    return pl.DataFrame([_typed(path, text, name, dtype) for name, dtype in schema.items()])


def _ragged_row(path: Path) -> str | None:
    """The first row with more fields than the header, as file:line (the error polars gives for
    it names no line); None if there is none."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as file:
            rows = csv.reader(file)
            fields = len(next(rows, []))
            for row in rows:
                if len(row) > fields:
                    return (f"{path}:{rows.line_num}: {len(row)} fields, but the header names "
                            f"{fields} (a comma in an unquoted value?)")
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    return None


def _check_text(path: Path) -> None:
    """Its first ``TEXT_PEEK`` bytes are UTF-8 without a NUL; polars would read a binary file,
    such as a trace given in a CSV's place, as a header of garbage."""
    with path.open("rb") as file:
        head = file.read(TEXT_PEEK)
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head)  # (a character cut at the end is fine)
        if b"\0" in head:
            at = head.index(b"\0")
            raise UnicodeDecodeError("utf-8", head, at, at + 1, "a NUL byte")
    except UnicodeDecodeError as err:
        raise unreadable(path, "CSV file", err) from None


def _typed(path: Path, text: pl.DataFrame, name: str, dtype: pl.DataType) -> pl.Series:
    """Column ``name`` cast to ``dtype``; the first value that does not cast is an error."""
    raw = text[name]
    if dtype == pl.String:
        return raw
    values = raw.str.strip_chars().cast(dtype, strict=False)
    bad = values.is_null() & raw.str.strip_chars().ne("").fill_null(False)
    if bad.any():
        row = bad.arg_true()[0]
        raise ReplayError(f"{path}:{row + 2}: column {name}: {raw[row]!r} is not "
                          f"{'an integer' if dtype.is_integer() else dtype}")
    return values


def _first_line(err: BaseException) -> str:
    return (str(err).strip() or type(err).__name__).splitlines()[0]
