"""``replay validate TRACE``: check a file against trace format v1."""

from __future__ import annotations

import argparse

import pyarrow.parquet as pq

from replay.trace.io import open_trace, source_of
from replay.trace.validate import conversion_hint, validate


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "validate", help="check a trace file against trace format v1",
        description="Check TRACE against trace format v1 (traces/README.md) and list every "
                    "problem found. Exit status 0 only when the file is valid.")
    parser.add_argument("trace", metavar="TRACE", help="Parquet trace file")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    problems = validate(args.trace)
    for problem in problems:
        print(f"{args.trace}: {problem}")
    if problems:
        print(f"{args.trace}: invalid ({len(problems)} problem{'s' * (len(problems) > 1)})")
        hint = conversion_hint(args.trace, open_trace(args.trace).schema_arrow)
        if hint:
            print(f"{args.trace}: {hint}")
        return 1
    rows = pq.ParquetFile(args.trace).metadata.num_rows
    source = source_of(args.trace).get("replay.source", "unknown source")
    print(f"{args.trace}: valid trace v1, {rows} rows, from {source}")
    return 0
