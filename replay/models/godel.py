"""``godel``: Gödel's dispatcher, scheduler instances and binder (kubewharf/godel-scheduler).

- The **dispatcher** takes each new pod in turn (``dispatch_ms`` each) and picks the scheduler
  with the fewest pods in the dispatched state, ties broken at random (``pkg/dispatcher``:
  ``GetMostIdleSchedulerAndAddPodInAdvance``), then patches the pod with it (a gang goes whole
  to one scheduler).  Its count of a scheduler's pods drops when its watch brings the pod's
  assume patch (or delete), and rises again when a rejection sends the pod back to dispatched.
- Each **scheduler** schedules the pods dispatched to it on its own view, walking the nodes from
  a random start until it has found the unit's members + 50 feasible ones (with ``partition =
  even`` its own slice of the nodes first: a preference, not isolation).  Its commit is a patch of
  the pod to ``assumed`` on the chosen node.  Every Gödel scheduler's cache counts an assumed pod
  on its node as soon as it applies that patch (``AssumedPodOfGodel``), and so does the truth.
- The **binder** takes each assumed pod in turn (``binder_ms`` each), re-checks that it fits on its
  own view (bound pods, and the pods it has itself assumed: ``pkg/binder/cache``), then writes the
  binding, or rejects: the pod goes back to ``dispatched`` and straight into the same scheduler's
  ready queue, without backoff, once the rejection reaches that scheduler through its watch.
- Gangs are placed all or nothing, by the scheduler and again by the binder.
- Assumptions expire if not confirmed: after 15 minutes in a scheduler, 5 in the binder.
- Every component writes through its own client: 10,000 QPS, burst 10,000 by default.
"""

from __future__ import annotations

import functools

import numpy as np

from replay.engine.api import (Assumptions, Attempt, Gathering, GodelNodeSelector, Indices,
                               Outcome, Pod, Reason, Scheduler, SelectorFactory, Simulation,
                               WatcherSpec, Worker, Write, WriteKind)
from replay.limits import MAX_SCHEDULERS
from replay.models.base import Param
from replay.models.whatif import SCHEDULER_PARAMS, WhatIfModel, with_defaults

DISPATCHER, BINDER = "godel-dispatcher", "godel-binder"


class GodelModel(WhatIfModel):
    name = "godel"
    description = "Gödel: a dispatcher, scheduler instances that assume, and a binder that re-checks."
    params = with_defaults(SCHEDULER_PARAMS, client_qps=10000.0, client_burst=10000) + (
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
        names = self.scheduler_names()
        partitions = self._partitions(sim, len(names))
        ttl = round(self.settings["scheduler_assume_ttl_ms"] * 1000)
        self.schedulers = [
            Scheduler(sim, name, self.settings, self.assume, gangs=True, assume_ttl_us=ttl,
                      selector=self._selector(None if partitions is None else partitions[i]))
            for i, name in enumerate(names)]
        self.clients = {s: self.client(sim) for s in self.schedulers}
        for i, scheduler in enumerate(self.schedulers):
            scheduler.queue_on(WriteKind.POD_DISPATCH, WriteKind.POD_REJECT, instance=i)
        self._start_dispatcher(sim)
        self._start_binder(sim)

    def _partitions(self, sim: Simulation, count: int) -> list[Indices] | None:
        if self.settings["partition"] == "none":
            return None
        return np.array_split(np.arange(sim.node_count), count)

    @staticmethod
    def _selector(partition: Indices | None) -> SelectorFactory:
        return functools.partial(GodelNodeSelector, preferred=partition)

    # -- dispatcher -------------------------------------------------------------------------------
    def _start_dispatcher(self, sim: Simulation) -> None:
        self.load = [0] * len(self.schedulers)  # pods in the dispatched state, per scheduler
        self.dispatched: dict[Pod, int] = {}
        self.gang_instance: dict[str, int] = {}
        self.dispatch_rng = sim.random("dispatcher")
        self.dispatcher_client = self.client(sim)
        worker = Worker(sim, round(self.settings["dispatch_ms"] * 1000), self._dispatch)

        def handle(write: Write) -> None:
            pod = write.pod
            assert pod is not None
            if write.kind == WriteKind.POD_CREATE:
                worker.submit(pod)
            elif write.kind == WriteKind.POD_REJECT:
                self._count(pod, pod.instance)
            else:  # assumed or deleted: no longer in the dispatched state
                self._uncount(pod)

        sim.react(DISPATCHER, {WriteKind.POD_CREATE, WriteKind.POD_ASSUME, WriteKind.POD_REJECT,
                               WriteKind.POD_DELETE}, handle)

    def _count(self, pod: Pod, instance: int) -> None:
        if pod.pending and pod not in self.dispatched:
            self.dispatched[pod] = instance
            self.load[instance] += 1

    def _uncount(self, pod: Pod) -> None:
        instance = self.dispatched.pop(pod, None)
        if instance is not None:
            self.load[instance] -= 1

    def _dispatch(self, pod: Pod) -> None:
        if not pod.pending:
            return
        instance = self.gang_instance.get(pod.group) if pod.group is not None else None
        if instance is None:
            instance = self._most_idle()
            if pod.group is not None:
                self.gang_instance[pod.group] = instance
        self._count(pod, instance)
        self.dispatcher_client.send(self._patch_dispatched, pod, instance)

    def _most_idle(self) -> int:
        """The scheduler with the fewest pods in the dispatched state, ties at random."""
        load = self.load
        fewest = min(load)
        if load.count(fewest) == 1:  # (no draw)
            return load.index(fewest)
        idle = [i for i, n in enumerate(load) if n == fewest]
        return idle[int(self.dispatch_rng.integers(len(idle)))]

    def _patch_dispatched(self, pod: Pod, instance: int) -> None:
        if pod.pending:
            self.sim.assign(pod, instance)
            self.sim.commit(WriteKind.POD_DISPATCH, pod, DISPATCHER)

    # -- schedulers -------------------------------------------------------------------------------
    def assume(self, scheduler: Scheduler, attempts: list[Attempt]) -> None:
        """The scheduler's commit: patch each pod to ``assumed`` on its node."""
        for attempt in attempts:
            self.clients[scheduler].send(self._patch_assumed, scheduler, attempt,
                                         for_attempts=(attempt,))

    def _patch_assumed(self, scheduler: Scheduler, attempt: Attempt) -> None:
        if scheduler.drop_deleted([attempt]):
            self.sim.commit(WriteKind.POD_ASSUME, attempt.pod, "godel-scheduler",
                            node=attempt.node, attempt=attempt)

    # -- binder -----------------------------------------------------------------------------------
    def _start_binder(self, sim: Simulation) -> None:
        self.binder_view = sim.view(BINDER)
        self.binder_assumed = Assumptions(sim, self.binder_view,
                                          round(self.settings["binder_assume_ttl_ms"] * 1000))
        self.binder_gangs: Gathering[Attempt] = Gathering(sim.gang_unplaced)
        self.binder_client = self.client(sim)
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
        for a in live:
            if fits:
                self.binder_assumed.assume(a)
            self.binder_client.send(self._decide, a, fits, for_attempts=(a,))

    def _decide(self, attempt: Attempt, fits: bool) -> None:
        pod = attempt.pod
        if not pod.pending:
            self.binder_assumed.forget(attempt)
            self.sim.settle(attempt, Outcome.ERROR, Reason.POD_DELETED)
        elif fits:
            self.sim.commit(WriteKind.POD_BIND, pod, BINDER, node=attempt.node, attempt=attempt)
            self.sim.settle(attempt, Outcome.BOUND)
        else:
            self.sim.commit(WriteKind.POD_REJECT, pod, BINDER, attempt=attempt)
            self.sim.settle(attempt, Outcome.CONFLICT, Reason.BINDER_REJECT)
