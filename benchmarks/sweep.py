"""A sweep of many small points, timed: what ``replay sweep`` pays for each point beyond its
replay (its process, its imports, numba's start and kernels).

    python benchmarks/sweep.py [SWEEP.toml] [--jobs N]

Runs the sweep (``examples/sweep.toml`` by default: 24 points of the bundled sample, three
what-if models by two scheduler counts by two network tails by two seeds) into a temporary
directory as a user would (``python -m replay sweep``), then prints its wall time, its points
per minute and, from its index, its points' wall times and peak memory.  The points' CPU is not
the sweep process's (they are the children of its fork server, ``replay/forkserver.py``), so
the script gives the machine's busy CPU seconds over the sweep instead (from /proc/stat: every
process's, so on a quiet machine).  The result line: ``seconds``, ``points``,
``points_per_min``, ``point_median_s``, ``point_max_s``, ``point_peak_mib`` (the largest) and
``machine_cpu_s`` (where there is /proc/stat).  The figures do not depend on ``run_all.py``'s
scale: the example's trace is the sample.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

from common import emit

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "sweep.toml"
CLOCK_TICKS = 100  # /proc/stat's unit, USER_HZ, on Linux


def busy_cpu_s() -> float | None:
    """The machine's CPU seconds not idle since it started, or None without /proc/stat."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", nargs="?", type=Path, default=EXAMPLE)
    parser.add_argument("--jobs", type=int, help="replay sweep's --jobs (default: its own)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "sweep"
        command = [sys.executable, "-m", "replay", "sweep", str(args.sweep.resolve()),
                   "--out", str(out), *(["--jobs", str(args.jobs)] if args.jobs else [])]
        cpu, started = busy_cpu_s(), time.perf_counter()
        subprocess.run(command, check=True, cwd=REPO)
        seconds = time.perf_counter() - started
        used = busy_cpu_s()
        index = pq.read_table(out / "sweep.parquet").to_pydict()
    walls = sorted(index["wall_seconds"])
    points = len(walls)
    peak_mib = max(index["peak_memory_bytes"]) / 2**20
    machine = None if cpu is None or used is None else used - cpu
    print(f"{points} points in {seconds:.1f} s ({points * 60 / seconds:.1f} points/min); "
          f"a point {statistics.median(walls):.2f} s ({walls[0]:.2f}-{walls[-1]:.2f}), "
          f"at most {peak_mib:,.0f} MiB" + ("" if machine is None else
                                            f"; the machine's busy CPU {machine:.1f} s"))
    emit(seconds=seconds, points=points, points_per_min=points * 60 / seconds,
         point_median_s=statistics.median(walls), point_max_s=walls[-1], point_peak_mib=peak_mib,
         **({} if machine is None else {"machine_cpu_s": machine}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
