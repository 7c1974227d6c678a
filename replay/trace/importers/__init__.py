"""Public workload traces -> trace format v1 (``replay import NAME``), one module per trace.

An importer is a module (or any object) with:

- ``NAME``: the subcommand, e.g. ``alibaba-gpu-2023``;
- ``HELP`` and ``DESCRIPTION``: one line for the command list, a paragraph for ``--help``;
- ``add_arguments(parser)``: its input options (``--out`` is added for it);
- ``rows(args) -> polars.DataFrame``: the trace rows, in any order, with ``ts`` and the other
  required columns and any extra columns worth keeping; ``csvfile.read_csv`` reads an input
  file with one-line errors that name the file, line and column;
- ``source_args(args) -> dict``: what to record in the trace's ``replay.source_args`` (file names
  and options, never contents);
- ``inputs(args) -> list[str]`` (optional): the files it reads, which ``--out`` must not touch.

``run_import`` sorts the rows stably by ``ts`` (rows with equal times keep the order ``rows``
gave), writes the trace atomically and returns the counts for the summary.  Google Borg 2019
(``InstanceEvent``: SUBMIT -> pod create, SCHEDULE -> binding, FINISH/KILL/EVICT -> delete) or
Alibaba 2018 (``batch_instance``) would each be one more such module; a trace too large for memory
would stream instead, but the protocol would stay the same apart from ``rows``.

Built-in importers are listed in ``BUILTIN``; installed packages can add their own through the
entry-point group ``replay.importers`` (each entry point loads an object as above).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from importlib import metadata
from types import ModuleType

from replay.outputs import check_output
from replay.trace.importers import alibaba_gpu_2023
from replay.trace.io import write_trace

BUILTIN: tuple[ModuleType, ...] = (alibaba_gpu_2023,)
ENTRY_POINT_GROUP = "replay.importers"


def importers() -> dict[str, object]:
    """Every importer by name: the built-ins, then those of installed packages."""
    found = {imp.NAME: imp for imp in BUILTIN}
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            imp = entry.load()
        except Exception as err:  # a broken plug-in must not break every command
            print(f"replay: warning: importer {entry.name!r} cannot be loaded: {err}",
                  file=sys.stderr)
            continue
        found.setdefault(imp.NAME, imp)
    return found


def run_import(importer, args: argparse.Namespace) -> Counter:
    """Write the trace of ``importer`` to ``args.out``; returns rows by (verb, resource)."""
    check_output(args.out, importer.inputs(args) if hasattr(importer, "inputs") else [])
    frame = importer.rows(args).sort("ts", maintain_order=True)
    write_trace(frame, args.out, source=importer.NAME, source_args=importer.source_args(args))
    counts = frame.group_by("verb", "resource", maintain_order=True).len()
    return Counter({(verb, resource): n for verb, resource, n in counts.iter_rows()})
