"""``omega``: shared-state schedulers that commit transactions straight to the cell state.

Each instance decides on its own view and commits a transaction to the shared state (the truth)
``commit_ms`` after deciding; there is no binder and no kubelet check.  Conflict detection
(Schwarzkopf et al., EuroSys 2013) is ``fine`` (a placement fails only if the node no longer has
room) or ``coarse`` (it fails if anything changed on the node since the version the scheduler's
view holds, its own commits excepted).  A gang is one transaction: ``incremental`` keeps the
placements that pass, ``all_or_nothing`` fails them all if one fails.  With every watch stage at
zero (``profile = "zero"``) a view is stale only for the scheduler's decision time, as in Omega's
own simulator.
"""

from __future__ import annotations

from replay.engine.api import (Attempt, Outcome, Reason, Scheduler, Simulation, WatcherSpec,
                               WriteKind)
from replay.models.base import Param
from replay.models.whatif import WhatIfModel, independent_schedulers, scheduler_params

COMPONENT = "omega-scheduler"


class OmegaModel(WhatIfModel):
    name = "omega"
    description = "Shared-state schedulers committing transactions with fine or coarse conflict detection."
    params = scheduler_params() + (
        Param("conflict", "fine", "fine: fail if the node has no room; coarse: fail if the node "
              "changed since the scheduler's view of it", choices=("fine", "coarse")),
        Param("transaction", "incremental", "for gangs: keep what passes, or all or nothing",
              choices=("incremental", "all_or_nothing")),
    )

    def components(self) -> list[WatcherSpec]:
        return self.scheduler_components("omega")

    def start(self, sim: Simulation) -> None:
        self.sim = sim
        names = [w.name for w in self.components()]
        self.schedulers = independent_schedulers(sim, names, self.settings, self.transact,
                                                 gangs=True)
        # the change count each scheduler's own latest commit left on each node
        self.own_change: dict[Scheduler, dict[int, int]] = {s: {} for s in self.schedulers}

    def transact(self, scheduler: Scheduler, attempts: list[Attempt]) -> None:
        self.sim.after(self.commit_us(), self._commit, scheduler, attempts)

    def _commit(self, scheduler: Scheduler, attempts: list[Attempt]) -> None:
        """Check the transaction against the shared state, then commit what it keeps."""
        live = scheduler.drop_deleted(attempts)
        coarse = self.settings["conflict"] == "coarse"
        accepted = [a for a in live if not coarse or self._unchanged(scheduler, a)]
        if not coarse:  # fine: each placement must still fit, with those before it
            kept: list[Attempt] = []
            for attempt in accepted:
                if self.sim.fits([(a.pod, a.node) for a in kept + [attempt]]):
                    kept.append(attempt)
            accepted = kept
        if len(accepted) < len(live) and self.settings["transaction"] == "all_or_nothing":
            accepted = []
        for attempt in live:
            if attempt not in accepted:
                scheduler.failed(attempt, Outcome.CONFLICT,
                                 Reason.NODE_CHANGED if coarse else Reason.NODE_FULL)
        for attempt in accepted:
            write = self.sim.commit(WriteKind.POD_BIND, attempt.pod, COMPONENT, node=attempt.node,
                                    attempt=attempt)
            self.own_change[scheduler][attempt.node] = write.node_version
            self.sim.settle(attempt, Outcome.BOUND)

    def _unchanged(self, scheduler: Scheduler, attempt: Attempt) -> bool:
        """Coarse-grained: the node is at the version the decision saw (the view's, or the
        scheduler's own latest commit there)."""
        known = max(attempt.seen_version, self.own_change[scheduler].get(attempt.node, 0))
        return self.sim.node_version(attempt.node) == known
