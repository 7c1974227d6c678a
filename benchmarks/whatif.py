"""Time a what-if replay at production scale (default: 1M pods on 20k nodes, 3 Gödel schedulers).

    python benchmarks/whatif.py [--pods 1000000] [--nodes 20000] [--model godel] [-p KEY=VALUE]
        [--out RUN_DIR]

Synthesizes a workload without bindings (kept in the system's temporary folder for later runs),
replays it through the model, and prints the wall time (of the replay and of the derivation of
the capacity windows that follows), CPU time, peak resident memory, the number of events and
deliveries, and the conflict fraction.  ``--out`` keeps the run directory.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import polars as pl

from common import NODES, PODS, cpu_seconds, emit, peak_rss_mib, whatif_trace
from replay.api import run_replay
from replay.engine.config import load_config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=PODS)
    parser.add_argument("--nodes", type=int, default=NODES)
    parser.add_argument("--arrival-rate", type=float, default=800.0)
    parser.add_argument("--mean-lifetime", type=float, default=300.0)
    parser.add_argument("--model", default="godel")
    parser.add_argument("-p", dest="params", action="append", default=[])
    parser.add_argument("--out", type=Path, help="keep the run directory here")
    args = parser.parse_args()
    trace = whatif_trace(args.pods, args.nodes, args.arrival_rate, args.mean_lifetime)
    config = load_config(overrides=args.params, model=args.model)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = args.out or Path(tmp) / "run"
        wall, cpu = time.perf_counter(), cpu_seconds()
        result = run_replay(trace, config, out=run_dir, force=True)
        wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
        attempts = pl.read_parquet(run_dir / "attempts.parquet", columns=["outcome"])
    outcomes = attempts["outcome"].value_counts(sort=True)
    bound = int((attempts["outcome"] == "bound").sum())
    conflicts = int((attempts["outcome"] == "conflict").sum())
    peak = peak_rss_mib()
    replay, derive = result.seconds["replay"], result.seconds["derive"]
    print(f"{args.model} {' '.join(args.params)}: {args.pods:,} pods, {args.nodes:,} nodes, "
          f"{result.rows['events']:,} events, {result.rows['deliveries']:,} deliveries")
    print(f"  wall {wall:.1f} s (replay {replay:.1f} s, then "
          f"{result.rows['capacity_windows']:,} capacity windows derived in "
          f"{derive:.1f} s), cpu {cpu:.1f} s, peak RSS {peak:,.0f} MiB")
    print(f"  attempts {attempts.height:,}: " + ", ".join(
        f"{o} {n:,}" for o, n in outcomes.iter_rows()))
    print(f"  conflict fraction (conflicts / bound) {conflicts / max(bound, 1):.4f}")
    emit(pods=args.pods, events=result.rows["events"], deliveries=result.rows["deliveries"],
         replay_s=replay, derive_s=derive, pods_per_s=args.pods / replay,
         deliveries_per_s=result.rows["deliveries"] / replay,
         capacity_windows=result.rows["capacity_windows"],
         conflict_fraction=conflicts / max(bound, 1), peak_rss_mib=peak)


if __name__ == "__main__":
    main()
