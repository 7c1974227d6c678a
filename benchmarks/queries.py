"""Time every shipped query on a run directory (the target: under 5 s each on a 1M-pod run).

    replay synth --nodes 20000 --pods 1000000 --arrival-rate 2400 --bind least-allocated \\
        --seed 1 --out /tmp/big.parquet
    replay run /tmp/big.parquet --out /tmp/rbig --force
    python benchmarks/queries.py /tmp/rbig [--repeat 3] [--threads N]

Each query runs on a fresh connection, as ``replay query`` would, and its whole result is
fetched; the median of --repeat runs (wall and CPU seconds: on a shared machine CPU time is the
steadier figure) is printed with the range of the wall times, the result's row count, the load
average of the machine when it ran and the peak resident memory of this process.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from common import cpu_seconds, emit, peak_rss_mib
from replay.analysis.catalog import load_query, shipped
from replay.analysis.runs import open_runs, run_query


def time_query(run_dirs: list[str], name: str,
               threads: int | None) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (every DuckDB thread) and rows of one run of the query."""
    con = open_runs(run_dirs, settings={"threads": str(threads)} if threads else None)
    started, cpu_started = time.perf_counter(), cpu_seconds()
    rows = run_query(con, load_query(name), {}).to_arrow_table().num_rows
    return time.perf_counter() - started, cpu_seconds() - cpu_started, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--threads", type=int, help="DuckDB threads (default: all cores)")
    parser.add_argument("--only", nargs="*", default=shipped(), metavar="QUERY")
    args = parser.parse_args()
    print(f"{'query':<30} {'seconds':>8} {'range':>12} {'cpu s':>7} {'rows':>10}  load average")
    figures = {}
    for name in args.only:
        runs = [time_query(args.run_dirs, name, args.threads) for _ in range(args.repeat)]
        walls, cpus, rows = [r[0] for r in runs], [r[1] for r in runs], runs[0][2]
        wall, cpu = statistics.median(walls), statistics.median(cpus)
        load = os.getloadavg()[0]
        spread = f"{min(walls):.2f}-{max(walls):.2f}"
        print(f"{name:<30} {wall:8.2f} {spread:>12} {cpu:7.2f} {rows:10,}  {load:.1f}",
              flush=True)
        figures[name] = {"seconds": wall, "cpu_seconds": cpu, "range": [min(walls), max(walls)],
                         "rows": rows}
    peak_mib = peak_rss_mib()
    print(f"peak RSS {peak_mib:,.0f} MiB on {os.cpu_count()} cores")
    emit(queries=figures, peak_rss_mib=peak_mib)


if __name__ == "__main__":
    main()
