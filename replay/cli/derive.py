"""``replay derive RUN_DIR...``: compute a run's derived tables again from its other tables."""

from __future__ import annotations

import argparse
import time

from replay.analysis.derive import derive
from replay.analysis.runs import runs_of
from replay.engine.rundir import DERIVED_TABLES


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "derive", help="compute the derived tables of run directories again",
        description="Compute the derived tables of each RUN_DIR "
                    f"({', '.join(DERIVED_TABLES)}) from its other tables, with the SQL in "
                    "queries/derived/, and replace them. `replay run` derives them when it writes "
                    "a run; derive them again after changing that SQL, or a table (with "
                    "--accept-edits), or for a run written by an older version.")
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                        help="run directories, or a sweep's directory for its finished points")
    parser.add_argument("--accept-edits", action="store_true",
                        help="you edited the run's tables on purpose: record their new sizes "
                             "and checksums in the manifest instead of refusing them as "
                             "damaged")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    for run_dir in runs_of(args.run_dirs):
        started = time.perf_counter()
        rows = derive(run_dir, accept_edits=args.accept_edits)
        counts = ", ".join(f"{name} {count:,} rows" for name, count in rows.items())
        print(f"{run_dir}: {counts} ({time.perf_counter() - started:.1f} s)")
    return 0
