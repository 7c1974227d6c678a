"""``replay import NAME ... --out TRACE``: a public workload trace -> a trace file."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from replay.cli.arguments import output_path
from replay.times import time_argument
from replay.trace.importers import importers, run_import
from replay.trace.importers.base import Importer, option_fields

# How a command-line string becomes an option of each type an importer's options may have
CONVERTERS: dict[Any, Callable[[str], Any]] = {
    Path: Path, "Path": Path, datetime: time_argument, "datetime": time_argument,
    int: int, "int": int, float: float, "float": float, str: str, "str": str,
}


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = commands.add_parser(
        "import", help="turn a public workload trace into a trace",
        description="Import a public workload trace into trace format v1. Each trace has its "
                    "own subcommand and options; traces/README.md documents each mapping.")
    traces = parser.add_subparsers(title="traces", metavar="NAME", required=True)
    found, warnings = importers()
    for line in warnings:
        print(f"replay: warning: {line}", file=sys.stderr)
    for name, importer in found.items():
        sub = traces.add_parser(name, help=importer.help, description=importer.description,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        add_options(sub, importer)
        sub.add_argument("--out", required=True, type=output_path, metavar="TRACE",
                         default=argparse.SUPPRESS, help="trace file to write")
        sub.set_defaults(run=run, importer=importer)


def add_options(parser: argparse.ArgumentParser, importer: type[Importer[Any]]) -> None:
    """A ``--flag`` per field of the importer's options."""
    for option in option_fields(importer):
        required = option.default is dataclasses.MISSING
        parser.add_argument(
            f"--{option.name.replace('_', '-')}", dest=option.name,
            type=CONVERTERS[option.type], required=required,
            default=argparse.SUPPRESS if required else option.default,  # (no "default: None")
            metavar=option.metadata.get("metavar"), help=option.metadata.get("help"))


def run(args: argparse.Namespace) -> int:
    importer = args.importer()
    options = importer.options(**{o.name: getattr(args, o.name)
                                   for o in option_fields(args.importer)})
    result = run_import(importer, options, args.out)
    for line in result.warnings:
        print(f"replay: warning: {line}", file=sys.stderr)
    kinds = ", ".join(f"{n:,} {verb} {resource}" for (verb, resource), n in result.counts.items())
    print(f"wrote {args.out}: {sum(result.counts.values()):,} rows ({kinds})")
    return 0
