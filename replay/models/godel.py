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

from replay.engine.api import (Assumptions, Attempt, Gathering, Indices, Outcome, Pod, Reason,
                               Scheduler, Simulation, WatcherSpec, Worker, Write, WriteKind)
from replay.models.base import Param
from replay.models.whatif import SCHEDULER_PARAMS, WhatIfModel, schedulers_on

DISPATCHER, BINDER = "godel-dispatcher", "godel-binder"


class GodelModel(WhatIfModel):
    name = "godel"
    description = "Gödel: a dispatcher, scheduler instances that assume, and a binder that re-checks."
    params = SCHEDULER_PARAMS + (
        Param("schedulers", 3, "number of scheduler instances", minimum=1),
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
        names = self.scheduler_names()
        self.schedulers = schedulers_on(
            sim, names, self.settings, self.assume, gangs=True,
            preferred=self._partitions(sim, len(names)),
            assume_ttl_us=round(self.settings["scheduler_assume_ttl_ms"] * 1000))
        for i, scheduler in enumerate(self.schedulers):
            scheduler.queue_on(WriteKind.POD_DISPATCH, instance=i, requeue=WriteKind.POD_REJECT)
        self._start_dispatcher(sim)
        self._start_binder(sim)

    def _partitions(self, sim: Simulation, count: int) -> list[Indices] | None:
        if self.settings["partition"] == "none":
            return None
        return np.array_split(np.arange(sim.node_count), count)

    # -- dispatcher -------------------------------------------------------------------------------
    def _start_dispatcher(self, sim: Simulation) -> None:
        self.load = [0] * len(self.schedulers)
        self.counted: dict[Pod, int] = {}  # dispatched pods not yet seen bound or deleted
        self.gang_instance: dict[str, int] = {}
        worker = Worker(sim, round(self.settings["dispatch_ms"] * 1000), self._dispatch)

        def handle(write: Write) -> None:
            assert write.pod is not None
            if write.kind == WriteKind.POD_CREATE:
                worker.submit(write.pod)
            elif write.pod in self.counted:
                self.load[self.counted.pop(write.pod)] -= 1

        sim.react(DISPATCHER, {WriteKind.POD_CREATE, WriteKind.POD_BIND, WriteKind.POD_DELETE},
                  handle)

    def _dispatch(self, pod: Pod) -> None:
        if not pod.pending:
            return
        instance = self.gang_instance.get(pod.group) if pod.group is not None else None
        if instance is None:
            instance = min(range(len(self.load)), key=lambda i: (self.load[i], i))
            if pod.group is not None:
                self.gang_instance[pod.group] = instance
        self.load[instance] += 1
        self.counted[pod] = instance
        self.sim.after(self.commit_us(), self._patch_dispatched, pod, instance)

    def _patch_dispatched(self, pod: Pod, instance: int) -> None:
        if pod.pending:
            self.sim.assign(pod, instance)
            self.sim.commit(WriteKind.POD_DISPATCH, pod, DISPATCHER)

    # -- schedulers -------------------------------------------------------------------------------
    def assume(self, scheduler: Scheduler, attempts: list[Attempt]) -> None:
        """The scheduler's commit: patch each pod to ``assumed`` on its node."""
        self.sim.after(self.commit_us(), self._patch_assumed, scheduler, attempts)

    def _patch_assumed(self, scheduler: Scheduler, attempts: list[Attempt]) -> None:
        for attempt in scheduler.drop_deleted(attempts):
            self.sim.commit(WriteKind.POD_ASSUME, attempt.pod, "godel-scheduler", node=attempt.node,
                            attempt=attempt)

    # -- binder -----------------------------------------------------------------------------------
    def _start_binder(self, sim: Simulation) -> None:
        self.binder_view = sim.view(BINDER)
        self.binder_assumed = Assumptions(sim, self.binder_view,
                                          round(self.settings["binder_assume_ttl_ms"] * 1000))
        self.binder_gangs: Gathering[Attempt] = Gathering(sim.gang_size)
        worker: Worker[Attempt] = Worker(sim, round(self.settings["binder_ms"] * 1000), self._check)
        sim.react(BINDER, {WriteKind.POD_ASSUME}, lambda w: worker.submit(sim.attempt(w.attempt)))

    def _check(self, attempt: Attempt) -> None:
        """Re-check an assumed placement (a whole gang at once) on the binder's own view."""
        members = self.binder_gangs.add(attempt.pod.group, attempt)
        if members is None:
            return
        view = self.binder_view
        live = [a for a in members if a.pod.pending]
        with view.holding() as hold:  # each member sees the room the others take
            fitted = 0
            for a in live:
                if view.fits(a.node, a.pod.request):
                    hold(a.node, a.pod.request)
                    fitted += 1
        fits = fitted == len(live)
        if fits:
            for a in live:
                self.binder_assumed.assume(a)
        self.sim.after(self.commit_us(), self._decide, live, fits)

    def _decide(self, attempts: list[Attempt], fits: bool) -> None:
        for attempt in attempts:
            pod = attempt.pod
            if not pod.pending:
                self.binder_assumed.forget(attempt)
                self.sim.settle(attempt, Outcome.ERROR, Reason.POD_DELETED)
            elif fits:
                self.sim.commit(WriteKind.POD_BIND, pod, BINDER, node=attempt.node,
                                attempt=attempt)
                self.sim.settle(attempt, Outcome.BOUND)
            else:
                self.sim.commit(WriteKind.POD_REJECT, pod, BINDER, attempt=attempt)
                self.sim.settle(attempt, Outcome.CONFLICT, Reason.BINDER_REJECT)
