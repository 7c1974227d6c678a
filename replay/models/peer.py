"""``peer``: Gödel's topology, but schedulers also tell each other their assumptions directly.

The design the Gödel maintainers wondered about: when a scheduler assumes a pod, it sends the
assumption straight to every other scheduler (one network hop, drawn like each receiver's network
stage, no API server), and the receiver counts the pod on that node until its watch brings the
binding, the rejection or the delete (or the assumption expires).  A message that arrives after
the binder has already rejected the placement, or after the receiver has applied the binding, is
ignored.  Comparing its runs with ``godel`` measures what the shortcut would save.
"""

from __future__ import annotations

from replay.engine.scheduler import Attempt, Scheduler
from replay.models.godel import GodelModel


class PeerModel(GodelModel):
    name = "peer"
    description = "Gödel plus assumptions sent directly between schedulers (one network hop)."

    def assume(self, scheduler: Scheduler, attempts: list[Attempt]) -> None:
        super().assume(scheduler, attempts)
        sim = self.sim
        for peer in self.schedulers:
            if peer is not scheduler:
                delay = sim.pipeline.hop(sim.piped_of[sim.index[peer.name]])
                sim.env.after(delay, self._told, peer, attempts)

    def _told(self, peer: Scheduler, attempts: list[Attempt]) -> None:
        peer.view.sync(self.sim.env.now)
        for attempt in attempts:
            pod = attempt.pod
            if attempt.outcome != "conflict" and pod.pending and pod not in peer.view.placed:
                peer.view.assume(pod, attempt.node)
