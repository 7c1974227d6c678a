"""``oracle``: one scheduler that sees every write the moment it commits: the lower bound.

Its view is never stale (it is outside the watch pipeline), it places gangs all or nothing, and
its bindings are checked against the truth when they commit (nothing but its own decision time can
make them fail).  Every other watcher (the kubelets) still sees the writes through the pipeline.
"""

from __future__ import annotations

from replay.engine.cluster import POD_BIND, POD_CREATE
from replay.engine.config import WatcherSpec
from replay.engine.scheduler import Attempt, Scheduler
from replay.engine.simulation import Simulation
from replay.models.whatif import (
    SCHEDULER_PARAMS,
    WhatIfModel,
    fits_together,
    react_as_scheduler,
    schedulers_on,
)

NAME = "oracle"


class OracleModel(WhatIfModel):
    name = NAME
    description = "One scheduler with zero watch delay, commits checked against the truth: the lower bound."
    params = SCHEDULER_PARAMS
    instant = frozenset({NAME})

    def components(self) -> list[WatcherSpec]:
        return [WatcherSpec(NAME, "scheduler", ("pods", "nodes"))]

    def start(self, sim: Simulation) -> None:
        self.sim = sim
        (scheduler,) = schedulers_on(sim, [NAME], self.settings, self.bind, gangs=True)
        react_as_scheduler(sim, scheduler, POD_CREATE)

    def bind(self, scheduler: Scheduler, attempts: list[Attempt]) -> None:
        self.sim.env.after(round(self.settings["commit_ms"] * 1000), self._commit,
                           scheduler, attempts)

    def _commit(self, scheduler: Scheduler, attempts: list[Attempt]) -> None:
        live = [a for a in attempts if a.pod.pending]
        for attempt in attempts:
            if not attempt.pod.pending:
                attempt.committed = self.sim.env.now
                scheduler.failed(attempt, "error", "pod_deleted", retry=False)
        if not fits_together(self.sim.truth, live):
            for attempt in live:
                attempt.committed = self.sim.env.now
                scheduler.failed(attempt, "conflict", "no_room")
            return
        for attempt in live:
            self.sim.commit(POD_BIND, attempt.pod, "oracle-scheduler", node=attempt.node,
                            attempt=attempt)
            self.sim.settle(attempt, "bound")
