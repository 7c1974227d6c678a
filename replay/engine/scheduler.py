"""What every scheduling model shares: a queue, attempts that take time, and node selection.

A scheduler pops pods one at a time (highest priority first, then oldest, like kube-scheduler's
PrioritySort).  A scheduling cycle snapshots the scheduler's view, picks a node for each of its
pods (``selection``: kube-scheduler's walk, or a Gödel scheduler's) and takes ``per_attempt_ms +
per_pod_ms x pods + per_node_ms x nodes evaluated`` (Omega's think time is t_job + t_task x
tasks: the first two terms).  At the end of that time it assumes the pods in its own view at once
and hands their attempts to the model's commit protocol (``on_assumed``).  A pod that fits
nowhere waits, unschedulable, until the view gives capacity back (and its backoff has passed),
checked again after ``unschedulable_timeout_ms``; a pod whose commit failed comes back after its
backoff (or at once, if the model says so: Gödel's rejected pods).

Gangs (pods sharing ``group``) are placed in one cycle when the model asks: the scheduler waits
until every member still to be placed has reached its queue.  All or nothing by default; with
``partial`` (Omega's incremental transactions), the members that fit go ahead and the others
wait for capacity.

Built only on the model API of ``Simulation`` and ``View``, as a model's own scheduler would be.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from replay.engine.assumed import Assumptions
from replay.engine.cluster import Attempt, Outcome, Pod, Reason, Write, WriteKind
from replay.engine.core import Timer
from replay.engine.gangs import Gathering
from replay.engine.selection import NodeSelector, SelectorFactory

if TYPE_CHECKING:
    from replay.engine.simulation import Simulation

# The writes that give capacity back to a view (and so may let an unschedulable pod fit)
GIVES_BACK = frozenset({WriteKind.POD_DELETE, WriteKind.POD_REJECT, WriteKind.POD_FAIL,
                        WriteKind.NODE_SET})

OnAssumed = Callable[["Scheduler", list[Attempt]], None]


class Scheduler:
    """One scheduler instance: its queue, its view, its attempts.

    ``on_assumed(scheduler, attempts)`` is the model's commit protocol for placements the
    scheduler has just decided and assumed in its view.  ``settings`` holds the parameters of
    ``replay.models.whatif.SCHEDULER_PARAMS``."""

    def __init__(self, sim: Simulation, name: str, settings: Mapping[str, Any],
                 on_assumed: OnAssumed, gangs: bool = False, partial: bool = False,
                 assume_ttl_us: int | None = None, selector: SelectorFactory = NodeSelector):
        """``assume_ttl_us``: how long an unconfirmed assumption lives (None: until confirmed or
        failed); ``selector``: how it picks nodes (kube-scheduler's ``NodeSelector`` by
        default), made with the ``policy`` and ``percentage_of_nodes_to_score`` settings and the
        scheduler's own random stream; ``partial``: a gang's members that fit go ahead."""
        self.sim, self.name, self.view = sim, name, sim.view(name)
        self.settings = settings
        self._on_assumed = on_assumed
        self._gangs: Gathering[Pod] | None = Gathering(sim.gang_unplaced) if gangs else None
        self._partial = partial
        self.selector = selector(settings["policy"], settings["percentage_of_nodes_to_score"],
                                 sim.random(f"scheduler/{name}"))
        self._per_attempt = round(settings["per_attempt_ms"] * 1000)
        self._per_pod = settings["per_pod_ms"] * 1000
        self._per_node = settings["per_node_ms"] * 1000
        self._queue: list[tuple[int, int, int, Pod]] = []
        self._enqueued_at: dict[Pod, int] = {}
        self._unschedulable: dict[Pod, tuple[int, Timer]] = {}  # -> (give_backs, its timeout)
        self._assumptions = Assumptions(sim, self.view, assume_ttl_us, sim.mark_forgotten)
        self._busy = False
        self._order = 0

    # -- what puts pods in the queue ------------------------------------------------------------
    def queue_on(self, *kinds: WriteKind, instance: int | None = None) -> None:
        """React to the writes of ``kinds`` that put a pod in this queue (only for pods assigned
        to ``instance``, if given) and, while pods wait unschedulable, to those that give
        capacity back."""
        def mine(write: Write) -> bool:
            return write.kind in kinds and (
                instance is None or write.pod.instance == instance)  # type: ignore[union-attr]

        def wants(write: Write) -> bool:
            return mine(write) or (write.kind in GIVES_BACK and bool(self._unschedulable))

        def handle(write: Write) -> None:
            if mine(write):
                assert write.pod is not None
                self.enqueue(write.pod)
            if write.kind in GIVES_BACK:
                self.capacity_returned()

        self.sim.react(self.name, {*kinds, *GIVES_BACK}, handle, wants)

    def enqueue(self, pod: Pod, backoff: bool = False) -> None:
        """Put ``pod`` in the queue now, or once its backoff has passed."""
        if backoff:
            self.sim.call_after(self.backoff_us(pod), self._push, pod)
        else:
            self._push(pod)

    def backoff_us(self, pod: Pod) -> int:
        s = self.settings
        delay = s["backoff_initial_ms"] * 2 ** max(pod.attempts - 1, 0)
        return int(round(min(delay, s["backoff_max_ms"]) * 1000))

    def _push(self, pod: Pod) -> None:
        if not pod.pending or pod in self._enqueued_at:
            return
        self._stop_waiting(pod)
        self._order += 1
        now = self.sim.now
        self._enqueued_at[pod] = now
        heapq.heappush(self._queue, (-pod.priority, now, self._order, pod))
        if not self._busy:
            self._busy = True
            self.sim.call_after(0, self._start)

    def capacity_returned(self) -> None:
        """The view has given capacity back: unschedulable pods may fit now."""
        give_backs = self.view.give_backs
        for pod in [p for p, (seen, _) in self._unschedulable.items() if seen < give_backs]:
            self._stop_waiting(pod)
            self.enqueue(pod, backoff=True)

    # -- attempts -------------------------------------------------------------------------------
    def _start(self) -> None:
        while self._queue:
            pod = heapq.heappop(self._queue)[3]
            enqueued = self._enqueued_at.pop(pod)
            if not pod.pending:
                continue
            members = self._gangs.add(pod.group, pod, _is_pending) if self._gangs else [pod]
            if members is None:
                continue
            self._attempt(members, enqueued)
            return
        self._busy = False

    def _attempt(self, pods: list[Pod], enqueued: int) -> None:
        sim, view = self.sim, self.view
        now = sim.now
        oldest = view.oldest_unapplied()
        lag = now - oldest if oldest is not None and oldest <= now else 0
        snapshot = view.snapshot()
        attempts: list[Attempt] = []
        evaluated = 0
        held: dict[int, int] = {}  # claims of earlier members per node (a private sequence number)
        with view.holding() as hold:  # each member of a gang sees the room the others took
            for pod in pods:
                node, count = self.selector.choose(snapshot, pod.request, len(pods))
                evaluated += count
                seen = 0
                if node >= 0:
                    hold(node, pod.request)
                    seen = int(snapshot.version[node]) + held.get(node, 0)
                    held[node] = held.get(node, 0) + 1
                attempts.append(sim.new_attempt(pod, self.name, enqueued, node, lag, seen,
                                                cycle=attempts[0] if attempts else None))
        decision = (self._per_attempt + round(self._per_pod * len(pods))
                    + round(self._per_node * evaluated))
        sim.call_after(decision, self._decided, attempts, view.give_backs)

    def _decided(self, attempts: list[Attempt], give_backs_at_start: int) -> None:
        sim = self.sim
        for attempt in attempts:
            sim.mark_decided(attempt)
        live = [a for a in attempts if a.pod.pending]
        for attempt in attempts:
            if not attempt.pod.pending:
                sim.settle(attempt, Outcome.ERROR, Reason.POD_DELETED)
        unplaced = [a for a in live if a.node < 0]
        if unplaced and not self._partial:  # a gang is placed all or nothing
            unplaced = live
        for attempt in unplaced:
            sim.settle(attempt, Outcome.UNSCHEDULABLE,
                       Reason.NO_FIT if attempt.node < 0 else Reason.GANG_INCOMPLETE)
            self._wait_for_capacity(attempt.pod, give_backs_at_start)
        placed = [a for a in live if a not in unplaced]
        if placed:
            for attempt in placed:
                self._assumptions.assume(attempt)
            self._on_assumed(self, placed)
        sim.call_after(0, self._start)

    def _wait_for_capacity(self, pod: Pod, give_backs_at_start: int) -> None:
        """Wait, unschedulable, for capacity; if some came back during the attempt, retry after
        the backoff."""
        if self.view.give_backs > give_backs_at_start:
            self.enqueue(pod, backoff=True)
            return
        timeout = self.sim.after(round(self.settings["unschedulable_timeout_ms"] * 1000),
                                 self._timed_out, pod)
        self._unschedulable[pod] = (self.view.give_backs, timeout)
        due = self.view.next_due(GIVES_BACK)
        if due is not None:  # committed, on its way to this view: do not sleep through it
            self.sim.call_at(max(due, self.sim.now), self.capacity_returned)

    def _stop_waiting(self, pod: Pod) -> None:
        waiting = self._unschedulable.pop(pod, None)
        if waiting is not None:
            waiting[1].cancel()

    def _timed_out(self, pod: Pod) -> None:
        """kube-scheduler's periodic flush of pods left unschedulable, but only if the view has
        given capacity back since (in a quiet cluster a retry could not succeed, and retrying
        forever would keep the replay from ending)."""
        seen, _ = self._unschedulable[pod]
        if self.view.give_backs > seen:
            del self._unschedulable[pod]
            self._push(pod)

    # -- the commit protocol's outcomes ---------------------------------------------------------
    def failed(self, attempt: Attempt, outcome: Outcome, reason: Reason,
               retry: bool = True) -> None:
        """The commit of ``attempt`` failed: forget the assumption and retry after backoff."""
        self.sim.settle(attempt, outcome, reason)
        self._assumptions.forget(attempt)
        if retry and attempt.pod.pending:
            self.enqueue(attempt.pod, backoff=True)


    def drop_deleted(self, attempts: list[Attempt]) -> list[Attempt]:
        """The attempts whose pods still exist; the others end now (``error``, ``pod_deleted``:
        the pod was deleted before the write)."""
        for attempt in attempts:
            if not attempt.pod.pending:
                self.failed(attempt, Outcome.ERROR, Reason.POD_DELETED, retry=False)
        return [a for a in attempts if a.pod.pending]

    def holds(self, attempt: Attempt) -> bool:
        """Whether ``attempt`` is this scheduler's current, unforgotten assumption of its pod."""
        return self._assumptions.holds(attempt)


def _is_pending(pod: Pod) -> bool:
    return pod.pending
