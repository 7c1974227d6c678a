"""Reproduce the Omega paper's conflict trends with the ``omega`` model, and print the table.

    python benchmarks/omega_trends.py [--trace omega.parquet] [--out-dir DIR] [--workers 2]
        [--schedulers 1,2,4,8,16] [--t-job 10,50,100,200] [--t-task 1] [--seeds 0,1] [--markdown]

The workload is benchmarks/omega_workload.py's (written first if ``--trace`` is missing): 100
machines of 8 cores and 32 GiB, jobs of 1-8 tasks of 500 millicores and 1 GiB offering 70% of the
CPU for 30 minutes, 60 s each on average.  Every watch stage is free (``profile = "zero"``) and a
commit takes no time (``commit_ms = 0``), as in Omega's simulator: a scheduler's copy of the cell
is stale only for its think time, t_job + t_task x tasks (``per_attempt_ms``, ``per_pod_ms``).
Each combination of conflict detection (fine, coarse), transactions (incremental, all or
nothing), schedulers and t_job is one run (``--workers`` at a time, each in its own process); the
table is the conflict fraction per transaction of all schedulers, from the shipped query
``omega_metrics``, pooled over the runs of every seed in ``--seeds`` (the schedulers' random
streams; the workload stays the same), and the script checks the paper's trends on it, telling
apart a comparison that goes the wrong way by less than twice its Poisson noise from one that
goes beyond it.
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
               conflict: str, transaction: str, seed: int) -> Path:
    """One run; its config lists the schedulers as the only watchers (no kubelets to feed)."""
    if not (out / "manifest.json").exists():
        config = out.with_suffix(".toml")
        config.write_text('profile = "zero"\n' + "".join(
            f'[[watchers]]\nname = "omega-{i}"\nrole = "scheduler"\n' for i in range(schedulers)))
        params = [f"schedulers={schedulers}", f"per_attempt_ms={t_job}", f"per_pod_ms={t_task}",
                  "per_node_ms=0", "commit_ms=0", f"conflict={conflict}",
                  f"transaction={transaction}"]
        run_replay(trace, load_config(config, overrides=params, model="omega", seed=seed),
                   out=out, force=True)
    return out


def trends(table: pl.DataFrame, schedulers: list[int], t_jobs: list[float]) -> list[str]:
    """The paper's trends, each checked on every pair of points it compares: how many hold, how
    many go the other way by less than twice their Poisson noise (the fraction's standard error,
    f x sqrt(1/failed + 1/successful)), and how many go the other way beyond it."""
    cells = {(r["conflict"], r["transaction"], r["schedulers"], r["t_job"]): r
             for r in table.iter_rows(named=True)}

    def compare(more, less, strict):
        """Whether ``more`` >= ``less`` (> if ``strict``): 'holds', 'noise' or 'violated'."""
        a, b = cells[more], cells[less]
        fa, fb = a["conflict_fraction"], b["conflict_fraction"]
        if fa > fb or (fa == fb and not strict):
            return "holds"
        noise = sum((r["conflict_fraction"] ** 2) * (1 / max(r["failed_transactions"], 1) + 1 / max(
            r["transactions"] - r["failed_transactions"], 1)) for r in (a, b)) ** 0.5
        return "noise" if fb - fa <= 2 * noise else "violated"

    checks: list[tuple[str, list[str]]] = []
    for c, t in MODES:
        checks.append((f"{c}/{t}: one scheduler has no conflict", [
            "holds" if cells[(c, t, 1, tj)]["conflict_fraction"] == 0 else "violated"
            for tj in t_jobs]))
        checks.append((f"{c}/{t}: rises with t_job (at every number of schedulers > 1)", [
            compare((c, t, k, b), (c, t, k, a), True)
            for k in schedulers if k > 1 for a, b in zip(t_jobs, t_jobs[1:])]))
        checks.append((f"{c}/{t}: rises with schedulers (at every t_job)", [
            compare((c, t, b, tj), (c, t, a, tj), True)
            for tj in t_jobs for a, b in zip(schedulers, schedulers[1:])]))
    for t in ("incremental", "all_or_nothing"):
        checks.append((f"coarse >= fine ({t}), at every point", [
            compare(("coarse", t, k, tj), ("fine", t, k, tj), False)
            for k in schedulers for tj in t_jobs]))
    for c in ("fine", "coarse"):
        checks.append((f"all-or-nothing >= incremental ({c}), at every point", [
            compare((c, "all_or_nothing", k, tj), (c, "incremental", k, tj), False)
            for k in schedulers for tj in t_jobs]))
    lines = []
    for what, results in checks:
        n = {r: results.count(r) for r in ("holds", "noise", "violated")}
        verdict = "FAIL" if n["violated"] else "PASS" if not n["noise"] else "PASS (noise)"
        lines.append(f"{verdict:13} {what}: {n['holds']} of {len(results)} hold, {n['noise']} "
                     f"the other way within 2 standard errors, {n['violated']} beyond")
    return lines


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
    parser.add_argument("--seeds", type=numbers, default=[0])
    parser.add_argument("--markdown", action="store_true", help="print the tables in Markdown")
    args = parser.parse_args()
    if not args.trace.exists():
        subprocess.run([sys.executable, str(Path(__file__).with_name("omega_workload.py")),
                        "--out", str(args.trace)], check=True)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    # the cheap runs first, every mode of a point together: a grid cut short still compares
    grid = [(mode, k, tj, s) for k, tj, s in itertools.product(
        sorted(args.schedulers), sorted(args.t_job), args.seeds) for mode in MODES]
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        futures = [pool.submit(replay_one, args.trace,
                               args.out_dir / (f"{c}-{t}-{k}-{tj:g}" + (f"-seed{s}" if s else "")),
                               k, tj, args.t_task, c, t, s)
                   for (c, t), k, tj, s in grid]
        dirs = [f.result() for f in futures]
    con = open_runs([str(d) for d in dirs])
    metrics = run_query(con, load_query("omega_metrics"), {}).pl().filter(scheduler="ALL")
    runs = con.sql("SELECT run, schedulers, per_attempt_ms AS t_job, conflict, transaction "
                   "FROM runs").pl()
    table = (runs.join(metrics, on="run")
             .group_by("conflict", "transaction", "schedulers", "t_job")
             .agg(pl.col("transactions", "failed_transactions").sum(),
                  pl.col("busyness").mean())
             .with_columns(conflict_fraction=pl.col("failed_transactions") / (
                 pl.col("transactions") - pl.col("failed_transactions"))))
    index = ["conflict", "transaction", "schedulers"]
    for values, title in (("conflict_fraction", "conflict fraction per transaction"),
                          ("failed_transactions", "failed transactions"),
                          ("busyness", "busyness")):
        wide = (table.sort("t_job").with_columns(pl.col("t_job").cast(pl.Int64).cast(pl.String))
                .pivot(on="t_job", index=index, values=values).sort(index))
        with pl.Config(tbl_rows=-1, tbl_cols=-1, float_precision=4,
                       tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True,
                       tbl_formatting="MARKDOWN" if args.markdown else None):
            print(f"{title} (t_task {args.t_task:g} ms; columns: t_job in ms)")
            print(wide)
    for line in trends(table, sorted(args.schedulers), sorted(args.t_job)):
        print(line)


if __name__ == "__main__":
    main()
