"""``replay ingest LOG... --out TRACE``: Kubernetes audit logs -> a trace file."""

from __future__ import annotations

import argparse
import sys

from replay.cli.arguments import output_path
from replay.trace.audit import ingest
from replay.trace.audit.ingest import WORKERS


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "ingest", help="turn Kubernetes audit logs into a trace",
        description="Read Kubernetes audit logs (JSON lines as the API server's log backend "
                    "writes them, audit.k8s.io v1 or v1beta1; gzip or not; - for stdin) and "
                    "write one trace: a row per write (create, update, patch, delete, "
                    "deletecollection) at its ResponseComplete stage, sorted by time, duplicate "
                    "events kept once, failed writes kept with their code. Object bodies are "
                    "read for pod requests, node allocatable and binding targets, and never "
                    "copied. traces/README.md documents how each column is filled.")
    parser.add_argument("logs", nargs="+", metavar="LOG",
                        help="audit log files in time order (rotated files oldest first); - "
                             "reads stdin")
    parser.add_argument("--out", required=True, type=output_path, metavar="TRACE",
                        help="trace file to write")
    parser.add_argument("--keep-reads", action="store_true",
                        help="also keep reads (get, list, watch) as rows")
    parser.add_argument("--skip-bad-lines", action="store_true",
                        help="skip lines that are not audit events (and a truncated gzip end), "
                             "count them in the summary, instead of stopping at the first")
    parser.add_argument("--workers", type=int, default=WORKERS, metavar="N",
                        help="worker processes that decode inputs larger than 16 MiB (1: none)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    summary = ingest(args.logs, args.out, keep_reads=args.keep_reads,
                     skip_bad_lines=args.skip_bad_lines, workers=args.workers)
    print(f"wrote {args.out}: {summary.rows:,} rows from {summary.events:,} audit events")
    for line in summary.lines():
        print(line, file=sys.stderr)
    return 0
