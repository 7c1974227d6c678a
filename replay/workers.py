"""Worker processes that never outlive the command that started them, and never print.

``worker_pool`` is a ``ProcessPoolExecutor`` (spawned, not forked: DuckDB and Arrow keep
threads) whose workers

- ignore Ctrl-C: the terminal sends SIGINT to every process of the command; the main process
  alone turns it into ``replay: interrupted``, then stops the workers, so no worker prints a
  traceback;
- die with the main process, even after ``kill -9`` of it: on Linux the kernel sends them SIGKILL
  when it exits (``prctl(PR_SET_PDEATHSIG)``), and should that be missed, a watchdog thread in
  each worker notices that its parent is gone (``on_end_of``);
- are stopped as soon as the block fails or is interrupted, instead of finishing their queue.

A worker that dies on its own (the out-of-memory killer) is an error that says so.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.connection import Connection

from replay import interrupts
from replay.errors import ReplayError

WATCHDOG_SECONDS = 1.0
MANAGER_JOIN_S = 5.0  # the most to wait for a stopped pool's own thread (it ends at once)
PR_SET_PDEATHSIG = 1


@contextlib.contextmanager
def worker_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """A pool of ``workers`` processes, started at once, stopped when the block ends."""
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_become_worker,
                               initargs=(os.getpid(),))
    try:
        _start(pool, workers)
        yield pool
    except BrokenProcessPool:
        _stop(pool)
        raise ReplayError("a worker process died (killed, or out of memory); nothing was "
                          "written") from None
    except BaseException:
        _stop(pool)
        raise
    pool.shutdown(wait=True)


def _start(pool: ProcessPoolExecutor, workers: int) -> None:
    """Start every worker now, with Ctrl-C held from them (``ctrl_c_held_from_children``)."""
    with ctrl_c_held_from_children():
        started = [pool.submit(os.getpid) for _ in range(workers)]
    for future in started:
        future.result()


@contextlib.contextmanager
def ctrl_c_held_from_children() -> Iterator[None]:
    """Processes started in the block begin with SIGINT blocked until they ``ignore_ctrl_c``,
    and this process holds a Ctrl-C until the block ends (``interrupts.deferred``).

    A child must not get a Ctrl-C while it starts as a KeyboardInterrupt (a traceback printed
    by a worker, a broken pool): the block blocks SIGINT in this thread, and a child inherits
    the mask, even across ``exec``.  Ignoring SIGINT here instead, as this did before, dropped
    a Ctrl-C of this process too: one pressed as ``replay ingest`` started its workers was
    lost, and the command went on to its end.  And this process must not raise it half-way
    through starting one: a KeyboardInterrupt between a worker's start and the pool's record
    of it left a worker the pool did not know, which it then waited for at exit, for ever."""
    with interrupts.deferred():
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def ignore_ctrl_c() -> None:
    """First thing in a child started in ``ctrl_c_held_from_children``: ignore Ctrl-C from now
    on (one that arrived while it started, held by its mask, is dropped with it)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancel what is queued and end the workers now, without waiting for their tasks."""
    # the pool's private parts that ``shutdown`` forgets: its workers, and the pipe that brings
    # their results
    processes = list((getattr(pool, "_processes", None) or {}).values())
    results = getattr(getattr(pool, "_result_queue", None), "_writer", None)
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        with contextlib.suppress(Exception):
            process.terminate()
    deadline = time.monotonic() + 2
    for process in processes:
        with contextlib.suppress(Exception):
            process.join(max(deadline - time.monotonic(), 0))
            if process.is_alive():
                process.kill()
                process.join(1)
    if results is not None:
        _close_for_writing(results)
    if manager is not None:
        # Python 3.11's exit hook wakes the pool's thread without the lock under which that
        # thread closes its wake-up pipe: "Exception ignored ... Bad file descriptor" once in
        # a CI run's Ctrl-C of ingest.  The thread, its workers ended and its results' pipe
        # closed, ends at once; waiting for it here leaves the hook nothing to race.
        manager.join(MANAGER_JOIN_S)


def _close_for_writing(results: Connection) -> None:
    """Close this process's end for writing of the pipe that brings the workers' results, once
    they are ended.  One ended while it wrote a result leaves part of it there, and the pool's
    thread waits for the rest for ever; the process then hung as it exited (``concurrent.
    futures`` joins that thread): once in 60 Ctrl-Cs of ``replay ingest``.  With no writer
    left, the thread reads the pipe's end instead, and the pool ends as broken."""
    with contextlib.suppress(OSError):
        results.close()


def _become_worker(parent: int) -> None:
    """Run first in each worker: ignore Ctrl-C, and die with ``parent``."""
    ignore_ctrl_c()
    _kill_me_when_parent_dies()
    if os.getppid() != parent:  # it died before the line above could take effect
        os._exit(1)
    on_end_of(parent, lambda: os._exit(1))


def _kill_me_when_parent_dies() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the watchdog alone


def on_end_of(pid: int, then: Callable[[], object]) -> None:
    """Call ``then`` as soon as process ``pid`` ends, in a watchdog thread of this process (at
    once, here, if it has ended).  Linux (5.3 on) wakes the thread when it exits, through a
    pidfd; elsewhere the thread looks every ``WATCHDOG_SECONDS``."""
    pidfd = _pidfd(pid)
    if pidfd is None and not _alive(pid):
        then()
        return
    threading.Thread(target=_watch, args=(pid, pidfd, then), name="replay-watchdog",
                     daemon=True).start()


def _pidfd(pid: int) -> int | None:
    """A pidfd of process ``pid``; None if it has ended, or on a system without them."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # ProcessLookupError; not Linux, or an older kernel
        return None


def _watch(pid: int, pidfd: int | None, then: Callable[[], object]) -> None:
    if pidfd is None:
        while _alive(pid):
            time.sleep(WATCHDOG_SECONDS)
    else:
        exited = select.poll()  # (select.select takes no descriptor above 1023)
        exited.register(pidfd, select.POLLIN)  # readable once the process has exited
        exited.poll()
        os.close(pidfd)
    then()


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a PermissionError: the number is another user's now)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
