"""Value types for the options of more than one subcommand (argparse's ``type=``): a bad value
is a usage error that says what was expected."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """A whole number, at least 1 (``--jobs``, ``--bucket-minutes``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def output_path(text: str) -> str:
    """An ``--out`` that names a file or a folder: not ``-``, which reads as standard output
    (``replay ingest -`` reads standard input), and would otherwise become a file named ``-``."""
    if text == "-":
        raise argparse.ArgumentTypeError("- is standard output, where this command cannot write; "
                                         "name a path (./- for one named '-')")
    return text
