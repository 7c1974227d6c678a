"""``replay sweep SWEEP.toml``: replay traces under a matrix of models, parameters and seeds."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from replay.cli.arguments import output_path, positive_int
from replay.errors import ReplayError

if TYPE_CHECKING:
    from replay.sweep import Sweep

EXECUTORS = ("local", "ray")


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "sweep", help="replay traces under a matrix of models, parameters and seeds",
        description="Run every point of the sweep file SWEEP.toml (traces, a base run config, "
                    "seeds and a [matrix] of models, model parameters and config keys; "
                    "docs/sweeps.md), each exactly as `replay run` would, into one run "
                    "directory per point under DIR, with DIR/sweep.parquet indexing them. "
                    "A failed point does not stop the others. `replay query DIR NAME` then "
                    "queries every finished point, e.g. sweep_summary.")
    parser.add_argument("sweep", metavar="SWEEP.toml", help="the sweep file")
    parser.add_argument("--out", type=output_path, metavar="DIR",
                        help="the sweep's directory (default: sweeps/<SWEEP's stem>)")
    parser.add_argument("--jobs", type=positive_int, metavar="N",
                        help="points at once at most (default: local, the number of CPUs, and "
                             "only as many as fit in memory by their estimates; ray, as many "
                             "as the cluster's resources allow)")
    parser.add_argument("--executor", choices=EXECUTORS, default="local",
                        help="local: a process per point on this machine (default); ray: a "
                             "Ray task per point (needs the ray extra)")
    parser.add_argument("--address", metavar="ADDR",
                        help="with --executor ray: the cluster to join (auto: the one started "
                             "on this machine with `ray start`); default: a Ray instance of "
                             "this command's own")
    parser.add_argument("--resume", action="store_true",
                        help="complete the sweep in DIR: run only the points not done yet")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the points and what would run, and run nothing")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.address is not None and args.executor != "ray":
        raise ReplayError("--address is for --executor ray")
    from replay.sweep import load_sweep, run_sweep  # (cli/main.py: imported when run)

    sweep = load_sweep(args.sweep)
    out = Path(args.out) if args.out else Path("sweeps") / Path(args.sweep).stem
    if args.dry_run:
        print_plan(sweep, out, args)
        return 0
    report = run_sweep(sweep, out, _executor(args), resume=args.resume)  # SIGTERM: as Ctrl-C
    print(f"sweep {out}: {report.points} points, {report.done} done, {report.failed} failed"
          + (f", {report.skipped} not run" if report.skipped else "")
          + f" ({report.ran} ran now); index {out / 'sweep.parquet'}")
    return 1 if report.failed else 0


def _executor(args: argparse.Namespace):
    from replay.sweep import LocalExecutor, RayExecutor, budget_bytes

    if args.executor == "ray":
        return RayExecutor(args.address, args.jobs)
    return LocalExecutor(args.jobs or os.cpu_count() or 1, budget_bytes())


def print_plan(sweep: Sweep, out: Path, args: argparse.Namespace) -> None:
    """The points, each with its estimated memory and whether it would run."""
    from replay.sweep import Status, plan

    planned = plan(sweep, out.resolve(), args.resume)
    frame = pl.DataFrame({
        "point": [p.name for p in sweep.points],
        "model": [p.model for p in sweep.points],
        **{column: [p.values[column] for p in sweep.points] for column in sweep.columns},
        "seed": [p.seed for p in sweep.points],
        "memory_gib": [round(p.memory_bytes / 2**30, 2) for p in sweep.points],
        "action": ["run" if p.name not in planned.outcomes else Status.DONE.value
                   for p in sweep.points],
    })
    with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=10_000, fmt_str_lengths=250,
                   tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True):
        print(frame)
    print(f"{len(sweep.points)} points, {len(planned.to_run)} to run into {out}"
          + _concurrency(sweep, args))


def _concurrency(sweep: Sweep, args: argparse.Namespace) -> str:
    from replay.sweep import budget_bytes

    if args.executor == "ray":
        return f", as Ray tasks ({'at most ' + str(args.jobs) if args.jobs else 'as many as fit'} at once)"
    jobs, budget = args.jobs or os.cpu_count() or 1, budget_bytes()
    largest = max((p.memory_bytes for p in sweep.points), default=0)
    if budget is not None and largest:
        jobs = max(1, min(jobs, budget // largest))
        return (f", {jobs} at once (up to {largest / 2**30:.1f} GiB each of "
                f"{budget / 2**30:.1f} GiB available)")
    return f", {jobs} at once"
