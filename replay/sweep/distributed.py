"""The Ray executor: each point a Ray task, on a local Ray instance or on a running cluster.

Each task asks for one CPU and the point's estimated memory (``replay.sweep.memory``), so Ray's
scheduler places as many on a node as fit.  A Ray worker serves task after task, and runs each
point in a child process forked by its own fork server, as the local executor runs each
(``replay.sweep.local``): the point's memory goes back to the node when the child ends, and the
worker starts Python, Ray and numba once rather than once a point.  A worker writes the run
directory into the sweep's directory when it sees it (a file system every node mounts at the
same path, e.g. NFS or a Kubernetes volume): it tells by the token in the sweep's lock file.
One that does not see it replays into a temporary directory and returns the files to the driver,
which writes them.  Ray's usage statistics are switched off (these machines have no internet).
``docs/sweeps.md`` says how to start a cluster.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import sys
import tempfile
from collections import deque
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

from replay.atomic import atomic_dir
from replay.errors import ReplayError
from replay.sweep.driver import LOCK
from replay.sweep.index import Outcome, Status
from replay.sweep.local import STOP_SECONDS, LocalExecutor
from replay.sweep.point import Task, remove_partial
from replay.trace.io import first_line

Files = dict[str, bytes]


class RayExecutor:
    """Runs points as Ray tasks on the cluster at ``address`` (``auto``: the one running on this
    machine; None: a Ray instance of its own, with ``jobs`` CPUs), at most ``jobs`` at once
    (None: as many as the cluster's resources allow)."""

    def __init__(self, address: str | None, jobs: int | None):
        self.address, self.jobs = address, jobs

    def run(self, tasks: list[Task]) -> Generator[Outcome, None, None]:
        ray = _connect(self.address, self.jobs)
        try:
            yield from self._run(ray, tasks)
        finally:
            ray.shutdown()

    def _run(self, ray, tasks: list[Task]) -> Iterator[Outcome]:
        remote = ray.remote(num_cpus=1, max_retries=0)(run_on_worker)
        largest = _largest_node_memory(ray)
        most = max((task.memory_bytes for task in tasks), default=0)
        if largest and most > largest:
            print(f"replay: warning: some points need about {most / 2**30:.1f} GiB, more than "
                  f"the largest Ray node offers ({largest / 2**30:.1f} GiB); they ask for all "
                  "of it", file=sys.stderr)
        waiting = deque(tasks)
        pending: dict[Any, Task] = {}  # by the Ray object reference of its outcome
        try:
            while waiting or pending:
                while waiting and (self.jobs is None or len(pending) < self.jobs):
                    task = waiting.popleft()
                    memory = min(task.memory_bytes, largest) if largest else task.memory_bytes
                    options = {"memory": memory, "name": f"replay-sweep {task.name}"}
                    pending[remote.options(**options).remote(task)] = task
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    yield _outcome(ray, ref, pending.pop(ref))
        finally:
            _cancel(ray, pending)


def run_on_worker(task: Task) -> tuple[Outcome, Files | None]:
    """A Ray task: run the point into the sweep's directory if this machine sees it; else into
    a temporary directory, returning the run directory's files for the driver to write."""
    if _sees_sweep(task):
        return _in_child(task), None
    with tempfile.TemporaryDirectory(prefix="replay-sweep-") as scratch:
        run_dir = Path(scratch) / task.name
        outcome = _in_child(dataclasses.replace(task, out=run_dir))
        files = ({p.name: p.read_bytes() for p in sorted(run_dir.iterdir())}
                 if outcome.status is Status.DONE else None)
    return outcome, files


def _in_child(task: Task) -> Outcome:
    """The point run in a child process, as the local executor runs each: forked by this
    worker's fork server, started with the worker's first point and kept for the next."""
    with contextlib.closing(LocalExecutor(jobs=1, memory_bytes=None).run([task])) as outcomes:
        return next(outcomes)


def _sees_sweep(task: Task) -> bool:
    try:
        return (task.out.parent / LOCK).read_text(encoding="utf-8") == task.token
    except OSError:
        return False


def _connect(address: str | None, jobs: int | None) -> Any:
    try:
        import ray
    except ImportError:
        raise ReplayError("--executor ray needs Ray: pip install 'k8s-watch-replay[ray]'") from None
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"  # no reports to the internet, from any process
    sigterm = signal.getsignal(signal.SIGTERM)  # ray.init replaces it with sys.exit
    try:
        own = address is None and "RAY_ADDRESS" not in os.environ  # else Ray joins a cluster
        ray.init(address=address, num_cpus=jobs if own else None,
                 include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    except (ConnectionError, RuntimeError, ValueError) as err:
        where = f"the Ray cluster at {address}" if address else "a local Ray instance"
        raise ReplayError(f"cannot start or join {where} "
                          f"({str(err).strip().splitlines()[0]})") from None
    finally:
        signal.signal(signal.SIGTERM, sigterm)
    return ray


def _largest_node_memory(ray) -> int | None:
    sizes = [node["Resources"].get("memory", 0) for node in ray.nodes() if node.get("Alive")]
    return int(max(sizes)) if sizes and max(sizes) > 0 else None


def _outcome(ray, ref, task: Task) -> Outcome:
    try:
        outcome, files = ray.get(ref)
    except ray.exceptions.RayError as err:  # the worker died, ran out of memory, was cancelled
        return Outcome(task.name, Status.FAILED, f"{type(err).__name__}: {first_line(err)}")
    if files is not None:
        try:
            with atomic_dir(task.out) as tmp:
                for name, data in files.items():
                    (tmp / name).write_bytes(data)
        except OSError as err:
            return dataclasses.replace(outcome, status=Status.FAILED,
                                       error=f"{task.out}: cannot write the run directory "
                                             f"({err.strerror or err})")
    return outcome


def _cancel(ray, pending: dict[Any, Task]) -> None:
    """Cancel the tasks still pending or running (a running one gets a KeyboardInterrupt and
    removes its partial run directory; one that does not stop in time is killed), then remove
    whatever partial run directories are left."""
    if not pending:
        return
    for ref in pending:
        ray.cancel(ref)
    _, stuck = ray.wait(list(pending), num_returns=len(pending), timeout=STOP_SECONDS)
    for ref in stuck:
        ray.cancel(ref, force=True)
    for task in pending.values():
        remove_partial(task.out)
