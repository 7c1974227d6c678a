"""The one ideal scheduler behind ``replay synth --bind``: exact capacity, no delay, no conflicts.

It places each pod the moment it is ready, on the node its policy picks among the nodes whose free
cpu, memory and gpu all fit the pod:

- ``first-fit``: the lowest-numbered node;
- ``least-allocated``: the node with the largest free share ``free_cpu/alloc_cpu +
  free_mem/alloc_mem`` (kube-scheduler's default NodeResourcesFit scoring, which weighs cpu and
  memory only), ties to the lowest-numbered node.

A pod that fits nowhere waits; when a pod leaves a node, the waiting pods that now fit it are placed
there in the order they arrived.  Exact, and fast enough for a million pods in plain Python, thanks
to lazily-updated heaps (see the policy classes) and one invariant: while pods of a shape wait, no
node fits that shape, so a newcomer of that shape waits too, and a node that frees capacity is the
only place where waiting pods can go.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

import numpy as np

from replay.progress import progress

POLICIES = ("first-fit", "least-allocated")


@dataclass
class Placement:
    """Per pod: when the scheduler decided (µs, -1 if never) and on which node (-1 if never)."""

    decided_us: np.ndarray
    node: np.ndarray


class _Capacity:
    """Free cpu, memory, gpu and pods per node; a policy subclass finds the node a pod shape
    gets."""

    def __init__(self, alloc: np.ndarray, shapes: np.ndarray):
        self.alloc = [tuple(int(v) for v in row) for row in alloc]
        self.free = [list(row) for row in self.alloc]
        self.shapes = [tuple(int(v) for v in row) for row in shapes]

    def fits(self, node: int, shape: int) -> bool:
        free, need = self.free[node], self.shapes[shape]
        return (free[0] >= need[0] and free[1] >= need[1] and free[2] >= need[2]
                and free[3] >= need[3])

    def take(self, node: int, shape: int) -> None:
        free, need = self.free[node], self.shapes[shape]
        free[0] -= need[0]
        free[1] -= need[1]
        free[2] -= need[2]
        free[3] -= need[3]

    def give_back(self, node: int, shape: int) -> None:
        free, need = self.free[node], self.shapes[shape]
        free[0] += need[0]
        free[1] += need[1]
        free[2] += need[2]
        free[3] += need[3]

    def best(self, shape: int) -> int:
        """The node the policy picks for a pod of ``shape``, or -1 if none fits."""
        raise NotImplementedError


class _FirstFit(_Capacity):
    """Per pod shape, a min-heap of the nodes that may fit it.

    A node that no longer fits a shape leaves that shape's heap when it reaches the top, and comes
    back when a pod leaves it; so a shape never looks at the same full node twice.
    """

    def __init__(self, alloc: np.ndarray, shapes: np.ndarray):
        super().__init__(alloc, shapes)
        nodes = range(len(self.alloc))
        self.heaps = [[n for n in nodes if self.fits(n, s)] for s in range(len(self.shapes))]
        self.in_heap = [[False] * len(self.alloc) for _ in self.shapes]
        for heap, present in zip(self.heaps, self.in_heap):
            for n in heap:
                present[n] = True  # a sorted list is already a heap

    def best(self, shape: int) -> int:
        heap, present = self.heaps[shape], self.in_heap[shape]
        while heap:
            if self.fits(heap[0], shape):
                return heap[0]
            present[heapq.heappop(heap)] = False
        return -1

    def give_back(self, node: int, shape: int) -> None:
        super().give_back(node, shape)
        for s, present in enumerate(self.in_heap):
            if not present[node] and self.fits(node, s):
                heapq.heappush(self.heaps[s], node)
                present[node] = True


class _LeastAllocated(_Capacity):
    """Per node shape, a max-heap of nodes by free share, kept lazily.

    Each entry is ``(-share, node, version)``.  Taking capacity lowers a node's share and leaves its
    entry as an over-estimate, corrected when it reaches the top; giving capacity back pushes a
    fresh entry.  So the first current entry that fits is the best node of its node shape.
    """

    def __init__(self, alloc: np.ndarray, shapes: np.ndarray):
        super().__init__(alloc, shapes)
        group_of: dict[tuple, int] = {}
        self.group = [group_of.setdefault(a, len(group_of)) for a in self.alloc]
        self.version = [0] * len(self.alloc)
        self.newest = [0] * len(self.alloc)  # version of each node's newest heap entry
        self.heaps: list[list] = [[] for _ in group_of]
        for node, g in enumerate(self.group):
            self.heaps[g].append(self._entry(node))
        for heap in self.heaps:
            heapq.heapify(heap)
        # For each pod shape, the node groups big enough to ever fit it.
        self.groups_for = [[g for a, g in group_of.items() if all(x >= y for x, y in zip(a, need))]
                           for need in self.shapes]

    def _entry(self, node: int) -> tuple[float, int, int]:
        free, alloc = self.free[node], self.alloc[node]
        share = (free[0] / alloc[0] if alloc[0] else 0.0) + (free[1] / alloc[1] if alloc[1] else 0.0)
        return (-share, node, self.version[node])

    def take(self, node: int, shape: int) -> None:
        super().take(node, shape)
        self.version[node] += 1

    def give_back(self, node: int, shape: int) -> None:
        super().give_back(node, shape)
        self.version[node] += 1
        self.newest[node] = self.version[node]
        heapq.heappush(self.heaps[self.group[node]], self._entry(node))

    def best(self, shape: int) -> int:
        best = None
        for group in self.groups_for[shape]:
            top = self.heaps[group][0] if self.heaps[group] else None
            if top is None or top[2] != self.version[top[1]] or not self.fits(top[1], shape):
                top = self._best_in(group, shape)  # the slow path: stale or unfitting top
            if top is not None and (best is None or top < best):
                best = top
        return -1 if best is None else best[1]

    def _best_in(self, group: int, shape: int) -> tuple | None:
        heap, version, newest = self.heaps[group], self.version, self.newest
        aside, found = [], None
        while heap:
            entry = heap[0]
            node = entry[1]
            if entry[2] != version[node]:  # stale: drop it, or refresh it if it is the newest
                if newest[node] == version[node]:
                    heapq.heappop(heap)
                else:
                    newest[node] = version[node]
                    heapq.heapreplace(heap, self._entry(node))
            elif self.fits(node, shape):
                found = entry
                break
            else:
                aside.append(heapq.heappop(heap))
        for entry in aside:
            heapq.heappush(heap, entry)
        return found


def place(policy: str, node_alloc: np.ndarray, shape_requests: np.ndarray, pod_shape: np.ndarray,
          ready_us: np.ndarray, lifetime_us: np.ndarray, commit_delay_us: int) -> Placement:
    """Place pods that become ready at ``ready_us`` (sorted) and stay ``lifetime_us`` once bound.

    ``node_alloc`` is (nodes, 4) and ``shape_requests`` (shapes, 4): cpu_milli, memory_bytes,
    gpu_milli, and pods (a node's allocatable ``pods``; 1 for every pod shape).  A pod decided
    at time t is bound at t + ``commit_delay_us`` and leaves at its binding plus its lifetime;
    capacity is taken at decision time and given back when it leaves.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; choose from {', '.join(POLICIES)}")
    policy_class = _FirstFit if policy == "first-fit" else _LeastAllocated
    cluster = policy_class(node_alloc, shape_requests)
    n_pods = len(pod_shape)
    decided = [-1] * n_pods
    chosen = [-1] * n_pods
    shapes = pod_shape.tolist()
    ready = ready_us.tolist()
    lifetime = lifetime_us.tolist()
    waiting: list[deque] = [deque() for _ in cluster.shapes]
    leaving: list[tuple[int, int]] = []  # heap of (leave time, pod)

    def bind(pod: int, node: int, now: int) -> None:
        cluster.take(node, shapes[pod])
        decided[pod] = now
        chosen[pod] = node
        heapq.heappush(leaving, (now + commit_delay_us + lifetime[pod], pod))

    def leave_until(now: int) -> None:
        while leaving and leaving[0][0] <= now:
            left_at, pod = heapq.heappop(leaving)
            node = chosen[pod]
            cluster.give_back(node, shapes[pod])
            place_waiting_on(node, left_at)

    def place_waiting_on(node: int, now: int) -> None:
        while any(waiting):
            heads = [(queue[0], s) for s, queue in enumerate(waiting)
                     if queue and cluster.fits(node, s)]
            if not heads:
                return
            pod, s = min(heads)
            waiting[s].popleft()
            bind(pod, node, now)

    with progress(n_pods, "placing pods", unit="pod") as bar:
        for pod in range(n_pods):
            now, shape = ready[pod], shapes[pod]
            leave_until(now)
            node = -1 if waiting[shape] else cluster.best(shape)
            if node < 0:
                waiting[shape].append(pod)
            else:
                bind(pod, node, now)
            if pod & 0xFFFF == 0xFFFF:
                bar.update(0x10000)
        leave_until(np.iinfo(np.int64).max)
    return Placement(np.array(decided, dtype=np.int64), np.array(chosen, dtype=np.int64))
