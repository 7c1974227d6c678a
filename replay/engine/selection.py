"""Node selection: which node a scheduler picks for a pod on its snapshot of its cache.

kube-scheduler's walk (``pkg/scheduler/schedule_one.go``, ``findNodesThatFitPod``): filter nodes
from a rotating start index until ``numFeasibleNodesToFind`` feasible nodes are found
(``percentageOfNodesToScore``, adaptive by default), then score the feasible ones.  Omega's
simulator instead tries random nodes until one fits (``random-first-fit``).  A preferred
partition, if any, is walked first.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from replay.engine.cluster import NO_NODE, Request
from replay.engine.view import Snapshot

POLICIES = ("least-allocated", "most-allocated", "random-first-fit")
Indices = npt.NDArray[np.int64]


def nodes_to_find(total: int, percentage: int) -> int:
    """kube-scheduler's numFeasibleNodesToFind."""
    if total < 100 or percentage >= 100:
        return total
    if percentage <= 0:
        percentage = max(5, 50 - total // 125)
    return max(100, total * percentage // 100)


class NodeSelector:
    """One scheduler's node selection, with the state it keeps between pods (the start index)."""

    def __init__(self, policy: str, percentage: int, rng: np.random.Generator,
                 preferred: Indices | None = None):
        self.policy, self.percentage, self.rng = policy, percentage, rng
        self.preferred = preferred  # node indices tried first (a partition), or None
        self.next_start = 0

    def choose(self, snapshot: Snapshot, request: Request) -> tuple[int, int]:
        """The node for ``request`` (NO_NODE if none fits), and how many nodes were evaluated."""
        if self.preferred is not None:
            node, count = self._choose_among(snapshot, self.preferred, request)
            if node >= 0:
                return node, count
            other, more = self._choose_among(snapshot, None, request)
            return other, count + more
        return self._choose_among(snapshot, None, request)

    def _choose_among(self, snapshot: Snapshot, nodes: Indices | None,
                      request: Request) -> tuple[int, int]:
        total = snapshot.free.shape[1] if nodes is None else len(nodes)
        if total == 0:
            return NO_NODE, 0
        if self.policy == "random-first-fit":
            return self._random_first_fit(snapshot, nodes, total, request)
        wanted = nodes_to_find(total, self.percentage)
        chunk = max(256, 2 * wanted)
        position = start = self.next_start % total
        found: list[Indices] = []
        count = evaluated = 0
        while evaluated < total and count < wanted:
            size = min(chunk, total - evaluated, total - position)  # a piece never wraps around
            fit = _fitting(snapshot, position, position + size, request, nodes)
            need = wanted - count
            if len(fit) >= need:  # enough: stop at the last one needed
                fit = fit[:need]
                size = int(fit[-1]) + 1
            found.append(fit + position if nodes is None else nodes[fit + position])
            count += len(fit)
            evaluated += size
            position = (position + size) % total
        self.next_start = start + evaluated
        feasible = np.concatenate(found) if found else np.zeros(0, dtype=np.int64)
        if len(feasible) == 0:
            return NO_NODE, evaluated
        return int(feasible[np.argmax(self._scores(snapshot, feasible, request))]), evaluated

    def _scores(self, snapshot: Snapshot, nodes: Indices,
                request: Request) -> npt.NDArray[np.float64]:
        """kube-scheduler's NodeResourcesFit: over cpu and memory, the share left free after
        placing the pod (least-allocated), or used (most-allocated); summed, which ranks nodes as
        the mean does."""
        free, alloc = snapshot.free, snapshot.alloc
        cpu: npt.NDArray[np.float64] = (free[0, nodes] - request[0]) / np.maximum(alloc[0, nodes], 1)
        score: npt.NDArray[np.float64] = cpu + (free[1, nodes] - request[1]) / np.maximum(
            alloc[1, nodes], 1)
        return score if self.policy == "least-allocated" else -score

    def _random_first_fit(self, snapshot: Snapshot, nodes: Indices | None, total: int,
                          request: Request) -> tuple[int, int]:
        """Omega's randomized first fit: try random nodes until one fits."""
        evaluated = 0
        while evaluated < total:
            tries = self.rng.integers(0, total, size=min(64, total))
            candidates = tries if nodes is None else nodes[tries]
            fit = np.flatnonzero(_fits(snapshot, candidates, request))
            if len(fit):
                return int(candidates[fit[0]]), evaluated + int(fit[0]) + 1
            evaluated += len(tries)
        return NO_NODE, evaluated


def _fitting(snapshot: Snapshot, lo: int, hi: int, request: Request,
             nodes: Indices | None) -> Indices:
    """Offsets from ``lo`` of the nodes in positions [lo, hi) that fit ``request``; with no
    partition the positions are node indices and the snapshot is read through slices."""
    free, present = snapshot.free, snapshot.present
    at: slice | Indices = slice(lo, hi) if nodes is None else nodes[lo:hi]
    return np.flatnonzero(present[at] & (free[0, at] >= request[0])
                          & (free[1, at] >= request[1]) & (free[2, at] >= request[2]))


def _fits(snapshot: Snapshot, nodes: Indices, request: Request) -> npt.NDArray[np.bool_]:
    free = snapshot.free
    fits: npt.NDArray[np.bool_] = (snapshot.present[nodes] & (free[0, nodes] >= request[0])
                                   & (free[1, nodes] >= request[1])
                                   & (free[2, nodes] >= request[2]))
    return fits
