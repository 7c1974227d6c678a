"""Trace format v1: the schema, the writer, and the validator's reports."""

from __future__ import annotations

import datetime as dt

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from replay.errors import ReplayError
from replay.trace import schema
from replay.trace.io import conform, source_of, trace_metadata, trace_writer, write_trace
import replay.trace.validate as validate_module
from replay.trace.validate import read_trace, validate, value_problems

from conftest import REPO, SAMPLE_TRACE

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


# received_ts of three rows: T0, null, and a microsecond before 0001-01-01 (which Python's
# datetime cannot hold, and Arrow's can)
BEFORE_YEAR_1 = pl.Series([int(T0.timestamp() * 1e6), None, -62135596800000001],
                          dtype=pl.Int64).cast(pl.Datetime("us", "UTC"))


def rows(n: int = 3, **overrides) -> pl.DataFrame:
    base = {
        "ts": [T0 + dt.timedelta(seconds=i) for i in range(n)],
        "verb": ["create"] * n,
        "resource": ["pods"] * n,
        "name": [f"p{i}" for i in range(n)],
        "code": [201] * n,
        "component": ["workload"] * n,
        "cpu_milli": [100] * n,
    }
    base.update(overrides)
    return pl.DataFrame(base)


def write(path, frame: pl.DataFrame | pa.Table, metadata: bool = True):
    if metadata:
        write_trace(frame, path, source="test", source_args={"case": path.name})
    else:
        pq.write_table(frame.to_arrow() if isinstance(frame, pl.DataFrame) else frame, path)
    return path


def test_readme_documents_exactly_the_schema():
    readme = (REPO / "traces" / "README.md").read_text()
    assert schema.markdown_table() in readme


def test_an_optional_column_may_be_left_out_and_reads_as_nulls(tmp_path):
    """``phase`` came after the first v1 traces: a file without it is valid, is not given one
    by the writer, and reads with it all null; one with it keeps it."""
    without = write(tmp_path / "without.parquet", rows())
    assert validate(without) == [] and "phase" not in pq.read_schema(without).names
    assert read_trace(without)["phase"].to_list() == [None] * 3
    assert read_trace(without, columns=["name", "phase"]).columns == ["name", "phase"]
    kept = write(tmp_path / "with.parquet", rows(phase=["Pending", "Running", "Succeeded"]))
    assert read_trace(kept)["phase"].to_list() == ["Pending", "Running", "Succeeded"]


def test_round_trip_keeps_types_metadata_and_extra_columns(tmp_path):
    frame = rows().with_columns(scheduled_s=pl.lit(1.5))
    path = write(tmp_path / "t.parquet", frame)
    assert validate(path) == []
    back = read_trace(path)
    assert back.columns[: len(schema.COLUMN_NAMES)] == list(schema.COLUMN_NAMES)
    assert back["scheduled_s"].to_list() == [1.5] * 3
    assert back["name"].to_list() == ["p0", "p1", "p2"]
    assert pq.read_schema(path).field("ts").type == schema.TIMESTAMP
    meta = source_of(path)
    assert meta["replay.trace_version"] == "1" and meta["replay.source"] == "test"


def test_conform_refuses_a_table_without_required_columns():
    with pytest.raises(ValueError, match="'verb'"):
        conform(rows().drop("verb"))


def test_failed_writer_leaves_no_file(tmp_path):
    out = tmp_path / "t.parquet"
    with pytest.raises(RuntimeError):
        with trace_writer(out, source="test", source_args={}) as writer:
            writer.write(rows())
            raise RuntimeError("producer failed")
    assert list(tmp_path.iterdir()) == []


HUGE = 2**62  # three of them add up to more than int64 holds


@pytest.mark.parametrize("twice", ["name", "extra"])
def test_a_column_named_twice_is_a_problem_not_a_traceback(tmp_path, twice):
    """pyarrow writes a file with two columns of one name, which polars cannot read."""
    table = conform(rows())
    table = table.append_column("extra", table["name"]).append_column(twice, table["name"])
    path = write(tmp_path / "t.parquet",
                 table.replace_schema_metadata(trace_metadata("test", {})), metadata=False)
    assert validate(path) == [f"column {twice!r} appears 2 times"]
    with pytest.raises(ReplayError, match=f"column {twice!r} appears 2 times"):
        read_trace(path)


def test_resources_whose_sums_would_wrap_are_refused(tmp_path):
    """Three pods of 2^62 millicores: a node holding them would wrap its int64 sums.  The
    writer refuses to make such a trace, and validate names it in one made by others."""
    huge = rows(cpu_milli=[HUGE] * 3)
    with pytest.raises(ReplayError, match="the cpu_milli of the trace's objects .each one's "
                                          "largest. add up to 1.384e.19, more than the 9.223e.18"):
        write(tmp_path / "t.parquet", huge)
    assert list(tmp_path.iterdir()) == []
    made_by_others = conform(huge).replace_schema_metadata(trace_metadata("test", {}))
    path = write(tmp_path / "t.parquet", made_by_others, metadata=False)
    assert [p[:39] for p in validate(path)] == ["the cpu_milli of the trace's objects (e"]
    with pytest.raises(ReplayError, match="cpu_milli of the trace's objects"):
        read_trace(path)


def test_one_object_repeating_a_large_resource_is_valid(tmp_path):
    """A node's allocatable repeated by its status updates counts once, however many rows."""
    node = rows(resource=["nodes"] * 3, name=["n0"] * 3, cpu_milli=[HUGE] * 3)
    assert validate(write(tmp_path / "t.parquet", node)) == []
    assert read_trace(tmp_path / "t.parquet").height == 3


def test_empty_trace_is_valid(tmp_path):
    path = tmp_path / "empty.parquet"
    with trace_writer(path, source="test", source_args={}):
        pass
    assert validate(path) == []
    assert read_trace(path).height == 0


@pytest.mark.parametrize("frame, expected", [
    (rows(ts=[T0, T0 + dt.timedelta(seconds=2), T0 + dt.timedelta(seconds=1)]), "ts is not sorted"),
    (rows(cpu_milli=[1, -5, -1]), "negative cpu_milli: 2 rows, first at row index 1"),
    (rows(verb=["create", "frobnicate", "patch"]), "verb not one of"),
    (rows(code=[201, 0, 201]), "code is not an HTTP status"),
    (rows(received_ts=[T0 + dt.timedelta(seconds=5)] * 3), "received_ts is later than ts"),
    (rows(ts=[T0, T0, dt.datetime(9999, 1, 1, tzinfo=dt.UTC)]),
     "ts outside the times replay handles (from 0001-01-01 up to 9999-01-01): 1 row, first at "
     "row index 2"),
    (rows(received_ts=BEFORE_YEAR_1), "received_ts outside the times replay handles"),
    (rows(phase=["Running", "Done", None]), "phase not one of Pending, Running, Succeeded, "
     "Failed, Unknown: 1 row, first at row index 1"),
])
def test_validate_names_each_value_problem(tmp_path, frame, expected):
    problems = validate(write(tmp_path / "t.parquet", frame))
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("frame", [
    rows(),
    rows(ts=[T0, T0 + dt.timedelta(seconds=2), T0 + dt.timedelta(seconds=1)]),
    rows(cpu_milli=[1, -5, -1]),
    rows(verb=["create", "frobnicate", "patch"], code=[201, 0, 700]),
    rows(received_ts=[T0 + dt.timedelta(seconds=5)] * 3),
    rows(ts=[T0, T0, dt.datetime(9999, 1, 1, tzinfo=dt.UTC)]),
    rows(received_ts=BEFORE_YEAR_1),
    rows(name=["a", None, "c"], component=[None, "x", None]),
    rows(0),
    rows(cpu_milli=[HUGE] * 3),
    rows(name=["a"] * 3, memory_bytes=[HUGE] * 3),
])
def test_a_frame_in_memory_gets_the_same_report(frame):
    """read_trace checks the frame it read by quick summaries first; the report is the same."""
    frame = pl.from_arrow(conform(frame))
    columns = list(schema.COLUMN_NAMES)
    assert value_problems(frame, columns) == value_problems(frame.lazy(), columns)


def test_read_trace_rules_out_value_problems_by_summaries_first(monkeypatch):
    """The trace read is checked as a frame in memory (``_clean``'s summaries, a third of the
    full pass's time on the 1M-pod trace), not lazily: a refactoring once passed it lazily,
    which counted every kind of bad row in every read."""
    summarised = []
    clean = validate_module._clean
    monkeypatch.setattr(validate_module, "_clean",
                        lambda *args: summarised.append(True) or clean(*args))
    read_trace(SAMPLE_TRACE)
    assert summarised == [True]


@pytest.mark.parametrize("column, replacement, expected", [
    ("component", None, "missing column 'component'"),
    ("code", pa.array(["201", "201", "201"]), "column 'code' has type string, expected int32"),
    ("ts", pa.array([1, 2, 3], pa.timestamp("ms", tz="UTC")), "column 'ts' has type timestamp[ms"),
    ("name", pa.array(["a", None, "c"]), "null in column 'name': 1 row, first at row index 1"),
])
def test_validate_names_each_problem_a_writer_could_not_make(tmp_path, column, replacement, expected):
    table = conform(rows())
    index = table.schema.get_field_index(column)
    table = table.remove_column(index) if replacement is None else \
        table.set_column(index, column, replacement)
    path = tmp_path / "t.parquet"
    pq.write_table(table.replace_schema_metadata({b"replay.trace_version": b"1"}), path)
    assert any(expected in p for p in validate(path)), validate(path)


def test_validate_reports_every_problem_at_once(tmp_path):
    bad = rows(verb=["create", "nope", "patch"], cpu_milli=[1, -5, 2])
    bad = bad.with_columns(ts=pl.Series([T0, T0, T0 - dt.timedelta(seconds=1)]))
    problems = validate(write(tmp_path / "t.parquet", bad))
    assert len(problems) == 3, problems


def test_validate_wants_the_version_metadata(tmp_path):
    path = write(tmp_path / "t.parquet", conform(rows()), metadata=False)
    assert validate(path) == ["no replay.trace_version in the file's key-value metadata"]


@pytest.mark.parametrize("content", [b"", b"not parquet at all\n", b"PAR1garbage"])
def test_non_parquet_file_is_a_clear_error(tmp_path, content):
    path = tmp_path / "bad.parquet"
    path.write_bytes(content)
    with pytest.raises(ReplayError, match="not a readable Parquet file"):
        validate(path)


def test_truncated_file_is_a_clear_error(tmp_path):
    data = SAMPLE_TRACE.read_bytes()
    path = tmp_path / "cut.parquet"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ReplayError, match="cut.parquet: not a readable Parquet file"):
        validate(path)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ReplayError, match="no such file"):
        validate(tmp_path / "nope.parquet")


def test_sample_trace_is_valid_and_small():
    assert validate(SAMPLE_TRACE) == []
    assert SAMPLE_TRACE.stat().st_size < 1_000_000
    trace = read_trace(SAMPLE_TRACE, columns=["resource", "subresource", "verb"])
    counts = trace.group_by("resource", "subresource", "verb").len()
    bindings = counts.filter(pl.col("subresource") == "binding")["len"].sum()
    assert bindings > 1000
