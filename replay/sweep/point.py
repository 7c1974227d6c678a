"""Running one point: exactly what ``replay run`` does with the point's configuration and seed,
in whatever process an executor gives it, reporting an ``Outcome`` instead of raising.

A point runs in a child process of its own (``replay.sweep.local``, in the sweep's process or in
a Ray worker), so the memory a replay held is given back when it ends, and its peak memory is its
own.
"""

from __future__ import annotations

import contextlib
import io
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from replay.atomic import sweep as sweep_temporaries
from replay.api import run_replay
from replay.engine.config import RunConfig
from replay.errors import ReplayError, os_error_message
from replay.sweep.index import Outcome, Status
from replay.sweep.memory import peak_bytes
from replay.trace.io import first_line

MANIFEST_KEY = "sweep"  # the run manifest's record of what the point swept (queries/views.sql)


@dataclass(frozen=True)
class Task:
    """A point, ready to run: everything a process on another machine needs."""

    name: str
    trace: Path  # absolute
    config: RunConfig
    out: Path  # the run directory to write, absolute
    record: dict[str, Any]  # the manifest's MANIFEST_KEY entry
    memory_bytes: int  # estimated peak
    token: str  # in the sweep directory's lock file: a worker that reads it there sees it


def run_point(task: Task) -> Outcome:
    """Replay the point into ``task.out``.  Its progress bar and messages are kept off the
    terminal (the sweep has its own); an error becomes the outcome's one line.  An interrupt
    (KeyboardInterrupt) is not caught: the partial run directory is removed as it propagates."""
    started = time.perf_counter()
    error: str | None = None
    notes: tuple[str, ...] = ()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            notes = tuple(run_replay(task.trace, task.config, out=task.out,
                                     manifest_extra={MANIFEST_KEY: task.record}).notes)
        except ReplayError as err:
            error = str(err)
        except OSError as err:  # the machine (a full disk): said as `replay run` says it
            error = os_error_message(err)
        except MemoryError:
            error = "out of memory"
        except Exception as err:  # a bug: one point fails, not all
            error = describe_exception(err)
    return Outcome(task.name, Status.FAILED if error else Status.DONE, error,
                   time.perf_counter() - started, peak_bytes(), notes)


def describe_exception(err: BaseException) -> str:
    """An unexpected exception in one line: its type, message and where it was raised."""
    where = traceback.extract_tb(err.__traceback__)[-1:]
    at = f" (at {Path(where[0].filename).name}:{where[0].lineno})" if where else ""
    return f"{type(err).__name__}: {first_line(err)}{at}"


def remove_partial(out: Path) -> None:
    """Remove what an interrupted or killed writer of ``out`` may have left next to it: the
    temporaries of processes that no longer run (``replay.atomic.sweep``; a live writer's stay)."""
    sweep_temporaries(out.parent)
