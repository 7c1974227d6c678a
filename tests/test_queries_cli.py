"""``replay query`` and the views without the package: formats, parameters, several runs, errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import duckdb
import polars as pl
import pyarrow.parquet as pq
import pytest
from test_queries import FEW_WATCHERS, WORKED, Answers, network, replay_rows

from replay.analysis.catalog import HEADLINE, queries_dir, shipped
from replay.analysis.output import render_table, write_result
from replay.engine.rundir import DERIVED_TABLES, TABLES

from conftest import REPO

QUERIES = ("per_component_delay", "per_component_delay_timeline", "delay_cdf", "conflict_rate",
           "conflict_rate_by_lag", "stale_capacity_windows", "phantom_capacity_windows",
           "stale_capacity_summary", "stale_capacity_by_role", "stale_capacity_timeline",
           "stale_capacity_by_node", "stale_capacity_durations", "reaction_lag", "sweep_summary",
           "watch_health",
           "omega_metrics")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The worked example replayed twice: 2 ms delays, and 5 ms with more watchers."""
    folder = tmp_path_factory.mktemp("runs")
    return (replay_rows(folder, WORKED, network(2), name="fast"),
            replay_rows(folder, WORKED, network(5) + FEW_WATCHERS.replace("n0", "n1"),
                        name="slow"))


def test_the_shipped_queries():
    assert shipped() == sorted(QUERIES)
    assert set(HEADLINE) <= set(QUERIES)
    for name in QUERIES:
        header = (queries_dir() / f"{name}.sql").read_text().splitlines()[0]
        assert header.startswith(f"-- {name}: "), name
    assert (queries_dir() / "README.md").read_text().count("```") >= 2


def test_headline(cli, runs):
    result = cli("query", runs[0])
    assert result.code == 0, result.err
    for name in HEADLINE:
        assert f"{name}:\n" in result.out
    assert "kube-scheduler" in result.out and "end_to_end" in result.out


def test_tables_round_floats_other_formats_do_not(tmp_path):
    result = duckdb.sql('SELECT 2 / 3 AS "a ""share""", \'x.12345\' AS label, 7 AS n')
    table = render_table(result)
    assert "0.667" in table and "0.6667" not in table and "x.12345" in table
    out = tmp_path / "out.csv"
    write_result(result, "csv", str(out))
    assert out.read_text().splitlines()[1].startswith("0.6666")


def test_json_is_strict_json(tmp_path):
    """NaN and infinities, at the top and nested, are null as ``JSON.stringify`` writes them;
    a string that says NaN stays as it is."""
    result = duckdb.sql("SELECT 'NaN'::DOUBLE AS a, '-inf'::DOUBLE AS b, "
                        "['inf'::DOUBLE, 1.5] AS c, {'k': 'NaN'::FLOAT, 's': 'NaN, Infinity é'} "
                        "AS d, 2 AS e")
    out = tmp_path / "out.json"
    write_result(result, "json", str(out))

    def refuse(word):
        raise ValueError(f"not JSON: {word}")

    assert json.loads(out.read_text(encoding="utf-8"), parse_constant=refuse) == [
        {"a": None, "b": None, "c": [None, 1.5], "d": {"k": None, "s": "NaN, Infinity é"},
         "e": 2}]


def test_files_are_utf8_whatever_the_locale(runs, tmp_path):
    """In an ASCII locale (LC_ALL=C without Python's UTF-8 mode), a UTF-8 query file was 'not
    text', and a result with a non-ASCII value could not be written."""
    query = tmp_path / "godel.sql"
    query.write_text("-- Gödel's schedulers\nSELECT 'Gödel ✓' AS name", encoding="utf-8")
    env = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}
    for fmt in ("json", "table", "csv"):
        out = tmp_path / f"out.{fmt}"
        done = subprocess.run([sys.executable, "-m", "replay", "query", str(runs[0]), str(query),
                               "--format", fmt, "--out", str(out)], env=env, capture_output=True,
                              text=True, encoding="utf-8")
        assert done.returncode == 0, done.stderr
        assert "Gödel ✓" in out.read_text(encoding="utf-8")


def test_the_out_files_extension_chooses_the_format(cli, runs, tmp_path):
    """As DuckDB's COPY does: not a truncated box-drawn table in a file named .parquet."""
    for name, check in [("a.parquet", lambda path: pq.read_table(path).num_rows),
                        ("b.json", lambda path: len(json.loads(path.read_text()))),
                        ("c.CSV", lambda path: path.read_text().count("\n") - 1)]:
        result = cli("query", runs[0], "conflict_rate", "--out", tmp_path / name)
        assert result.code == 0, result.err
        assert check(tmp_path / name) == 2  # kube-scheduler and ALL
    assert "┌" in (cli("query", runs[0], "conflict_rate", "--out", tmp_path / "d.txt"),
                   (tmp_path / "d.txt").read_text(encoding="utf-8"))[1]
    assert cli("query", runs[0], "conflict_rate", "--format", "csv", "--out",
               tmp_path / "e.txt").code == 0
    mixed = cli("query", runs[0], "conflict_rate", "--format", "csv", "--out", tmp_path / "f.json")
    assert mixed.code == 1 and "its extension says json, --format says csv; drop one" in mixed.err
    assert not (tmp_path / "f.json").exists()


@pytest.mark.parametrize("name", QUERIES)
def test_every_format_holds_the_same_rows(cli, runs, tmp_path, name):
    expected = Answers(runs[0]).query(name)
    out = tmp_path / "out.parquet"
    assert cli("query", runs[0], name, "--format", "parquet", "--out", out).code == 0
    assert pl.read_parquet(out).height == expected.height
    as_csv = cli("query", runs[0], name, "--format", "csv")
    assert as_csv.code == 0, as_csv.err
    assert as_csv.out.count("\n") == expected.height + 1
    as_json = cli("query", runs[0], name, "--format", "json")
    rows = json.loads(as_json.out)
    assert len(rows) == expected.height and (not rows or list(rows[0]) == expected.columns)
    assert cli("query", runs[0], name).code == 0


def test_output_is_ordered_and_the_same_every_time(cli, runs):
    first = cli("query", *runs, "stale_capacity_windows", "--format", "csv").out
    assert first == cli("query", *runs, "stale_capacity_windows", "--format", "csv").out
    lines = first.splitlines()[1:]
    keys = [line.split(",")[:4] + [line.split(",")[4]] for line in lines]
    assert keys == sorted(keys)
    assert "+00" in lines[0]  # times in UTC


def test_parameters(cli, runs):
    result = cli("query", runs[0], "stale_capacity_windows", "--format", "json",
                 "--from", "2026-01-01T00:00:00.050", "--to", "2026-01-01T01:00:00+00:00",
                 "--watcher", "kubelet/*")
    assert [(r["watcher"], r["start_ts"]) for r in json.loads(result.out)] == [
        ("kubelet/n1", "2026-01-01 00:00:00.1+00")]


def test_several_runs_compare_with_one_group_by(cli, runs, tmp_path):
    mine = tmp_path / "compare.sql"
    mine.write_text("SELECT run, model, count(*) AS windows FROM capacity_windows "
                    "WHERE kind = getvariable('kind') GROUP BY ALL ORDER BY run")
    result = cli("query", *runs, mine, "--var", "kind=stale", "--format", "json")
    assert result.code == 0, result.err
    assert json.loads(result.out) == [{"run": "fast", "model": "observe", "windows": 6},
                                      {"run": "slow", "model": "observe", "windows": 9}]
    summary = json.loads(cli("query", *runs, "stale_capacity_summary", "--format", "json").out)
    assert {r["run"] for r in summary} == {"fast", "slow"}


def test_a_variable_may_be_an_sql_keyword_in_any_case(cli, runs, tmp_path):
    """DuckDB compares variable names in lower case, and ``limit`` must be quoted to be set."""
    mine = tmp_path / "keyword.sql"
    mine.write_text("SELECT getvariable('limit') AS n, getvariable('Kind') AS kind")
    result = cli("query", runs[0], mine, "--var", "LIMIT=3", "--var", "kind=stale",
                 "--format", "json")
    assert result.code == 0, result.err
    assert json.loads(result.out) == [{"n": "3", "kind": "stale"}]


def test_core_seconds_beyond_bigint_are_summed(cli, tmp_path):
    """Nodes and pods of 2^60 and 2^58 millicores: one stale window of a few milliseconds holds
    about 10^12 core-seconds, whose nano-core-seconds (core_ns) BIGINT cannot hold."""
    trace, run = tmp_path / "big.parquet", tmp_path / "big"
    made = cli("synth", "--nodes", "2", "--pods", "4", "--node-shape", f"{2**60}m/64Gi=1",
               "--pod-shape", f"{2**58}m/1Gi=1", "--out", trace)
    assert made.code == 0, made.err
    assert cli("run", trace, "--out", run).code == 0
    for name in QUERIES:
        result = cli("query", run, name, "--format", "json")
        assert result.code == 0, (name, result.err)
    summary = json.loads(cli("query", run, "stale_capacity_summary", "--format", "json").out)
    windows = pl.read_parquet(run / "capacity_windows.parquet").filter(
        kind="stale", resource="cpu")
    for row in summary:
        expected = windows.filter(watcher=row["watcher"])["gap_seconds"].sum()
        assert row["blind_core_seconds"] == pytest.approx(expected, rel=1e-12)
    assert max(r["blind_core_seconds"] for r in summary) > 2**63 / 1e9


def test_options_reach_a_file_that_reads_them_through_the_views(cli, runs, tmp_path):
    """in_time_window (views.sql) reads from_ts and to_ts: --to applies, and filters (the
    first microsecond of the run holds no decision)."""
    mine = tmp_path / "decided.sql"
    mine.write_text("SELECT count(*) AS n FROM attempts WHERE in_time_window(decided_ts)")
    every = json.loads(cli("query", runs[0], mine, "--format", "json").out)[0]["n"]
    first = cli("query", runs[0], mine, "--format", "json", "--to", "2026-01-01T00:00:00.000001")
    assert first.code == 0, first.err
    assert json.loads(first.out) == [{"n": 0}] and every > 0


def test_model_parameters_become_columns(tmp_path):
    answers = Answers(replay_rows(tmp_path, WORKED, network(2)))
    runs_view = answers.con.sql("SELECT * FROM runs").pl()
    assert runs_view.select("run", "model", "profile").rows() == [("run", "observe", "zero")]
    first = answers.con.sql("SELECT * FROM attempts LIMIT 1").pl()
    assert first.columns[:2] == ["run", "model"]


def test_plain_duckdb_without_the_package(runs):
    """views.sql and a query file from DuckDB alone, as queries/README.md shows."""
    script = f"""
import duckdb, sys
con = duckdb.connect()
con.execute("SET VARIABLE run_dirs = ?", [[{str(runs[0])!r}, {str(runs[1])!r}]])
con.execute(open({str(queries_dir() / 'views.sql')!r}).read())
rows = con.sql(open({str(queries_dir() / 'conflict_rate.sql')!r}).read()).fetchall()
con.execute("SET VARIABLE run_dirs = ?", [[{str(runs[0])!r}]])
derived = con.sql(open({str(queries_dir() / 'derived' / 'capacity_windows.sql')!r}).read())
stored = con.sql("SELECT * EXCLUDE (run, model, sweep) FROM capacity_windows")
assert derived.fetchall() == stored.fetchall()
assert 'replay' not in sys.modules
print(len(rows))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=REPO.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "4"


@pytest.mark.parametrize("spelling", ["as given", "dotted, doubled, trailing", "glob"])
def test_every_row_reaches_its_run_however_the_directories_are_written(runs, spelling):
    """A view's rows meet their run by the name of the file read (views.sql, run_table), so
    the names read_parquet reads and glob lists must agree however run_dirs writes a
    directory; a row whose file matched no run would be dropped without a word."""
    fast, slow = runs
    written = {"as given": [str(fast), str(slow)],
               "dotted, doubled, trailing": [f"{fast.parent}/./{fast.name}/",
                                             f"{slow.parent}//{slow.name}"],
               "glob": [f"{fast.parent.parent}/*/[fs][al]??"]}[spelling]
    con = duckdb.connect()
    con.execute("SET VARIABLE run_dirs = ?", [written])
    con.execute((queries_dir() / "views.sql").read_text())
    for table in (*TABLES, *DERIVED_TABLES):
        counted = dict(con.sql(f"SELECT run, count(*) FROM {table} GROUP BY run").fetchall())
        stored = {run.name: pq.read_metadata(run / f"{table}.parquet").num_rows
                  for run in (fast, slow)}
        assert counted == {run: rows for run, rows in stored.items() if rows}, table


def test_derive_again(cli, runs, tmp_path):
    """Without its derived table a run says how to derive it; `replay derive` writes the same
    table again and records its rows in the manifest."""
    run = tmp_path / "fast"
    shutil.copytree(runs[0], run)
    (run / "capacity_windows.parquet").unlink()
    refused = cli("query", run, "stale_capacity_summary")
    assert refused.code == 1 and f"no capacity_windows table; `replay derive {run}`" in refused.err
    done = cli("derive", run)
    assert done.code == 0, done.err
    original = pl.read_parquet(runs[0] / "capacity_windows.parquet")
    assert f"capacity_windows {original.height:,} rows" in done.out
    assert pl.read_parquet(run / "capacity_windows.parquet").equals(original)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["tables"]["capacity_windows"] == original.height
    assert cli("derive", tmp_path / "nowhere").err.endswith("nowhere: no such run directory\n")


def test_a_manifest_that_is_a_folder_says_so(cli, runs, tmp_path):
    run = tmp_path / "odd"
    shutil.copytree(runs[0], run)
    (run / "manifest.json").unlink()
    (run / "manifest.json").mkdir()
    result = cli("query", run, "conflict_rate")
    assert result.code == 1 and result.err == (
        f"replay: error: {run}: not a run directory (its manifest.json is not a file)\n")


def test_a_run_from_an_older_version_says_so(cli, runs, tmp_path):
    run = tmp_path / "old"
    shutil.copytree(runs[0], run)
    pl.read_parquet(run / "pods.parquet").drop("bound_rv").write_parquet(run / "pods.parquet")
    manifest = json.loads((run / "manifest.json").read_text())
    del manifest["files"]  # older versions recorded no sizes and checksums
    (run / "manifest.json").write_text(json.dumps(manifest))
    for command in (["query", run], ["derive", run]):
        result = cli(*command)
        assert result.code == 1
        assert result.err == (f"replay: error: {run / 'pods.parquet'}: lacks bound_rv; the run "
                              "was written by an older version of replay, or the table was "
                              "edited: replay its trace again\n")


def test_a_table_edited_to_other_types_or_names_is_refused_even_when_accepted(cli, runs, tmp_path):
    """``derive --accept-edits`` recorded the checksum of an attempts table whose ids had
    become strings, and every query and ``replay check`` then took it."""
    run = tmp_path / "edited"
    shutil.copytree(runs[0], run)
    attempts = pl.read_parquet(run / "attempts.parquet")
    attempts.with_columns(pl.col("attempt_id").cast(pl.String)).write_parquet(
        run / "attempts.parquet")
    result = cli("derive", run, "--accept-edits")
    assert result.code == 1
    assert result.err == (f"replay: error: {run / 'attempts.parquet'}: column attempt_id is "
                          "large_string, where a run's table has int64; the run was written by "
                          "an older version of replay, or the table was edited: replay its "
                          "trace again\n")
    twice = attempts.to_arrow().append_column("pod", attempts.to_arrow()["pod"])
    pq.write_table(twice, run / "attempts.parquet")
    result = cli("derive", run, "--accept-edits")
    assert result.code == 1 and result.err == (
        f"replay: error: {run / 'attempts.parquet'}: names the column pod more than once; the "
        "table was edited: replay its trace again\n")


@pytest.mark.parametrize("args, message", [
    (["nowhere"], "nowhere: no such run directory"),
    ([REPO], "not a run directory (no manifest.json)"),
    (["{run}/pods.parquet", "conflict_rate"], "pods.parquet: a file, not a run directory"),
    (["{run}", "{binary}"], "binary.sql: not text (byte 4), so not a query"),
    (["{run}", "no_such_query"], "no query named 'no_such_query'; queries: conflict_rate"),
    (["{run}", "missing.sql"], "missing.sql: no such query file"),
    (["{run}", "{bad}"], "Catalog Error"),
    (["{run}", "{var}"], "reads the variable 'limit'; set it with --var limit=VALUE"),
    (["{run}", "conflict_rate", "--format", "parquet"], "--format parquet writes a file"),
    (["{run}", "--format", "csv"], "--format, --out and --var need a query NAME or FILE.sql"),
    (["{run}", "--var", "limit=3"], "--format, --out and --var need a query NAME or FILE.sql"),
    (["{run}", "{var}", "--var", "limt=3"],
     "var.sql: does not read the variable 'limt' that --var limt=... sets"),
    (["{run}", "conflict_rate", "--var", "limit=3"],
     "conflict_rate: does not read the variable 'limit'"),
    (["{run}", "{var}", "--var", "limit=3", "--var", "from_ts=2024-01-01"],
     "--var from_ts=...: set from_ts with --from"),
    (["{run}", "per_component_delay", "--bucket-minutes", "5"],
     "per_component_delay: has no minute buckets for --bucket-minutes to widen (the "
     "minute-by-minute queries: per_component_delay_timeline, stale_capacity_by_node, "
     "stale_capacity_timeline)"),
    (["{run}", "--bucket-minutes", "5"], "--bucket-minutes needs a minute-by-minute query"),
    (["{run}", "{var}", "--var", "limit=3", "--from", "2024-01-01"],
     "var.sql: does not read from_ts, so --from would change nothing"),
    (["{run}", "{var}", "--var", "limit=3", "--watcher", "kubelet/*"],
     "var.sql: does not read watcher, so --watcher would change nothing"),
    (["{run}", "{var}", "--var", "Run_Dirs=/etc"],
     "--var Run_Dirs=...: set run_dirs with the RUN_DIR arguments"),
    (["{run}", "{run}", "conflict_rate"], "two run directories are named 'fast'"),
    (["{run}", "conflict_rate", "--var", "novalue"], "--var 'novalue': expected NAME=VALUE"),
    (["{run}", "conflict_rate", "--from", "2024-01-02", "--to", "2024-01-02"],
     "--from 2024-01-02T00:00:00+00:00 is not before --to 2024-01-02T00:00:00+00:00"),
    (["{run}", "per_component_delay", "--watcher", "kublet/*"],
     "--watcher 'kublet/*' matches no watcher, scheduler or component of the runs ("),
    (["{run}", "--watcher", "["], "--watcher '[' matches no watcher"),
    (["{run}", "conflict_rate", "--from", "2030-01-01"],
     "--from 2030-01-01T00:00:00+00:00: holds no time of the runs, which span 20"),
    (["{run}", "--to", "1999-01-01T00:00:00+01:00"],
     "--to 1999-01-01T00:00:00+01:00: holds no time of the runs"),
])
def test_errors_are_one_line(cli, runs, tmp_path, args, message):
    bad, var = tmp_path / "bad.sql", tmp_path / "var.sql"
    bad.write_text("SELECT * FROM no_such_table")
    var.write_text("SELECT getvariable('limit') AS n")
    (tmp_path / "binary.sql").write_bytes(b"PAR1\xc0\x15")
    result = cli("query", *[str(a).format(run=runs[0], bad=bad, var=var,
                                          binary=tmp_path / "binary.sql") for a in args])
    assert result.code == 1, result.out
    assert message in result.err
    assert result.err.count("\n") == 1 and "Traceback" not in result.err


def test_a_failing_query_leaves_no_file(cli, runs, tmp_path):
    bad = tmp_path / "bad.sql"
    bad.write_text("SELECT 1 / 0 AS x, error('stop here') AS y")
    out = tmp_path / "out.csv"
    result = cli("query", runs[0], bad, "--format", "csv", "--out", out)
    assert result.code == 1 and "stop here" in result.err
    assert list(tmp_path.iterdir()) == [bad]
