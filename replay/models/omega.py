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

from replay.engine.cluster import POD_BIND, POD_CREATE
from replay.engine.config import WatcherSpec
from replay.engine.scheduler import Attempt, Scheduler
from replay.engine.simulation import Simulation
from replay.models.base import Param
from replay.models.whatif import (
    Assigner,
    WhatIfModel,
    fits_together,
    react_as_scheduler,
    scheduler_params,
    schedulers_on,
)

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
        return [WatcherSpec(f"omega-{i}", "scheduler", ("pods", "nodes"))
                for i in range(self.settings["schedulers"])]

    def start(self, sim: Simulation) -> None:
        self.sim = sim
        Assigner(sim, self.settings["schedulers"], self.settings["assign"])
        names = [w.name for w in self.components()]
        self.schedulers = schedulers_on(sim, names, self.settings, self.transact, gangs=True)
        # the change count each scheduler's own latest commit left on each node
        self.own_change: dict[Scheduler, dict[int, int]] = {s: {} for s in self.schedulers}
        for i, scheduler in enumerate(self.schedulers):
            react_as_scheduler(sim, scheduler, POD_CREATE, owner=i)

    def transact(self, scheduler: Scheduler, attempts: list[Attempt]) -> None:
        self.sim.env.after(round(self.settings["commit_ms"] * 1000), self._commit,
                           scheduler, attempts)

    def _commit(self, scheduler: Scheduler, attempts: list[Attempt]) -> None:
        """Check the transaction against the shared state, then commit what it keeps."""
        now = self.sim.env.now
        live = [a for a in attempts if a.pod.pending]
        for attempt in attempts:
            if not attempt.pod.pending:
                attempt.committed = now
                scheduler.failed(attempt, "error", "pod_deleted", retry=False)
        coarse = self.settings["conflict"] == "coarse"
        accepted = [a for a in live if not coarse or self._unchanged(scheduler, a)]
        if not coarse:  # fine: each placement must still fit, with those before it
            kept: list[Attempt] = []
            for attempt in accepted:
                if fits_together(self.sim.truth, kept + [attempt]):
                    kept.append(attempt)
            accepted = kept
        if len(accepted) < len(live) and self.settings["transaction"] == "all_or_nothing":
            accepted = []
        for attempt in live:
            if attempt not in accepted:
                attempt.committed = now
                scheduler.failed(attempt, "conflict", "node_changed" if coarse else "node_full")
        for attempt in accepted:
            write = self.sim.commit(POD_BIND, attempt.pod, COMPONENT, node=attempt.node,
                                    attempt=attempt)
            self.own_change[scheduler][attempt.node] = write.seq
            self.sim.settle(attempt, "bound")

    def _unchanged(self, scheduler: Scheduler, attempt: Attempt) -> bool:
        """Coarse-grained: the node is at the version the decision saw (the view's, or the
        scheduler's own latest commit there)."""
        node = self.sim.truth.nodes[attempt.node]
        known = max(attempt.version, self.own_change[scheduler].get(attempt.node, 0))
        return node.present and node.changes == known
