"""The local executor: each point in a child process of its own, as many at once as ``--jobs``
and the memory allow.

A process per point gives all of a replay's memory back when it ends (a long-lived worker keeps
its allocator's pools) and makes its peak memory its own.  Children are forked by a fork server
(``multiprocessing``'s ``forkserver``) that holds numba, started, and nothing of this process
(``replay.forkserver``): a fork of this process would count its pages as the child's peak, and
a fresh interpreter (``spawn``, which it is off Linux) imports numba and starts it again for
every point.  Children ignore SIGINT, so that Ctrl-C in the terminal reaches only this
process, which stops them with SIGTERM: each then removes its partial run directory as
``replay run`` does on an interrupt.  A child stops in the same way as soon as this process
ends, even killed outright (``replay.workers.on_end_of``), so a killed sweep leaves no replay
running.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
from collections import deque
from collections.abc import Generator, Iterable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import cast

from replay.sweep.index import Outcome, Status
from replay.sweep.point import Task, remove_partial, run_point
from replay.workers import ctrl_c_held_from_children, ignore_ctrl_c, on_end_of

STOP_SECONDS = 30  # how long a stopped child may take to clean up before it is killed
FORK_SERVER_LOADS = "replay.forkserver"


@dataclass
class _Running:
    task: Task
    process: BaseProcess


class LocalExecutor:
    """Runs points in up to ``jobs`` child processes at once, and only as many as fit together
    in ``memory_bytes`` by their estimates (one at a time when one alone does not fit; None:
    no memory limit)."""

    def __init__(self, jobs: int, memory_bytes: int | None):
        self.jobs, self.memory_bytes = max(1, jobs), memory_bytes

    def run(self, tasks: Iterable[Task]) -> Generator[Outcome, None, None]:
        """Outcomes as points finish.  Closing the iterator (or an interrupt while it waits)
        stops the points still running and removes their partial run directories."""
        context = _context()
        waiting = deque(tasks)
        running: dict[Connection, _Running] = {}
        try:
            while waiting or running:
                while waiting and self._fits(waiting[0], running.values()):
                    task = waiting.popleft()
                    receiver, sender = context.Pipe(duplex=False)
                    running[receiver] = _Running(task, _start(context, task, sender))
                    sender.close()
                # wait returns some of the connections it is given
                for receiver in cast("list[Connection]", wait(list(running))):
                    yield _collect(receiver, running.pop(receiver))
        finally:
            _stop(running.values())

    def _fits(self, task: Task, running: Iterable[_Running]) -> bool:
        running = list(running)
        if not running:
            return True
        if len(running) >= self.jobs:
            return False
        used = sum(r.task.memory_bytes for r in running)
        return self.memory_bytes is None or used + task.memory_bytes <= self.memory_bytes


def _context() -> multiprocessing.context.BaseContext:
    """The fork server's context on Linux, else ``spawn``: macOS's system libraries (numpy's
    BLAS there is Accelerate) are not all safe to use in a forked child, which is why Python
    spawns there by default, and Windows has no fork."""
    if not sys.platform.startswith("linux"):
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([FORK_SERVER_LOADS])  # before it starts (no effect after)
    return context


def _start(context, task: Task, sender: Connection) -> BaseProcess:
    process = context.Process(target=_child, args=(task, sender, os.getpid()),
                              name=f"replay-sweep {task.name}")
    with ctrl_c_held_from_children():
        process.start()
    return process


def _child(task: Task, sender: Connection, parent: int) -> None:
    """A child process: run the point, send its outcome; on SIGTERM, stop cleanly.  What it
    would print (DuckDB draws progress bars itself) is not for the sweep's terminal."""
    ignore_ctrl_c()
    signal.signal(signal.SIGTERM, _interrupt)
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
    with contextlib.suppress(KeyboardInterrupt):
        _die_with(parent)
        sender.send(run_point(task))


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _die_with(sweep: int) -> None:
    """SIGTERM to this process as soon as the ``sweep`` process ends.  On Linux its parent is
    the fork server, which would tell it too late: the server outlives the sweep while a point
    it forked runs, for each holds the server's end of the pipe that tells it the sweep is gone."""
    on_end_of(sweep, lambda: os.kill(os.getpid(), signal.SIGTERM))


def _collect(receiver: Connection, running: _Running) -> Outcome:
    try:
        outcome = receiver.recv()
    except EOFError:  # it died without a word
        outcome = None
    receiver.close()
    running.process.join()
    if outcome is not None:
        return outcome
    remove_partial(running.task.out)
    code = running.process.exitcode
    how = (f"killed by {signal.Signals(-code).name}" if code is not None and code < 0
           else f"exited with status {code}")
    hint = " (out of memory?)" if code == -signal.SIGKILL else ""
    return Outcome(running.task.name, Status.FAILED, f"its process {how}{hint}")


def _stop(running: Iterable[_Running]) -> None:
    """Stop these children: SIGTERM, time to clean up, then SIGKILL; remove what they leave."""
    running = list(running)
    for each in running:
        with contextlib.suppress(ProcessLookupError):
            each.process.terminate()
    for each in running:
        each.process.join(STOP_SECONDS)
        if each.process.is_alive():
            each.process.kill()
            each.process.join()
        remove_partial(each.task.out)
