"""A report's numbers: the shipped queries' answers over the runs, aggregated by DuckDB.

The page holds only these answers (percentiles, minute-by-minute sums, histograms), never a
table of deliveries or windows, so its size does not grow with the run's; and every number in it
is one that ``replay query RUN_DIR NAME`` prints.  Nor does it grow with the run's length: the
timelines' buckets are a minute wide unless that would make more than ``MOST_BUCKETS`` of them,
as the Alibaba trace's five months would (216,000 minutes: a 64 MB page), and then wider
(``bucket_minutes``), which the page says.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from replay.analysis.catalog import load_query
from replay.analysis.runs import (PARAMETERS, check_window_overlaps, duckdb_errors, open_runs,
                                  run_query, set_variables)
from replay.progress import progress

# The queries a report reads, in the order its sections read them.
QUERIES = (
    "per_component_delay",
    "delay_cdf",
    "per_component_delay_timeline",
    "conflict_rate",
    "conflict_rate_by_lag",
    "stale_capacity_by_role",
    "stale_capacity_timeline",
    "stale_capacity_by_node",
    "stale_capacity_durations",
    "watch_health",
)
RUN_COLUMNS = ("run", "model", "seed", "profile", "trace")  # the runs view's; then parameters
MOST_BUCKETS = 1440  # a timeline's points at most, unless its buckets would be over a day wide
# The widths a report's buckets may have, in minutes; then whole days.
BUCKET_WIDTHS = (1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440)
DAY_MINUTES = 1440


@dataclass(frozen=True)
class Run:
    name: str  # the run directory's name, as every query calls it
    path: str
    model: str
    seed: int
    profile: str
    trace: str
    parameters: dict[str, Any]  # the model's parameters (those of other models' omitted)


@dataclass(frozen=True)
class ReportData:
    runs: tuple[Run, ...]  # in the order they were given
    answers: dict[str, pl.DataFrame]  # query name -> its answer over every run
    variables: dict[str, Any]  # the parameters the queries were run with (from_ts, to_ts,
    # bucket_minutes)

    @property
    def bucket_minutes(self) -> int:
        """The width of the timelines' buckets, in minutes."""
        return self.variables.get("bucket_minutes", 1)

    def answer(self, query: str) -> pl.DataFrame:
        return self.answers[query]


def load(run_dirs: Sequence[str], variables: Mapping[str, Any] | None = None,
         queries: Sequence[str] = QUERIES) -> ReportData:
    """Run ``queries`` (shipped names) over ``run_dirs`` with ``variables`` (``from_ts``,
    ``to_ts``; unset ones are null; ``bucket_minutes`` unless given, ``bucket_width``'s)."""
    given = {name: None for name in PARAMETERS} | dict(variables or {})
    con = open_runs(list(run_dirs))
    check_window_overlaps(con, given["from_ts"], given["to_ts"])
    if given["bucket_minutes"] is None:
        given["bucket_minutes"] = bucket_width(con, given)
    answers = {}
    with progress(len(queries), "report", unit="query") as bar:
        for name in queries:
            bar.set_postfix_str(name)
            query = load_query(name)
            with duckdb_errors(query.name):
                answers[name] = run_query(con, query, given).pl()
            bar.update()
    with duckdb_errors("queries/views.sql: runs"):
        runs = con.table("runs").pl()
    return ReportData(_in_given_order(runs, run_dirs), answers,
                      {k: v for k, v in given.items() if v is not None})


def bucket_width(con: duckdb.DuckDBPyConnection, variables: Mapping[str, Any]) -> int:
    """The timelines' bucket width for the longest run's minutes within ``from_ts`` and
    ``to_ts``: ``narrowest_width``."""
    set_variables(con, {**variables, "bucket_minutes": None})
    with duckdb_errors("queries/views.sql: run_buckets"):
        longest = con.execute("SELECT max(n) FROM "
                              "(SELECT count(*) AS n FROM run_buckets GROUP BY run)").fetchone()
    return narrowest_width(longest[0] if longest and longest[0] else 0)


def narrowest_width(minutes: int) -> int:
    """The narrowest of ``BUCKET_WIDTHS`` (or whole days) that cuts ``minutes`` minutes into at
    most ``MOST_BUCKETS`` buckets."""
    least = -(-minutes // MOST_BUCKETS)  # the width that would just do, rounded up
    fitting = [width for width in BUCKET_WIDTHS if width >= least]
    return fitting[0] if fitting else -(-least // DAY_MINUTES) * DAY_MINUTES


def _parameters(row: dict[str, Any]) -> dict[str, Any]:
    """A run's parameters as the runs view has them: its model's, then for a sweep's point the
    keys it swept (``stages_network_latency_p99_ms``), without the sweep's name and without a
    swept ``model_NAME`` that only repeats the model parameter ``NAME``."""
    given = {k: v for k, v in row.items() if k not in RUN_COLUMNS and v is not None}
    return {k: v for k, v in given.items()
            if k != "sweep" and not (k.startswith("model_") and k[len("model_"):] in given)}


def _in_given_order(runs: pl.DataFrame, run_dirs: Sequence[str]) -> tuple[Run, ...]:
    by_name = {row["run"]: row for row in runs.iter_rows(named=True)}
    ordered = []
    for path in run_dirs:
        row = by_name[Path(path).resolve().name]
        parameters = _parameters(row)
        ordered.append(Run(row["run"], str(path), row["model"], row["seed"], row["profile"],
                           row["trace"], parameters))
    return tuple(ordered)
