"""The capacity windows' sweep in numpy (``replay.analysis.windows``) against their definition,
``queries/derived/capacity_windows.sql`` run whole.  The tests of the replay's runs compare the
stored table with the query on runs of every model (``test_derive.stored_is_the_whole_query``,
which also checks that the sweep, not the SQL, computed it), and test_queries' properties
compare it with a reference in Python on random traces; these pin the parts those runs may not
reach: a missed change, an attempt held after its conflict, 128-bit integrals, and a run left
to the SQL."""

from __future__ import annotations

import contextlib
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import budget
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.analysis import claims, windows
from replay.analysis.derive import derive
from replay.api import run_replay
from replay.engine.config import load_config
from test_derive import stored_is_the_whole_query, sweeps_in_numpy
from test_queries import FAILED_D, WORKED, edited_run, learn_of_conflicts_late, network, \
    replay_rows, sample_prefix


def test_integrals_are_exact_beyond_64_bits():
    """A window's integral (gap times duration, summed) is a 128-bit integer, as DuckDB's
    HUGEINT: bytes of memory times microseconds exceed 2**63 within hours."""
    a = np.array([2**62 + 12345, 3, 2**40 + 7], dtype=np.int64)
    b = np.array([2**61 + 999, 5, 2**45 + 11], dtype=np.int64)
    hi = np.array([0, 0, 1], dtype=np.int64)
    lo = np.array([0, 2**64 - 1, 2**64 - 2], dtype=np.uint64)
    start = [int(h) * 2**64 + int(low) for h, low in zip(hi, lo)]
    windows.mul_add128(a, b, hi, lo)
    assert [int(h) * 2**64 + int(low) for h, low in zip(hi, lo)] == [
        s + int(x) * int(y) for s, x, y in zip(start, a, b)]


def drop_a_delivery(tables):
    """The kubelet never receives the delete: a missed change, open until the run's end."""
    delete_rv = tables["events"].filter(pl.col("verb") == "delete")["rv"][0]
    d = tables["deliveries"]
    return {"deliveries": d.filter(~((pl.col("rv") == delete_rv)
                                     & (pl.col("watcher") == "kubelet/n1")))}


@pytest.mark.parametrize("edit, rows", [(drop_a_delivery, WORKED),
                                        (learn_of_conflicts_late, FAILED_D)])
def test_irregular_pairs_are_swept_as_the_sql_cuts_them(tmp_path, edit, rows):
    stored_is_the_whole_query(edited_run(tmp_path, edit, rows))


def test_a_run_the_arrays_cannot_hold_is_left_to_the_sql(tmp_path, monkeypatch):
    """When the sweep declines (here forced), the SQL computes every expression: the same
    table."""
    run_dir = replay_rows(tmp_path, WORKED, network(2))
    monkeypatch.setattr(windows, "_received", lambda con, nodes, rvs, reading=None: None)
    derive(run_dir)
    stored_is_the_whole_query(run_dir, swept=False)


def test_the_deliveries_are_read_once_begun_before_the_claims(tmp_path, monkeypatch):
    """The read begins at the derivation's first step, before ``every_change``'s claims, and
    ``received`` takes it rather than reading again."""
    run_dir = replay_rows(tmp_path, WORKED, network(2))
    calls: list[str] = []
    record(monkeypatch, windows, "provisional_viewers", calls, "begun")
    record(monkeypatch, windows, "_delivered", calls, "read")
    record(monkeypatch, claims, "capacity_changes", calls, "claims")
    record(monkeypatch, windows, "_received", calls, "received")
    derive(run_dir)
    assert [call for call in calls if call != "read"] == ["begun", "claims", "received"]
    assert calls.count("read") == 1
    stored_is_the_whole_query(run_dir)


def test_viewers_numbered_otherwise_than_the_read_began_are_read_again(tmp_path, monkeypatch):
    """Where ``viewers`` numbers the viewers otherwise than the early read did (here forced:
    numbered backwards), ``received`` reads the deliveries again with its numbers: the
    SQL's table, on a run whose viewers each received the changes at other times."""
    run_dir = tmp_path / "run"
    run_replay(sample_prefix(tmp_path), load_config(), out=run_dir)
    calls: list[str] = []
    provisional = windows.provisional_viewers
    monkeypatch.setattr(windows, "provisional_viewers", lambda con: [
        (watcher, len(viewers) + 1 - number)
        for viewers in [provisional(con)] for watcher, number in viewers])
    record(monkeypatch, windows, "_delivered", calls, "read")
    derive(run_dir)
    assert calls == ["read", "read"]
    stored_is_the_whole_query(run_dir)


def record(monkeypatch, module, name: str, calls: list[str], call: str) -> None:
    """``module.name`` appends ``call`` to ``calls`` each time it is called."""
    function = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a, **k: calls.append(call) or function(*a, **k))


def test_a_change_received_twice_is_left_to_the_sql(tmp_path):
    """Every delivery twice: each viewer received each change twice, which the SQL's joins
    count twice; the lags' sorted keys repeat, the arrays decline the run, and the SQL
    computes the table."""
    run_dir = edited_run(tmp_path, lambda tables: {
        "deliveries": pl.concat([tables["deliveries"], tables["deliveries"]])})
    assert not sweeps_in_numpy(run_dir)
    stored_is_the_whole_query(run_dir, swept=False)


def received_by_search(viewer_id, rv, viewer_class, only_one, only_node_id, change_key,
                       change_node, change_rv, nodes, rvs, first_pair):
    """What ``_receive_kernel`` replaced: a binary search of each delivery's key in the
    changes sorted by key, then the kubelets' filter, the lag key and the pair's number, in
    numpy."""
    if not len(change_key):  # no change: nothing received
        viewer_id, rv = viewer_id[:0], rv[:0]
    by_key = np.argsort(change_key)
    sorted_key = change_key[by_key]
    viewer = viewer_id - 1
    wanted = rv * 3 + viewer_class[viewer] + 1
    at = np.minimum(np.searchsorted(sorted_key, wanted), max(len(sorted_key) - 1, 0))
    hit = sorted_key[at] == wanted
    change = by_key[at]
    hit &= ~only_one[viewer] | (change_node[change] == only_node_id[viewer])
    rows = np.flatnonzero(hit)
    change = change[rows]
    viewer = viewer[rows]
    pair = first_pair[viewer] + np.where(only_one[viewer], 0, change_node[change])
    return rows, change, windows._lag_key(viewer_id[rows], change_node[change],
                                          change_rv[change], nodes, rvs), pair


@settings(max_examples=budget(300), deadline=None)
@given(data=st.data(), viewers=st.integers(1, 4), nodes=st.integers(1, 3),
       max_rv=st.integers(0, 8))
def test_each_delivery_finds_the_change_a_binary_search_finds(data, viewers, nodes, max_rv):
    """The kernel's lookup through ``_change_of`` against the binary search it replaced, on
    small runs where deliveries repeat rvs, rvs have changes of several classes or none, and
    kubelets filter by node; deliveries of rvs beyond the changes' find none."""
    keys = data.draw(st.lists(st.tuples(st.integers(0, max_rv), st.integers(-1, 1)),
                              unique=True, max_size=12))
    change_rv = np.array([rv for rv, _ in keys], dtype=np.int64)
    change_class = np.array([cls for _, cls in keys], dtype=np.int64)
    change_node = np.array(data.draw(st.lists(st.integers(0, nodes - 1), min_size=len(keys),
                                              max_size=len(keys))), dtype=np.int64)
    viewer_class = np.array(data.draw(st.lists(st.integers(-1, 1), min_size=viewers,
                                               max_size=viewers)), dtype=np.int64)
    only_one = np.array(data.draw(st.lists(st.booleans(), min_size=viewers, max_size=viewers)))
    only_node_id = np.where(only_one, data.draw(st.lists(
        st.integers(0, nodes - 1), min_size=viewers, max_size=viewers)), -1).astype(np.int64)
    delivered = data.draw(st.lists(st.tuples(st.integers(1, viewers), st.integers(1, max_rv + 3)),
                                   max_size=30))
    viewer_id = np.array([v for v, _ in delivered], dtype=np.int64)
    rv = np.array([r for _, r in delivered], dtype=np.int64)
    rvs = (int(change_rv.max()) if len(keys) else 0) + 2
    change_key = change_rv * 3 + change_class + 1
    change_of = windows._change_of(change_key, rvs)
    assert change_of is not None
    first_pair, _ = windows._pair_numbers(only_one, nodes)
    want = received_by_search(viewer_id, rv, viewer_class, only_one, only_node_id, change_key,
                              change_node, change_rv, nodes, rvs, first_pair)
    for threads in SHARES:
        with shares_of(threads):
            got = windows._receive(viewer_id, rv, viewer_class, only_one, only_node_id,
                                   change_of, change_node, change_rv, nodes, rvs, first_pair)
        assert len(got) == len(want) == 4
        for g, w in zip(got, want):
            assert g.tolist() == w.tolist(), threads


SHARES = (1, 2, 3)  # the kernels' shares of the rows tried: one thread's, and several


@contextlib.contextmanager
def shares_of(threads: int):
    """``windows.RECEIVE_THREADS`` set to ``threads`` while this lasts (hypothesis's tests
    cannot take pytest's monkeypatch)."""
    before, windows.RECEIVE_THREADS = windows.RECEIVE_THREADS, threads
    try:
        yield
    finally:
        windows.RECEIVE_THREADS = before


def ints(data, low: int, high: int, size: int) -> np.ndarray:
    return np.array(data.draw(st.lists(st.integers(low, high), min_size=size, max_size=size)),
                    dtype=np.int64)


def lags_by_gathers(order, key, rows, change, viewer_id, applied_us, watcher_code,
                    assumed_code, folds_code, assumed_until_us, commit_us):
    """What ``_lag_kernel`` replaced: the sorted keys checked for a repeat, then a gather of
    each column by the sorted order, in numpy."""
    repeated = len(key) > 1 and bool((key[1:] == key[:-1]).any())
    rows, change = rows[order], change[order]
    viewer = viewer_id[rows] - 1
    applied = applied_us[rows]
    watcher = watcher_code[viewer]
    folds = (folds_code[change] == watcher) & (assumed_until_us[change] >= applied)
    return repeated, ((viewer + 1).astype(np.int32), change.astype(np.int32), applied,
                      np.where(folds, commit_us[change], applied),
                      assumed_code[change] == watcher)


@settings(max_examples=budget(300), deadline=None)
@given(data=st.data(), viewers=st.integers(1, 3), changes=st.integers(1, 5),
       count=st.integers(0, 12))
def test_the_lags_are_gathered_as_numpy_gathers_them(data, viewers, changes, count):
    """The lags' columns in one compiled pass against the gathers they replaced, on small
    random lags: watchers that own or fold in some changes' assumptions, assumptions that
    end before, at or after a delivery's application, and keys that repeat (a change
    received twice: the run is declined, so only the flag must agree)."""
    key = ints(data, 0, 6, count)
    rows = ints(data, 0, 9, count)
    change = ints(data, 0, changes - 1, count).astype(np.int32)
    viewer_id = ints(data, 1, viewers, 10)
    applied_us = ints(data, 0, 5, 10)
    watcher_code = ints(data, 1, 3, viewers)
    changed = [ints(data, low, high, changes) for low, high in ((-1, 3), (-1, 3), (0, 5), (0, 5))]
    order = np.argsort(key)
    args = (order, key[order], rows, change, viewer_id, applied_us, watcher_code, *changed)
    want_repeated, want = lags_by_gathers(*args)
    for threads in SHARES:
        with shares_of(threads):
            repeated, *got = windows._lags(*args)
        assert repeated == want_repeated, threads
        if not repeated:
            for g, w in zip(got, want):
                assert g.dtype == w.dtype
                assert g.tolist() == w.tolist(), threads


@settings(max_examples=budget(200), deadline=None)
@given(data=st.data(), count=st.integers(0, 16))
def test_the_sweep_reads_its_points_through_the_order_as_if_gathered_by_it(data, count):
    """The sweep kernel reads the points through their order by pair and time: the same
    windows and stale segments as of the points gathered in that order first (what it did
    before), on random points of a few pairs with instants of several points, ties of rv,
    points without a change and steps that end at the run's end; each pair's steps sum to
    zero, as every lag's and held assumption's do."""
    pair, ts = ints(data, 0, 2, count), ints(data, 0, 3, count)
    rv, at_end = ints(data, -1, 4, count), ints(data, 0, 1, count).astype(bool)
    gaps = np.stack([ints(data, -2, 2, count) for _ in windows.RESOURCES])
    truths = np.stack([ints(data, 0, 9, count) for _ in windows.RESOURCES])
    for p in np.unique(pair):  # a last point at the pair's end that undoes its steps
        pair, ts, rv = np.append(pair, p), np.append(ts, 4), np.append(rv, -1)
        at_end = np.append(at_end, False)
        gaps = np.column_stack([gaps, -gaps[:, pair[:-1] == p].sum(axis=1)])
        truths = np.column_stack([truths, np.zeros(3, dtype=np.int64)])
    shuffled = np.array(data.draw(st.permutations(range(len(pair)))), dtype=np.int64)
    pair, ts, rv, at_end = pair[shuffled], ts[shuffled], rv[shuffled], at_end[shuffled]
    gaps, truths = gaps[:, shuffled], truths[:, shuffled]
    order = np.lexsort((ts, pair))
    got = windows._sweep_kernel(order, pair, ts, rv, gaps, truths, at_end)
    want = windows._sweep_kernel(np.arange(len(order)), pair[order], ts[order], rv[order],
                                 gaps[:, order], truths[:, order], at_end[order])
    for g, w in zip(got, want):
        assert g.tolist() == w.tolist()


def test_two_changes_of_one_key_are_refused():
    """A write that changed two nodes' capacity has two changes of one rv and class: the
    arrays decline the run."""
    assert windows._change_of(np.array([4, 7, 4]), 3) is None
    assert windows._change_of(np.array([4, 7, 5]), 3).tolist() == [-1, -1, -1, -1, 0, 2, -1,
                                                                    1, -1]


WATCHERS = ("a", "b", "c", "kubelet/n1")


def deliveries_file(path, rows, group_rows, dictionary=True):
    """A deliveries file of ``rows`` (watcher, rv, applied_us; None for a null) in row groups
    of ``group_rows``: each group's dictionary holds the watchers it has, in their order."""
    table = pa.table({
        "watcher": pa.array([w for w, _, _ in rows], pa.string()),
        "rv": pa.array([rv for _, rv, _ in rows], pa.int64()),
        "applied_ts": pa.array([us for _, _, us in rows], pa.timestamp("us", tz="UTC"))})
    pq.write_table(table, path, row_group_size=group_rows, use_dictionary=dictionary)
    return pq.ParquetFile(path, read_dictionary=["watcher"])


def joined_by_sql(path, viewers):
    """``windows._deliveries_by_sql`` on the deliveries of the file at ``path``."""
    con = duckdb.connect()
    con.execute("CREATE TABLE viewers (watcher VARCHAR, viewer_id BIGINT)")
    con.executemany("INSERT INTO viewers VALUES (?, ?)", viewers)
    con.execute(f"CREATE VIEW deliveries AS FROM read_parquet('{path}')")
    return windows._deliveries_by_sql(con)


def rows_of(columns):
    return sorted(zip(*(columns[name].tolist()
                        for name in ("viewer_id", "rv", "applied_us", "missed"))))


@settings(max_examples=budget(200), deadline=None)
@given(data=st.data(), group_rows=st.integers(1, 4), dictionary=st.booleans())
def test_the_deliveries_read_from_their_file_are_the_sqls_join(tmp_path_factory, data,
                                                               group_rows, dictionary):
    """``_delivered`` reads the deliveries' file a row group at a time, its watchers as
    dictionary codes looked up among the viewers: the rows (and types) of the SQL's join, on
    row groups whose dictionaries differ, watchers that are no viewer's (dropped), deliveries
    never applied, and files written with or without dictionaries; it declines (None) a
    watcher of two viewers and a null watcher or rv, which the SQL's join treats otherwise."""
    rows = data.draw(st.lists(st.tuples(st.sampled_from(WATCHERS + (None,)),
                                        st.one_of(st.none(), st.integers(0, 9)),
                                        st.one_of(st.none(), st.integers(0, 99))),
                              max_size=12))
    names = data.draw(st.lists(st.sampled_from(WATCHERS), min_size=1, max_size=5))
    viewers = [(name, number + 1) for number, name in enumerate(names)]
    path = tmp_path_factory.mktemp("deliveries") / "deliveries.parquet"
    got = windows._delivered(deliveries_file(path, rows, group_rows, dictionary), viewers)
    declines = (len(set(names)) < len(names)
                or any(w is None or rv is None for w, rv, _ in rows))
    assert (got is None) == declines
    if got is not None:
        want = joined_by_sql(path, viewers)
        assert {name: column.dtype for name, column in got.items()} == \
            {name: column.dtype for name, column in want.items()}
        assert rows_of(got) == rows_of(want)


def test_a_run_whose_deliveries_the_file_read_declines_derives_the_same_bytes(tmp_path,
                                                                              monkeypatch):
    """With ``_delivered`` declining, ``_received`` reads the deliveries by SQL: the same
    file, byte for byte, and the sweep still in numpy."""
    run_dir = replay_rows(tmp_path, WORKED, network(2))
    table = Path(run_dir) / "capacity_windows.parquet"
    read_from_file = table.read_bytes()
    monkeypatch.setattr(windows, "_delivered", lambda file, viewers: None)
    assert sweeps_in_numpy(run_dir)
    derive(run_dir)
    assert table.read_bytes() == read_from_file


def test_the_sweeps_parts_on_threads_derive_the_bytes_of_one_part(tmp_path, monkeypatch):
    """The sweep's parts, small enough that the sample's Gödel run makes dozens, swept on two
    threads: the same file, byte for byte, as one part on one thread, and what the SQL
    computes."""
    run_dir = tmp_path / "run"
    run_replay(sample_prefix(tmp_path), load_config(model="godel"), out=run_dir)
    table = run_dir / "capacity_windows.parquet"
    monkeypatch.setattr(windows, "SWEEP_ROWS", 1 << 40)
    monkeypatch.setattr(windows, "SWEEP_THREADS", 1)
    derive(run_dir)
    whole = table.read_bytes()
    parts = []
    bounds = windows._part_bounds
    monkeypatch.setattr(windows, "_part_bounds", lambda *a: parts.append(bounds(*a)) or parts[-1])
    monkeypatch.setattr(windows, "SWEEP_ROWS", 1 << 5)
    monkeypatch.setattr(windows, "SWEEP_THREADS", 2)
    derive(run_dir)
    assert len(parts) == 1 and len(parts[0]) > 20
    assert table.read_bytes() == whole
    stored_is_the_whole_query(run_dir)


@settings(max_examples=budget(100))
@given(lags=st.lists(st.tuples(st.integers(1, 4), st.integers(0, 4), st.integers(0, 9)),
                     max_size=40),
       only_node=st.lists(st.one_of(st.none(), st.integers(0, 4)), min_size=4, max_size=4),
       in_rv_order=st.booleans())
def test_lags_are_ordered_by_their_whole_key_whether_or_not_they_come_in_rv_order(
        lags, only_node, in_rv_order):
    """Viewers 1 to 4, each of every node or of one (a kubelet: its lags all of that node)."""
    nodes, rvs = 5, 10
    lags = [(viewer, node if only_node[viewer - 1] is None else only_node[viewer - 1], rv)
            for viewer, node, rv in lags]
    if in_rv_order:  # as every model writes its deliveries
        lags = sorted(lags, key=lambda lag: lag[2])
    key = np.array([(viewer * nodes + node) * rvs + rv for viewer, node, rv in lags],
                   dtype=np.int64)
    only_one = np.array([n is not None for n in only_node])
    first_pair, pairs = windows._pair_numbers(only_one, nodes)
    pair = np.array([first_pair[viewer - 1] + (0 if only_one[viewer - 1] else node)
                     for viewer, node, _ in lags], dtype=np.int64)
    assert pairs == sum(1 if one else nodes for one in only_one)
    assert ((0 <= pair) & (pair < pairs)).all()
    order, ordered = windows._in_lag_order(key, pair, pairs)
    if in_rv_order:  # the pairs' numbers alone order them, with no fallback
        assert windows.counting_order(pair, pairs).tolist() == order.tolist()
    assert ordered.tolist() == sorted(key.tolist())
    assert key[order].tolist() == ordered.tolist()
    assert order.tolist() == np.argsort(key, kind="stable").tolist()
