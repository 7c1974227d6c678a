"""Measure ``replay check`` on a run directory and print figures.

    python benchmarks/check.py [RUN_DIR] [--repeat 3]

Without RUN_DIR it checks the observe run of the 1M-pod / 20k-node trace (``observe.py``'s,
with its default watchers: one scheduler and a kubelet per node), replaying it first if it is
not in the system's temporary folder yet (about two minutes, kept for later runs).  Prints, per
repetition, the wall and CPU time (user + system, all threads) of the whole check; then the wall
time of each invariant run alone, and the process's peak resident memory.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

from common import big_trace, cpu_seconds

from replay.analysis.check import INVARIANTS, Reads, RunTables, check_run
from replay.api import run_replay
from replay.engine.config import load_config


def observe_run() -> Path:
    out = Path(tempfile.gettempdir()) / "replay-bench-1M-observe"
    if not (out / "manifest.json").exists():
        print(f"replaying {big_trace()} into {out} ...", flush=True)
        run_replay(big_trace(), load_config(), out=out, force=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", nargs="?", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    run_dir = args.run_dir or observe_run()
    for i in range(args.repeat):
        wall, cpu = time.perf_counter(), cpu_seconds()
        findings = check_run(run_dir)
        wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
        failed = [f.invariant for f in findings if not f.ok]
        print(f"check {i + 1}: {wall:.2f} s wall, {cpu:.2f} s cpu; "
              f"{'FAILED: ' + ', '.join(failed) if failed else 'every invariant holds'}")
    run = RunTables(run_dir)
    print("each invariant alone (after the tables it shares were read):")
    for invariant in INVARIANTS:
        started = time.perf_counter()
        invariant.check(run.dir if invariant.reads is Reads.FILES else run)
        print(f"  {invariant.id:<30} {time.perf_counter() - started:6.2f} s")
    run.close()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak:,.0f} MiB")


if __name__ == "__main__":
    main()
