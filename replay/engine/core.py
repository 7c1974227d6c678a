"""The simulation core: integer-microsecond time and a queue of timers.

Like SimPy's ``Environment`` (``now``, ``schedule``, ``step``, ``peek``, ``run(until=...)``), but
with plain callbacks instead of generator processes: the models are reactive (a delivered write,
a finished decision, a timer), and a callback costs a fraction of a generator step at millions of
events.  ``at`` and ``after`` return a ``Timer`` that can be cancelled until it fires, so a model
never has to check whether a timer it set is still wanted.  Timers due at the same microsecond fire
in the order they were set, so a run never depends on anything but its inputs.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any


class Timer:
    """A callback due at ``time``; ``cancel()`` it before then and it never runs."""

    __slots__ = ("time", "callback", "args", "cancelled", "fired", "_env")

    def __init__(self, time: int, callback: Callable[..., Any], args: tuple[Any, ...],
                 env: Environment):
        self.time = time
        self.callback = callback
        self.args = args
        self.cancelled = False
        self.fired = False
        self._env = env

    @property
    def pending(self) -> bool:
        """Set, and neither fired nor cancelled yet."""
        return not (self.fired or self.cancelled)

    def cancel(self) -> None:
        """Make sure the callback does not run (nothing happens if it already has)."""
        if not (self.cancelled or self.fired):
            self.cancelled = True
            self._env._cancelled_one()


# A queue entry: due time, order set, callback, its arguments, and its Timer (None: a call the
# engine never cancels, which needs no Timer)
_Entry = tuple[int, int, Callable[..., Any], tuple[Any, ...], "Timer | None"]


# Cancelled timers are swept out of the queue once they are more than half of it, and at least
# this many: a timer cancelled long before it is due (an assumption's time to live, 15 minutes,
# confirmed within a second) would otherwise stay queued until then, hundreds of thousands of
# them in a large replay
SWEEP_AT_LEAST = 1 << 12


class Environment:
    """Simulated time (``now``, µs since the epoch) and the timers still to fire."""

    def __init__(self, start: int = 0):
        self.now = start
        self._queue: list[_Entry] = []
        self._order = 0
        self._cancelled = 0  # cancelled timers still in the queue

    def at(self, time: int, callback: Callable[..., Any], *args: Any) -> Timer:
        """Run ``callback(*args)`` at ``time`` (never earlier than now)."""
        if time < self.now:
            raise ValueError(f"cannot schedule at {time}, before now ({self.now})")
        self._order += 1
        timer = Timer(time, callback, args, self)
        heapq.heappush(self._queue, (time, self._order, callback, args, timer))
        return timer

    def call_at(self, time: int, callback: Callable[..., Any], *args: Any) -> None:
        """``at``, for a call that is never cancelled (no Timer: the engine sets one per
        reaction to a delivery, millions in a large replay)."""
        if time < self.now:
            raise ValueError(f"cannot schedule at {time}, before now ({self.now})")
        self._order += 1
        heapq.heappush(self._queue, (time, self._order, callback, args, None))

    def after(self, delay: int, callback: Callable[..., Any], *args: Any) -> Timer:
        """Run ``callback(*args)`` ``delay`` microseconds from now."""
        return self.at(self.now + delay, callback, *args)

    def peek(self) -> int | None:
        """When the next timer that will fire is due; None if there is none."""
        queue = self._queue
        while queue and (timer := queue[0][4]) is not None and timer.cancelled:
            heapq.heappop(queue)
            self._cancelled -= 1
        return queue[0][0] if queue else None

    def step(self) -> bool:
        """Fire the next timer (advancing ``now`` to its time); False if none was left."""
        queue = self._queue
        while queue:
            time, _, callback, args, timer = heapq.heappop(queue)
            if timer is not None:
                if timer.cancelled:
                    self._cancelled -= 1
                    continue
                timer.fired = True
            self.now = time
            callback(*args)
            return True
        return False

    def run(self, until: int | None = None, on_step: Callable[[int], bool] | None = None,
            every: int = 4096) -> bool:
        """Fire timers in time order until none is left, or until the next is due at or after
        ``until`` (then ``now`` becomes ``until``, as in SimPy); ``on_step(now)`` every
        ``every`` timers fired, which pauses the run if it returns True: then ``run`` returns
        True, and a later ``run`` goes on from there."""
        queue, pop = self._queue, heapq.heappop
        steps = 0
        while queue:
            time, _, callback, args, timer = queue[0]
            if until is not None and time >= until:
                break
            pop(queue)
            if timer is not None:
                if timer.cancelled:
                    self._cancelled -= 1
                    continue
                timer.fired = True
            self.now = time
            callback(*args)
            steps += 1
            if on_step is not None and steps % every == 0 and on_step(time):
                return True
        if until is not None and until > self.now:
            self.now = until
        return False

    def _cancelled_one(self) -> None:
        """A timer in the queue was cancelled: sweep the cancelled ones out once they are most of
        it (in place: ``run`` holds the list).  The queue is ordered by (due time, order set),
        which no two entries share, so what fires, and when, does not change."""
        self._cancelled += 1
        queue = self._queue
        if self._cancelled >= SWEEP_AT_LEAST and 2 * self._cancelled > len(queue):
            queue[:] = [entry for entry in queue if entry[4] is None or not entry[4].cancelled]
            heapq.heapify(queue)
            self._cancelled = 0

    def __len__(self) -> int:
        """Timers still set (cancelled ones included until they come up or are swept out)."""
        return len(self._queue)
