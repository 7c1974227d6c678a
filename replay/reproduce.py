"""Replaying runs again to show they are deterministic: the ``deterministic`` invariant.

A run directory's manifest records the trace (its path and sha256) and the resolved configuration
(seed included), so the same replay can be made again.  It is made in a new process, with one
polars thread and one DuckDB thread (the first run used every core), and every file of the two
run directories is compared byte for byte (``replay.analysis.check.compare_runs``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from replay.analysis.check import Finding, Status, compare_runs
from replay.engine.config import from_description
from replay.engine.rundir import MANIFEST_EXTRA, read_manifest, sha256_of
from replay.errors import ReplayError

# The second replays, as a new process sees them: DuckDB's connections get one thread (DuckDB
# reads no environment variable for it), polars one (POLARS_MAX_THREADS, set by the caller).
_AGAIN = """
import functools, json, os, sys
import duckdb
duckdb.connect = functools.partial(duckdb.connect, config={"threads": 1})
from replay.api import run_replay
from replay.engine.config import from_description
for trace, config, extra, out, folder in json.loads(sys.argv[1]):
    os.chdir(folder)
    run_replay(trace, from_description(config), out=out, manifest_extra=extra)
"""


def recorded_replay(run_dir: str | os.PathLike) -> tuple[str, dict, dict, str]:
    """The trace and the configuration ``run_dir`` was replayed with, what its manifest records
    beside them (a sweep point's ``sweep``, which the manifest made again must hold too), and
    the folder the trace's path is relative to (``trace_folder``); a one-line error if the
    trace is not there, or has changed since."""
    manifest = read_manifest(run_dir)
    trace = manifest.get("trace", {}).get("path", "")
    folder = trace_folder(run_dir, Path(trace), manifest["trace"].get("sha256"))
    described = manifest.get("config", {})
    from_description(described)  # a bad record is one line here, not a traceback there
    return trace, described, {k: manifest[k] for k in MANIFEST_EXTRA if k in manifest}, folder


def trace_folder(run_dir: str | os.PathLike, trace: Path, sha256: str | None) -> str:
    """Where a run's trace path, recorded as it was given, leads to the trace it replayed (the
    same sha256): from the current directory, or else, for a relative path, from the run
    directory's folder or one of its parents (``replay run traces/t.parquet --out runs/t`` made
    in a project's folder, checked from elsewhere).  The replay made again runs there, so that
    its manifest records the same path."""
    folders = [Path.cwd()]
    if not trace.is_absolute():
        folders += Path(run_dir).resolve().parents
    found = [folder for folder in folders if (folder / trace).is_file()]
    for folder in found:
        if sha256_of(folder / trace) == sha256:
            return str(folder)
    if found:
        raise ReplayError(f"{run_dir}: its trace {found[0] / trace} changed since the run "
                          "(sha256 differs)")
    raise ReplayError(f"{run_dir}: its trace {str(trace)!r} is not here to replay again (not "
                      "from the current directory, nor from the run directory's folders)")


def replay_again(runs: list[tuple[str | os.PathLike, str | os.PathLike]]) -> None:
    """Replay each run directory's trace with its recorded configuration into its ``out``, all
    in one new process with one polars thread and one DuckDB thread."""
    jobs = []
    for run_dir, out in runs:
        trace, described, extra, folder = recorded_replay(run_dir)
        jobs.append((trace, described, extra, str(Path(out).resolve()), folder))
    done = subprocess.run([sys.executable, "-c", _AGAIN, json.dumps(jobs)],
                          env={**os.environ, "POLARS_MAX_THREADS": "1"}, capture_output=True,
                          text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise ReplayError(f"replaying again failed: {last}")


def deterministic(run_dirs: Sequence[str | os.PathLike]) -> dict[str, Finding]:
    """The ``deterministic`` invariant of each run: replayed again, byte for byte the same."""
    findings: dict[str, Finding] = {}
    with tempfile.TemporaryDirectory(prefix="replay-again-") as folder:
        again: dict[str, Path] = {}
        for i, run_dir in enumerate(map(str, run_dirs)):
            try:
                recorded_replay(run_dir)
                again[run_dir] = Path(folder) / str(i) / Path(run_dir).name
            except ReplayError as err:
                findings[run_dir] = Finding("deterministic", Status.NOT_APPLICABLE, note=str(err))
        try:
            replay_again(list(again.items()))
        except ReplayError as err:
            return findings | {run_dir: Finding("deterministic", Status.NOT_APPLICABLE,
                                                note=str(err)) for run_dir in again}
        return findings | {run_dir: compare_runs(run_dir, out) for run_dir, out in again.items()}
