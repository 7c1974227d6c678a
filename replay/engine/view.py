"""A watcher's cache of node capacity, as its informer has applied it, plus its own assumptions.

Free capacity per node lives in numpy arrays so that a scheduler can filter and score thousands of
nodes in one vectorised step.  Deliveries are applied lazily: the engine appends each one to the
watcher's ``inbox`` at commit time (with its applied time, which never decreases along a watcher's
deliveries), and ``sync(now)`` applies all that are due before anyone reads the cache.  So a write
nobody reacts to costs no event in the simulation's queue.

A pod counts on a node from its applied binding until its applied delete; a scheduler also counts
the pods it assumed itself, from its decision until it forgets them: when it applies the pod's
binding, its delete or a binder's rejection, or when the attempt fails.  This is the definition
the analysis queries use (docs/run-directory.md).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np

from replay.engine.cluster import (
    NODE_DELETE,
    NODE_SET,
    POD_BIND,
    POD_DELETE,
    POD_REJECT,
    Pod,
    Write,
)


class View:
    def __init__(self, node_count: int, alloc_of: Callable[[Write], tuple[int, int, int]]):
        self.alloc = np.zeros((3, node_count), dtype=np.int64)  # cpu_milli, memory, gpu_milli
        self.free = np.zeros((3, node_count), dtype=np.int64)
        self.present = np.zeros(node_count, dtype=bool)
        self.seen = np.zeros(node_count, dtype=np.int64)  # the node's change count last applied
        self.placed: dict[Pod, int] = {}  # pods on nodes as applied from the watch
        self.assumed: dict[Pod, int] = {}  # pods this watcher placed itself, not yet confirmed
        self.freed = 0  # how many applied changes gave capacity back (wakes unschedulable pods)
        self.inbox: deque[tuple[int, Write]] = deque()  # (applied_us, write), not yet applied
        self.on_forget: Callable[[Pod, int], None] | None = None  # called with (pod, now)
        self._alloc_of = alloc_of

    # -- the informer ---------------------------------------------------------------------------
    def sync(self, now: int) -> None:
        """Apply every delivery due by ``now``."""
        inbox = self.inbox
        while inbox and inbox[0][0] <= now:
            applied, write = inbox.popleft()
            self.apply(write, applied)

    def oldest_unapplied(self) -> int | None:
        """Commit time of the oldest write sent to this watcher and not yet applied."""
        return self.inbox[0][1].commit if self.inbox else None

    def apply(self, write: Write, now: int) -> None:
        kind, pod = write.kind, write.pod
        if write.seq:
            node = write.node if kind != POD_DELETE else pod.node
            self.seen[node] = max(self.seen[node], write.seq)
        if kind == NODE_SET:
            self._set_node(write.node, self._alloc_of(write))
        elif kind == NODE_DELETE:
            self._set_node(write.node, None)
        elif kind == POD_BIND:
            if pod not in self.placed:
                mine = self.assumed.pop(pod, None)
                if mine is not None and self.on_forget is not None:
                    self.on_forget(pod, now)  # confirmed
                if mine != write.node:
                    if mine is not None:
                        self._take(mine, pod.request, 1)
                    self._take(write.node, pod.request, -1)
                self.placed[pod] = write.node
        elif kind == POD_DELETE or kind == POD_REJECT:
            self._forget(pod, now)
            node = self.placed.pop(pod, None)
            if node is not None:
                self._take(node, pod.request, 1)

    def _set_node(self, node: int, alloc: tuple[int, int, int] | None) -> None:
        new = np.zeros(3, dtype=np.int64) if alloc is None else np.asarray(alloc, dtype=np.int64)
        grew = bool((new > self.alloc[:, node]).any())
        self.free[:, node] += new - self.alloc[:, node]
        self.alloc[:, node] = new
        self.present[node] = alloc is not None
        self.freed += grew

    def _take(self, node: int, request: tuple[int, int, int], sign: int) -> None:
        free = self.free
        free[0, node] += sign * request[0]
        free[1, node] += sign * request[1]
        free[2, node] += sign * request[2]
        if sign > 0:
            self.freed += 1

    # -- the watcher's own placements -----------------------------------------------------------
    def assume(self, pod: Pod, node: int) -> None:
        """Count ``pod`` on ``node`` at once, before any write about it comes back."""
        if pod not in self.placed and pod not in self.assumed:
            self.assumed[pod] = node
            self._take(node, pod.request, -1)

    def forget(self, pod: Pod, now: int) -> None:
        """Drop an assumption that failed (the write was refused or the placement rejected)."""
        self._forget(pod, now)

    def _forget(self, pod: Pod, now: int) -> None:
        node = self.assumed.pop(pod, None)
        if node is not None:
            self._take(node, pod.request, 1)
            if self.on_forget is not None:
                self.on_forget(pod, now)

    def fits(self, node: int, request: tuple[int, int, int]) -> bool:
        free = self.free
        return bool(self.present[node] and free[0, node] >= request[0]
                    and free[1, node] >= request[1] and free[2, node] >= request[2])
