"""``replay check RUN_DIR...``: check every invariant of the project on run directories."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from replay.analysis.check import Finding


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "check", help="check that run directories keep every invariant",
        description="Check each RUN_DIR against the project's invariants (docs/consistency.md): "
                    "the tables' integrity (manifest.json's checksums), the watch pipeline's "
                    "causality, order and exactly-once delivery (across terminations, re-watches "
                    "and re-lists), capacity, "
                    "bindings, attempts, every pod accounted for, views that converge. Prints "
                    "one line per invariant: ok, FAILED with how many rows break it and up to "
                    "5 of them, reported (allowed by design, counted), or n/a. Exits 1 if any "
                    "invariant fails.")
    parser.add_argument("run_dirs", nargs="*", metavar="RUN_DIR",
                        help="run directories, or a sweep's directory for its finished points")
    parser.add_argument("--rerun", action="store_true",
                        help="also replay each run's trace again (a full replay, in a new "
                             "process with one thread) and compare every table byte for byte")
    parser.add_argument("--list", action="store_true", help="list the invariants and exit")
    parser.set_defaults(run=run, parser=parser)


def run(args: argparse.Namespace) -> int:
    # (cli/main.py: imported when run)
    from replay.analysis.check import INVARIANTS, check_run
    from replay.analysis.runs import runs_of
    from replay.reproduce import deterministic

    if not args.list and not args.run_dirs:
        args.parser.error("give one or more RUN_DIR (or --list to see the invariants)")
    if args.list:
        width = max(len(i.id) for i in INVARIANTS)
        for invariant in INVARIANTS:
            print(f"{invariant.id:<{width}}  {invariant.summary}")
        return 0
    run_dirs = runs_of(args.run_dirs)
    replayed = deterministic(run_dirs) if args.rerun else {}
    broken = 0
    for run_dir in run_dirs:
        findings = check_run(run_dir)
        findings = [replayed.get(str(run_dir), f) if f.invariant == "deterministic" else f
                    for f in findings]
        failures = sum(not f.ok for f in findings)
        broken += failures
        verdict = f"{failures} of {len(findings)} invariants FAILED" if failures else \
            f"every invariant holds ({len(findings)} checked)"
        print(f"{run_dir}: {verdict}")
        for finding in findings:
            print(describe(finding))
    return 1 if broken else 0


def describe(finding: Finding) -> str:
    """One line for the finding, then one per example row."""
    from replay.analysis.check import Status

    line = f"  {finding.status.value:<9} {finding.invariant}"
    if finding.status in (Status.FAILED, Status.REPORTED):
        line += f": {finding.count:,} {'row' if finding.count == 1 else 'rows'}"
    if finding.note and finding.status is not Status.OK:
        line += f" ({finding.note})"
    rows = [" " * 14 + ", ".join(f"{k}={v}" for k, v in row.items())
            for row in finding.examples]
    return "\n".join([line, *rows])
