"""The capacity windows' final query in numpy (``replay.analysis.window_rows``): the tests of
the replay's runs compare the stored table with the query run whole
(``test_derive.stored_is_the_whole_query``) and the 1M-pod files were compared byte for byte;
these pin what small runs do not reach: integrals past 2**64 rounded as DuckDB rounds them,
and the batches that become the file's row groups."""

from __future__ import annotations

import functools
import time

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.analysis import window_rows
from replay.analysis.windows import RESOURCES
from conftest import budget


def test_integrals_past_64_bits_round_as_duckdb_casts_them():
    rng = np.random.default_rng(7)
    hi = np.concatenate([np.zeros(200, np.int64), rng.integers(1, 4, 1000),
                         rng.integers(1, 1 << 20, 1000)])
    lo = rng.integers(0, 1 << 63, len(hi)).astype(np.uint64) * np.uint64(2) + rng.integers(
        0, 2, len(hi)).astype(np.uint64)
    lo[:5] = [0, 1, (1 << 53) + 1, (1 << 64) - 1, 1 << 63]  # exact, ties, the largest
    hi[-3:] = [1, 1 << 40, (1 << 63) - 1]
    con = duckdb.connect()
    con.register("halves", pa.table({"hi": hi, "lo": lo}))
    duck = con.sql("""
        SELECT (hi::HUGEINT * 18446744073709551616::HUGEINT + lo::HUGEINT)::DOUBLE AS d
        FROM halves""").fetchnumpy()["d"]
    ours = np.array([window_rows._to_double(h, x) for h, x in zip(hi, lo)])
    assert ours.tobytes() == duck.tobytes()
    assert ours.tolist() == [float(int(h) * 2**64 + int(x)) for h, x in zip(hi, lo)]


@settings(max_examples=budget(500), deadline=None)
@given(pairs=st.sets(st.integers(0, 6), max_size=7),
       runs=st.lists(st.lists(st.integers(-1, 7), min_size=1, max_size=4), max_size=5),
       data=st.data())
def test_the_ranks_walk_finds_what_a_binary_search_finds(pairs, runs, data):
    """The keys' walk over a part's pairs against ``np.searchsorted``, for needles in sorted
    runs (as a part's windows come) that go back between runs, pairs absent or beyond the
    ends; and the key made of the rank, the resource's name and the start."""
    pairs = np.array(sorted(pairs), dtype=np.int64)
    pair = np.array([p for run in runs for p in sorted(run)], dtype=np.int64)
    code = np.array(data.draw(st.lists(st.integers(0, len(RESOURCES) - 1), min_size=len(pair),
                                       max_size=len(pair))), dtype=np.int64)
    start = np.array(data.draw(st.lists(st.integers(5, 20), min_size=len(pair),
                                        max_size=len(pair))), dtype=np.int64)
    group = np.searchsorted(pairs, pair) * len(RESOURCES) + window_rows.NAME_RANK[code]
    assert window_rows._keys(pairs, pair, code, start, 5, 4).tolist() == \
        ((group << 4) + (start - 5)).tolist()


def test_batches_are_whole_row_groups_of_one_chunk(monkeypatch):
    monkeypatch.setattr(window_rows, "BATCH_ROWS", 4)
    empty = window_rows.NUMBERED.empty_table()
    parts = list(window_rows._batches(iter([_rows(3), _rows(0), _rows(6), _rows(2)])))
    assert [p.num_rows for p in parts] == [4, 4, 3]
    assert all(c.num_chunks == 1 for p in parts for c in p.columns)
    assert [t.num_rows for t in window_rows._batches(iter([empty, empty]))] == [0]
    assert [t.num_rows for t in window_rows._batches(iter([_rows(4)]))] == [4]


def _rows(count: int) -> pa.Table:
    """``count`` rows of the final query's schema."""
    return pa.table({f.name: pa.array([None] * count, f.type) for f in window_rows.NUMBERED},
                    schema=window_rows.NUMBERED)


@settings(max_examples=budget(300), deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 6), st.integers(0, 2),
                               st.integers(0, 1)), max_size=40))
def test_names_are_numbered_as_the_sqls_strings_are(rows):
    """A batch's names become Arrow dictionaries numbered in the order of first appearance,
    as ``derive._named`` numbers the strings of the SQL's final query, so that the two ways
    write the same file: the same dictionaries, the same numbers."""
    from replay.analysis.derive import _named
    from replay.analysis.windows import RESOURCES

    names = (pa.array([f"watcher-{i}" for i in range(5)]), pa.array([f"n{i}" for i in range(7)]),
             pa.array(RESOURCES), window_rows.KINDS)
    numbers = [np.array([row[at] for row in rows], dtype=np.int64) for at in range(4)]
    batch = _rows(len(rows))
    for at, column in enumerate(numbers):
        batch = batch.set_column(at, window_rows.NAMES[at],
                                 pa.array(column, window_rows.NUMBERED.field(at).type))
    ours = window_rows._named(batch, names)
    strings = batch
    for at, column in enumerate(numbers):
        strings = strings.set_column(at, window_rows.NAMES[at], names[at].take(column))
    theirs = _named(strings)
    assert ours.schema.equals(window_rows.SCHEMA)
    for at, name in enumerate(window_rows.NAMES):
        mine, sql = ours.column(name).combine_chunks(), theirs.column(name).combine_chunks()
        assert mine.dictionary.to_pylist() == sql.dictionary.to_pylist(), name
        assert mine.indices.to_pylist() == sql.indices.to_pylist(), name
        assert mine.dictionary.take(mine.indices).to_pylist() == names[at].take(
            numbers[at]).to_pylist()


def test_a_sort_key_too_wide_leaves_the_final_query_to_the_sql(tmp_path, monkeypatch):
    """Where the pair, resource and start would not fit in one integer (here forced), the
    SQL's final query runs: the same table, byte for byte."""
    from replay.analysis.derive import derive
    from test_derive import stored_is_the_whole_query
    from test_queries import WORKED, network, replay_rows

    run_dir = replay_rows(tmp_path, WORKED, network(2))
    ours = (run_dir / "capacity_windows.parquet").read_bytes()
    calls = []
    rows = window_rows.rows
    monkeypatch.setattr(window_rows, "rows", lambda con, sweep: calls.append(
        rows(con, sweep)) or calls[-1])
    monkeypatch.setattr(window_rows, "_KEY_BITS", 1)
    derive(run_dir)
    assert calls == [None]
    assert (run_dir / "capacity_windows.parquet").read_bytes() == ours
    stored_is_the_whole_query(run_dir)


def test_the_parts_rows_come_in_order_each_made_once_the_next_one_ahead():
    made: list[int] = []
    taken: list[int] = []

    def make(part):
        made.append(part)
        return part * 10

    for rows in window_rows._one_ahead(make, [3, 1, 2]):
        taken.append(rows)
        ahead = min(len(taken) + 1, 3)  # the next part is made while this one is held
        deadline = time.monotonic() + 30
        while len(made) < ahead and time.monotonic() < deadline:
            time.sleep(0.001)
        assert len(made) == ahead
    assert taken == [30, 10, 20] and sorted(made) == [1, 2, 3]
    assert list(window_rows._one_ahead(make, [])) == []


def test_an_error_making_a_part_reaches_the_caller_and_stops_the_parts():
    made: list[int] = []

    def make(part):
        made.append(part)
        if part == 2:
            raise ValueError("part 2")
        return part

    rows = window_rows._one_ahead(make, [1, 2, 3, 4])
    assert next(rows) == 1
    with pytest.raises(ValueError, match="part 2"):
        next(rows)
    assert made == [1, 2, 3]  # 3 was ahead; 4 never begun


def _windows(pairs: list[int], nodes: int, merged: bool) -> pa.Table:
    """Windows of the sweep's tables at ``pairs`` (viewer_id * nodes + node_id), in that order."""
    from replay.analysis.windows import _windows_table

    pair = np.array(pairs, dtype=np.int64)
    count = len(pair)
    starts = np.arange(count, dtype=np.int64) * 10 + (8 if merged else 5)
    table = _windows_table(pair // nodes, pair % nodes, np.arange(count) % len(RESOURCES), starts,
                           starts + 7, np.arange(count) % 3 == 0, np.arange(count) % 2 == 0,
                           np.arange(count, dtype=np.int64) + 1,
                           *([np.zeros(count, np.int64), np.arange(count, dtype=np.uint64)]
                             if merged else []))
    if not merged:
        table = table.append_column("truth", pa.array(np.zeros(count, np.int64))).append_column(
            "view", pa.array(np.zeros(count, np.int64)))
    return table


def _marks(pair=(), code=(), start=(), count=()) -> window_rows.Marks:
    marks = window_rows.Marks.__new__(window_rows.Marks)
    marks.pair, marks.code, marks.start, marks.count = (
        np.array(values, dtype=np.int64) for values in (pair, code, start, count))
    return marks


@settings(max_examples=budget(200), deadline=None)
@given(pairs=st.lists(st.integers(0, 29), min_size=1, max_size=12, unique=True),
       data=st.data(), piece_rows=st.integers(1, 8))
def test_a_part_cut_into_pieces_makes_the_same_rows(pairs, data, piece_rows):
    """A part's rows made a piece at a time (``_pieces``) are its rows made whole: the pieces
    take every window once, each with the pairs it belongs to, and in the pairs' order; marks
    (wasted, conflicts) land where they did."""
    pairs = sorted(pairs)
    lone = [sorted(data.draw(st.lists(st.sampled_from(pairs), max_size=6))) for _ in RESOURCES]
    merged = sorted(data.draw(st.lists(st.sampled_from(pairs), max_size=6)))
    part = window_rows.Part(np.array(pairs, dtype=np.int64),
                            pa.concat_tables([_windows(run, 10, False) for run in lone]),
                            _windows(merged, 10, True))
    windows = [(p, r, s) for p, r, s in zip(merged, *(
        window_rows._column(part.merged_windows, name).tolist() for name in ("resource", "start_ts")))]
    marked = sorted(data.draw(st.lists(st.sampled_from(windows), max_size=3, unique=True))
                    if windows else [])
    wasted = _marks(*zip(*[(*window, 1) for window in marked])) if marked else _marks()
    make = functools.partial(window_rows._part_rows, nodes=10, first=0, shift=10,
                             wasted=wasted, conflicted=_marks())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(window_rows, "PIECE_ROWS", piece_rows)
        pieces = list(window_rows._pieces(part, 10))
    assert np.concatenate([piece.pairs for piece in pieces]).tolist() == pairs
    assert sum(p.lone_windows.num_rows + p.merged_windows.num_rows for p in pieces) == \
        part.lone_windows.num_rows + part.merged_windows.num_rows
    whole = make(part)
    assert pa.concat_tables([make(piece) for piece in pieces]).equals(whole)
    if whole.num_rows > piece_rows:  # cut into as many as asked, at most one per pair
        assert len(pieces) == min(-(-whole.num_rows // piece_rows), len(pairs))


def test_a_part_not_in_its_pairs_order_is_made_whole(monkeypatch):
    monkeypatch.setattr(window_rows, "PIECE_ROWS", 1)
    part = window_rows.Part(np.array([1, 2, 3]), _windows([1, 3, 2], 10, False),
                            _windows([1, 2], 10, True))
    assert list(window_rows._pieces(part, 10)) == [part]
    ordered = window_rows.Part(part.pairs, _windows([1, 2, 3], 10, False), part.merged_windows)
    assert len(list(window_rows._pieces(ordered, 10))) == 3


def test_pieces_of_one_window_write_the_same_file(tmp_path, monkeypatch):
    """The final rows made a window at a time: the same file, byte for byte."""
    from replay.analysis.derive import derive
    from test_derive import stored_is_the_whole_query
    from test_queries import WORKED, network, replay_rows

    run_dir = replay_rows(tmp_path, WORKED, network(2))
    ours = (run_dir / "capacity_windows.parquet").read_bytes()
    cut = []
    pieces = window_rows._pieces

    def counted(part, nodes):
        for piece in pieces(part, nodes):
            cut.append(piece)
            yield piece
    monkeypatch.setattr(window_rows, "_pieces", counted)
    monkeypatch.setattr(window_rows, "PIECE_ROWS", 1)
    derive(run_dir)
    assert len(cut) > 1
    assert (run_dir / "capacity_windows.parquet").read_bytes() == ours
    stored_is_the_whole_query(run_dir)


def test_windows_beyond_a_parts_pairs_stay_in_its_first_and_last_pieces(monkeypatch):
    """Every window is in one piece, even one whose pair the part does not list (the sweep
    lists them all; this keeps a row from being lost if it did not)."""
    monkeypatch.setattr(window_rows, "PIECE_ROWS", 1)
    part = window_rows.Part(np.array([3, 5, 7]), _windows([1, 3, 5, 7, 9], 10, False),
                            _windows([2, 8], 10, True))
    pieces = list(window_rows._pieces(part, 10))
    assert [len(p.pairs) for p in pieces] == [1, 1, 1]
    assert [window_rows._column(p.lone_windows, "node_id").tolist() for p in pieces] == \
        [[1, 3], [5], [7, 9]]
    assert [window_rows._column(p.merged_windows, "node_id").tolist() for p in pieces] == \
        [[2], [], [8]]
