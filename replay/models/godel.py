"""``godel``: Gödel's dispatcher, scheduler instances and binder (kubewharf/godel-scheduler).

- The **dispatcher** takes each new pod in turn (``dispatch_ms`` each), picks the scheduler with
  the fewest pods it has dispatched and not yet seen bound or deleted, and patches the pod with it
  (a gang goes whole to one scheduler).
- Each **scheduler** schedules the pods dispatched to it on its own view; with ``partition =
  even`` it tries its own slice of the nodes first (a preference, not isolation).  Its commit is a
  patch of the pod to ``assumed`` on the chosen node.
- The **binder** takes each assumed pod in turn (``binder_ms`` each), re-checks that it fits on its
  own delayed view plus its own assumptions, then writes the binding, or rejects: the pod goes back
  to ``dispatched`` and returns to the same scheduler's queue (after its backoff) once the
  rejection reaches that scheduler through its watch.
- Gangs are placed all or nothing, by the scheduler and again by the binder.
- Assumptions expire if not confirmed: after 15 minutes in a scheduler, 5 in the binder.
"""

from __future__ import annotations

import numpy as np

from replay.engine.cluster import (
    POD_ASSUME,
    POD_BIND,
    POD_CREATE,
    POD_DELETE,
    POD_DISPATCH,
    POD_REJECT,
    Pod,
    Write,
)
from replay.engine.config import WatcherSpec
from replay.engine.scheduler import Attempt, Scheduler
from replay.engine.simulation import Simulation
from replay.engine.view import View
from replay.limits import MAX_SCHEDULERS
from replay.models.base import Param
from replay.models.whatif import (
    SCHEDULER_PARAMS,
    WhatIfModel,
    Worker,
    react_as_scheduler,
    schedulers_on,
)

DISPATCHER, BINDER = "godel-dispatcher", "godel-binder"


class GodelModel(WhatIfModel):
    name = "godel"
    description = "Gödel: a dispatcher, scheduler instances that assume, and a binder that re-checks."
    params = SCHEDULER_PARAMS + (
        Param("schedulers", 3, "number of scheduler instances", minimum=1,
              maximum=MAX_SCHEDULERS),
        Param("partition", "none", "even: each scheduler prefers its own slice of the nodes",
              choices=("none", "even")),
        Param("dispatch_ms", 0.1, "the dispatcher's time per pod", minimum=0),
        Param("binder_ms", 0.1, "the binder's time per assumed pod", minimum=0),
        Param("scheduler_assume_ttl_ms", 900000.0, "a scheduler forgets an unconfirmed "
              "assumption after this long", minimum=0),
        Param("binder_assume_ttl_ms", 300000.0, "the binder forgets an unconfirmed assumption "
              "after this long", minimum=0),
    )

    def scheduler_names(self) -> list[str]:
        return [f"godel-scheduler-{i}" for i in range(self.settings["schedulers"])]

    def components(self) -> list[WatcherSpec]:
        return ([WatcherSpec(DISPATCHER, "dispatcher", ("pods",))]
                + [WatcherSpec(n, "scheduler", ("pods", "nodes")) for n in self.scheduler_names()]
                + [WatcherSpec(BINDER, "binder", ("pods", "nodes"))])

    def start(self, sim: Simulation) -> None:
        self.sim = sim
        s = self.settings
        self.commit_us = round(s["commit_ms"] * 1000)
        names = self.scheduler_names()
        self.schedulers = schedulers_on(sim, names, s, self.assume, gangs=True,
                                        preferred=self._partitions(sim, len(names)))
        for i, scheduler in enumerate(self.schedulers):
            react_as_scheduler(sim, scheduler, POD_DISPATCH, owner=i, requeue_kind=POD_REJECT)
        self._start_dispatcher(sim)
        self._start_binder(sim)

    def _partitions(self, sim: Simulation, count: int) -> list[np.ndarray] | None:
        if self.settings["partition"] == "none":
            return None
        return np.array_split(np.arange(len(sim.truth.nodes)), count)

    # -- dispatcher -------------------------------------------------------------------------------
    def _start_dispatcher(self, sim: Simulation) -> None:
        self.load = [0] * len(self.schedulers)
        self.counted: dict[Pod, int] = {}  # dispatched pods not yet seen bound or deleted
        self.gang_owner: dict[str, int] = {}
        worker = Worker(sim, round(self.settings["dispatch_ms"] * 1000), self._dispatch)

        def handle(write: Write) -> None:
            if write.kind == POD_CREATE:
                worker.submit(write.pod)
            elif write.pod in self.counted:
                self.load[self.counted.pop(write.pod)] -= 1

        sim.react(DISPATCHER, {POD_CREATE, POD_BIND, POD_DELETE}, handle)

    def _dispatch(self, pod: Pod) -> None:
        if not pod.pending:
            return
        owner = self.gang_owner.get(pod.group) if pod.group is not None else None
        if owner is None:
            owner = min(range(len(self.load)), key=lambda i: (self.load[i], i))
            if pod.group is not None:
                self.gang_owner[pod.group] = owner
        self.load[owner] += 1
        self.counted[pod] = owner
        self.sim.env.after(self.commit_us, self._patch_dispatched, pod, owner)

    def _patch_dispatched(self, pod: Pod, owner: int) -> None:
        if pod.pending:
            pod.owner = owner
            self.sim.commit(POD_DISPATCH, pod, DISPATCHER)

    # -- schedulers -------------------------------------------------------------------------------
    def assume(self, scheduler: Scheduler, attempts: list[Attempt]) -> None:
        """The scheduler's commit: patch each pod to ``assumed`` on its node."""
        self.sim.env.after(self.commit_us, self._patch_assumed, scheduler, attempts)
        ttl = round(self.settings["scheduler_assume_ttl_ms"] * 1000)
        self.sim.env.after(ttl, _expire, self.sim, scheduler.view, scheduler.in_flight, attempts)

    def _patch_assumed(self, scheduler: Scheduler, attempts: list[Attempt]) -> None:
        for attempt in attempts:
            if attempt.pod.pending:
                self.sim.commit(POD_ASSUME, attempt.pod, "godel-scheduler", node=attempt.node,
                                attempt=attempt)
            else:
                attempt.committed = self.sim.env.now
                scheduler.failed(attempt, "error", "pod_deleted", retry=False)

    # -- binder -----------------------------------------------------------------------------------
    def _start_binder(self, sim: Simulation) -> None:
        self.binder_view = sim.view(BINDER)
        self.binder_assumed: dict[Pod, Attempt] = {}  # until confirmed, rejected or expired
        self.binder_view.on_forget = lambda pod, now: self.binder_assumed.pop(pod, None)
        self.binder_gangs: dict[str, list[Attempt]] = {}
        worker = Worker(sim, round(self.settings["binder_ms"] * 1000), self._check)
        sim.react(BINDER, {POD_ASSUME}, lambda w: worker.submit(sim.attempts[w.attempt - 1]))

    def _check(self, attempt: Attempt) -> None:
        """Re-check an assumed placement (a whole gang at once) on the binder's own view."""
        members = self._gang(attempt)
        if members is None:
            return
        view = self.binder_view
        view.sync(self.sim.env.now)
        live = [a for a in members if a.pod.pending]
        held = []
        for a in live:
            if view.fits(a.node, a.pod.request):
                view.free[:, a.node] -= a.pod.request
                held.append(a)
        for a in held:
            view.free[:, a.node] += a.pod.request
        if len(held) == len(live):
            for a in live:
                view.assume(a.pod, a.node)
                self.binder_assumed[a.pod] = a
            ttl = round(self.settings["binder_assume_ttl_ms"] * 1000)
            self.sim.env.after(ttl, _expire, self.sim, view, self.binder_assumed, live)
        self.sim.env.after(self.commit_us, self._decide, live, len(held) == len(live))

    def _gang(self, attempt: Attempt) -> list[Attempt] | None:
        group = attempt.pod.group
        size = self.sim.workload.group_size.get(group, 1) if group is not None else 1
        if size <= 1:
            return [attempt]
        waiting = self.binder_gangs.setdefault(group, [])
        waiting.append(attempt)
        if len(waiting) < size:
            return None
        return self.binder_gangs.pop(group)

    def _decide(self, attempts: list[Attempt], fits: bool) -> None:
        for attempt in attempts:
            pod = attempt.pod
            if not pod.pending:
                self.binder_view.forget(pod, self.sim.env.now)
                self.sim.settle(attempt, "error", "pod_deleted")
            elif fits:
                self.sim.commit(POD_BIND, pod, BINDER, node=attempt.node, attempt=attempt)
                self.sim.settle(attempt, "bound")
            else:
                self.sim.commit(POD_REJECT, pod, BINDER, attempt=attempt)
                self.sim.settle(attempt, "conflict", "binder_reject")


def _expire(sim: Simulation, view: View, holding: dict, attempts: list[Attempt]) -> None:
    """Forget assumptions still unconfirmed when their time to live is up."""
    for attempt in attempts:
        if holding.get(attempt.pod) is attempt:
            view.forget(attempt.pod, sim.env.now)
