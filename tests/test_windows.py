"""The capacity windows' sweep in numpy (``replay.analysis.windows``) against their definition,
``queries/derived/capacity_windows.sql`` run whole.  The tests of the replay's runs compare the
stored table with the query on runs of every model (``test_derive.stored_is_the_whole_query``,
which also checks that the sweep, not the SQL, computed it), and test_queries' properties
compare it with a reference in Python on random traces; these pin the parts those runs may not
reach: a missed change, an attempt held after its conflict, 128-bit integrals, and a run left
to the SQL."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from replay.analysis import windows
from replay.analysis.derive import derive
from test_derive import stored_is_the_whole_query
from test_queries import FAILED_D, WORKED, edited_run, learn_of_conflicts_late, network, \
    replay_rows


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
    monkeypatch.setattr(windows, "_received", lambda con, nodes, rvs: None)
    derive(run_dir)
    stored_is_the_whole_query(run_dir, swept=False)
