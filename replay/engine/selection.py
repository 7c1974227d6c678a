"""Node selection: which node a scheduler picks for a pod on its snapshot of its cache.

Three steps, as kube-scheduler and Gödel take them (docs/fidelity.md cites every file):

1. **Walk**: filter nodes (cpu, memory, gpu fit, node present) until enough feasible ones are
   found.  kube-scheduler (``pkg/scheduler/schedule_one.go``: ``findNodesThatFitPod``,
   ``numFeasibleNodesToFind``) starts where its previous walk stopped (``nextStartNodeIndex``,
   advanced by the number of nodes processed) and wants ``percentageOfNodesToScore`` of them,
   adaptive by default (50% - nodes/125, at least 5%, at least 100 nodes).  A Gödel scheduler
   (``pkg/scheduler/core/pod_scheduler/pod_scheduler.go``: ``findFeasibleNodes``,
   ``numFeasibleNodesToFind``) starts at a random node every time and wants the unit's members +
   50 (+ 10 only for best-effort or node-manager pods, which a trace does not record), or a
   percentage if one is configured; it walks its partition first, then the other nodes.
2. **Score** the feasible nodes with integer plugin scores, 0-100 each (``MaxNodeScore``), weighted
   and summed: NodeResourcesFit's LeastAllocated or MostAllocated over cpu and memory
   (``pkg/scheduler/framework/plugins/noderesources/least_allocated.go``, ``most_allocated.go``)
   and NodeResourcesBalancedAllocation (``balanced_allocation.go``), weight 1 each as in
   kube-scheduler's default profile (``pkg/scheduler/apis/config/v1/default_plugins.go``); a
   Gödel profile configures only its resource plugin (``test/static/scheduler_config_v1beta1.yaml``).
3. **selectHost**: pick uniformly at random among the nodes with the top score (reservoir
   sampling upstream), drawing from the scheduler's own named random stream.

Omega's simulator instead tries random machines until one fits (``random-first-fit``,
``CoreClusterSimulation.scala``: ``scheduleJob``).  Every step is vectorised over numpy arrays: no
Python loop per node.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from replay.engine.cluster import NO_NODE, Request
from replay.engine.view import Snapshot

POLICIES = ("least-allocated", "most-allocated", "random-first-fit")
Indices = npt.NDArray[np.int64]
Ints = npt.NDArray[np.int64]
MAX_NODE_SCORE = 100  # framework.MaxNodeScore
# Omega's walk draws candidates this many at a time
_BATCH = 64


def nodes_to_find(total: int, percentage: int) -> int:
    """kube-scheduler's numFeasibleNodesToFind."""
    if total < 100 or percentage >= 100:
        return total
    if percentage <= 0:
        percentage = max(5, 50 - total // 125)
    return max(100, total * percentage // 100)


def godel_nodes_to_find(total: int, percentage: int, members: int) -> int:
    """Gödel's numFeasibleNodesToFind for a unit of ``members`` pods: a configured percentage
    (at least one node; no floor of 100 as in kube), else members + 50, the count for a
    long-running task (every pod whose annotations do not say best-effort or node-manager)."""
    if percentage >= 100:
        return total
    if percentage > 0:
        return max(1, total * percentage // 100)
    return min(total, members + 50)


class NodeSelector:
    """kube-scheduler's node selection, with the state it keeps between pods (the start index).

    ``balanced_weight`` is NodeResourcesBalancedAllocation's weight next to NodeResourcesFit's
    (1); 0 leaves it out."""

    balanced_weight = 1

    def __init__(self, policy: str, percentage: int, rng: np.random.Generator):
        self.policy, self.percentage, self.rng = policy, percentage, rng
        self.next_start = 0

    def choose(self, snapshot: Snapshot, request: Request, members: int = 1) -> tuple[int, int]:
        """The node for ``request`` (NO_NODE if none fits) in a unit of ``members`` pods, and how
        many nodes were evaluated."""
        total = snapshot.free.shape[1]
        if total == 0:
            return NO_NODE, 0
        if self.policy == "random-first-fit":
            return self._random_first_fit(snapshot, total, request)
        wanted = nodes_to_find(total, self.percentage)
        start = self.next_start % total
        feasible, evaluated = walk(snapshot, None, start, wanted, request)
        self.next_start = start + evaluated
        return self._select(snapshot, feasible, request), evaluated

    def _select(self, snapshot: Snapshot, feasible: Indices, request: Request) -> int:
        """selectHost: a node drawn uniformly among those with the top total score."""
        if len(feasible) == 0:
            return NO_NODE
        scores = self.scores(snapshot, feasible, request)
        top = np.flatnonzero(scores == scores.max())
        pick = 0 if len(top) == 1 else int(self.rng.integers(len(top)))
        return int(feasible[top[pick]])

    def scores(self, snapshot: Snapshot, nodes: Indices, request: Request) -> Ints:
        """The weighted sum of the plugins' integer scores of ``nodes`` for ``request``."""
        alloc = snapshot.alloc[:2, nodes]
        requested = alloc - snapshot.free[:2, nodes] + np.array(request[:2]).reshape(2, 1)
        fit = resource_scores(alloc, requested, self.policy)
        total: Ints = (fit[0] + fit[1]) // 2  # cpu and memory, weight 1 each
        if self.balanced_weight:
            total = total + self.balanced_weight * balanced_allocation(alloc, requested)
        return total

    def _random_first_fit(self, snapshot: Snapshot, total: int,
                          request: Request) -> tuple[int, int]:
        """Omega's randomized first fit: random machines, each tried once, until one fits."""
        tries = self.rng.choice(total, size=min(_BATCH, total), replace=False)
        fit = np.flatnonzero(_fits(snapshot, tries, request))
        if len(fit):
            return int(tries[fit[0]]), int(fit[0]) + 1
        rest = np.setdiff1d(np.arange(total), tries, assume_unique=True)
        order = rest[self.rng.permutation(len(rest))]
        fit = np.flatnonzero(_fits(snapshot, order, request))
        if len(fit):
            return int(order[fit[0]]), len(tries) + int(fit[0]) + 1
        return NO_NODE, total


class GodelNodeSelector(NodeSelector):
    """A Gödel scheduler's node selection: a random start every time, Gödel's count of nodes to
    find, its partition (``preferred``) walked before the other nodes; scored by its configured
    resource plugin alone."""

    balanced_weight = 0

    def __init__(self, policy: str, percentage: int, rng: np.random.Generator,
                 preferred: Indices | None = None):
        super().__init__(policy, percentage, rng)
        self.preferred = preferred
        self._others: Indices | None = None

    def choose(self, snapshot: Snapshot, request: Request, members: int = 1) -> tuple[int, int]:
        if self.policy == "random-first-fit" or self.preferred is None:
            return self._choose_among(snapshot, None, request, members)
        node, count = self._choose_among(snapshot, self.preferred, request, members)
        if node >= 0:
            return node, count
        if self._others is None:
            self._others = np.setdiff1d(np.arange(snapshot.free.shape[1]), self.preferred)
        other, more = self._choose_among(snapshot, self._others, request, members)
        return other, count + more

    def _choose_among(self, snapshot: Snapshot, nodes: Indices | None, request: Request,
                      members: int) -> tuple[int, int]:
        total = snapshot.free.shape[1] if nodes is None else len(nodes)
        if total == 0:
            return NO_NODE, 0
        if self.policy == "random-first-fit":
            return self._random_first_fit(snapshot, total, request)
        wanted = godel_nodes_to_find(total, self.percentage, members)
        start = int(self.rng.integers(total))
        feasible, evaluated = walk(snapshot, nodes, start, wanted, request)
        return self._select(snapshot, feasible, request), evaluated


SelectorFactory = Callable[[str, int, np.random.Generator], NodeSelector]


def walk(snapshot: Snapshot, nodes: Indices | None, start: int, wanted: int,
         request: Request) -> tuple[Indices, int]:
    """Filter the nodes (all, or the listed ``nodes``) in order from position ``start``, wrapping
    around, until ``wanted`` fit ``request``: those feasible nodes, and how many were evaluated
    (up to the last one needed)."""
    total = snapshot.free.shape[1] if nodes is None else len(nodes)
    chunk = max(256, 2 * wanted)
    position = start
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
    feasible = np.concatenate(found) if found else np.zeros(0, dtype=np.int64)
    return feasible, evaluated


def resource_scores(alloc: Ints, requested: Ints, policy: str) -> Ints:
    """Per resource (rows) and node (columns): LeastAllocated's ``(capacity - requested) x 100 /
    capacity`` (0 if requested exceeds it) or MostAllocated's ``requested x 100 / capacity``,
    integer division, 0 where the capacity is 0; requested counts the pod being placed."""
    capacity = np.maximum(alloc, 1)
    if policy == "least-allocated":
        score = np.where(requested > alloc, 0, (alloc - requested) * MAX_NODE_SCORE // capacity)
    else:  # MostAllocated clamps requested to the capacity instead
        score = np.minimum(requested, alloc) * MAX_NODE_SCORE // capacity
    out: Ints = np.where(alloc == 0, 0, score)
    return out


def balanced_allocation(alloc: Ints, requested: Ints) -> Ints:
    """NodeResourcesBalancedAllocation over cpu and memory: ``(1 - std) x 100`` truncated, std
    being half the difference of the two used fractions (each at most 1); a resource whose
    capacity is 0 is left out, and with one fraction left std is 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        fraction = np.minimum(requested / alloc, 1.0)
    both = (alloc[0] != 0) & (alloc[1] != 0)
    std = np.where(both, np.abs(fraction[0] - fraction[1]) / 2, 0.0)
    scores: Ints = ((1.0 - std) * MAX_NODE_SCORE).astype(np.int64)
    return scores


def _fitting(snapshot: Snapshot, lo: int, hi: int, request: Request,
             nodes: Indices | None) -> Indices:
    """Offsets from ``lo`` of the nodes in positions [lo, hi) that fit ``request``; with no
    list the positions are node indices and the snapshot is read through slices."""
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
