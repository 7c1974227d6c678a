"""``replay import NAME ... --out TRACE``: a public workload trace -> a trace file."""

from __future__ import annotations

import argparse

from replay.trace.importers import importers, run_import


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "import", help="turn a public workload trace into a trace",
        description="Import a public workload trace into trace format v1. Each trace has its "
                    "own subcommand and options; traces/README.md documents each mapping.")
    traces = parser.add_subparsers(title="traces", metavar="NAME", required=True)
    for name, importer in importers().items():
        sub = traces.add_parser(name, help=importer.HELP, description=importer.DESCRIPTION,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        importer.add_arguments(sub)
        sub.add_argument("--out", required=True, metavar="TRACE", help="trace file to write")
        sub.set_defaults(run=run, importer=importer)


def run(args: argparse.Namespace) -> int:
    counts = run_import(args.importer, args)
    kinds = ", ".join(f"{n:,} {verb} {resource}" for (verb, resource), n in counts.items())
    print(f"wrote {args.out}: {sum(counts.values()):,} rows ({kinds})")
    return 0
