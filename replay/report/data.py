"""A report's numbers: the shipped queries' answers over the runs, aggregated by DuckDB.

The page holds only these answers (percentiles, minute-by-minute sums, histograms), never a
table of deliveries or windows, so its size does not grow with the run's; and every number in it
is one that ``replay query RUN_DIR NAME`` prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from replay.analysis.catalog import load_query
from replay.analysis.runs import PARAMETERS, duckdb_errors, open_runs, run_query
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
    variables: dict[str, Any]  # the parameters the queries were run with (from_ts, to_ts)

    def answer(self, query: str) -> pl.DataFrame:
        return self.answers[query]


def load(run_dirs: Sequence[str], variables: Mapping[str, Any] | None = None,
         queries: Sequence[str] = QUERIES) -> ReportData:
    """Run ``queries`` (shipped names) over ``run_dirs`` with ``variables`` (``from_ts``,
    ``to_ts``; unset ones are null)."""
    given = {name: None for name in PARAMETERS} | dict(variables or {})
    con = open_runs(list(run_dirs))
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
