"""The simulation core: integer-microsecond time and a queue of callbacks.

Like SimPy's environment, but with plain callbacks instead of generator processes: the models are
reactive (a delivered write, a finished decision, a timer), and a callback costs a fraction of a
generator step at millions of events.  Callbacks due at the same microsecond run in the order they
were scheduled, so a run never depends on anything but its inputs.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any


class Environment:
    """Simulated time (``now``, µs since the epoch) and the callbacks still to run."""

    def __init__(self, start: int = 0):
        self.now = start
        self._queue: list[tuple[int, int, Callable[..., Any], tuple]] = []
        self._order = 0

    def at(self, time: int, callback: Callable[..., Any], *args: Any) -> None:
        """Run ``callback(*args)`` at ``time`` (never earlier than now)."""
        if time < self.now:
            raise ValueError(f"cannot schedule at {time}, before now ({self.now})")
        self._order += 1
        heapq.heappush(self._queue, (time, self._order, callback, args))

    def after(self, delay: int, callback: Callable[..., Any], *args: Any) -> None:
        """Run ``callback(*args)`` ``delay`` microseconds from now."""
        self.at(self.now + delay, callback, *args)

    def run(self, on_step: Callable[[int], None] | None = None, every: int = 4096) -> None:
        """Run callbacks in time order until none is left; ``on_step(now)`` every ``every``."""
        queue, pop = self._queue, heapq.heappop
        steps = 0
        while queue:
            time, _, callback, args = pop(queue)
            self.now = time
            callback(*args)
            steps += 1
            if on_step is not None and steps % every == 0:
                on_step(time)

    def __len__(self) -> int:
        return len(self._queue)
