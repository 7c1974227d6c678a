"""``omega``: shared-state schedulers that commit transactions straight to the cell state.

As in Omega (Schwarzkopf et al., EuroSys 2013) and its simulator (google/cluster-scheduler-
simulator, ``OmegaSimulation.scala``, ``CoreClusterSimulation.scala``): each scheduler decides a
job (a gang, or one pod) on its own view for its think time, ``per_attempt_ms + per_pod_ms x
tasks`` (t_job + t_task x tasks), then commits the job's claims as one transaction to the shared
state (the truth), ``commit_ms`` later; there is no binder and no kubelet check.  Conflict
detection is ``fine`` (a claim fails if the machine no longer has room) or ``coarse`` (it fails
if the machine's sequence number moved since the scheduler's copy, ``ClaimDelta``: only claims
move it, and the scheduler's own claims count as seen).  ``incremental`` transactions keep the
claims that pass and retry the rest; ``all_or_nothing`` fails them all if one fails.  A job's
tasks that fit nowhere in the view wait for capacity (incremental: the others go ahead), and
every task left over is retried after the backoff (the simulator retries a job a second later)
until it is placed.  With every watch stage at zero (``profile = "zero"``) a view is stale only
for the scheduler's think time, as in Omega's simulator.
"""

from __future__ import annotations

from replay.engine.api import (Attempt, Outcome, Reason, Scheduler, Simulation, WatcherSpec,
                               WriteKind)
from replay.models.base import Param
from replay.models.whatif import (WhatIfModel, independent_schedulers, scheduler_params,
                                  with_defaults)

COMPONENT = "omega-scheduler"
_NONE: frozenset[int] = frozenset()


class OmegaModel(WhatIfModel):
    name = "omega"
    description = "Shared-state schedulers committing transactions with fine or coarse conflict detection."
    params = with_defaults(scheduler_params(), policy="random-first-fit", per_pod_ms=0.1,
                           per_node_ms=0.0,
                           backoff_max_ms=1000.0, client_qps=0.0) + (
        Param("conflict", "fine", "fine: a claim fails if the machine has no room; coarse: if "
              "its sequence number moved since the scheduler's copy", choices=("fine", "coarse")),
        Param("transaction", "incremental", "keep the claims that pass and retry the rest, or "
              "all or nothing", choices=("incremental", "all_or_nothing")),
    )

    def components(self) -> list[WatcherSpec]:
        return self.scheduler_components("omega")

    def start(self, sim: Simulation) -> None:
        self.sim = sim
        names = [w.name for w in self.components()]
        self.incremental = self.settings["transaction"] == "incremental"
        self.coarse = self.settings["conflict"] == "coarse"
        self.schedulers = independent_schedulers(sim, names, self.settings, self.transact,
                                                 gangs=True, partial=self.incremental)
        self.clients = {s: self.client(sim) for s in self.schedulers}
        # per scheduler and node: the sequence numbers its own claims left there
        self.own: dict[Scheduler, dict[int, set[int]]] = {s: {} for s in self.schedulers}

    def transact(self, scheduler: Scheduler, attempts: list[Attempt]) -> None:
        self.clients[scheduler].send(self._commit, scheduler, attempts, for_attempts=attempts)

    def _commit(self, scheduler: Scheduler, attempts: list[Attempt]) -> None:
        """Check the transaction's claims in order against the shared state, then commit the
        ones it keeps."""
        live = scheduler.drop_deleted(attempts)
        kept = self._coarse_check(scheduler, live) if self.coarse else self._fine_check(live)
        if len(kept) < len(live) and not self.incremental:
            kept = []
        for attempt in live:
            if attempt not in kept:
                scheduler.failed(attempt, Outcome.CONFLICT,
                                 Reason.NODE_CHANGED if self.coarse else Reason.NODE_FULL)
        own = self.own[scheduler]
        for attempt in kept:
            write = self.sim.commit(WriteKind.POD_BIND, attempt.pod, COMPONENT, node=attempt.node,
                                    attempt=attempt)
            own.setdefault(attempt.node, set()).add(write.node_version)
            self.sim.settle(attempt, Outcome.BOUND)

    def _fine_check(self, attempts: list[Attempt]) -> list[Attempt]:
        """Fine-grained: each claim must fit its machine, with the claims kept before it."""
        kept: list[Attempt] = []
        for attempt in attempts:
            if self.sim.fits([(a.pod, a.node) for a in kept + [attempt]]):
                kept.append(attempt)
        return kept

    def _coarse_check(self, scheduler: Scheduler, attempts: list[Attempt]) -> list[Attempt]:
        """Coarse-grained: a claim passes if no one else claimed its machine since the version
        the decision saw; each claim kept moves the machine's number on, as the next claim of
        the job on the same machine expects."""
        own = self.own[scheduler]
        current: dict[int, int] = {}
        mine: dict[int, set[int]] = {}
        kept: list[Attempt] = []
        for attempt in attempts:
            node = attempt.node
            if node not in current:
                version = self.sim.node_version(node)
                if version is None:  # the machine is gone
                    continue
                current[node] = version
            seen, now = attempt.seen_version, current[node]
            ours, this = own.get(node, _NONE), mine.get(node, _NONE)
            if seen <= now and all(v in ours or v in this for v in range(seen + 1, now + 1)):
                current[node] = now + 1
                mine.setdefault(node, set()).add(now + 1)
                kept.append(attempt)
        return kept
