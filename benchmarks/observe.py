"""Measure ``replay run`` in observe mode end to end (reading, replaying, writing Parquet), and
the derivation of the capacity windows that follows.

    python benchmarks/observe.py [TRACE] [--config FILE.toml] [--kubelets] [--repeat 3]
        [--pods 1000000 --nodes 20000] [--out RUN_DIR] [--tables-only]

Without TRACE it synthesizes the 1M-pod / 20k-node trace with bindings first (about 25 s; kept in
the system's temporary folder for later runs; ``--pods`` and ``--nodes`` scale it).
``--config benchmarks/godel-watchers.toml`` replaces the default watchers (one scheduler and a
kubelet per node) with a Gödel control plane's five; ``--kubelets`` adds the default kubelets to
a config's watchers.  Prints, per repetition, the wall time of the replay and deliveries per
second, the wall time of the derivation, the wall and CPU time (user + system, all threads) of
both; then the best replay, and the process's peak resident memory.  ``--out`` keeps the last
run directory (for ``queries.py``).  ``--tables-only`` measures the model alone: its tables
computed in memory (no Parquet, no derivation), in wall and CPU time; CPU time is the steadier
figure on a machine shared with other jobs.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import tempfile
import time
from pathlib import Path

from common import NODES, PODS, big_trace, cpu_seconds, emit, peak_rss_mib
from replay import models
from replay.api import run_replay
from replay.engine.config import RunConfig, load_config
from replay.models.observe import ObserveModel
from replay.trace.validate import read_trace


def with_kubelets(config: RunConfig, trace: Path) -> RunConfig:
    """``config`` with a kubelet per node of ``trace`` after its own watchers."""
    kubelets = [w for w in ObserveModel().default_watchers(read_trace(trace))
                if w.role == "kubelet"]
    return dataclasses.replace(config, watchers=(*(config.watchers or ()), *kubelets))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", type=Path)
    parser.add_argument("--config", type=Path)
    parser.add_argument("--kubelets", action="store_true",
                        help="add a kubelet per node to the config's watchers")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tables-only", action="store_true",
                        help="time the model's tables in memory, without writing or deriving")
    parser.add_argument("--pods", type=int, default=PODS, help="of the trace made without TRACE")
    parser.add_argument("--nodes", type=int, default=NODES, help="of the trace made without TRACE")
    parser.add_argument("--out", type=Path, help="keep the last run directory here")
    args = parser.parse_args()
    trace = args.trace or big_trace(args.pods, args.nodes)
    config = load_config(args.config, model="observe")
    if args.kubelets:
        config = with_kubelets(config, trace)
    if args.tables_only:
        tables_only(trace, config, args.repeat)
        return
    best = derive = None
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            wall, cpu = time.perf_counter(), cpu_seconds()
            result = run_replay(trace, config, out=Path(tmp) / "run", force=True)
            wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
            deliveries, replay = result.rows["deliveries"], result.seconds["replay"]
            print(f"run {i + 1}: {result.rows['events']:,} events, {result.watchers:,} watchers, "
                  f"{deliveries:,} deliveries in {replay:.2f} s wall: "
                  f"{deliveries / replay / 1e6:.2f}M deliveries/s; then "
                  f"{result.rows['capacity_windows']:,} capacity windows derived in "
                  f"{result.seconds['derive']:.2f} s; {wall:.2f} s wall, {cpu:.2f} s cpu in all")
            best = replay if best is None else min(best, replay)
            derive = result.seconds["derive"] if derive is None else min(
                derive, result.seconds["derive"])
        if args.out:
            shutil.rmtree(args.out, ignore_errors=True)
            shutil.move(Path(tmp) / "run", args.out)
    peak = peak_rss_mib()
    print(f"best: {deliveries / best / 1e6:.2f}M deliveries/s ({best:.2f} s); peak RSS {peak:,.0f} MiB")
    emit(events=result.rows["events"], deliveries=deliveries, replay_s=best, derive_s=derive,
         deliveries_per_s=deliveries / best, capacity_windows=result.rows["capacity_windows"],
         peak_rss_mib=peak)


def tables_only(trace_path: Path, config: RunConfig, repeat: int) -> None:
    """The model's tables, computed and dropped: the replay without reading or writing.  The
    trace is read once, as ``replay run`` reads it for the model: its columns only."""
    model_class = models.load(config.model or "observe")
    columns = model_class.trace_columns
    trace = read_trace(trace_path, columns=list(columns) if columns is not None else None)
    for i in range(repeat):
        model = model_class(config.model_params)
        watchers = (list(config.watchers) if config.watchers is not None
                    else model.default_watchers(trace))
        wall, cpu = time.perf_counter(), cpu_seconds()
        deliveries = sum(len(table) for name, table in model.tables(trace, config, watchers)
                         if name == "deliveries")
        wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
        print(f"tables {i + 1}: {deliveries:,} deliveries in {wall:.2f} s wall "
              f"({deliveries / wall / 1e6:.2f}M/s), {cpu:.2f} s cpu "
              f"({deliveries / cpu / 1e6:.2f}M deliveries per cpu-second)", flush=True)


if __name__ == "__main__":
    main()
