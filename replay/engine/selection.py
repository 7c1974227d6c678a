"""Node selection: which node a scheduler picks for a pod on its snapshot of its cache.

Three steps, as kube-scheduler and Gödel take them (docs/fidelity.md cites every file):

1. **Walk**: filter nodes (cpu, memory, gpu fit, room for one more pod, node present) until
   enough feasible ones are found.  kube-scheduler (``pkg/scheduler/schedule_one.go``: ``findNodesThatFitPod``,
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
``CoreClusterSimulation.scala``: ``scheduleJob``).  The loops over nodes are compiled
(``selectkernel``: walk, scores and top-scored nodes in one call); the random draws stay here,
from the scheduler's stream, in upstream's order.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import numpy as np
import numpy.typing as npt

from replay.engine.cluster import NO_NODE, Request
from replay.engine.view import Snapshot

POLICIES = ("least-allocated", "most-allocated", "random-first-fit")
Indices = npt.NDArray[np.int64]
Ints = npt.NDArray[np.int64]
# Omega's walk draws candidates this many at a time
_BATCH = 64


def _kernels() -> ModuleType:
    """``selectkernel``, imported on first use: numba's import is for what-if replays only."""
    from replay.engine import selectkernel
    return selectkernel


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
        self._kernels = _kernels()
        self._policy = (self._kernels.MOST_ALLOCATED if policy == "most-allocated"
                        else self._kernels.LEAST_ALLOCATED)
        self._every: Indices = np.zeros(0, dtype=np.int64)  # every node, in index order
        self._top: Indices = np.zeros(0, dtype=np.int64)  # the kernel's output

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
        node, evaluated = self._walk(snapshot, self._all(total), start, wanted, request)
        self.next_start = start + evaluated
        return node, evaluated

    def _all(self, total: int) -> Indices:
        if len(self._every) != total:
            self._every = np.arange(total, dtype=np.int64)
        return self._every

    def _walk(self, snapshot: Snapshot, order: Indices, start: int, wanted: int,
              request: Request) -> tuple[int, int]:
        """Walk ``order`` from position ``start``, wrapping around, until ``wanted`` nodes fit
        ``request``; selectHost among them: a node drawn uniformly among those with the top total
        score (NO_NODE if none fits).  Also returns how many nodes were evaluated (up to the last
        feasible one needed)."""
        if len(self._top) < len(order):  # room for every feasible node (no bounds checks)
            self._top = np.zeros(len(order), dtype=np.int64)
        cpu, memory, gpu = request
        tied, evaluated = self._kernels.walk_and_score(
            snapshot.alloc, snapshot.free, snapshot.zero_requests, snapshot.present, order, start,
            wanted, cpu, memory, gpu, self._policy, self.balanced_weight, self._top)
        if tied == 0:
            return NO_NODE, evaluated
        pick = 0 if tied == 1 else int(self.rng.integers(tied))
        return int(self._top[pick]), evaluated

    def scores(self, snapshot: Snapshot, nodes: Indices, request: Request) -> Ints:
        """The weighted sum of the plugins' integer scores of ``nodes`` for ``request``:
        NodeResourcesFit's LeastAllocated ``(capacity - requested) x 100 / capacity`` (0 if
        requested exceeds it) or MostAllocated's ``requested x 100 / capacity`` (requested
        clamped to the capacity), integer division, 0 where the capacity is 0, averaged over cpu
        and memory; plus NodeResourcesBalancedAllocation's ``(1 - std) x 100`` truncated, std
        being half the difference of the two used fractions (each at most 1; with one resource
        of capacity 0, std is 0).  Requested counts the pod being placed.  Fit counts a request
        of 0 (one not set, as a trace cannot tell them apart) as 100 millicores or 200 MiB, the
        pod's own and those of the pods on the node (``NonZeroRequested``), as both
        kube-scheduler and Gödel do; BalancedAllocation counts requests as they are, and
        kube-scheduler's skips a pod that requests neither cpu nor memory (it scores 0)."""
        scores: Ints = self._kernels.score_nodes(
            snapshot.alloc, snapshot.free, snapshot.zero_requests,
            np.asarray(nodes, dtype=np.int64), request[0], request[1], self._policy,
            self.balanced_weight)
        return scores

    def _random_first_fit(self, snapshot: Snapshot, total: int,
                          request: Request) -> tuple[int, int]:
        """Omega's randomized first fit: random machines, each tried once, until one fits."""
        first_fit = self._kernels.first_fit
        free, present = snapshot.free, snapshot.present
        cpu, memory, gpu = request
        tries = self.rng.choice(total, size=min(_BATCH, total), replace=False)
        fit = first_fit(free, present, tries, cpu, memory, gpu)
        if fit >= 0:
            return int(tries[fit]), fit + 1
        rest = np.setdiff1d(np.arange(total), tries, assume_unique=True)
        order = rest[self.rng.permutation(len(rest))]
        fit = first_fit(free, present, order, cpu, memory, gpu)
        if fit >= 0:
            return int(order[fit]), len(tries) + fit + 1
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
        return self._walk(snapshot, self._all(total) if nodes is None else nodes, start, wanted,
                          request)


SelectorFactory = Callable[[str, int, np.random.Generator], NodeSelector]
