"""Time ``replay synth`` at production scale (default: 1M pods on 20k nodes) and print figures.

    python benchmarks/synth.py [--pods 1000000] [--nodes 20000] [--bind least-allocated] [--out FILE]

Prints wall time, rows per second and the peak resident memory of this process.  ``--out`` keeps
the trace.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from common import NODES, PODS, emit, peak_rss_mib
from replay.trace.synth import SynthSpec, synthesize


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=PODS)
    parser.add_argument("--nodes", type=int, default=NODES)
    parser.add_argument("--arrival-rate", type=float, default=2_400.0)
    parser.add_argument("--bind", default="least-allocated", help="policy, or 'none'")
    parser.add_argument("--heartbeat-interval", type=float, default=0.0)
    parser.add_argument("--out", type=Path, help="keep the trace here")
    args = parser.parse_args()
    spec = SynthSpec(nodes=args.nodes, pods=args.pods, arrival_rate=args.arrival_rate,
                     bind=None if args.bind == "none" else args.bind,
                     heartbeat_interval=args.heartbeat_interval, seed=1)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.parquet"
        started = time.perf_counter()
        result = synthesize(spec, out)
        elapsed = time.perf_counter() - started
        size = out.stat().st_size
        if args.out:
            shutil.move(out, args.out)
    peak_mib = peak_rss_mib()
    print(f"synth: {args.pods} pods, {args.nodes} nodes, bind={args.bind}, "
          f"heartbeats={args.heartbeat_interval}s")
    print(f"  rows {result.rows:,}  file {size / 2**20:.1f} MiB  "
          f"offered cpu load {result.offered_cpu_load:.0%}  pending {result.pending}")
    print(f"  wall {elapsed:.2f} s  ({result.rows / elapsed:,.0f} rows/s)  peak RSS {peak_mib:,.0f} MiB")
    emit(pods=args.pods, rows=result.rows, seconds=elapsed, rows_per_s=result.rows / elapsed,
         peak_rss_mib=peak_mib)


if __name__ == "__main__":
    main()
