"""``replay run TRACE``: replay a trace through a scheduler-cache model into a run directory."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from replay.cli.arguments import output_path

if TYPE_CHECKING:
    from replay.api import RunResult


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = commands.add_parser(
        "run", help="replay a trace through a model of the watch pipeline",
        description="Replay TRACE event by event through the list-watch delay pipeline and a "
                    "scheduler-cache model, and write a run directory of Parquet tables "
                    "(docs/run-directory.md). Default model: observe when the trace records "
                    "bindings. The configuration (stage costs, watchers, model parameters) is "
                    "documented in docs/config.md.")
    add_run_options(parser)
    parser.add_argument("--force", action="store_true",
                        help="replace RUN_DIR if it exists (only once the new run is complete)")
    parser.set_defaults(run=run)


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """The trace and the options that choose what to replay (shared with ``replay TRACE``)."""
    parser.add_argument("trace", metavar="TRACE", help="trace file (trace format v1)")
    parser.add_argument("--model", help="model name (see `replay models`)")
    parser.add_argument("--config", metavar="FILE.toml", help="run configuration")
    parser.add_argument("-p", dest="params", action="append", default=[], metavar="KEY=VALUE",
                        help="set a model parameter (repeatable); overrides [model] in --config")
    parser.add_argument("--seed", type=int, help="random seed (overrides the config's)")
    parser.add_argument("--out", type=output_path, metavar="RUN_DIR",
                        help="run directory to write (default: runs/<trace stem>-<model>)")


def run(args: argparse.Namespace) -> int:
    print_summary(replay_from(args, force=args.force))
    return 0


def replay_from(args: argparse.Namespace, force: bool) -> RunResult:
    """The replay that the run options in ``args`` ask for."""
    from replay.api import load_config, run_replay  # (cli/main.py: imported when run)

    config = load_config(args.config, overrides=args.params, seed=args.seed, model=args.model)
    return run_replay(args.trace, config, out=args.out, force=force)


def print_summary(result: RunResult) -> None:
    for note in result.notes:
        print(f"replay: warning: {note}", file=sys.stderr)
    print(f"model {result.model}: {result.rows['events']:,} events, "
          f"{result.watchers:,} watchers, {result.rows['deliveries']:,} deliveries")
    for role, deliveries, p50, p99 in result.delay_by_role.iter_rows():
        print(f"  end-to-end watch delay, {role}: p50 {p50:.3f} ms, p99 {p99:.3f} ms "
              f"({deliveries:,} deliveries)")
    print(f"  scheduling attempts {result.attempts:,}, conflicts {result.conflicts:,}, "
          f"unschedulable {result.unschedulable:,}")
    print(f"  capacity windows {result.rows['capacity_windows']:,} "
          f"(derived in {result.seconds['derive']:.1f} s, after {result.seconds['replay']:.1f} s "
          f"of replay)")
    print(f"wrote {result.out}")
