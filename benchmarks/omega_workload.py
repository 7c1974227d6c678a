"""Write the Omega-style workload of docs/fidelity.md as a trace (``replay synth`` makes no gangs).

    python benchmarks/omega_workload.py --out omega.parquet [--nodes 100] [--minutes 30]
        [--load 0.7] [--seed 1]

A cell of identical machines (8 cores, 32 GiB) and a stream of jobs in the shape of the Omega
paper's batch workload (Schwarzkopf et al., EuroSys 2013, section 4): jobs arrive as a Poisson
process for ``--minutes``, each of 1-8 tasks (uniform) of 500 millicores and 1 GiB, all running
for the job's duration, exponential with a mean of 60 s; the arrival rate offers ``--load`` of the
cell's CPU (mean tasks x 0.5 cores x 60 s per job).  A job is a gang (the trace's ``group``), so
that the ``omega`` model commits its tasks as one transaction.  Each task is a pod created at its
job's arrival and deleted a duration later (the replay counts the duration from the binding).
"""

from __future__ import annotations

import argparse
import datetime as dt

import numpy as np
import polars as pl

from replay.rng import stream
from replay.trace.io import write_trace

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
GIB = 1 << 30
CORES, MEMORY = 8, 32 * GIB  # per machine
TASK_CPU, TASK_MEMORY = 500, GIB
MAX_TASKS, MEAN_SECONDS = 8, 60.0


def workload(nodes: int, minutes: float, load: float, seed: int) -> pl.DataFrame:
    rng = stream(seed, "omega-workload")
    mean_tasks = (1 + MAX_TASKS) / 2
    rate = load * nodes * CORES / (mean_tasks * TASK_CPU / 1000 * MEAN_SECONDS)  # jobs a second
    arrivals = np.cumsum(rng.exponential(1 / rate, size=int(rate * minutes * 60 * 1.5) + 10))
    arrivals = arrivals[arrivals < minutes * 60]
    tasks = rng.integers(1, MAX_TASKS + 1, size=len(arrivals))
    seconds = rng.exponential(MEAN_SECONDS, size=len(arrivals))
    us = np.round(arrivals * 1e6).astype(np.int64)
    run_us = np.maximum(np.round(seconds * 1e6).astype(np.int64), 1)
    job = np.repeat(np.arange(len(arrivals)), tasks)
    task = np.concatenate([np.arange(n) for n in tasks]) if len(tasks) else np.zeros(0, int)
    names = [f"job-{j:06d}-{t}" for j, t in zip(job.tolist(), task.tolist())]
    node_rows = pl.DataFrame({
        "us": np.zeros(nodes, dtype=np.int64), "verb": "create", "resource": "nodes",
        "namespace": None, "name": [f"machine-{i:03d}" for i in range(nodes)],
        "node": [f"machine-{i:03d}" for i in range(nodes)],
        "cpu_milli": CORES * 1000, "memory_bytes": MEMORY, "code": 201, "component": "kubelet",
        "group": None})
    creates = pl.DataFrame({
        "us": us[job], "verb": "create", "resource": "pods", "namespace": "batch",
        "name": names, "node": None, "cpu_milli": TASK_CPU, "memory_bytes": TASK_MEMORY,
        "code": 201, "component": "workload", "group": [f"job-{j:06d}" for j in job.tolist()]})
    deletes = creates.with_columns(us=pl.Series(us[job] + run_us[job]), verb=pl.lit("delete"),
                                   cpu_milli=None, memory_bytes=None, code=pl.lit(200),
                                   group=None)
    rows = pl.concat([node_rows, creates, deletes], how="vertical_relaxed")
    ts = pl.lit(T0) + pl.duration(microseconds=pl.col("us"))
    return (rows.sort("us", maintain_order=True)
            .select(ts=ts, received_ts=ts, verb="verb", resource="resource",
                    subresource=pl.lit(None, pl.String), namespace="namespace", name="name",
                    node="node", cpu_milli=pl.col("cpu_milli").cast(pl.Int64),
                    memory_bytes=pl.col("memory_bytes").cast(pl.Int64),
                    gpu_milli=pl.lit(0, pl.Int64), code=pl.col("code").cast(pl.Int32),
                    component="component", group="group"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--load", type=float, default=0.7, help="share of the CPU offered")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    trace = workload(args.nodes, args.minutes, args.load, args.seed)
    rows = write_trace(trace, args.out, source="benchmarks/omega_workload.py",
                       source_args=vars(args))
    jobs = trace.filter(pl.col("resource") == "pods", pl.col("verb") == "create")["group"].n_unique()
    print(f"wrote {args.out}: {rows:,} rows, {jobs:,} jobs on {args.nodes} machines")


if __name__ == "__main__":
    main()
