"""``replay query RUN_DIR... [NAME | FILE.sql]``: answer a question with DuckDB SQL over runs."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

from replay.analysis.catalog import HEADLINE, HEADLINE_ALL_ROWS, Query, load_query, shipped
from replay.analysis.output import FORMATS, render_table, write_result
from replay.analysis.runs import (RUNS_VARIABLE, check_watcher, check_window_overlaps,
                                  duckdb_errors, open_runs, run_query, variables_read)
from replay.cli.arguments import positive_int
from replay.errors import ReplayError
from replay.times import check_window, time_argument


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "query", help="answer a question with DuckDB SQL over run directories",
        description="Run a shipped query by NAME, or your own FILE.sql, over the tables of one "
                    "or more run directories (views named after the tables, every row "
                    "carrying its run's name, model and model parameters; queries/README.md). "
                    "Without NAME, print the headline results: "
                    f"{', '.join(HEADLINE)}. Queries: {', '.join(shipped())}.")
    parser.add_argument("args", nargs="+", metavar="RUN_DIR... [NAME | FILE.sql]",
                        help="run directories, then optionally the query")
    parser.add_argument("--format", choices=FORMATS,
                        help="output format (default: the --out file's extension, .csv, .json "
                             "or .parquet, else table: at most 40 rows; the others hold every "
                             "row; parquet needs --out)")
    parser.add_argument("--out", metavar="FILE",
                        help="write to FILE instead of stdout (- is stdout)")
    parser.add_argument("--from", dest="from_ts", type=time_argument, metavar="TIME",
                        help="only what happens from TIME on (ISO 8601; UTC unless it says)")
    parser.add_argument("--to", dest="to_ts", type=time_argument, metavar="TIME",
                        help="only what happens before TIME")
    parser.add_argument("--watcher", metavar="GLOB",
                        help="only watchers (schedulers, for conflicts) whose name matches GLOB, "
                             "e.g. 'kubelet/*'")
    parser.add_argument("--bucket-minutes", type=positive_int, metavar="N",
                        help="the minute-by-minute queries (the timelines, "
                             "stale_capacity_by_node) give a row per N minutes (default 1)")
    parser.add_argument("--verify", action="store_true",
                        help="verify every byte of each run's tables against the checksums in "
                             "its manifest first (by default: sizes, footers and the small "
                             "tables)")
    parser.add_argument("--var", dest="variables", action="append", default=[],
                        metavar="NAME=VALUE",
                        help="set the DuckDB variable NAME (a string) that your own query "
                             "reads with getvariable('NAME'); repeatable")
    parser.set_defaults(run=run)


def split_arguments(args: list[str]) -> tuple[list[str], str | None]:
    """Run directories, and the query if the last argument names one: a FILE.sql, or a name
    that is not a directory."""
    *runs, last = args
    if runs and (last.endswith(".sql") or not Path(last).is_dir()):
        return runs, last
    return args, None


STDOUT = "-"  # as --out: standard output, as without --out

# The variables that have an option (or the arguments) of their own: a --var of one of these
# would bypass the option's checks.
_OWN_OPTION = {"from_ts": "--from", "to_ts": "--to", "watcher": "--watcher",
               "bucket_minutes": "--bucket-minutes", RUNS_VARIABLE: "the RUN_DIR arguments"}


def parse_variables(items: list[str]) -> dict[str, str]:
    variables = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ReplayError(f"--var {item!r}: expected NAME=VALUE")
        if name.lower() in _OWN_OPTION:
            raise ReplayError(f"--var {name}=...: set {name.lower()} with "
                              f"{_OWN_OPTION[name.lower()]}")
        variables[name] = value
    return variables


def bucketed() -> str:
    """The shipped queries that give a row per bucket of ``--bucket-minutes``."""
    return ", ".join(name for name in shipped()
                     if "bucket_minutes" in variables_read(load_query(name)))


def check_read(query: Query, given: dict[str, str], options: dict[str, Any]) -> None:
    """Refuse a ``--var``, or an option (``--from`` ...), that the query never reads, itself
    or through the views: a misspelt name, which would leave the variable the query does read
    unset, or an option that would silently change nothing (a file of your own that does not
    filter by time)."""
    read = variables_read(query)
    unread = [name for name in sorted(given) if name.lower() not in read]
    if unread:
        raise ReplayError(f"{query.name}: does not read the variable {unread[0]!r} that "
                          f"--var {unread[0]}=... sets")
    if options.get("bucket_minutes") is not None and "bucket_minutes" not in read:
        raise ReplayError(f"{query.name}: has no minute buckets for --bucket-minutes to widen "
                          f"(the minute-by-minute queries: {bucketed()})")
    ignored = [name for name in options if name not in read]
    if ignored:
        raise ReplayError(f"{query.name}: does not read {ignored[0]}, so {_OWN_OPTION[ignored[0]]} "
                          f"would change nothing (queries/README.md: Parameters)")


def output_format(given: str | None, out: str | None) -> str:
    """``--format``, else the one ``--out``'s extension names, else ``table``; a format that
    contradicts the extension is refused (CSV in a ``.parquet`` file breaks every reader)."""
    implied = EXTENSIONS.get(Path(out).suffix.lower()) if out else None
    if given and implied and given != implied:
        raise ReplayError(f"--out {out}: its extension says {implied}, --format says {given}; "
                          "drop one")
    return given or implied or "table"


EXTENSIONS = {".csv": "csv", ".json": "json", ".parquet": "parquet"}


def run(args: argparse.Namespace) -> int:
    runs, name = split_arguments(args.args)
    check_window(args.from_ts, args.to_ts)
    out = None if args.out == STDOUT else args.out
    fmt = output_format(args.format, out)
    given = parse_variables(args.variables)
    variables = {"from_ts": args.from_ts, "to_ts": args.to_ts, "watcher": args.watcher,
                 "bucket_minutes": args.bucket_minutes, **given}
    if name is None and (out or args.format or given):
        raise ReplayError("--format, --out and --var need a query NAME or FILE.sql")
    if name is None and args.bucket_minutes is not None:
        raise ReplayError(f"--bucket-minutes needs a minute-by-minute query ({bucketed()}); "
                          f"the headline answers have no minutes")
    if not name:
        print_headline(runs, variables, verify=args.verify)
        return 0
    query = load_query(name)
    check_read(query, given, {key: value for key, value in variables.items()
                              if key in _OWN_OPTION and value is not None})
    con = open_runs(runs, verify=args.verify)
    check_window_overlaps(con, args.from_ts, args.to_ts)
    check_watcher(con, args.watcher)
    inputs = [*runs, *([name] if name.endswith(".sql") else [])]
    with duckdb_errors(query.name):
        write_result(run_query(con, query, variables), fmt, out, inputs)
    return 0


def print_headline(runs: list[str], variables: dict[str, Any] | None = None,
                   verify: bool = False) -> None:
    """The headline answers about ``runs``, one table each (``verify``: every table's checksum
    first, as ``replay check`` does)."""
    con = open_runs(runs, verify=verify)
    variables = variables or {}
    check_window_overlaps(con, variables.get("from_ts"), variables.get("to_ts"))
    check_watcher(con, variables.get("watcher"))
    for query in [load_query(q) for q in HEADLINE]:
        with duckdb_errors(query.name):
            print(f"{query.name}:\n{render_table(run_query(con, query, variables))}")
        if query.name in HEADLINE_ALL_ROWS:
            every = shlex.join(["replay", "query", *runs, HEADLINE_ALL_ROWS[query.name]])
            print(f"Watchers of one node each (kubelets): the 3 worst, then ALL of the role. "
                  f"Every watcher: {every}\n")
