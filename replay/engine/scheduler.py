"""What every scheduling model shares: a queue, attempts that take time, and node selection.

A scheduler pops pods one at a time (highest priority first, then oldest, like kube-scheduler's
PrioritySort).  An attempt snapshots the scheduler's view, evaluates nodes the way
kube-scheduler's ``percentageOfNodesToScore`` does (from a rotating start, until enough feasible
nodes are found), scores the feasible ones by ``policy`` and takes ``per_attempt_ms + per_node_ms
x nodes evaluated`` (Omega's t_job + t_task).  At the end of that time it assumes the pod in its own
view at once and hands the attempt to the model's commit protocol.  A pod that fits nowhere waits,
unschedulable, until the view gives capacity back (and its backoff has passed), checked again
after ``unschedulable_timeout_ms``; a pod whose commit failed comes back after its backoff.

Gangs (pods sharing ``group``) are placed all or nothing when the model asks: the scheduler waits
until every member has reached its queue, then places them in one attempt.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from replay.engine.cluster import NODE_SET, POD_DELETE, POD_REJECT, Attempt, Pod
from replay.engine.view import View

if TYPE_CHECKING:
    from replay.engine.simulation import Simulation

POLICIES = ("least-allocated", "most-allocated", "random-first-fit")
GIVES_BACK = (POD_DELETE, POD_REJECT, NODE_SET)



def nodes_to_find(total: int, percentage: int) -> int:
    """kube-scheduler's numFeasibleNodesToFind."""
    if total < 100 or percentage >= 100:
        return total
    if percentage <= 0:
        percentage = max(5, 50 - total // 125)
    return max(100, total * percentage // 100)


class Scheduler:
    """One scheduler instance: its queue, its view, its attempts.  ``commit(scheduler,
    attempts)`` is the model's protocol for placements the scheduler has just decided and
    assumed."""

    def __init__(self, sim: Simulation, name: str, view: View, settings: dict,
                 commit: Callable[[Scheduler, list[Attempt]], None], gangs: bool = False,
                 preferred: np.ndarray | None = None):
        self.sim, self.env, self.name, self.view = sim, sim.env, name, view
        self.settings = settings
        self.commit = commit
        self.gangs = gangs
        self.preferred = preferred  # node indices tried first (a partition), or None
        self.rng = sim.random(f"scheduler/{name}")
        self.per_attempt = round(settings["per_attempt_ms"] * 1000)
        self.per_node = settings["per_node_ms"] * 1000
        self.queue: list[tuple[int, int, int, Pod]] = []
        self.enqueued_at: dict[Pod, int] = {}
        self.unschedulable: dict[Pod, int] = {}  # pod -> view.freed when it failed
        self.gathering: dict[str, list[Pod]] = {}  # gang -> members waiting for the rest
        self.in_flight: dict[Pod, Attempt] = {}  # assumed, not yet forgotten
        self.busy = False
        self.next_start = 0
        self._order = 0
        view.on_forget = self._forgotten

    # -- queue ----------------------------------------------------------------------------------
    def enqueue(self, pod: Pod, backoff: bool = False) -> None:
        """Put ``pod`` in the queue now, or once its backoff has passed."""
        if backoff:
            self.env.after(self.backoff_us(pod), self._push, pod)
        else:
            self._push(pod)

    def backoff_us(self, pod: Pod) -> int:
        s = self.settings
        delay = s["backoff_initial_ms"] * 2 ** max(pod.attempts - 1, 0)
        return round(min(delay, s["backoff_max_ms"]) * 1000)

    def _push(self, pod: Pod) -> None:
        if not pod.pending or pod in self.enqueued_at:
            return
        self.unschedulable.pop(pod, None)
        self._order += 1
        self.enqueued_at[pod] = self.env.now
        heapq.heappush(self.queue, (-pod.priority, self.env.now, self._order, pod))
        if not self.busy:
            self.busy = True
            self.env.after(0, self._start)

    def wants_capacity_news(self) -> bool:
        """Whether a write that gives capacity back should wake this scheduler."""
        return bool(self.unschedulable)

    def capacity_news(self) -> None:
        """The view has given capacity back: unschedulable pods may fit now."""
        self.view.sync(self.env.now)
        freed = self.view.freed
        for pod in [p for p, seen in self.unschedulable.items() if seen < freed]:
            del self.unschedulable[pod]
            self.enqueue(pod, backoff=True)

    # -- attempts -------------------------------------------------------------------------------
    def _start(self) -> None:
        while self.queue:
            pod = heapq.heappop(self.queue)[3]
            enqueued = self.enqueued_at.pop(pod)
            if not pod.pending:
                continue
            members = self._gang_members(pod)
            if members is None:
                continue
            self._attempt(members, enqueued)
            return
        self.busy = False

    def _gang_members(self, pod: Pod) -> list[Pod] | None:
        """The pods to place together with ``pod``: itself, or its whole gang once all members
        are here (None while the gang is still gathering)."""
        size = self.sim.workload.group_size.get(pod.group, 1) if self.gangs and pod.group else 1
        if size <= 1:
            return [pod]
        waiting = self.gathering.setdefault(pod.group, [])
        waiting.append(pod)
        waiting[:] = [p for p in waiting if p.pending]
        if len(waiting) < size:
            return None
        del self.gathering[pod.group]
        return waiting

    def _attempt(self, pods: list[Pod], enqueued: int) -> None:
        now = self.env.now
        view = self.view
        view.sync(now)
        oldest = view.oldest_unapplied()
        lag = now - oldest if oldest is not None and oldest <= now else 0
        attempts, evaluated = [], 0
        taken: list[tuple[int, Pod]] = []
        for pod in pods:
            node, count = self.choose(pod.request)
            evaluated += count
            if node >= 0:
                view.free[:, node] -= pod.request  # hold it while placing the rest of a gang
                taken.append((node, pod))
            attempt = self.sim.new_attempt(pod, self.name, enqueued, now, node, lag)
            attempt.version = int(view.seen[node]) if node >= 0 else 0
            attempts.append(attempt)
        for node, pod in taken:
            view.free[:, node] += pod.request
        decision = self.per_attempt + round(self.per_node * evaluated)
        self.env.after(decision, self._decided, attempts, view.freed)

    def _decided(self, attempts: list[Attempt], freed_at_start: int) -> None:
        now = self.env.now
        for attempt in attempts:
            attempt.decided = now
        live = [a for a in attempts if a.pod.pending]
        for attempt in attempts:
            if not attempt.pod.pending:
                self.sim.settle(attempt, "error", "pod_deleted")
        if any(a.node < 0 for a in live):  # a gang is placed all or nothing
            for attempt in live:
                self.sim.settle(attempt, "unschedulable",
                                "no_fit" if attempt.node < 0 else "gang_incomplete")
                attempt.committed = now
                self._unschedulable(attempt.pod, freed_at_start)
        elif live:
            for attempt in live:
                self.view.assume(attempt.pod, attempt.node)
                self.in_flight[attempt.pod] = attempt
            self.commit(self, live)
        self.env.after(0, self._start)

    def _unschedulable(self, pod: Pod, freed_at_start: int) -> None:
        """Wait for capacity; if some came back during the attempt, retry after the backoff."""
        if self.view.freed > freed_at_start:
            self.enqueue(pod, backoff=True)
            return
        self.unschedulable[pod] = self.view.freed
        self.env.after(round(self.settings["unschedulable_timeout_ms"] * 1000),
                       self._timeout, pod, pod.attempts)
        due = self._next_give_back()
        if due is not None:  # committed, on its way to this view: do not sleep through it
            self.env.at(max(due, self.env.now), self.capacity_news)

    def _next_give_back(self) -> int | None:
        for applied, write in self.view.inbox:
            if write.kind in GIVES_BACK:
                return applied
        return None

    def _timeout(self, pod: Pod, attempts: int) -> None:
        """kube-scheduler's periodic flush of pods left unschedulable, but only if the view has
        given capacity back since (in a quiet cluster a retry could not succeed, and retrying
        forever would keep the replay from ending)."""
        seen = self.unschedulable.get(pod)
        if seen is not None and pod.attempts == attempts and self.view.freed > seen:
            del self.unschedulable[pod]
            self._push(pod)

    def failed(self, attempt: Attempt, outcome: str, reason: str, retry: bool = True) -> None:
        """The commit of ``attempt`` failed: forget the assumption and retry after backoff."""
        self.sim.settle(attempt, outcome, reason)
        self.view.forget(attempt.pod, self.env.now)
        if retry and attempt.pod.pending:
            self.enqueue(attempt.pod, backoff=True)

    def _forgotten(self, pod: Pod, now: int) -> None:
        attempt = self.in_flight.pop(pod, None)
        if attempt is not None:
            attempt.forgotten = now

    # -- node selection -------------------------------------------------------------------------
    def choose(self, request: tuple[int, int, int]) -> tuple[int, int]:
        """The node for ``request`` on the current view (-1 if none fits), and how many nodes
        were evaluated.  A preferred partition is tried first."""
        if self.preferred is not None:
            node, count = self._choose_among(self.preferred, request)
            if node >= 0:
                return node, count
            other, more = self._choose_among(None, request)
            return other, count + more
        return self._choose_among(None, request)

    def _choose_among(self, nodes: np.ndarray | None, request) -> tuple[int, int]:
        total = self.view.free.shape[1] if nodes is None else len(nodes)
        if total == 0:
            return -1, 0
        if self.settings["policy"] == "random-first-fit":
            return self._random_first_fit(nodes, total, request)
        wanted = nodes_to_find(total, self.settings["percentage_of_nodes_to_score"])
        chunk = max(256, 2 * wanted)
        position = start = self.next_start % total
        found: list[np.ndarray] = []
        count = evaluated = 0
        while evaluated < total and count < wanted:
            size = min(chunk, total - evaluated, total - position)  # a piece never wraps around
            fit = self._fitting(position, position + size, request, nodes)
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
            return -1, evaluated
        return int(feasible[np.argmax(self._scores(feasible, request))]), evaluated

    def _fitting(self, lo: int, hi: int, request, nodes: np.ndarray | None) -> np.ndarray:
        """Offsets from ``lo`` of the nodes in positions [lo, hi) that fit ``request``; with no
        partition the positions are node indices and the view is read through slices."""
        free, present = self.view.free, self.view.present
        at = slice(lo, hi) if nodes is None else nodes[lo:hi]
        return np.flatnonzero(present[at] & (free[0, at] >= request[0])
                              & (free[1, at] >= request[1]) & (free[2, at] >= request[2]))

    def _fits(self, nodes: np.ndarray, request) -> np.ndarray:
        free = self.view.free
        return (self.view.present[nodes] & (free[0, nodes] >= request[0])
                & (free[1, nodes] >= request[1]) & (free[2, nodes] >= request[2]))

    def _scores(self, nodes: np.ndarray, request) -> np.ndarray:
        """kube-scheduler's NodeResourcesFit: over cpu and memory, the share left free after
        placing the pod (least-allocated), or used (most-allocated); summed, which ranks nodes as
        the mean does."""
        free, alloc = self.view.free, self.view.alloc
        score = (free[0, nodes] - request[0]) / np.maximum(alloc[0, nodes], 1)
        score += (free[1, nodes] - request[1]) / np.maximum(alloc[1, nodes], 1)
        return score if self.settings["policy"] == "least-allocated" else -score

    def _random_first_fit(self, nodes, total: int, request) -> tuple[int, int]:
        """Omega's randomized first fit: try random nodes until one fits."""
        evaluated = 0
        while evaluated < total:
            tries = self.rng.integers(0, total, size=min(64, total))
            candidates = tries if nodes is None else nodes[tries]
            fit = np.flatnonzero(self._fits(candidates, request))
            if len(fit):
                return int(candidates[fit[0]]), evaluated + int(fit[0]) + 1
            evaluated += len(tries)
        return -1, evaluated
