"""How many writes one pipeline step could take at once, by conservative lookahead, in a run.

    python benchmarks/lookahead.py RUN_DIR [--lookahead-ms 1.0 3.4 ...]

The what-if engine sends each committed write through the watch pipeline and hands its
deliveries to the views and reactions one write at a time (benchmarks/README.md, "Where the time
goes now"). A batched engine would commit writes as they come and step the pipeline once for all
those committed within a lookahead L of the batch's first: no delivery of them can be applied, and
so no component can react to one, before the batch ends, as long as every write takes at least L
from its commit to any watcher's applying it. L is then the smallest delay the run's profile can
draw; a run directory does not record that, so this prints the smallest delay the run drew (an
upper bound of L, which favours batching) and, with --lookahead-ms, any others to compare.

For each L: the batches that a greedy cut makes (a batch starts at the first write not yet taken
and holds every write committed before its start + L), their mean, median, 90th percentile and
largest size, and the writes left alone in a batch of one. Writes per batch is the most that
batching can divide the pipeline's per-write work by.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq


def _micros(run_dir: Path, table: str, *columns: str) -> list[pa.ChunkedArray]:
    """Timestamp columns of a run's table, read at once, as integer microseconds (the tables'
    unit), nulls kept."""
    read = pq.read_table(run_dir / f"{table}.parquet", columns=list(columns))
    return [read.column(column).cast(pa.int64()) for column in columns]


def commits_us(run_dir: Path) -> np.ndarray:
    """Every committed write's commit time in microseconds, sorted."""
    [commits] = _micros(run_dir, "events", "commit_ts")
    return np.sort(commits.to_numpy())


def smallest_delay_us(run_dir: Path) -> int:
    """The smallest commit-to-applied delay of any delivery of the run (a delivery never
    applied, to a watch terminated first, has none)."""
    applied, committed = _micros(run_dir, "deliveries", "applied_ts", "commit_ts")
    smallest = pc.min(pc.subtract(applied, committed)).as_py()
    return int(smallest) if smallest is not None else 0


def batch_sizes(commits: np.ndarray, lookahead_us: int) -> np.ndarray:
    """The sizes of the greedy batches of ``commits`` (sorted) for ``lookahead_us``: a Python
    loop of one ``searchsorted`` per batch, a few seconds for a million-pod run."""
    sizes, start = [], 0
    while start < len(commits):
        end = max(int(np.searchsorted(commits, commits[start] + lookahead_us, side="left")),
                  start + 1)
        sizes.append(end - start)
        start = end
    return np.asarray(sizes, dtype=np.int64)


def describe(commits: np.ndarray, lookahead_us: int, label: str) -> str:
    sizes = batch_sizes(commits, lookahead_us)
    if not len(sizes):
        return f"{label}: no writes"
    alone = int((sizes == 1).sum())
    return (f"{label} ({lookahead_us / 1000:.3f} ms): {len(sizes):,} batches of {len(commits):,} "
            f"writes: {len(commits) / len(sizes):.2f} writes a batch (median "
            f"{np.median(sizes):.0f}, 90th percentile {np.percentile(sizes, 90):.0f}, largest "
            f"{sizes.max():,}); {alone:,} writes alone ({alone / len(commits):.1%})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    parser.add_argument("--lookahead-ms", type=float, nargs="*", default=[], metavar="MS",
                        help="other lookaheads to cut the same writes by")
    args = parser.parse_args(argv)
    for table in ("events", "deliveries"):
        if not (args.run_dir / f"{table}.parquet").is_file():
            print(f"lookahead: {args.run_dir}: no {table}.parquet (not a run directory)",
                  file=sys.stderr)
            return 2
    try:
        commits, smallest = commits_us(args.run_dir), smallest_delay_us(args.run_dir)
    except (OSError, pa.ArrowException) as err:
        print(f"lookahead: {args.run_dir}: cannot read its tables ({err})", file=sys.stderr)
        return 2
    print(describe(commits, smallest, "the run's smallest delay"))
    for ms in args.lookahead_ms:
        print(describe(commits, round(ms * 1000), "lookahead"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
