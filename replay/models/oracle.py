"""``oracle``: one scheduler that sees every write the moment it commits: the lower bound.

Its view is never stale (it is outside the watch pipeline), it places gangs all or nothing, and
its bindings are checked against the truth when they commit (nothing but its own decision time can
make them fail).  Every other watcher (the kubelets) still sees the writes through the pipeline.
"""

from __future__ import annotations

from replay.engine.api import (Attempt, Outcome, Reason, Scheduler, Simulation, WatcherSpec,
                               WriteKind)
from replay.models.whatif import SCHEDULER_PARAMS, WhatIfModel, with_defaults

NAME = "oracle"


class OracleModel(WhatIfModel):
    name = NAME
    description = "One scheduler with zero watch delay, commits checked against the truth: the lower bound."
    params = with_defaults(SCHEDULER_PARAMS, client_qps=0.0)  # a lower bound: no rate limit
    instant = frozenset({NAME})

    def components(self) -> list[WatcherSpec]:
        return [WatcherSpec(NAME, "scheduler", ("pods", "nodes"))]

    def start(self, sim: Simulation) -> None:
        self.sim = sim
        scheduler = Scheduler(sim, NAME, self.settings, self.bind, gangs=True)
        scheduler.queue_on(WriteKind.POD_CREATE)
        self.api = self.client(sim)

    def bind(self, scheduler: Scheduler, attempts: list[Attempt]) -> None:
        self.api.send(self._commit, scheduler, attempts, for_attempts=attempts)

    def _commit(self, scheduler: Scheduler, attempts: list[Attempt]) -> None:
        live = scheduler.drop_deleted(attempts)
        if not self.sim.fits([(a.pod, a.node) for a in live]):
            for attempt in live:
                scheduler.failed(attempt, Outcome.CONFLICT, Reason.NO_ROOM)
            return
        for attempt in live:
            self.sim.commit(WriteKind.POD_BIND, attempt.pod, "oracle-scheduler", node=attempt.node,
                            attempt=attempt)
            self.sim.settle(attempt, Outcome.BOUND)
