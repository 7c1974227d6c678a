"""Entry point of the ``replay`` command: parses arguments, runs a subcommand, reports errors.

Bad input raises ``ReplayError`` (or a ``ValueError`` from argument parsing) and is printed as one
line on stderr with exit status 1; usage errors exit 2 as argparse does.
"""

from __future__ import annotations

import argparse
import sys

from replay import __version__
from replay.cli import derive, importer, ingest, models, query, run, sweep, synth, validate
from replay.errors import ReplayError

COMMANDS = (synth, ingest, importer, validate, run, derive, models, query, sweep)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="replay",
        description="Replay Kubernetes scheduler traces through a model of list-watch delay.",
    )
    parser.add_argument("--version", action="version", version=f"replay {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args) or 0
    except ReplayError as err:
        print(f"replay: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("replay: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        sys.stderr.close()  # the reader went away (e.g. `| head`); nothing more to say
        return 0
