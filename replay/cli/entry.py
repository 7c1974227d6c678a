"""The ``replay`` command's entry point (``pyproject.toml``'s script, ``python -m replay``).

It loads the command line's modules itself, so that a Ctrl-C while they load (a second or so:
polars, pyarrow, DuckDB, numba) is reported as any other, ``replay: interrupted`` and exit 130,
rather than as Python's traceback of the import it stopped.
"""

from __future__ import annotations

import sys


def main() -> int:
    """Load ``replay.cli.main`` and run it on ``sys.argv``."""
    try:
        from replay.cli.main import main as run
    except KeyboardInterrupt:
        print("replay: interrupted", file=sys.stderr)
        status = 130
    else:
        status = run()
    _forget_escaped_interrupts()
    return status


def _forget_escaped_interrupts() -> None:
    """Make the exit status the one returned.  Under ``python -m`` CPython (3.11, 3.12)
    remembers a KeyboardInterrupt that escaped an ``exec`` or ``eval`` of a string, even one
    caught later, and at exit kills the process with SIGINT instead (status -2, where 130 was
    returned).  Imports and the namedtuples, dataclasses and enums they make run such code, so
    a Ctrl-C while a module loads often escapes one.  Each such ``exec`` forgets what the one
    before it remembered: one that succeeds leaves nothing remembered."""
    exec("pass")  # a constant string, run for the side effect above
