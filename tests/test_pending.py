"""``pending`` of the capacity windows in numpy (``replay.analysis.pending``) against the SQL's
expression: ``test_derive.stored_is_the_whole_query`` compares the two on the runs of every
model (``pending_is_the_sqls``); here random pods with ties everywhere (starts, ends, requests)
and nulls (unknown creates, bindings, deletes, requests, the run's end) go through both, and
the runs left to the SQL derive the same file."""

from __future__ import annotations

import duckdb
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.analysis import pending as pending_module
from replay.analysis.derive import derived_sql
from replay.analysis.pending import pending
from replay.analysis.steps import split_steps
from test_changes import the_sql_alone_derives_the_same_file
from test_derive import pending_matches_the_sql
from conftest import budget

time = st.none() | st.integers(0, 6)
request = st.none() | st.integers(-1, 3)
pod = st.tuples(time, time, time, request, request, request)  # created, bound, deleted, requests
SQL = next(s.sql for s in split_steps(derived_sql("capacity_windows")) if s.name == "pending")


def _connection(pods: list[tuple], end: int | None, runs: int = 1) -> duckdb.DuckDBPyConnection:
    """``pods`` and ``bounds`` as the SQL's ``pending`` reads them, for ``runs`` runs alike."""
    con = duckdb.connect()
    con.register("_pods", pa.table({
        name: pa.array([p[i] for p in pods], pa.int64())
        for i, name in enumerate(("created", "bound", "deleted", "cpu_milli", "memory_bytes",
                                  "gpu_milli"))}))
    con.execute(f"""CREATE TABLE pods AS
                    SELECT 'run' || run AS run, make_timestamptz(created) AS created_ts,
                           make_timestamptz(bound) AS bound_ts,
                           make_timestamptz(deleted) AS deleted_ts,
                           cpu_milli, memory_bytes, gpu_milli
                    FROM _pods, range({runs}) AS runs(run)""")
    con.execute(f"""CREATE TABLE bounds AS
                    SELECT 'run' || run AS run, make_timestamptz(0) AS start_ts,
                           make_timestamptz({'NULL' if end is None else end}::BIGINT) AS end_ts
                    FROM range({runs}) AS runs(run)""")
    return con


@settings(max_examples=budget(150), deadline=None)
@given(st.lists(pod, max_size=16), st.none() | st.integers(0, 8))
def test_pending_is_the_sqls_on_ties_and_nulls(pods, end):
    assert pending_matches_the_sql(_connection(pods, end), SQL)


@settings(max_examples=budget(20), deadline=None)  # (what it checks does not depend on the pods)
@given(st.lists(pod, max_size=4), st.none() | st.integers(0, 8))
def test_several_runs_or_none_are_left_to_the_sql(pods, end):
    for con in (_connection(pods, end, runs=2), _connection(pods, end, runs=0)):
        assert pending(con) is None
        assert con.sql("SELECT count(*) FROM duckdb_views() WHERE view_name = 'pending'"
                       ).fetchall() == [(0,)]


def test_the_sql_alone_derives_the_same_file(tmp_path, monkeypatch):
    """Where the numpy path declines, the SQL's ``pending`` runs: the same bytes."""
    the_sql_alone_derives_the_same_file(tmp_path, monkeypatch, pending_module, "pending")
