"""A component's own placements, counted in its view before the API server confirms them.

kube-scheduler's cache assumes a pod on its node as soon as the scheduler decides
(``AssumePod``) and forgets it when the binding comes back through the watch or the binding
fails (``ForgetPod``); an assumption never confirmed expires after a time to live (Gödel: 15
minutes in a scheduler, 5 in the binder).  ``Assumptions`` keeps that bookkeeping for one view,
the times to live as ``Deadlines`` (nearly all are confirmed long before: no timer each).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from replay.engine.cluster import Attempt, Pod
from replay.engine.view import View

if TYPE_CHECKING:
    from replay.engine.simulation import Simulation


class Assumptions:
    """The attempts a component has assumed in ``view`` and not yet forgotten.

    ``ttl_us`` (None: forever) is how long an unconfirmed assumption lives; ``on_forgotten(attempt,
    at)`` is told when one ends, whatever ended it (confirmed, failed, deleted, expired)."""

    def __init__(self, sim: Simulation, view: View, ttl_us: int | None = None,
                 on_forgotten: Callable[[Attempt, int], None] | None = None):
        self._view = view
        self._on_forgotten = on_forgotten
        self._held: dict[Pod, Attempt] = {}
        self._expiry = sim.deadlines(ttl_us, self.forget) if ttl_us is not None else None
        view.on_forget = self._forgotten

    def assume(self, attempt: Attempt) -> None:
        """Count ``attempt``'s pod on its node in the view from now on."""
        self._view.assume(attempt.pod, attempt.node)
        if self._expiry is not None:
            previous = self._held.get(attempt.pod)
            if previous is not None:
                self._expiry.discard(previous)
            self._expiry.add(attempt)
        self._held[attempt.pod] = attempt

    def forget(self, attempt: Attempt) -> None:
        """Drop ``attempt``'s assumption now (its write was refused or its placement failed)."""
        self._view.forget(attempt.pod)

    def holds(self, attempt: Attempt) -> bool:
        """Whether ``attempt`` is still assumed (not confirmed, failed or expired)."""
        return self._held.get(attempt.pod) is attempt

    def _forgotten(self, pod: Pod, at: int) -> None:
        attempt = self._held.pop(pod, None)
        if attempt is None:
            return
        if self._expiry is not None:
            self._expiry.discard(attempt)
        if self._on_forgotten is not None:
            self._on_forgotten(attempt, at)
