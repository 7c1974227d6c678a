"""Entry point of the ``replay`` command: parses arguments, runs a subcommand, reports errors.

Bad input raises ``ReplayError`` and is printed as one line on stderr with exit status 1, and so
is any operating-system error (``PATH: cause``: a full disk, a read-only folder); usage errors
exit 2 as argparse does.  Ctrl-C prints ``replay: interrupted`` and exits 130, after every
partial output has been removed (the writers' own cleanup, ``replay.atomic``).
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys

import polars as pl

from replay import __version__, interrupts
from replay.cli import (calibrate, check, default, derive, importer, ingest, models, query, report,
                        run, sweep, synth, validate)
from replay.errors import ReplayError, os_error_message

# Each command's module imports what the command runs only when it runs (``replay run``'s models
# and engine, their compiled kernels and numba; ``replay check``'s invariants): a command loads
# what it needs, and ``replay query`` starts in about half the time it took with all of them.
COMMANDS = (synth, ingest, importer, validate, run, derive, models, query, calibrate, report, sweep,
            check)
# What DuckDB's Python client raises, rather than KeyboardInterrupt, when Ctrl-C stops a query
# (replay.interrupts)
DUCKDB_INTERRUPTED = "Query interrupted"


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


def check_not_a_misspelt_command(parser: argparse.ArgumentParser, word: str) -> None:
    """A usage error for ``replay rnu trace.parquet``: a first argument that names no file and
    could not be a path (no ``/`` or ``.``) is a command mistyped, not a trace to replay."""
    if os.path.exists(word) or "/" in word or "." in word:
        return
    names = command_names(parser)
    close = difflib.get_close_matches(word, names, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"commands: {', '.join(names)}"
    parser.error(f"{word!r} is neither a command nor a trace file ({hint})")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    _never_fail_to_print()
    try:
        _check_utf8(argv)
        parser = build_parser()
        _load_numpy_interfaces()
        interrupts.install()
        warned = _warn_if_uncached()  # kernels imported before (by a test, a notebook)
        if argv == ["help"]:
            parser.print_help()
            return 0
        if is_trace_shortcut(parser, argv):
            check_not_a_misspelt_command(parser, argv[0])
            return default.main(argv)
        args = parser.parse_args(argv)
        try:
            return args.run(args) or 0
        finally:
            if not warned:
                _warn_if_uncached()  # the kernels the command imported
    except ReplayError as err:
        return _failed(str(err).strip().splitlines()[0] if str(err).strip() else "failed")
    except KeyboardInterrupt:
        return _failed("interrupted", prefix="replay: ", status=130)
    except RuntimeError as err:
        if str(err) != DUCKDB_INTERRUPTED:
            raise
        return _failed("interrupted", prefix="replay: ", status=130)
    except BrokenPipeError:
        sys.stderr.close()  # the reader went away (e.g. `| head`); nothing more to say
        return 0
    except MemoryError:
        return _failed("out of memory")
    except OSError as err:
        return _failed(os_error_message(err))
    except BaseException as err:  # Ctrl-C inside a native library surfaces as its own exception
        if isinstance(err, SystemExit) or not interrupts.received():
            raise
        return _failed("interrupted", prefix="replay: ", status=130)


def _never_fail_to_print() -> None:
    """Characters that stdout's or stderr's encoding lacks (a Gödel model's name, a table's
    lines, with ``PYTHONIOENCODING=ascii`` or a Latin-1 locale) are printed as escapes, not a
    traceback."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")


def _check_utf8(argv: list[str]) -> None:
    """Refuse an argument, or a current directory, that is not UTF-8 (a file name in another
    encoding, which Python holds as escapes): Arrow, DuckDB and polars take UTF-8 names only,
    and failed on one with a traceback half-way through a run."""
    try:
        here = os.getcwd()
    except OSError:
        here = "."  # removed meanwhile: the first path used reports it
    for name, what in ((here, "the current directory "), *((arg, "") for arg in argv)):
        try:
            name.encode()
        except UnicodeEncodeError as err:
            shown = os.fsencode(name).decode(errors="backslashreplace")
            raise ReplayError(f"{what}{shown}: not UTF-8 (byte {err.start}); the libraries "
                              f"replay reads and writes with take UTF-8 names only: rename "
                              f"it") from None


def _warn_if_uncached() -> bool:
    """Say so when numba could cache none of the kernels imported so far (``replay.jit``, if a
    command imported it): every command then spends seconds compiling them again, which one
    setting avoids.  Whether it said so."""
    jit = sys.modules.get("replay.jit")
    if jit is None or not jit.UNCACHED:
        return False
    try:
        print("replay: warning: numba has no writable folder to cache its compiled kernels in "
              "(the package is read-only, and so is ~/.cache), so each command compiles them "
              "again; set NUMBA_CACHE_DIR to a writable folder", file=sys.stderr)
    except (OSError, ValueError):
        pass  # stderr is gone (a closed pipe)
    return True


def _load_numpy_interfaces() -> None:
    """Load polars' NumPy interface now.  Loaded lazily, on a first ``to_numpy``, it runs Python
    code inside a Rust call, where a Ctrl-C panics the Rust side and prints its backtrace."""
    pl.Series([0]).to_numpy()


def _failed(message: str, prefix: str = "replay: error: ", status: int = 1) -> int:
    """Print ``message`` as the one line of a failure."""
    try:
        print(f"{prefix}{message}", file=sys.stderr, flush=True)
    except OSError:
        pass  # stderr is gone too
    return status
