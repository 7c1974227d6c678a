"""Where a replay's memory peaks: `replay run` with its RSS sampled every 50 ms, marked per phase.

    python benchmarks/memory_phases.py TRACE [--model godel] [--out RUN_DIR]

Prints the peak RSS of the whole run, then each phase mark (the replay loop's start and end, or
its pauses to hand on a part of the deliveries; each table built; each table file closed; the
derivation) with the elapsed seconds, CPU seconds, RSS at the mark and the largest RSS sampled
since the previous mark.  The marks wrap engine functions, so a phase that a version of the
engine lacks is simply not marked.
"""

from __future__ import annotations

import argparse
import functools
import os
import resource
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import replay.api as application
import replay.engine.core as core
import replay.engine.rundir as rundir
import replay.engine.simulation as simulation
from replay.api import run_replay
from replay.engine.config import load_config

START = time.perf_counter()
samples: list[tuple[float, float]] = []
marks: list[tuple[float, str, float, float]] = []


def rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def sample() -> None:
    while True:
        samples.append((time.perf_counter() - START, rss_mib()))
        time.sleep(0.05)


def mark(name: str) -> None:
    marks.append((time.perf_counter() - START, name, rss_mib(), cpu()))


def marked(owner: Any, attribute: str, name: str) -> None:
    """Mark the start and the end of every call of ``owner.attribute``, if it exists."""
    if not hasattr(owner, attribute):
        return
    function: Callable[..., Any] = getattr(owner, attribute)

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        mark(f"{name} start")
        result = function(*args, **kwargs)
        mark(f"{name} end")
        return result

    setattr(owner, attribute, wrapper)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--model", default="godel")
    parser.add_argument("--out", type=Path, help="keep the run directory here")
    args = parser.parse_args()
    marked(core.Environment, "run", "replay loop")
    for table in ("_events_part", "_events_table", "_attempts_table", "_pods_table"):
        marked(simulation.Simulation, table, table.strip("_"))
    marked(simulation._Log, "_part", "deliveries part")
    marked(simulation._Log, "deliveries_table", "deliveries table")
    marked(rundir.TableFile, "close", "table file closed")
    marked(application, "derive", "derivation")
    threading.Thread(target=sample, daemon=True).start()
    with tempfile.TemporaryDirectory() as tmp:
        mark("begin")
        run_replay(args.trace, load_config(model=args.model), out=args.out or Path(tmp) / "run",
                   force=True)
        mark("end")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak:,.0f} MiB, CPU {cpu():.1f} s")
    previous = 0.0
    for at, name, rss, seconds in marks:
        since = max((r for t, r in samples if previous <= t <= at), default=rss)
        print(f"{at:8.1f} s  CPU {seconds:7.1f} s  RSS {rss:7,.0f} MiB  "
              f"(largest since the last mark {since:7,.0f})  {name}")
        previous = at


if __name__ == "__main__":
    main()
