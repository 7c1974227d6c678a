"""``peer``: Gödel's topology, but schedulers also tell each other their assumptions directly.

The design the Gödel maintainers wondered about: when a scheduler assumes a pod, it sends the
assumption straight to every other scheduler (one network hop, drawn like each receiver's network
stage, no API server), and the receiver counts the pod on that node until its watch brings the
binding, the rejection or the delete (or the assumption expires).  A message that arrives after
the binder has already rejected the placement, or after the receiver has applied the binding, is
ignored.  Comparing its runs with ``godel`` measures what the shortcut would save.
"""

from __future__ import annotations

from replay.engine.api import Attempt, Outcome, Scheduler
from replay.models.godel import GodelModel


class PeerModel(GodelModel):
    name = "peer"
    description = "Gödel plus assumptions sent directly between schedulers (one network hop)."

    def assume(self, scheduler: Scheduler, attempts: list[Attempt]) -> None:
        super().assume(scheduler, attempts)
        for peer in self.schedulers:
            if peer is not scheduler:
                self.sim.message(peer.name, self._told, peer, attempts)

    def _told(self, peer: Scheduler, attempts: list[Attempt]) -> None:
        for attempt in attempts:
            pod = attempt.pod
            if (attempt.outcome != Outcome.CONFLICT and pod.pending
                    and not peer.view.has_placed(pod)):
                peer.view.assume(pod, attempt.node)
