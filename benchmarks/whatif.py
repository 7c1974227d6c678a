"""Time a what-if replay at production scale (default: 1M pods on 20k nodes, 3 Gödel schedulers).

    python benchmarks/whatif.py [--pods 1000000] [--nodes 20000] [--model godel] [-p KEY=VALUE]

Synthesizes a workload without bindings (kept in the system's temporary folder for later runs),
replays it through the model, and prints the wall time (of the replay and of the derivation of
the capacity windows that follows), CPU time, peak resident memory, the number of events and
deliveries, and the conflict fraction.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import polars as pl

from replay.api import run_replay
from replay.engine.config import load_config
from replay.trace.synth import SynthSpec, synthesize


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=1_000_000)
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--arrival-rate", type=float, default=800.0)
    parser.add_argument("--mean-lifetime", type=float, default=300.0)
    parser.add_argument("--model", default="godel")
    parser.add_argument("-p", dest="params", action="append", default=[])
    args = parser.parse_args()
    spec = SynthSpec(nodes=args.nodes, pods=args.pods, arrival_rate=args.arrival_rate,
                     mean_lifetime=args.mean_lifetime, seed=1)
    trace = Path(tempfile.gettempdir()) / (
        f"replay-bench-{args.pods}-pods-{args.nodes}-nodes-{args.arrival_rate:g}.parquet")
    if not trace.exists():
        print(f"synthesizing {trace} ...", flush=True)
        synthesize(spec, trace)
    config = load_config(overrides=args.params, model=args.model)
    with tempfile.TemporaryDirectory() as tmp:
        wall, cpu = time.perf_counter(), cpu_seconds()
        result = run_replay(trace, config, out=Path(tmp) / "run")
        wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
        attempts = pl.read_parquet(Path(tmp) / "run" / "attempts.parquet", columns=["outcome"])
    outcomes = attempts["outcome"].value_counts(sort=True)
    bound = int((attempts["outcome"] == "bound").sum())
    conflicts = int((attempts["outcome"] == "conflict").sum())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{args.model} {' '.join(args.params)}: {args.pods:,} pods, {args.nodes:,} nodes, "
          f"{result.rows['events']:,} events, {result.rows['deliveries']:,} deliveries")
    print(f"  wall {wall:.1f} s (replay {result.seconds['replay']:.1f} s, then "
          f"{result.rows['capacity_windows']:,} capacity windows derived in "
          f"{result.seconds['derive']:.1f} s), cpu {cpu:.1f} s, peak RSS {peak:,.0f} MiB")
    print(f"  attempts {attempts.height:,}: " + ", ".join(
        f"{o} {n:,}" for o, n in outcomes.iter_rows()))
    print(f"  conflict fraction (conflicts / bound) {conflicts / max(bound, 1):.4f}")


if __name__ == "__main__":
    main()
