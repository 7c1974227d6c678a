"""Reproduce the Omega paper's conflict trends with the ``omega`` model, and print the table.

    python benchmarks/omega_trends.py [--trace omega.parquet] [--out-dir DIR] [--workers 2]
        [--schedulers 1,2,4,8,16] [--t-job 10,50,100,200] [--t-task 1]

The workload is benchmarks/omega_workload.py's (written first if ``--trace`` is missing): 100
machines of 8 cores and 32 GiB, jobs of 1-8 tasks of 500 millicores and 1 GiB offering 70% of the
CPU for 30 minutes, 60 s each on average.  Every watch stage is free (``profile = "zero"``) and a
commit takes no time (``commit_ms = 0``), as in Omega's simulator: a scheduler's copy of the cell
is stale only for its think time, t_job + t_task x tasks (``per_attempt_ms``, ``per_pod_ms``).
Each combination of conflict detection (fine, coarse), transactions (incremental, all or
nothing), schedulers and t_job is one run (``--workers`` at a time, each in its own process); the
table is the conflict fraction per transaction of all schedulers, from the shipped query
``omega_metrics``, and the script checks the paper's trends on it.
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import polars as pl

from replay.analysis.catalog import load_query
from replay.analysis.runs import open_runs, run_query
from replay.api import run_replay
from replay.engine.config import load_config

MODES = [(c, t) for c in ("fine", "coarse") for t in ("incremental", "all_or_nothing")]


def numbers(text: str, kind: type = int) -> list:
    return [kind(x) for x in text.split(",")]


def replay_one(trace: Path, out: Path, schedulers: int, t_job: float, t_task: float,
               conflict: str, transaction: str) -> Path:
    """One run; its config lists the schedulers as the only watchers (no kubelets to feed)."""
    if not (out / "manifest.json").exists():
        config = out.with_suffix(".toml")
        config.write_text('profile = "zero"\n' + "".join(
            f'[[watchers]]\nname = "omega-{i}"\nrole = "scheduler"\n' for i in range(schedulers)))
        params = [f"schedulers={schedulers}", f"per_attempt_ms={t_job}", f"per_pod_ms={t_task}",
                  "per_node_ms=0", "commit_ms=0", f"conflict={conflict}",
                  f"transaction={transaction}"]
        run_replay(trace, load_config(config, overrides=params, model="omega"), out=out,
                   force=True)
    return out


def trends(table: pl.DataFrame, schedulers: list[int], t_jobs: list[float]) -> list[str]:
    """The paper's trends, each checked on the table: a line per check, PASS or FAIL."""
    def cf(conflict, transaction, k, t):
        return table.filter(conflict=conflict, transaction=transaction, schedulers=k,
                            t_job=t)["conflict_fraction"].item()

    checks = []
    for conflict, transaction in MODES:
        mode = f"{conflict}/{transaction}"
        ones = [cf(conflict, transaction, 1, t) for t in t_jobs]
        checks.append((f"{mode}: one scheduler has no conflict", all(x == 0 for x in ones)))
        many = [k for k in schedulers if k > 1]
        checks.append((f"{mode}: rises with t_job at every number of schedulers > 1", all(
            cf(conflict, transaction, k, a) < cf(conflict, transaction, k, b)
            for k in many for a, b in zip(t_jobs, t_jobs[1:]))))
        checks.append((f"{mode}: rises with schedulers at every t_job", all(
            cf(conflict, transaction, a, t) < cf(conflict, transaction, b, t)
            for t in t_jobs for a, b in zip(schedulers, schedulers[1:]))))
    for transaction in ("incremental", "all_or_nothing"):
        checks.append((f"coarse >= fine ({transaction}) at every point", all(
            cf("coarse", transaction, k, t) >= cf("fine", transaction, k, t)
            for k in schedulers for t in t_jobs)))
    for conflict in ("fine", "coarse"):
        checks.append((f"all-or-nothing >= incremental ({conflict}) at every point", all(
            cf(conflict, "all_or_nothing", k, t) >= cf(conflict, "incremental", k, t)
            for k in schedulers for t in t_jobs)))
    return [f"{'PASS' if ok else 'FAIL'}  {what}" for what, ok in checks]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path,
                        default=Path(tempfile.gettempdir()) / "omega-workload.parquet")
    parser.add_argument("--out-dir", type=Path,
                        default=Path(tempfile.gettempdir()) / "omega-trends")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--schedulers", type=numbers, default=[1, 2, 4, 8, 16])
    parser.add_argument("--t-job", type=lambda s: numbers(s, float), default=[10, 50, 100, 200])
    parser.add_argument("--t-task", type=float, default=1.0)
    args = parser.parse_args()
    if not args.trace.exists():
        subprocess.run([sys.executable, str(Path(__file__).with_name("omega_workload.py")),
                        "--out", str(args.trace)], check=True)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    grid = list(itertools.product(MODES, args.schedulers, args.t_job))
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        futures = [pool.submit(replay_one, args.trace,
                               args.out_dir / f"{c}-{t}-{k}-{tj:g}", k, tj, args.t_task, c, t)
                   for (c, t), k, tj in grid]
        dirs = [f.result() for f in futures]
    con = open_runs([str(d) for d in dirs])
    metrics = run_query(con, load_query("omega_metrics"), {}).pl().filter(scheduler="ALL")
    runs = con.sql("SELECT run, schedulers, per_attempt_ms AS t_job, conflict, transaction "
                   "FROM runs").pl()
    table = runs.join(metrics, on="run").select(
        "conflict", "transaction", "schedulers", "t_job", "transactions", "conflict_fraction",
        "busyness").with_columns(pl.col("conflict_fraction").fill_null(0.0))
    wide = table.pivot(on="t_job", index=["conflict", "transaction", "schedulers"],
                       values="conflict_fraction").sort("conflict", "transaction", "schedulers")
    with pl.Config(tbl_rows=-1, tbl_cols=-1, float_precision=4, tbl_hide_dataframe_shape=True):
        print(f"conflict fraction per transaction (t_task {args.t_task:g} ms; columns: t_job ms)")
        print(wide)
    for line in trends(table, sorted(args.schedulers), sorted(args.t_job)):
        print(line)


if __name__ == "__main__":
    main()
