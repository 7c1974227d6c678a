"""The claims in numpy (``replay.analysis.claims``) against views.sql's ``capacity_changes``:
``test_derive.stored_is_the_whole_query`` compares them on the runs of every model and the
properties' random traces; these pin a name's several lives, writes to a pod created before
the trace, a pod created on its node, one that ran to its end, and names with a '/', which are
left to the SQL."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.analysis.claims import ASSUMED, COUNTS_ASSUMED, _moves, capacity_changes, pod_order
from replay.analysis.derive import derive
from replay.analysis.runs import open_runs
from strategies import bind, delete, node, pod, status
from test_derive import stored_is_the_whole_query
from test_queries import edited_run, network, replay_rows
from conftest import budget

LIVES = [
    node(0, "n1", 4000),
    node(0, "n2", 4000),
    bind(1, "old", "n1"),  # created before the trace: life 0, requests unknown
    delete(5, "old"),
    pod(10, "a", 1000),
    bind(12, "a", "n1"),
    delete(20, "a"),
    pod(21, "a", 2000),  # the name again: a second life, its own requests
    bind(23, "a", "n2"),
    status(24, "a", "Succeeded"),  # ran to its end: gives n2 back before any delete
    pod(24, "b", 1000),
    bind(26, "b", "n1"),
    pod(27, "mirror", 500, node_name="n2"),  # created on its node: placed at its create
    delete(30, "mirror"),
]


def test_every_life_of_a_name_claims_its_own_requests(tmp_path):
    stored_is_the_whole_query(replay_rows(tmp_path, LIVES, network(2)))


def test_names_that_make_one_pod_are_left_to_the_sql(tmp_path):
    """b's writes renamed to namespace null and name "ns/a": the pod text of a's, "ns/a".
    (The SQL then merges a's first life and b's, whose requests must be equal for its
    ``any_value`` to be one number.)"""
    def rename_b(tables):
        events = tables["events"]
        is_b = (pl.col("resource") == "pods") & (pl.col("name") == "b")
        return {"events": events.with_columns(
            namespace=pl.when(is_b).then(None).otherwise(pl.col("namespace")),
            name=pl.when(is_b).then(pl.lit("ns/a")).otherwise(pl.col("name")))}

    run_dir = edited_run(tmp_path, rename_b, LIVES)
    con = open_runs([str(run_dir)], derived=False)
    try:
        assert not capacity_changes(con)
        assert con.sql("SELECT count(*) FROM duckdb_tables() WHERE temporary").fetchall() == [(0,)]
    finally:
        con.close()
    derive(run_dir)
    stored_is_the_whole_query(run_dir, swept=False)


@settings(max_examples=budget(300), deadline=None)
@given(data=st.data(), pods=st.integers(1, 6), count=st.integers(0, 40))
def test_the_writes_are_ordered_as_lexsort_orders_them(data, pods, count):
    """``pod_order`` (a stable sort by rv, then one counted by pod) against ``np.lexsort``,
    on rvs in order but for a few swapped batches, as DuckDB hands them over, or in any order,
    with repeats (which keep the writes' order)."""
    pod = np.array(data.draw(st.lists(st.integers(0, pods - 1), min_size=count,
                                      max_size=count)), dtype=np.int32)
    rv = np.array(data.draw(st.lists(st.integers(0, 10), min_size=count, max_size=count)),
                  dtype=np.int64)
    if data.draw(st.booleans()):
        rv = np.sort(rv)
        cut = data.draw(st.integers(0, count))
        rv = np.concatenate([rv[cut:], rv[:cut]])  # two batches swapped
    assert np.array_equal(pod_order(pod, rv, pods), np.lexsort((rv, pod)))


def test_a_life_longer_than_the_room_first_given_makes_every_move():
    """One life of ten assumptions, on two nodes in turn: 19 moves (a take, then a release and
    a take each), more than the 13 that ``_moves`` first makes room for."""
    count = 10
    writes = SimpleNamespace(
        rv=np.arange(1, count + 1, dtype=np.int64), node=np.arange(count, dtype=np.int32) % 2,
        binds=np.zeros(count, bool), deletes=np.zeros(count, bool),
        state=np.full(count, ASSUMED, np.int32))
    rows, nodes, takes, kinds, changes, lives = _moves(writes, np.array([0]), np.array([True]))
    expected = [(0, 0, True)] + [move for i in range(1, count)
                                 for move in sorted([(i, (i - 1) % 2, False), (i, i % 2, True)],
                                                    key=lambda m: m[1])]
    assert list(zip(rows.tolist(), nodes.tolist(), takes.tolist())) == expected
    assert set(kinds.tolist()) == {COUNTS_ASSUMED} and set(changes.tolist()) == {ASSUMED}
    assert set(lives.tolist()) == {0}
