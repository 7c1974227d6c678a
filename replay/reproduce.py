"""Replaying a run again to show it is deterministic: the ``deterministic`` invariant.

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
from pathlib import Path

from replay.analysis.check import Finding, Status, compare_runs
from replay.engine.config import from_description
from replay.engine.rundir import read_manifest, sha256_of
from replay.errors import ReplayError

# The second replay, as a new process sees it: DuckDB's connections get one thread (DuckDB reads
# no environment variable for it), polars one (POLARS_MAX_THREADS, set by the caller).
_AGAIN = """
import functools, json, sys
import duckdb
duckdb.connect = functools.partial(duckdb.connect, config={"threads": 1})
from replay.api import run_replay
from replay.engine.config import from_description
run_replay(sys.argv[1], from_description(json.loads(sys.argv[2])), out=sys.argv[3])
"""


def replay_again(run_dir: str | os.PathLike, out: str | os.PathLike) -> None:
    """Replay ``run_dir``'s trace with its recorded configuration into ``out``, in a new process
    with one polars thread and one DuckDB thread."""
    manifest = read_manifest(run_dir)
    trace = Path(manifest.get("trace", {}).get("path", ""))
    if not trace.is_file():
        raise ReplayError(f"{run_dir}: its trace {str(trace)!r} is not here to replay again")
    if sha256_of(trace) != manifest["trace"].get("sha256"):
        raise ReplayError(f"{run_dir}: its trace {trace} changed since the run (sha256 differs)")
    described = manifest.get("config", {})
    from_description(described)  # a bad record is one line here, not a traceback there
    done = subprocess.run(
        [sys.executable, "-c", _AGAIN, str(trace), json.dumps(described), str(out)],
        env={**os.environ, "POLARS_MAX_THREADS": "1"}, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise ReplayError(f"{run_dir}: replaying it again failed: {last}")


def deterministic(run_dir: str | os.PathLike) -> Finding:
    """The ``deterministic`` invariant: the run replayed again is byte for byte the same."""
    with tempfile.TemporaryDirectory(prefix="replay-again-") as folder:
        again = Path(folder) / Path(run_dir).name
        try:
            replay_again(run_dir, again)
        except ReplayError as err:
            return Finding("deterministic", Status.NOT_APPLICABLE, note=str(err))
        return compare_runs(run_dir, again)
