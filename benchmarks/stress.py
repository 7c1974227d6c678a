"""The watch pipeline under load: the stress scenario of docs/watch-pipeline.md, with bounded
buffers (upstream's) and with buffers that never fill, and the figures the docs quote.

    python benchmarks/stress.py [--config benchmarks/stress-slow-watcher.toml]

Synthesizes a busy trace (2,000 nodes with 10 s heartbeats, 100,000 pods at 1,000/s living 60 s
on average, bound by an ideal scheduler; kept in the system's temporary folder), replays it
through observe with the config, and again with ``[stages.watcher_queue] buffer = 10^9``.
Prints, for each: the terminations (by watch and recovery), the re-lists, the end-to-end delay
per role (p50, p99, max), how long the dispatchers were held back, and the replay's wall time.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

import polars as pl

from replay.analysis.catalog import load_query
from replay.analysis.runs import PARAMETERS, open_runs, run_query
from replay.api import run_replay
from replay.engine.config import load_config
from replay.trace.synth import SynthSpec, synthesize

BUSY = SynthSpec(nodes=2_000, pods=100_000, arrival_rate=1_000.0, mean_lifetime=60.0,
                 heartbeat_interval=10.0, bind="least-allocated", seed=1)
UNBOUNDED = 1_000_000_000


def busy_trace() -> Path:
    path = Path(tempfile.gettempdir()) / "replay-bench-stress.parquet"
    if not path.exists():
        print(f"synthesizing {path} ...", flush=True)
        synthesize(BUSY, path)
    return path


def report(run_dir: Path, label: str, seconds: float) -> None:
    def table(name: str) -> pl.DataFrame:
        return pl.read_parquet(run_dir / f"{name}.parquet")

    terminations, relists, waits = (table(n) for n in ("watch_terminations", "relists",
                                                       "dispatch_waits"))
    delay = table("deliveries").with_columns(
        ms=(pl.col("applied_ts") - pl.col("commit_ts")).dt.total_microseconds() / 1000)
    print(f"{label}: replay {seconds:.1f} s; {terminations.height} terminations, "
          f"{relists.height} re-lists")
    for watcher, resource, recovery, count in terminations.group_by(
            "watcher", "resource", "recovery").len().sort("watcher", "resource").rows():
        print(f"  terminated {count} x {watcher} / {resource}, recovered by {recovery}")
    stalled = waits.group_by("resource", "rv").agg(
        held=(pl.col("end_ts") - pl.col("start_ts")).max().dt.total_microseconds() / 1e6)
    for resource, held in stalled.group_by("resource").agg(pl.col("held").sum()).sort(
            "resource").rows():
        print(f"  the {resource} dispatcher held back {held:.2f} s in all")
    percentiles = {"p50": pl.col("ms").quantile(0.5, "nearest"),
                   "p99": pl.col("ms").quantile(0.99, "nearest"), "max": pl.col("ms").max()}
    for row in delay.group_by("role").agg(**percentiles).sort("role").rows():
        print("  end-to-end delay, {}: p50 {:.1f} ms, p99 {:.1f} ms, max {:.1f} ms".format(*row))
    for row in delay.filter(pl.col("role") == "scheduler").group_by("watcher").agg(
            **percentiles).sort("watcher").rows():
        print("    scheduler {}: p50 {:.1f} ms, p99 {:.1f} ms, max {:.1f} ms".format(*row))
    for relist in relists.select("watcher", "resource", "objects", seconds=(
            pl.col("end_ts") - pl.col("start_ts")).dt.total_microseconds() / 1e6).rows():
        print("  re-list by {} of {}: {:,} objects, {:.2f} s".format(*relist))
    health = run_query(open_runs([str(run_dir)]), load_query("watch_health"),
                       dict.fromkeys(PARAMETERS)).pl()
    for row in health.filter(pl.col("terminations") > 0).select(
            "watcher", "resource", "frozen_seconds", "max_frozen_seconds").rows():
        print("  watch_health: {} / {}: frozen {:.2f} s in all, {:.2f} s at most".format(*row))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path,
                        default=Path(__file__).parent / "stress-slow-watcher.toml")
    args = parser.parse_args()
    trace = busy_trace()
    bounded = load_config(args.config)
    unbounded = dataclasses.replace(bounded, server=dataclasses.replace(bounded.server,
                                                                        buffer=UNBOUNDED))
    with tempfile.TemporaryDirectory() as tmp:
        for label, config in (("bounded buffers (upstream's)", bounded),
                              ("buffers that never fill", unbounded)):
            started = time.perf_counter()
            result = run_replay(trace, config, out=Path(tmp) / "run", force=True)
            report(result.out, label, time.perf_counter() - started - result.seconds["derive"])


if __name__ == "__main__":
    main()
