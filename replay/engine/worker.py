"""A component's work loop: items handled one at a time, first come first served (Gödel's
dispatcher and binder, or any controller with one worker)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic

from replay.engine.core import Item

if TYPE_CHECKING:
    from replay.engine.simulation import Simulation


class Worker(Generic[Item]):
    """Handles each submitted item ``service_us`` after the previous one is done."""

    def __init__(self, sim: Simulation, service_us: int, handle: Callable[[Item], None]):
        self._sim, self._service_us, self._handle = sim, service_us, handle
        self._queue: deque[Item] = deque()
        self._busy = False

    def submit(self, item: Item) -> None:
        self._queue.append(item)
        if not self._busy:
            self._busy = True
            self._sim.call_after(self._service_us, self._done)

    def _done(self) -> None:
        self._handle(self._queue.popleft())
        if self._queue:
            self._sim.call_after(self._service_us, self._done)
        else:
            self._busy = False
