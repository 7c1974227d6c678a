"""A sweep's index, ``DIR/sweep.parquet``: one row per point, what it swept and how it went.

Columns: point (its run directory's name), trace, model, one typed column per swept key (dots
made underscores), seed, status, error, wall_seconds, peak_memory_bytes.  Rewritten atomically
each time a point finishes, so that an interrupted sweep leaves an index that says which points
are done, and ``--resume`` starts from it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from replay.analysis.runs import SWEEP_INDEX
from replay.atomic import atomic_file
from replay.errors import ReplayError, system_errors
from replay.sweep.spec import Sweep


class Status(str, enum.Enum):
    DONE = "done"  # its run directory is complete
    FAILED = "failed"  # it ran and failed; error says why
    SKIPPED = "skipped"  # it has not run: the sweep was interrupted first


@dataclass(frozen=True)
class Outcome:
    """How one point went; wall_seconds and peak_memory_bytes are those of its process."""

    point: str
    status: Status
    error: str | None = None
    wall_seconds: float | None = None
    peak_memory_bytes: int | None = None
    notes: tuple[str, ...] = ()  # what its replay said bears on the numbers (not in the index)


OUTCOME_SCHEMA: dict[str, pl.DataType] = {
    "status": pl.String(), "error": pl.String(), "wall_seconds": pl.Float64(),
    "peak_memory_bytes": pl.Int64()}


def index_path(out: Path) -> Path:
    return out / SWEEP_INDEX


def index_frame(sweep: Sweep, outcomes: Mapping[str, Outcome]) -> pl.DataFrame:
    """The index: every point of ``sweep`` in its order; a point without an outcome is skipped."""
    schema: dict[str, pl.DataType] = {
        "point": pl.String(), "trace": pl.String(), "model": pl.String(), **sweep.columns,
        "seed": pl.Int64(), **OUTCOME_SCHEMA}
    rows = []
    for point in sweep.points:
        outcome = outcomes.get(point.name, Outcome(point.name, Status.SKIPPED))
        rows.append({"point": point.name, "trace": point.trace, "model": point.model,
                     **point.values, "seed": point.seed, "status": outcome.status.value,
                     "error": outcome.error, "wall_seconds": outcome.wall_seconds,
                     "peak_memory_bytes": outcome.peak_memory_bytes})
    return pl.DataFrame(rows, schema=schema, orient="row")


def write_index(out: Path, frame: pl.DataFrame) -> None:
    try:
        with atomic_file(index_path(out)) as tmp, system_errors(tmp, pl.exceptions.PolarsError):
            frame.write_parquet(tmp, compression="zstd")
    except OSError as err:
        raise ReplayError(f"{index_path(out)}: cannot write the sweep's index "
                          f"({err.strerror or err})") from None


def read_index(out: Path) -> dict[str, Outcome]:
    """The outcomes an earlier run of the sweep recorded in ``out``, by point (none if it has
    no index)."""
    path = index_path(out)
    if not path.exists():
        return {}
    try:
        frame = pl.read_parquet(path, columns=["point", *OUTCOME_SCHEMA], glob=False)
    except Exception as err:  # polars raises several types for a damaged or foreign file
        raise ReplayError(f"{path}: not a sweep index ({str(err).splitlines()[0]})") from None
    return {row["point"]: Outcome(row["point"], Status(row["status"]), row["error"],
                                  row["wall_seconds"], row["peak_memory_bytes"])
            for row in frame.iter_rows(named=True)}
