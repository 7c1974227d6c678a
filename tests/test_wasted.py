"""``wasted`` of the capacity windows in numpy (``replay.analysis.wasted``) against the SQL's
expression: ``test_derive.stored_is_the_whole_query`` compares the two on the runs of every
model (``wasted_is_the_sqls``), but the sample runs have few wasted windows; here random stale
segments and pending pods with ties everywhere (starts, ends, requests at the view and the
truth) go through both, and the runs left to the SQL derive the same file."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.analysis import wasted as wasted_module
from replay.analysis.derive import derived_sql
from replay.analysis.steps import split_steps
from replay.analysis.wasted import wasted
from replay.analysis.windows import Part, Sweep, _stale_table, _windows_table
from test_changes import the_sql_alone_derives_the_same_file
from conftest import budget

NODES = 3
small = st.integers(0, 6)
segment = st.tuples(st.integers(1, 2), st.integers(1, 2), st.integers(0, 2), small, small,
                    small, small)  # viewer, node, resource, start, length, view, truth - view
lone_window = st.tuples(st.integers(1, 2), st.integers(1, 2), st.integers(0, 2), small, small,
                        small, small, st.booleans())  # a segment, and whether it is stale
pod = st.tuples(st.integers(0, 2), st.integers(1, 6), small, small)  # resource, request, start, length


def _sweep(merged: list[tuple], lone: list[tuple]) -> Sweep:
    """A sweep whose stale segments are ``merged`` (named by their window's start, here the
    segment's start less one) and whose lone windows are ``lone`` (stale where flagged)."""
    def column(rows: list[tuple], at: int) -> np.ndarray:
        return np.array([row[at] for row in rows], dtype=np.int64)

    start = {name: column(rows, 3) for name, rows in (("merged", merged), ("lone", lone))}
    end = {name: start[name] + column(rows, 4) + 1
           for name, rows in (("merged", merged), ("lone", lone))}
    view = {name: column(rows, 5) for name, rows in (("merged", merged), ("lone", lone))}
    truth = {name: view[name] + column(rows, 6) + 1
             for name, rows in (("merged", merged), ("lone", lone))}
    count = len(lone)
    lone_windows = _windows_table(
        column(lone, 0), column(lone, 1), column(lone, 2).astype(np.int8), start["lone"],
        end["lone"], np.zeros(count, dtype=bool), np.array([row[7] for row in lone], dtype=bool),
        truth["lone"] - view["lone"])
    lone_windows = (lone_windows.append_column("truth", pa.array(truth["lone"]))
                    .append_column("view", pa.array(view["lone"])))
    stale = _stale_table(column(merged, 0), column(merged, 1), column(merged, 2).astype(np.int8),
                         start["merged"], end["merged"], start["merged"] - 1, truth["merged"],
                         view["merged"])
    empty = _windows_table(*(np.zeros(0, dtype=np.int64),) * 8).append_column(
        "gap_hi", pa.array([], pa.int64())).append_column("gap_lo", pa.array([], pa.uint64()))
    return Sweep([Part(np.zeros(0, dtype=np.int64), lone_windows, empty)], stale, NODES)


@settings(max_examples=budget(100), deadline=None)
@given(st.lists(segment, max_size=12), st.lists(lone_window, max_size=12),
       st.lists(pod, max_size=12))
def test_wasted_is_the_sqls_on_ties(merged, lone, pods):
    sweep = _sweep(merged, lone)
    con = duckdb.connect()
    con.execute("CREATE TABLE viewers AS SELECT 'run' AS run, unnest([1, 2]) AS viewer_id")
    con.register("_pods", pa.table({
        "resource": [("cpu", "memory", "gpu")[p[0]] for p in pods],
        "request": [p[1] for p in pods],
        "start_us": [p[2] for p in pods], "end_us": [p[2] + p[3] + 1 for p in pods]}))
    # the SQL's pending, over these pods
    con.execute("""CREATE TABLE pending AS
                   SELECT 'run' AS run, resource, request::BIGINT AS request,
                          make_timestamptz(start_us) AS start_ts,
                          max(make_timestamptz(end_us)) OVER (PARTITION BY resource, request
                                                              ORDER BY start_us) AS reach_ts
                   FROM _pods""")
    con.register("_merged", sweep.stale_segments)
    con.register("_lone", sweep.parts[0].lone_windows)
    con.execute("""CREATE VIEW stale_segments AS
                   SELECT viewer_id, node_id, resource::VARCHAR AS resource, start_ts, end_ts,
                          window_ts, truth, view FROM _merged
                   UNION ALL
                   SELECT viewer_id, node_id, resource::VARCHAR, start_ts, end_ts, start_ts,
                          truth, view FROM _lone WHERE stale""")
    sql = next(s.sql for s in split_steps(derived_sql("capacity_windows")) if s.name == "wasted")
    theirs = con.sql(f"SELECT * FROM ({sql}) ORDER BY ALL").fetchall()
    assert wasted(con, sweep)
    assert con.sql("FROM wasted ORDER BY ALL").fetchall() == theirs


def test_a_null_in_pending_is_left_to_the_sql(tmp_path):
    con = duckdb.connect()
    con.execute("""CREATE TABLE pending AS
                   SELECT 'run' AS run, 'cpu' AS resource, 1::BIGINT AS request,
                          NULL::TIMESTAMPTZ AS start_ts, NULL::TIMESTAMPTZ AS reach_ts""")
    assert not wasted(con, _sweep([(1, 1, 0, 0, 0, 0, 0)], []))
    assert not wasted(con, None)
    assert con.sql("SELECT count(*) FROM duckdb_views() WHERE view_name = 'wasted'"
                   ).fetchall() == [(0,)]


def test_the_sql_alone_derives_the_same_file(tmp_path, monkeypatch):
    """Where the numpy path declines, the SQL's ``wasted`` runs: the same bytes."""
    the_sql_alone_derives_the_same_file(tmp_path, monkeypatch, wasted_module, "wasted")
