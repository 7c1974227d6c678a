"""``replay.analysis.history``'s deliveries: read a column at a time and ordered by watcher, then
rv, they are what sorting the whole table gives, whatever the file's order."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.analysis.history import STAGES, Deliveries, watcher_then_rv
from replay.engine.pipeline import SOURCES
from replay.engine.rundir import TABLES
from conftest import budget

WATCHERS = ("godel-binder", "kubelet/n0", "kubelet/n1", "godel-scheduler-0")

delivery = st.tuples(
    st.sampled_from(WATCHERS), st.integers(1, 12),  # few rvs: a watcher receives one twice
    st.lists(st.one_of(st.none(), st.integers(0, 10**9)), min_size=len(STAGES),
             max_size=len(STAGES)),
    st.sampled_from([*SOURCES, None]), st.one_of(st.none(), st.booleans()))


def _file(rows: list[tuple], in_rv_order: bool, group_rows: int, folder: Path) -> Path:
    """The rows as a deliveries table file, in rv order (as a what-if run writes them) or as
    drawn, in row groups of ``group_rows`` (each with its own dictionaries)."""
    if in_rv_order:
        rows = sorted(rows, key=lambda row: row[1])  # stable: a watcher's ties keep their order
    us = pa.timestamp("us", tz="UTC")
    table = pa.table({
        "rv": pa.array([r[1] for r in rows], pa.int64()),
        "watcher": pa.array([r[0] for r in rows]),
        "role": pa.array(["scheduler"] * len(rows)),
        **{stage: pa.array([r[2][i] for r in rows], pa.int64()).cast(us)
           for i, stage in enumerate(STAGES)},
        "source": pa.array([r[3] for r in rows], pa.string()),
        "coalesced": pa.array([r[4] for r in rows], pa.bool_())}).cast(TABLES["deliveries"])
    path = folder / "deliveries.parquet"
    pq.write_table(table, path, row_group_size=group_rows)
    return path


def _sorted_whole(path: Path) -> pl.DataFrame:
    """The file read whole and sorted by watcher (the watchers numbered in the order they first
    appear, as their codes are), then rv, ties in the file's order: the reference."""
    table = pl.read_parquet(path)
    first = {name: i for i, name in reversed(list(enumerate(table["watcher"].to_list())))}
    code = pl.Series([first[name] for name in table["watcher"].to_list()])
    return table.with_columns(code=code).sort("code", "rv", maintain_order=True)


@settings(max_examples=budget(60), deadline=None)
@given(st.lists(delivery, max_size=60), st.booleans(), st.integers(1, 9))
def test_deliveries_are_the_whole_table_sorted_by_watcher_then_rv(rows, in_rv_order, group_rows):
    with tempfile.TemporaryDirectory() as tmp:
        path = _file(rows, in_rv_order, group_rows, Path(tmp))
        d = Deliveries.read(path)
        expected = _sorted_whole(path)
    assert [d.names[w] for w in d.watcher] == expected["watcher"].to_list()
    assert d.rv.tolist() == expected["rv"].to_list()
    for stage in STAGES:
        column = expected[stage]
        assert d.nulls[stage] == column.null_count()
        assert d.times[stage].tolist() == column.dt.epoch("us").fill_null(-1).to_list()
    assert [SOURCES[s] if s >= 0 else None for s in d.source] == expected["source"].to_list()
    assert d.coalesced.tolist() == expected["coalesced"].fill_null(False).to_list()


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5)), max_size=80))
def test_watcher_then_rv_is_the_lexicographic_order(pairs):
    """Whichever way it finds the order (a sort by watcher alone, or the full sort), it is
    ``np.lexsort``'s, equal pairs in their order; none where each watcher's pairs are together
    already, their rvs increasing."""
    watcher = np.array([w for w, _ in pairs], dtype=np.int32)
    rv = np.array([r for _, r in pairs], dtype=np.int64)
    order = watcher_then_rv(watcher, rv, 4)
    if order is not None:
        assert order.tolist() == np.lexsort((rv, watcher)).tolist()
        return
    seen = [w for i, (w, _) in enumerate(pairs) if i == 0 or pairs[i - 1][0] != w]
    assert len(seen) == len(set(seen)), "each watcher's pairs together"
    assert all(pairs[i - 1][0] != w or pairs[i - 1][1] < r for i, (w, r) in enumerate(pairs)
               if i > 0), "their rvs increasing"
