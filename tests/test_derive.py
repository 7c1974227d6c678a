"""The derivation of a run's derived tables: the SQL cut into steps (``replay.analysis.steps``)
computes exactly what the SQL run whole does."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow.parquet as pq
from conftest import SAMPLE_TRACE

from replay.analysis.changes import truths
from replay.analysis.claims import capacity_changes, claims_table
import replay.analysis.derive as derive_module
from replay.analysis.derive import derived_sql
from replay.analysis.runs import open_runs
from replay.analysis import windows
from replay.analysis.steps import _quote, run_steps, split_steps
from replay.analysis import wasted as wasted_module
from replay.analysis.pending import pending
from replay.analysis.wasted import wasted
from replay.api import run_replay
from replay.engine.config import load_config
from replay.engine.rundir import DERIVED_TABLES

TRICKY = '''-- a comment with a ( and a WITH x AS (
WITH "Odd ""name""" AS MATERIALIZED (
    SELECT 1 AS a, ')' AS b, '-- not a comment' AS c  /* a ( block comment */
), plain AS (
    SELECT a + 1 AS a FROM "odd ""name""" WHERE b = ')'
), unread AS NOT MATERIALIZED (
    SELECT (a * (2 + 3)) AS a FROM plain
), last_one AS (
    SELECT plain.a, unread.a AS b FROM plain, unread
)
SELECT * FROM last_one JOIN plain USING (a)
ORDER BY a;
'''


def test_split_steps_cuts_at_the_expressions_only():
    steps = split_steps(TRICKY)
    assert [s.name for s in steps] == ['odd "name"', "plain", "unread", "last_one", None]
    assert steps[0].sql.strip().startswith("SELECT 1 AS a, ')'")
    assert steps[0].sql.strip().endswith("/* a ( block comment */")
    assert steps[2].sql.strip() == "SELECT (a * (2 + 3)) AS a FROM plain"
    assert steps[-1].sql.startswith("SELECT * FROM last_one JOIN plain")
    assert 'odd "name"' in steps[1].reads and "plain" in steps[-1].reads
    assert "-- not a comment" not in steps[0].reads  # strings are not names


def test_what_split_steps_does_not_recognise_is_one_step():
    for sql in ("SELECT 1", "WITH RECURSIVE r AS (SELECT 1) SELECT * FROM r",
                "WITH c(x) AS (SELECT 1) SELECT x FROM c", "WITH c AS (SELECT 1",
                "WITH c AS (SELECT 1)"):
        assert [(s.name, s.sql) for s in split_steps(sql)] == [(None, sql)]


def test_run_steps_answers_as_the_query_and_drops_what_is_read_no_more():
    con = duckdb.connect()
    done = []
    answer = run_steps(con, split_steps(TRICKY), done=done.append).fetchall()
    assert answer == con.sql(TRICKY).fetchall() == [(2, 10)]
    assert len(done) == 4
    left = con.sql("SELECT table_name FROM duckdb_tables() WHERE temporary ORDER BY 1").fetchall()
    assert left == [("last_one",), ("plain",)]  # the final query reads them


def test_a_table_or_view_a_replacement_made_is_dropped_after_its_last_reader():
    con = duckdb.connect()

    def replace(name: str) -> bool:
        kind, body = {"odd \"name\"": ("TABLE", "SELECT 1 AS a, ')' AS b"),
                      "plain": ("VIEW", "SELECT 2 AS a"),
                      "unread": ("VIEW", "SELECT 10 AS a")}.get(name, (None, ""))
        if kind is None:
            return False
        con.execute(f"CREATE TEMPORARY {kind} {_quote(name)} AS {body}")
        return True

    assert run_steps(con, split_steps(TRICKY), replace=replace).fetchall() == [(2, 10)]
    left = con.sql("SELECT table_name FROM duckdb_tables() WHERE temporary ORDER BY 1").fetchall()
    assert left == [("last_one",)]  # "odd ""name""" dropped after plain read it
    views = con.sql("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()
    assert views == [("plain",)]  # the final query reads it; unread dropped after last_one


def stored_is_the_whole_query(run_dir: Path, swept: bool = True) -> None:
    """Each derived table of ``run_dir`` holds what its SQL computes run whole, in one query,
    row for row and type for type (the tests of the replay's runs call this); and, if
    ``swept``, ``replay derive`` computed the capacity windows' sweep in numpy
    (``replay.analysis.windows``), not by leaving the run to the SQL."""
    if swept:
        assert sweeps_in_numpy(run_dir)
        claims_are_the_views(run_dir)
        truths_are_the_sqls(run_dir)
        pending_is_the_sqls(run_dir)
        wasted_is_the_sqls(run_dir)
        deliveries_are_the_sqls(run_dir)
    con = open_runs([str(run_dir)], derived=False)
    try:
        for name in DERIVED_TABLES:
            whole = con.sql(derived_sql(name)).arrow()
            if hasattr(whole, "read_all"):
                whole = whole.read_all()
            stored = pq.read_table(Path(run_dir) / f"{name}.parquet")
            assert stored.schema.equals(whole.schema), name
            assert stored.equals(whole), name
    finally:
        con.close()


def claims_are_the_views(run_dir: Path) -> None:
    """``replay.analysis.claims`` makes ``every_change`` with the rows of views.sql's
    ``capacity_changes``, and the table ``claims`` (``replay check``'s) with those of
    ``claims``, typed alike (in another order)."""
    con = open_runs([str(run_dir)], derived=False)
    try:
        assert capacity_changes(con)
        columns = ", ".join(f'"{c}"' for c in con.sql("FROM capacity_changes").columns)
        ours = con.sql(f"SELECT {columns} FROM every_change ORDER BY ALL")
        views = con.sql(f"SELECT {columns} FROM capacity_changes ORDER BY ALL")
        assert ours.types == views.types
        assert ours.fetchall() == views.fetchall()
        con.execute("CREATE TEMPORARY TABLE sql_claims AS FROM claims")
        assert claims_table(con)  # (the table claims now hides the view)
        ours, views = (con.sql(f"FROM {name} ORDER BY ALL") for name in ("claims", "sql_claims"))
        assert ours.columns == views.columns and ours.types == views.types
        assert ours.fetchall() == views.fetchall()
    finally:
        con.close()


def truths_are_the_sqls(run_dir: Path) -> None:
    """``replay.analysis.changes`` makes the temporary table ``truths`` with the rows of the
    SQL's expression, typed alike, numbered 1, 2, ... in another order."""
    con = open_runs([str(run_dir)], derived=False)
    try:
        sql = steps_until(con, "truths")
        con.execute(f"CREATE TEMPORARY TABLE sql_truths AS {sql}")
        assert truths(con)
        ours = con.sql("SELECT * EXCLUDE (change_id) FROM truths ORDER BY ALL")
        theirs = con.sql("SELECT * EXCLUDE (change_id) FROM sql_truths ORDER BY ALL")
        assert con.sql("DESCRIBE truths").fetchall() == con.sql("DESCRIBE sql_truths").fetchall()
        assert ours.fetchall() == theirs.fetchall()
        ids = con.sql("SELECT change_id FROM truths ORDER BY change_id").fetchnumpy()["change_id"]
        assert ids.tolist() == list(range(1, len(ids) + 1))
    finally:
        con.close()


def pending_is_the_sqls(run_dir: Path) -> None:
    """``replay.analysis.pending`` makes ``pending`` with the rows of the SQL's expression."""
    con = open_runs([str(run_dir)], derived=False)
    try:
        assert pending_matches_the_sql(con, steps_until(con, "pending"))
    finally:
        con.close()


def pending_matches_the_sql(con: duckdb.DuckDBPyConnection, sql: str) -> bool:
    """Whether ``pending`` made its view, and then with the rows and types of ``sql`` (the
    SQL's expression, on the connection's ``pods`` and ``bounds``) and, sorted for
    ``wasted``'s kernel, its arrays as read from the SQL's table."""
    con.execute(f"CREATE TEMPORARY TABLE pending AS {sql}")
    types = con.sql("DESCRIBE pending").fetchall()
    rows = con.sql("FROM pending ORDER BY ALL").fetchall()
    sizes = wasted_module._pending(con)
    con.execute("DROP TABLE pending")
    ours = pending(con)
    if ours is None:
        return False
    assert con.sql("DESCRIBE pending").fetchall() == types
    assert con.sql("FROM pending ORDER BY ALL").fetchall() == rows
    assert sizes is not None and len(ours) == len(sizes)
    for mine, theirs in zip(ours, sizes):
        assert mine.tolist() == theirs.tolist()
    return True


def wasted_is_the_sqls(run_dir: Path) -> None:
    """``replay.analysis.wasted`` makes ``wasted`` with the rows of the SQL's expression (run
    on the same ``pending`` and the sweep's ``stale_segments``), typed alike."""
    con = open_runs([str(run_dir)], derived=False)
    try:
        swept = derive_module._sweep_steps(con)
        steps = split_steps(derived_sql("capacity_windows"))
        until = [s.name for s in steps].index("wasted")
        run_steps(con, steps[:until + 1], replace=derive_module._replace(con, swept))
        con.execute(f"CREATE TEMPORARY TABLE sql_wasted AS {steps[until].sql}")
        assert wasted(con, swept.swept())
        ours = con.sql("FROM wasted ORDER BY ALL")
        assert ours.types == con.sql("FROM sql_wasted").types
        assert ours.fetchall() == con.sql("FROM sql_wasted ORDER BY ALL").fetchall()
    finally:
        con.close()


def deliveries_are_the_sqls(run_dir: Path) -> None:
    """``replay.analysis.windows`` reads the deliveries from the run's file (the read does not
    decline), with the rows and types of the SQL's join with the viewers."""
    con = open_runs([str(run_dir)], derived=False)
    try:
        steps_until(con, "received")
        viewers = con.sql("SELECT watcher, viewer_id FROM viewers").fetchall()
        ours = windows._delivered(pq.ParquetFile(Path(run_dir) / "deliveries.parquet",
                                                 read_dictionary=["watcher"]), viewers)
        theirs = windows._deliveries_by_sql(con)
        assert ours is not None
        assert {name: column.dtype for name, column in ours.items()} == \
            {name: column.dtype for name, column in theirs.items()}
        by = ("viewer_id", "rv", "applied_us", "missed")
        assert sorted(zip(*(ours[n].tolist() for n in by))) == \
            sorted(zip(*(theirs[n].tolist() for n in by)))
    finally:
        con.close()


def steps_until(con: duckdb.DuckDBPyConnection, name: str) -> str:
    """Make the temporary tables of the capacity windows' expressions before ``name`` with
    their SQL; returns ``name``'s."""
    steps = split_steps(derived_sql("capacity_windows"))
    until = [s.name for s in steps].index(name)
    for step in steps[:until]:
        con.execute(f"CREATE TEMPORARY TABLE {_quote(step.name)} AS {step.sql}")
    return steps[until].sql


def sweeps_in_numpy(run_dir: Path) -> bool:
    """Whether ``replay derive`` computes the run's capacity windows from ``received`` on in
    numpy, rather than leaving the run to the SQL."""
    con = open_runs([str(run_dir)], derived=False)
    try:
        steps_until(con, "received")
        return windows._received(con, *windows._sizes(con)) is not None
    finally:
        con.close()


def test_a_derived_tables_names_are_written_with_a_dictionary_and_no_statistics(tmp_path):
    """The capacity windows' names go to the writer as Arrow dictionaries, which take no
    statistics (as plain strings take none); the other columns keep theirs."""
    run_replay(SAMPLE_TRACE, load_config(), out=tmp_path / "run")
    meta = pq.ParquetFile(tmp_path / "run" / "capacity_windows.parquet").metadata
    assert meta.num_rows > 0
    for group in range(meta.num_row_groups):
        columns = {meta.row_group(group).column(i).path_in_schema: meta.row_group(group).column(i)
                   for i in range(meta.num_columns)}
        for name in ("watcher", "node", "resource", "kind"):
            assert columns[name].has_dictionary_page and not columns[name].is_stats_set, name
        assert columns["gap_seconds"].has_dictionary_page and columns["gap_max"].is_stats_set
        assert columns["start_ts"].is_stats_set


def test_duckdb_memory_is_capped_and_leaves_others_theirs(monkeypatch, tmp_path):
    for available, limit in ((100_000, derive_module.MEMORY_CAP_MIB), (2_000, min(1_500, derive_module.MEMORY_CAP_MIB)),
                             (800, 1_024), (None, derive_module.MEMORY_CAP_MIB)):
        monkeypatch.setattr(derive_module, "available_mib", lambda available=available: available)
        settings = derive_module._memory_settings(tmp_path)
        assert settings == {"temp_directory": str(tmp_path), "memory_limit": f"{limit}MiB"}
