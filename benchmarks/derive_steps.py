"""Where `replay derive` spends its time: each step of a derived table's SQL (a DuckDB
temporary table, or numpy where ``replay.analysis`` computes it instead), then the final query
and the file's writing, with wall and process CPU time, the system's part of that CPU time and
the page faults behind most of it, the process's RSS and DuckDB's memory and spill after each.

    cp -r RUN_DIR /tmp/copy && python benchmarks/derive_steps.py /tmp/copy

It derives RUN_DIR's tables again in place (``replay derive``), so give it a copy.  CPU is the
process's, all threads (DuckDB's, the file writer's) included.
"""

from __future__ import annotations

import argparse
import resource
import time
from collections.abc import Callable

import duckdb

import replay.analysis.derive as derive_module
from replay.analysis.steps import Step, run_steps


def rss_mib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    return 0


def peak_mib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


class Clock:
    """Wall, CPU and system seconds and page faults since the last ``lap``."""

    def __init__(self) -> None:
        self.last = self._now()

    @staticmethod
    def _now() -> tuple[float, float, float, int]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return (time.perf_counter(), usage.ru_utime + usage.ru_stime, usage.ru_stime,
                usage.ru_minflt + usage.ru_majflt)

    def lap(self) -> tuple[float, float, float, int]:
        now = self._now()
        lapped = (now[0] - self.last[0], now[1] - self.last[1], now[2] - self.last[2],
                  now[3] - self.last[3])
        self.last = now
        return lapped


def timed_steps(clock: Clock) -> Callable[..., duckdb.DuckDBPyRelation]:
    """``run_steps`` printing a line per step as it is done."""
    def run(con: duckdb.DuckDBPyConnection, steps: list[Step], done: Callable[[int], object],
            replace: Callable[[str], bool]) -> duckdb.DuckDBPyRelation:
        names = iter(step.name for step in steps[:-1])
        swept: set[str] = set()

        def noting(name: str) -> bool:
            replaced = replace(name)
            if replaced:
                swept.add(name)
            return replaced

        def tick(count: int) -> None:
            name = next(names)
            wall, cpu, system, faults = clock.lap()
            memory, spilled = con.sql("""SELECT coalesce(sum(memory_usage_bytes), 0) >> 20,
                                                coalesce(sum(temporary_storage_bytes), 0) >> 20
                                         FROM duckdb_memory()""").fetchall()[0]
            print(f"{name:<20} {'numpy' if name in swept else 'duckdb':<6} wall {wall:6.2f} "
                  f"cpu {cpu:6.2f} (system {system:5.2f}, {faults:8,} faults)  "
                  f"rss {rss_mib():5} MiB  duckdb {memory:5} MiB, spilled {spilled:5} MiB",
                  flush=True)
            done(count)

        return run_steps(con, steps, done=tick, replace=noting)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    args = parser.parse_args()
    clock = Clock()
    derive_module.run_steps = timed_steps(clock)  # type: ignore[assignment]
    record = derive_module._record

    def recorded(*record_args) -> None:
        wall, cpu, system, faults = clock.lap()
        print(f"{'final, writing':<27} wall {wall:6.2f} cpu {cpu:6.2f} (system {system:5.2f}, "
              f"{faults:8,} faults)  rss {rss_mib():5} MiB")
        record(*record_args)

    derive_module._record = recorded  # type: ignore[assignment]
    start = Clock()
    rows = derive_module.derive(args.run_dir)
    wall, cpu, system, faults = start.lap()
    print(f"{rows}: wall {wall:.2f} s, cpu {cpu:.2f} s (system {system:.2f} s, {faults:,} page "
          f"faults), peak RSS {peak_mib():,} MiB")


if __name__ == "__main__":
    main()
