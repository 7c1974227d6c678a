"""`replay import parquet`: a table with the trace's columns, as other tools write it, made a
trace, every value kept, or refused with the column and row that would change."""

from __future__ import annotations

from datetime import datetime, timezone

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from replay.trace.io import source_of
from replay.trace.validate import validate

SAMPLE = "traces/sample.parquet"
ROW = pl.int_range(pl.len())  # a row's index


@pytest.fixture(scope="module")
def sample() -> pl.DataFrame:
    return pl.read_parquet(SAMPLE)


def convert(cli, tmp_path, table, name="table.parquet"):
    """``table`` (a polars frame or an Arrow table) written by its own library, then imported."""
    path, out = tmp_path / name, tmp_path / "trace.parquet"
    if isinstance(table, pl.DataFrame):
        table.write_parquet(path)
    else:
        pq.write_table(table, path)
    return cli("import", "parquet", "--table", path, "--out", out), out


def test_a_trace_rewritten_by_polars_is_refused_by_validate_and_imported_unchanged(
        cli, tmp_path, sample):
    """polars writes text as large_string and no metadata: 14 problems, each only of type."""
    sample.write_parquet(tmp_path / "cut.parquet")
    refused = cli("validate", tmp_path / "cut.parquet")
    assert refused.code == 1 and "has type large_string, expected string" in refused.out
    assert "`replay import parquet --table" in refused.out
    run = cli("run", tmp_path / "cut.parquet", "--out", tmp_path / "run")
    assert run.code == 1 and "(and 13 more problems); a table other tools wrote" in run.err
    result, out = convert(cli, tmp_path, sample)
    assert result.code == 0, result.err
    assert result.err == ""  # nothing to say: every column is there, in order
    assert validate(out) == []
    assert pl.read_parquet(out).equals(sample)
    assert source_of(out)["replay.source"] == "parquet"
    assert '"from_source"' not in source_of(out)["replay.source_args"]  # polars kept none


@pytest.mark.parametrize("change", [
    pl.col("ts", "received_ts").dt.cast_time_unit("ns"),
    pl.col("ts", "received_ts").dt.convert_time_zone("Asia/Kolkata"),
    pl.col("verb", "resource", "component").cast(pl.Categorical),
    pl.col("code", "priority").cast(pl.Int64),
    pl.col("cpu_milli").cast(pl.Float64),  # what pandas makes of integers with nulls
    pl.col("memory_bytes").cast(pl.UInt64),
    pl.col("uid").cast(pl.Null),
], ids=["ns", "zone", "categorical", "wider", "float", "unsigned", "nulls"])
def test_each_type_other_tools_write_is_cast_without_changing_a_value(
        cli, tmp_path, sample, change):
    result, out = convert(cli, tmp_path, sample.with_columns(change))
    assert result.code == 0, result.err
    assert pl.read_parquet(out).equals(sample)


def test_a_trace_cut_with_duckdb_keeps_its_origin(cli, tmp_path, sample):
    """DuckDB writes the format's types but drops the metadata: the only problem."""
    cut = tmp_path / "cut.parquet"
    duckdb.sql(f"COPY (SELECT * FROM '{SAMPLE}' WHERE namespace IS NULL OR name < 'pod-01') "
               f"TO '{cut}'")
    assert validate(cut) == ["no replay.trace_version in the file's key-value metadata"]
    out = tmp_path / "trace.parquet"
    assert cli("import", "parquet", "--table", cut, "--out", out).code == 0
    assert validate(out) == []
    assert pl.read_parquet(out).equals(pl.read_parquet(cut))
    again = tmp_path / "again.parquet"
    assert cli("import", "parquet", "--table", out, "--out", again).code == 0
    assert '"from_source": "parquet"' in source_of(again)["replay.source_args"]


def test_nanoseconds_round_to_the_nearest_microsecond_halves_up(cli, tmp_path):
    """As ingest rounds audit times, before 1970 too (where truncation would round up)."""
    ns = [-1_500, -1_499, 999_499, 999_500, 2_000_000]  # ns since 1970
    result, out = convert(cli, tmp_path, nodes(pa.array(ns, pa.timestamp("ns", "UTC"))))
    assert result.code == 0, result.err
    assert "column ts: 4 times rounded to the nearest microsecond, halves up" in result.err
    assert "no column received_ts, subresource" in result.err  # written as nulls
    micros = pl.read_parquet(out)["ts"].dt.epoch("us").to_list()
    assert micros == [-1, -1, 999, 1000, 2000]


def test_rows_out_of_order_are_sorted_ties_in_the_tables_order(cli, tmp_path, sample):
    shuffled = pl.concat([sample[5000:], sample[:5000]])
    result, out = convert(cli, tmp_path, shuffled)
    assert result.code == 0, result.err
    assert "1 rows earlier than the row before them; sorted by ts" in result.err
    assert pl.read_parquet(out).equals(sample)


def test_pandas_index_and_extra_columns(cli, tmp_path, sample):
    """pandas writes a filtered frame's index as a column; it is not the trace's data."""
    table = sample.with_columns(pl.int_range(pl.len()).alias("__index_level_0__"),
                                pl.lit("x").alias("note")).to_arrow()
    result, out = convert(cli, tmp_path, table)
    assert result.code == 0, result.err
    assert "__index_level_0__ is pandas' index, not data; left out" in result.err
    written = pl.read_parquet(out)
    assert written.columns[-1] == "note" and written.drop("note").equals(sample)


@pytest.mark.parametrize("change, message", [
    (pl.col("cpu_milli").cast(pl.Float64) / 3,
     "column 'cpu_milli', row index 0: 5333.333333333333 is not a whole number that int64 "
     "holds"),
    (pl.when(ROW == 3).then(float("nan")).otherwise(pl.col("cpu_milli")).alias("cpu_milli"),
     "column 'cpu_milli', row index 3: nan is not a whole number"),
    (pl.col("code").cast(pl.Int64) * 100_000_000, "column 'code', row index 0: 20100000000 is "
     "not a whole number that int32 holds"),
    (pl.col("ts").dt.epoch("us"), "column 'ts' is int64; a time column must be a timestamp"),
    (pl.col("name").hash(), "column 'name' is uint64; it must hold text"),
    (pl.col("priority").cast(pl.String), "column 'priority' is large_string; it must hold "
     "integers"),
    (pl.col("ts", "received_ts").dt.offset_by("-2100y"),
     "ts outside the times replay handles (from 0001-01-01 up to 9999-01-01): 66522 rows, "
     "first at row index 0"),
    (pl.when(ROW == 2).then(None).otherwise(pl.col("verb")).alias("verb"),
     "null in column 'verb': 1 row, first at row index 2"),
], ids=["fraction", "nan", "int32", "epoch", "hash", "text", "year", "null"])
def test_a_value_that_would_change_is_refused_naming_column_and_row(
        cli, tmp_path, sample, change, message):
    result, out = convert(cli, tmp_path, sample.with_columns(change))
    assert result.code == 1 and message in result.err, result.err
    assert result.err.count("\n") == 1 and "Traceback" not in result.err
    assert not out.exists()


def test_a_table_without_a_required_column_or_with_a_column_twice(cli, tmp_path, sample):
    result, out = convert(cli, tmp_path, sample.drop("code", "component"))
    assert result.code == 1
    assert "no column 'code', 'component', which a trace needs (found: ts, received_ts" \
        in result.err
    twice = sample.to_arrow()
    twice = twice.append_column("name", twice.column("name"))
    result, out = convert(cli, tmp_path, twice, "twice.parquet")
    assert result.code == 1 and "column 'name' appears more than once" in result.err
    assert not out.exists()


def nodes(times: pa.Array) -> pa.Table:
    """A node create at each of ``times``."""
    n = len(times)
    return pa.table({"ts": times, "verb": ["create"] * n, "resource": ["nodes"] * n,
                     "name": [f"n{i}" for i in range(n)], "component": ["kubelet"] * n,
                     "code": [201] * n})


@pytest.mark.parametrize("unit", ["s", "ms"])
def test_seconds_and_milliseconds_are_exact_and_beyond_int64_microseconds_refused(
        cli, tmp_path, unit):
    per_second = {"s": 1, "ms": 1000}[unit]
    result, out = convert(cli, tmp_path, nodes(pa.array([-3, 0, 7], pa.timestamp(unit, "UTC"))))
    assert result.code == 0, result.err
    assert pl.read_parquet(out)["ts"].dt.epoch("us").to_list() == [
        -3_000_000 // per_second, 0, 7_000_000 // per_second]
    far = int(datetime(9000, 1, 1, tzinfo=timezone.utc).timestamp()) * 10_000 * per_second
    result, out = convert(cli, tmp_path, nodes(pa.array([0, far], pa.timestamp(unit, "UTC"))))
    assert result.code == 1
    assert "column 'ts', row index 1: outside the times replay handles" in result.err


def test_the_table_is_an_input_never_an_output(cli, tmp_path, sample):
    path = tmp_path / "cut.parquet"
    sample.write_parquet(path)
    before = path.read_bytes()
    result = cli("import", "parquet", "--table", path, "--out", path)
    assert result.code == 1 and "is the input" in result.err
    assert path.read_bytes() == before
