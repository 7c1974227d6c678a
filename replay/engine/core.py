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
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar


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
Item = TypeVar("Item")
# An item of ``Deadlines``: its due time, the order it took when added, and the item
_Deadline = tuple[int, int, Item]


# Cancelled timers are swept out of the queues once they are more than half of them, and at least
# this many: a timer cancelled long before it is due (an assumption's time to live, 15 minutes,
# confirmed within a second) would otherwise stay queued until then, hundreds of thousands of
# them in a large replay
SWEEP_AT_LEAST = 1 << 12
# Timers due more than this long after they are set wait outside the heap (a pod's end of run, an
# assumption's time to live, a backoff) until the heap reaches their time: the heap of the few due
# soon (a reaction, a decision, a client's latency: most timers) stays small, and each push and
# pop touches a few lines of memory instead of the 20 levels, most of them out of the CPU's cache,
# of a heap of the half million pods running in a large replay (0.4 against 0.9 to 5 us a timer).
# The far timers wait in one list per 2^SLOT_SHIFT us of due time (a "slot"), appended to,
# unsorted: a heap of them cost the same 20 levels twice per timer, a push when set and a pop
# when moved to the near heap, where a slot costs an append, and a push into the near heap once
# the near heap reaches the slot's start.  A slot spans 65.5 ms, so that the timers it moves
# early into the near heap are few.
FAR_US = 1_000_000
SLOT_SHIFT = 16
# Later than any time: the first far slot's start while there is none
_LAST = 1 << 62


class Environment:
    """Simulated time (``now``, µs since the epoch) and the timers still to fire."""

    def __init__(self, start: int = 0):
        self.now = start
        self._queue: list[_Entry] = []  # due within FAR_US of when they were set
        # the others, until the near queue reaches their slot: per slot (by its start, the due
        # time with its low SLOT_SHIFT bits cleared), its timers in the order set; the slots'
        # starts, as a heap; the first one (read by ``run`` at every timer); how many timers the
        # slots hold (``len``, read at every cancel)
        self._far: dict[int, list[_Entry]] = {}
        self._slots: list[int] = []
        self._far_first = _LAST
        self._far_count = 0
        self._order = 0
        self._cancelled = 0  # cancelled timers still in the queues

    def at(self, time: int, callback: Callable[..., Any], *args: Any) -> Timer:
        """Run ``callback(*args)`` at ``time`` (never earlier than now)."""
        self._order += 1
        return self._at_order(time, self._order, callback, *args)

    def call_at(self, time: int, callback: Callable[..., Any], *args: Any) -> None:
        """``at``, for a call that is never cancelled (no Timer: the engine sets one per
        reaction to a delivery, millions in a large replay)."""
        self._order += 1
        self._put(time, self._order, callback, args, None)

    def after(self, delay: int, callback: Callable[..., Any], *args: Any) -> Timer:
        """Run ``callback(*args)`` ``delay`` microseconds from now."""
        return self.at(self.now + delay, callback, *args)

    def _at_order(self, time: int, order: int, callback: Callable[..., Any],
                  *args: Any) -> Timer:
        """``at``, for a timer that takes the place of one set earlier, when ``order`` was the
        order set (``Deadlines``)."""
        timer = Timer(time, callback, args, self)
        self._put(time, order, callback, args, timer)
        return timer

    def _put(self, time: int, order: int, callback: Callable[..., Any], args: tuple[Any, ...],
             timer: Timer | None) -> None:
        """Queue a timer, in the near queue or, due more than FAR_US from now, in its far slot
        (which of the two changes nothing but the cost: ``_bring_near`` moves a slot to the
        near queue before any timer due after the slot's start fires)."""
        now = self.now
        if time < now:
            raise ValueError(f"cannot schedule at {time}, before now ({now})")
        if time - now <= FAR_US:
            heapq.heappush(self._queue, (time, order, callback, args, timer))
            return
        self._far_count += 1
        start = time >> SLOT_SHIFT << SLOT_SHIFT
        if (timers := self._far.get(start)) is not None:
            timers.append((time, order, callback, args, timer))
            return
        self._far[start] = [(time, order, callback, args, timer)]
        heapq.heappush(self._slots, start)
        if start < self._far_first:
            self._far_first = start

    def _bring_near(self) -> bool:
        """Move the far slots that start by the near queue's first timer (the first slot, if
        it is empty) to the near queue; whether it has any timer.  (A slot starts later than
        any of its timers was set, as they are due more than FAR_US after: no timer is put in a
        slot whose time has come.)"""
        queue, slots, push = self._queue, self._slots, heapq.heappush
        while slots and (not queue or self._far_first <= queue[0][0]):
            timers = self._far.pop(heapq.heappop(slots))
            self._far_count -= len(timers)
            for entry in timers:
                push(queue, entry)
            self._far_first = slots[0] if slots else _LAST
        return bool(queue)

    def peek(self) -> int | None:
        """When the next timer that will fire is due; None if there is none."""
        queue = self._queue
        while self._bring_near() and (timer := queue[0][4]) is not None and timer.cancelled:
            heapq.heappop(queue)
            self._cancelled -= 1
        return queue[0][0] if queue else None

    def step(self) -> bool:
        """Fire the next timer (advancing ``now`` to its time); False if none was left."""
        queue = self._queue
        while self._bring_near():
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
        stop = _LAST if until is None else until
        countdown = every  # timers to fire until the next ``on_step``
        while True:
            if (not queue or self._far_first <= queue[0][0]) and not self._bring_near():
                break
            time, _, callback, args, timer = entry = pop(queue)
            if time >= stop:
                heapq.heappush(queue, entry)  # (back: the one place ``until`` costs a push)
                break
            if timer is not None:
                if timer.cancelled:
                    self._cancelled -= 1
                    continue
                timer.fired = True
            self.now = time
            callback(*args)
            countdown -= 1
            if not countdown:
                countdown = every
                if on_step is not None and on_step(time):
                    return True
        if until is not None and until > self.now:
            self.now = until
        return False

    def _cancelled_one(self) -> None:
        """A timer in a queue was cancelled: sweep the cancelled ones out once they are most of
        the queues (in place: ``run`` holds the near one).  The queues are ordered by (due time,
        order set), which no two entries share, so what fires, and when, does not change."""
        self._cancelled += 1
        if self._cancelled >= SWEEP_AT_LEAST and 2 * self._cancelled > len(self):
            self._queue[:] = _uncancelled(self._queue)
            heapq.heapify(self._queue)
            self._far = {start: kept for start, timers in self._far.items()
                         if (kept := _uncancelled(timers))}
            self._slots = sorted(self._far)
            self._far_count = sum(map(len, self._far.values()))
            self._far_first = self._slots[0] if self._slots else _LAST
            self._cancelled = 0

    def __len__(self) -> int:
        """Timers still set (cancelled ones included until they come up or are swept out)."""
        return len(self._queue) + self._far_count


def _uncancelled(entries: list[_Entry]) -> list[_Entry]:
    """``entries`` without the cancelled timers, in the same order."""
    return [entry for entry in entries if entry[4] is None or not entry[4].cancelled]


class Deadlines(Generic[Item]):
    """Items that each fall due ``delay`` after they are added, unless discarded before; then
    ``fire(item)``.  A time to live nearly always ended early (an assumption's 15 minutes,
    confirmed within a second) costs an entry in a dict and a deque instead of a timer set and
    cancelled: the items fall due in the order added, so only the first still pending has a
    timer queued, with the order the item took when it was added (it fires where a timer of its
    own would have, among those due at the same microsecond).  That timer is cancelled once no
    item is pending, as the items' own timers would have been: one firing for nothing then
    could move ``now`` past the run's last event (while an item is pending, its own due time
    or the event that discards it comes later)."""

    def __init__(self, env: Environment, delay: int, fire: Callable[[Item], Any]):
        self._env, self._delay, self._fire = env, delay, fire
        self._pending: dict[Item, _Deadline[Item]] = {}
        self._line: deque[_Deadline[Item]] = deque()  # in the order added (pending or not)
        self._timer: Timer | None = None  # the first pending item's

    def add(self, item: Item) -> None:
        """``item`` falls due ``delay`` from now (an item added again: from now only)."""
        env = self._env
        env._order += 1
        deadline = (env.now + self._delay, env._order, item)
        self._pending[item] = deadline
        self._line.append(deadline)
        if self._timer is None:
            self._arm()

    def discard(self, item: Item) -> None:
        """``item`` will not fall due (nothing happens if it is not pending)."""
        if self._pending.pop(item, None) is not None and not self._pending:
            self._line.clear()
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def _arm(self) -> None:
        """A timer for the first pending item, if any (the items before it dropped)."""
        line, pending = self._line, self._pending
        while line and pending.get(line[0][2]) is not line[0]:
            line.popleft()
        if line:
            first = line[0]
            self._timer = self._env._at_order(first[0], first[1], self._due, first)

    def _due(self, deadline: _Deadline[Item]) -> None:
        self._timer = None
        item = deadline[2]
        if self._pending.get(item) is deadline:  # still pending: the first in the line
            del self._pending[item]
            self._line.popleft()
            self._fire(item)
        if self._timer is None:
            self._arm()
