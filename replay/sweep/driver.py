"""Running a sweep: which points still need to run, handing them to an executor, and keeping
the index up to date as they finish, whatever happens.

The sweep's directory holds one run directory per point, ``sweep.parquet`` (``replay.sweep.index``)
and a lock file held while a sweep runs in it.  A point is done when its run directory exists:
``replay run`` writes it under a temporary name and renames it only when complete, so an
interrupted or killed point leaves none (and a temporary directory, removed on the next start).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import sys
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from replay import models
from replay.engine.rundir import read_manifest, sha256_of
from replay.errors import ReplayError
from replay.progress import progress
from replay.sweep.index import (
    Outcome,
    Status,
    index_frame,
    index_path,
    read_index,
    write_index,
)
from replay.sweep.point import Task, remove_partial
from replay.sweep.spec import Point, Sweep

LOCK = ".sweep.lock"  # held while a sweep runs; holds a token that tells workers they see it
RUNS_COLUMNS = ("run", "model", "seed", "profile", "trace")  # the runs view has these already


class Executor(Protocol):
    def run(self, tasks: list[Task]) -> Generator[Outcome, None, None]:
        """Run the tasks; yield each outcome as its point finishes.  Closing the generator stops
        what still runs and removes partial run directories."""
        ...  # pragma: no cover


@dataclass(frozen=True)
class Plan:
    """What a sweep finds in its directory: outcomes recorded and still true, points to run."""

    outcomes: dict[str, Outcome]
    to_run: tuple[Point, ...]


@dataclass(frozen=True)
class Report:
    points: int
    ran: int  # this time
    done: int
    failed: int
    skipped: int


def plan(sweep: Sweep, out: Path, resume: bool) -> Plan:
    """The points done already (with ``resume``) and those to run.  A run directory of a point
    that another configuration wrote is an error, not silently reused or replaced."""
    recorded = read_index(out)
    if not resume and recorded:
        raise ReplayError(f"{out}: holds a sweep already; pass --resume to complete it, or "
                          "choose another --out")
    if not resume and out.exists() and any(not p.name.startswith(".") for p in out.iterdir()):
        raise ReplayError(f"{out}: exists and is not a sweep's directory; choose another --out")
    outcomes, to_run, digests = {}, [], {}
    for point in sweep.points:
        run_dir = out / point.name
        if not run_dir.exists():
            to_run.append(point)
            continue
        if point.trace_path not in digests:
            digests[point.trace_path] = sha256_of(point.trace_path)
        if not _same_run(read_manifest(run_dir), point, digests[point.trace_path]):
            raise ReplayError(f"{run_dir}: was written with another configuration or trace than "
                              "this sweep gives the point; remove it or choose another --out")
        before = recorded.get(point.name)
        outcomes[point.name] = (before if before is not None and before.status is Status.DONE
                                else Outcome(point.name, Status.DONE))
    return Plan(outcomes, tuple(to_run))


def run_sweep(sweep: Sweep, out: str | os.PathLike, executor: Executor,
              resume: bool = False) -> Report:
    """Run the sweep's points into ``out`` (only those not done yet, with ``resume``), keeping
    ``out/sweep.parquet`` up to date; a failed point is recorded and printed as one line on
    stderr, and the others go on.  An interrupt stops the points running, records what was
    done, and propagates."""
    out = Path(out).resolve()
    if out.exists() and not out.is_dir():
        raise ReplayError(f"{out}: a file, not a sweep's directory; choose another --out")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ReplayError(f"{out}: cannot make the sweep's directory "
                          f"({err.strerror or err})") from None
    with _locked(out) as token:
        for point in sweep.points:
            remove_partial(out / point.name)
        remove_partial(index_path(out))  # an index being written when the sweep was killed
        planned = plan(sweep, out, resume)
        outcomes = dict(planned.outcomes)
        write_index(out, index_frame(sweep, outcomes))
        tasks = [task_of(point, out, token) for point in planned.to_run]
        said: set[str] = set()  # notes, each said once (the points of a trace share them)
        with progress(len(tasks), "sweep", unit="point") as bar:
            try:
                with contextlib.closing(executor.run(tasks)) as finished:
                    for outcome in finished:
                        outcomes[outcome.point] = outcome
                        write_index(out, index_frame(sweep, outcomes))
                        if outcome.status is Status.FAILED:
                            bar.write(f"replay: point {outcome.point} failed: {outcome.error}",
                                      file=sys.stderr)
                        for note in sorted(set(outcome.notes) - said):
                            bar.write(f"replay: warning: point {outcome.point} (and the "
                                      f"others of its trace): {note}", file=sys.stderr)
                        said.update(outcome.notes)
                        bar.update()
            finally:
                outcomes.update(_landed_unreported(planned.to_run, outcomes, out))
                write_index(out, index_frame(sweep, outcomes))
    statuses = [outcomes[p.name].status if p.name in outcomes else Status.SKIPPED
                for p in sweep.points]
    return Report(len(sweep.points), len(outcomes) - len(planned.outcomes),
                  statuses.count(Status.DONE), statuses.count(Status.FAILED),
                  statuses.count(Status.SKIPPED))


def _landed_unreported(points: tuple[Point, ...], outcomes: dict[str, Outcome],
                       out: Path) -> dict[str, Outcome]:
    """Points whose run directory was renamed into place while the sweep was being
    interrupted, before their outcome reached it: done, as ``plan`` finds them on a resume (a
    run directory exists only once complete), not skipped beside a finished run."""
    return {point.name: Outcome(point.name, Status.DONE) for point in points
            if point.name not in outcomes and (out / point.name).exists()}


def task_of(point: Point, out: Path, token: str) -> Task:
    """The point as a task writing into the sweep directory ``out`` (whose lock holds
    ``token``); its manifest records the sweep's name and the values swept."""
    record = {"sweep": out.name,
              **{k: v for k, v in point.values.items() if k not in RUNS_COLUMNS}}
    return Task(point.name, point.trace_path, point.config, out / point.name, record,
                point.memory_bytes, token)


def _same_run(manifest: dict[str, Any], point: Point, trace_sha256: str) -> bool:
    """Whether a run directory's manifest records this point's trace, model and configuration
    (as ``replay.api.run_replay`` records them)."""
    model = models.load(point.model)
    described = point.config.describe()
    expected_model = {"name": point.model, "params": model.resolve(point.config.model_params)}
    recorded = manifest.get("config", {})
    return (manifest.get("trace", {}).get("sha256") == trace_sha256
            and _json(manifest.get("model")) == _json(expected_model)
            and _json({k: v for k, v in recorded.items() if k != "model"})
            == _json({k: v for k, v in described.items() if k != "model"}))


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


@contextlib.contextmanager
def _locked(out: Path) -> Iterator[str]:
    """Hold ``out``'s lock file while the block runs (a second sweep into ``out`` is an error);
    yields the token written in it."""
    path = out / LOCK
    try:
        handle = path.open("a+", encoding="utf-8")
    except OSError as err:
        raise ReplayError(f"{path}: cannot open the sweep's lock file "
                          f"({err.strerror or err})") from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ReplayError(f"{out}: another sweep is running in it") from None
        token = secrets.token_hex(16)
        handle.seek(0)
        handle.truncate()
        handle.write(token)
        handle.flush()
        yield token

