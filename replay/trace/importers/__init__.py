"""Public workload traces -> trace format v1 (``replay import NAME``), one class per trace.

An importer subclasses ``replay.trace.importers.base.Importer``: a name, a help line and a
description, a frozen dataclass of typed options (the command line makes its flags from the
fields), the files it reads, and its rows (``Imported``: a frame and any warnings).  ``run_import``
checks the output against the inputs, sorts the rows stably by ``ts`` (rows with equal times keep
the order the importer gave), refuses rows that ``replay validate`` would refuse (a plugin's
unknown verb, negative request or missing column), writes the trace atomically and returns the
counts for the summary.
Google Borg 2019 (``InstanceEvent``: SUBMIT -> pod create, SCHEDULE -> binding,
FINISH/KILL/EVICT -> delete) or Alibaba 2018 (``batch_instance``) would each be one more such
class; a trace too large for memory would stream instead.

Built-in importers are listed in ``BUILTIN``; installed packages add their own through the
entry-point group ``replay.importers`` (each entry point names an ``Importer`` subclass), the
same mechanism as models (``replay.models``).
"""

from __future__ import annotations

import os
from collections import Counter
from importlib import metadata
from typing import Any, NamedTuple

import polars as pl

from replay.errors import ReplayError
from replay.outputs import check_output
from replay.trace.importers.alibaba_gpu_2023 import AlibabaGpu2023
from replay.trace.importers.base import Importer
from replay.trace.importers.parquet_table import ParquetTable
from replay.trace import schema
from replay.trace.io import conform, write_trace
from replay.trace.validate import value_problems

BUILTIN: tuple[type[Importer[Any]], ...] = (AlibabaGpu2023, ParquetTable)
ENTRY_POINT_GROUP = "replay.importers"


def importers() -> tuple[dict[str, type[Importer[Any]]], list[str]]:
    """Every importer by name (the built-ins, then those of installed packages), and a warning
    for each installed one that cannot be loaded (a broken plugin must not break every
    command)."""
    found: dict[str, type[Importer[Any]]] = {imp.name: imp for imp in BUILTIN}
    warnings = []
    for entry in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=_package):
        try:
            imp = entry.load()
        except Exception as err:  # a third-party plugin may fail in any way on import
            warnings.append(f"importer {entry.name!r} cannot be loaded: {err}")
            continue
        if not (isinstance(imp, type) and issubclass(imp, Importer)):
            warnings.append(f"importer {entry.name!r} ({entry.value}) is not an Importer class")
            continue
        taken = found.setdefault(imp.name, imp)
        if taken is not imp:
            warnings.append(f"importer {entry.name!r} ({entry.value}) is not used: "
                            f"{taken.__module__}.{taken.__qualname__} has its name "
                            f"{imp.name!r} (built-ins come first, then packages by name, "
                            "each in its own order)")
    return found, warnings


def _package(entry: metadata.EntryPoint) -> str:
    return entry.dist.name if entry.dist is not None else ""


class ImportResult(NamedTuple):
    counts: Counter[tuple[str, str]]  # rows by (verb, resource)
    warnings: list[str]


def run_import(importer: Importer[Any], options: Any,
               out: str | os.PathLike[str]) -> ImportResult:
    """Write the trace of ``importer`` with ``options`` to ``out``."""
    check_output(out, importer.inputs(options))
    imported = importer.rows(options)
    frame = imported.rows
    if not frame["ts"].is_sorted():  # (a sorted table, as most are, is not copied)
        frame = frame.sort("ts", maintain_order=True)
    try:
        table = conform(frame)
    except ValueError as err:  # a plugin's rows that trace format v1 cannot hold
        raise ReplayError(f"importer {importer.name!r}: {err}") from None
    problems = value_problems(pl.DataFrame(table), list(schema.COLUMN_NAMES))
    if problems:  # (a plugin's rows; the built-ins check what they read)
        raise ReplayError(f"importer {importer.name!r}: {problems[0]}")
    write_trace(table, out, source=importer.name, source_args=importer.source_args(options))
    counts = frame.group_by("verb", "resource", maintain_order=True).len()
    return ImportResult(Counter({(verb, resource): n for verb, resource, n in counts.iter_rows()}),
                        imported.warnings)
