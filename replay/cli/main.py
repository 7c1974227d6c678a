"""Entry point of the ``replay`` command: parses arguments, runs a subcommand, reports errors.

Bad input raises ``ReplayError`` (or a ``ValueError`` from argument parsing) and is printed as one
line on stderr with exit status 1; usage errors exit 2 as argparse does.
"""

from __future__ import annotations

import argparse
import sys

from replay import __version__
from replay.cli import (calibrate, default, derive, importer, ingest, models, query, run, sweep,
                        synth, validate)
from replay.errors import ReplayError

COMMANDS = (synth, ingest, importer, validate, run, derive, models, query, calibrate, sweep)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="replay", usage=f"{default.USAGE}\n       replay COMMAND ...",
        description="Replay Kubernetes scheduler traces through a model of list-watch delay. "
                    "`replay TRACE` replays a trace with the default model and prints the "
                    "headline answers (`replay run TRACE --force` then `replay query RUN_DIR`; "
                    "the options of `replay run` work after it); the commands below do each "
                    "step on its own.",
    )
    parser.add_argument("--version", action="version", version=f"replay {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True,
                                     prog="replay")
    for command in COMMANDS:
        command.add_parser(commands)
    return parser


def command_names(parser: argparse.ArgumentParser) -> list[str]:
    """The names of the commands ``parser`` knows."""
    return [name for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name in action.choices]


def is_trace_shortcut(parser: argparse.ArgumentParser, argv: list[str]) -> bool:
    """``replay TRACE ...``: the first argument is neither an option nor a command."""
    return bool(argv) and not argv[0].startswith("-") and argv[0] not in command_names(parser)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    try:
        if is_trace_shortcut(parser, argv):
            return default.main(argv)
        args = parser.parse_args(argv)
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
