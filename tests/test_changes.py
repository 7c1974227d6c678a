"""The window functions of the capacity windows' changes (``truths``) in numpy
(``replay.analysis.changes``) against the SQL's expression: ``test_derive.stored_is_the_whole_query``
compares the two on the runs of every model (``truths_are_the_sqls``); these pin the changes
the SQL would not order one way only, which are left to it, and the derivation without the
numpy path."""

from __future__ import annotations

import pytest

from replay.analysis import changes as changes_module
from replay.analysis.changes import truths
from replay.analysis.derive import derive
from replay.analysis.runs import open_runs
from test_derive import stored_is_the_whole_query, steps_until
from test_queries import WORKED, network, replay_rows


@pytest.mark.parametrize("edit", [
    # a second change of one node and class at the same rv: the SQL's lag and lead would
    # take either one as the other's neighbour
    "INSERT INTO all_changes SELECT * FROM all_changes WHERE change = 'binding' LIMIT 1",
    # an unknown amount, which the SQL's running sum skips
    "UPDATE all_changes SET cpu_milli = NULL WHERE change = 'binding'",
])
def test_changes_the_sql_would_not_order_one_way_are_left_to_it(tmp_path, edit):
    run_dir = replay_rows(tmp_path, WORKED, network(2))
    con = open_runs([str(run_dir)], derived=False)
    try:
        steps_until(con, "truths")
        assert truths(con)
        con.execute("DROP VIEW truths")
        con.execute(edit)
        assert not truths(con)
        assert con.sql("SELECT count(*) FROM duckdb_views() WHERE view_name = 'truths'"
                       ).fetchall() == [(0,)]
    finally:
        con.close()


def the_sql_alone_derives_the_same_file(tmp_path, monkeypatch, module, name: str) -> None:
    """Where a numpy step (``module.name``) declines (here forced), the SQL's expression runs
    instead: the derivation writes the same bytes."""
    run_dir = replay_rows(tmp_path, WORKED, network(2))
    ours = (run_dir / "capacity_windows.parquet").read_bytes()
    stored_is_the_whole_query(run_dir)
    declined = []

    def decline(*args) -> None:  # falsy, as a hook's False; what ``pending`` returns to decline
        declined.append(args)
        return None

    monkeypatch.setattr(module, name, decline)
    derive(run_dir)
    assert declined and (run_dir / "capacity_windows.parquet").read_bytes() == ours


def test_the_sql_alone_derives_the_same_file(tmp_path, monkeypatch):
    """Where the numpy path declines, the SQL's ``truths`` runs: the same bytes."""
    the_sql_alone_derives_the_same_file(tmp_path, monkeypatch, changes_module, "truths")
