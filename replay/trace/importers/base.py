"""What every importer is: a name, typed options, the files it reads, and the rows it makes.

The same contract as a model's (``replay.models.base.Model``): a class whose class attributes
describe it, constructed with typed options, raising ``ReplayError`` for bad input and returning
warnings instead of printing them, so that a notebook and the command line use it alike.  The
options are a frozen dataclass whose fields the command line turns into ``--flags``: each
field's type (``Path``, ``datetime``, ``int``, ``float``, ``str``), its default (none: required)
and its ``metadata["help"]`` (and optionally ``metadata["metavar"]``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, ClassVar, Generic, NamedTuple, TypeVar

import polars as pl

Options = TypeVar("Options")


class Imported(NamedTuple):
    """An importer's trace rows, in any order (``run_import`` sorts them by ``ts``), and what it
    has to say about them."""

    rows: pl.DataFrame
    warnings: list[str]


class Importer(Generic[Options]):
    """Base class of importers; subclasses set the class attributes and implement the methods."""

    name: ClassVar[str]  # the subcommand, e.g. ``alibaba-gpu-2023``
    help: ClassVar[str]  # one line for the command list
    description: ClassVar[str]  # a paragraph for ``--help``
    options: ClassVar[type[Any]]  # a frozen dataclass of the importer's options

    def inputs(self, options: Options) -> list[Path]:
        """The files the import reads, which its output must never touch."""
        raise NotImplementedError

    def source_args(self, options: Options) -> dict[str, str]:
        """What to record in the trace's ``replay.source_args``: file names and options, never
        contents."""
        raise NotImplementedError

    def rows(self, options: Options) -> Imported:
        """The trace rows, with ``ts`` and the other required columns and any extra columns
        worth keeping; ``replay.trace.importers.csvfile.read_csv`` reads a CSV file with
        one-line errors that name the file, line and column."""
        raise NotImplementedError


def option_fields(importer: type[Importer[Any]]) -> list[dataclasses.Field[Any]]:
    """The fields of an importer's options, in order."""
    return list(dataclasses.fields(importer.options))
