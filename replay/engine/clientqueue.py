"""A watcher's client queue in front of its handler, one per watch: three disciplines.

Every event a watch delivers (and every delta of a re-list's ``Replace``) arrives at the client at
its ``received`` time and waits for the watch's one handler goroutine, which handles it in
``service`` µs.  What "waits" means depends on the client (``ClientQueue``):

- ``fifo``: one entry per event in arrival order, as a shared informer's ``processorListener``
  (``client-go/tools/cache/shared_informer.go``: an unbounded ring buffer in front of the
  handler) and client-go's ``RealFIFO`` (``the_real_fifo.go``, the informers' queue since 1.33)
  queue them: ``applied = max(received, previous applied) + service``, a Lindley recursion;
- ``delta_fifo``: client-go's ``DeltaFIFO`` (``delta_fifo.go``) feeding the handler directly, as a
  plain informer (``cache.NewInformer``) of client-go before 1.33 does: one entry per object key;
  an event whose key already has a queued entry joins it, and all of a key's deltas are popped
  together, at the position of the key's first queued delta, and handled one by one (only two
  consecutive deletes are merged into one: ``dedupDeltas`` keeps the earlier, unless that one is
  a re-list's ``DeletedFinalStateUnknown``; the other is *coalesced* into it);
- ``workqueue``: a controller's rate-limited workqueue (``client-go/util/workqueue/queue.go``):
  a key added while it is queued is not queued again (the delivery is *coalesced*: it is handled
  by the queued item, which reads the latest state), and a key added while it is being processed
  is queued again when the processing is done.

With every event of a different key, all three are the same queue.  ``delta_fifo`` and
``workqueue`` can hand a key's later event to the handler before other keys' earlier ones: the
handling order is not the arrival order across keys.

The queues are evaluated event by event: ``arrive`` each arrival in received order, ``flush`` up to
a time to pop what is popped by then (an arrival at the very instant of a pop comes after it), and
``take`` what was handled.  An arrival's handling is final once it is popped, which for
``delta_fifo`` and ``workqueue`` can be long after it arrived (a later event of its key may still
join it); ``next_pop`` says when the next pop happens.  ``Pipeline`` runs these for what-if replays
and for observe replays whose vectorised queue (``fifo``) would differ
(``conflicting_rows``).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from replay.engine.config import ClientQueue

NEVER_BEFORE = -(1 << 62)  # earlier than any time: an idle handler's last completion


@dataclass(eq=False)
class Arrival:
    """One event (or one delta of a re-list) arriving at the client queue.

    ``rows``: what to report when it is handled (opaque to the queue; a re-list's delta may stand
    for several writes of its object, or none); ``tag``: the re-list it belongs to, if any."""

    received: int
    key: int
    service: int
    deleted: bool
    rows: list[Any] = field(default_factory=list)
    tag: int = -1


# (arrival, dequeued, applied, coalesced): an arrival's handling, final
Handled = tuple[Arrival, int, int, bool]


class _Queue:
    def __init__(self) -> None:
        self.handled: list[Handled] = []

    def take(self) -> list[Handled]:
        """The handlings finalised since the last ``take``, in handling order."""
        out, self.handled = self.handled, []
        return out


class FifoQueue(_Queue):
    """One entry per event, in arrival order: handled at once, as it is the last in line."""

    def __init__(self) -> None:
        super().__init__()
        self.last = NEVER_BEFORE

    def arrive(self, arrival: Arrival) -> None:
        dequeued = max(arrival.received, self.last)
        self.last = dequeued + arrival.service
        self.handled.append((arrival, dequeued, self.last, False))

    def flush(self, until: int) -> None:
        pass

    def next_pop(self) -> int | None:
        return None


@dataclass(eq=False)
class _Entry:
    created: int
    arrivals: list[Arrival]
    merged: list[tuple[Arrival, Arrival]] = field(default_factory=list)  # (dropped, kept)


class DeltaFifoQueue(_Queue):
    """client-go's DeltaFIFO with the handler run on each popped key's deltas."""

    def __init__(self) -> None:
        super().__init__()
        self.entries: OrderedDict[int, _Entry] = OrderedDict()
        self.busy_until = NEVER_BEFORE

    def arrive(self, arrival: Arrival) -> None:
        self.flush(arrival.received)
        entry = self.entries.get(arrival.key)
        if entry is None:
            self.entries[arrival.key] = _Entry(arrival.received, [arrival])
        elif arrival.deleted and entry.arrivals[-1].deleted:  # dedupDeltas: one delete of two
            older = entry.arrivals[-1]
            if older.tag >= 0:  # a re-list's (DeletedFinalStateUnknown): the newer one is kept
                entry.merged.append((older, arrival))
                entry.arrivals[-1] = arrival
            else:  # the older, "the one with the most information" (isDeletionDup)
                entry.merged.append((arrival, older))
        else:
            entry.arrivals.append(arrival)

    def flush(self, until: int) -> None:
        entries = self.entries
        while entries:
            key, entry = next(iter(entries.items()))
            clock = max(self.busy_until, entry.created)
            if clock > until:
                return
            del entries[key]
            times = {}
            for arrival in entry.arrivals:
                times[id(arrival)] = (clock, clock + arrival.service)
                self.handled.append((arrival, clock, clock + arrival.service, False))
                clock += arrival.service
            for dropped, kept in entry.merged:  # kept may itself have been merged later
                while id(kept) not in times:
                    kept = next(k for d, k in entry.merged if d is kept)
                self.handled.append((dropped, *times[id(kept)], True))
            self.busy_until = clock

    def next_pop(self) -> int | None:
        if not self.entries:
            return None
        return max(self.busy_until, next(iter(self.entries.values())).created)


@dataclass(eq=False)
class _Item:
    key: int
    created: int
    creator: Arrival
    absorbed: list[Arrival] = field(default_factory=list)


class WorkQueue(_Queue):
    """A controller's workqueue with one worker: dirty keys are queued once."""

    def __init__(self) -> None:
        super().__init__()
        self.queue: deque[_Item] = deque()
        self.dirty: dict[int, _Item] = {}  # queued, or to be queued again when processed
        self.processing: _Item | None = None
        self.again: _Item | None = None  # the processing key's next item, queued when it is done
        self.done_at = NEVER_BEFORE

    def arrive(self, arrival: Arrival) -> None:
        self.flush(arrival.received)
        key = arrival.key
        item = self.dirty.get(key)
        if item is not None:
            item.absorbed.append(arrival)
        elif self.processing is not None and self.processing.key == key:
            self.again = self.dirty[key] = _Item(key, self.done_at, arrival)
        else:
            item = self.dirty[key] = _Item(key, arrival.received, arrival)
            self.queue.append(item)

    def flush(self, until: int) -> None:
        while True:
            if self.processing is not None:
                if self.done_at > until:
                    return
                self.processing = None
                if self.again is not None:  # Done: a dirty key is queued again now
                    self.queue.append(self.again)
                    self.again = None
            if not self.queue:
                return
            start = max(self.done_at, self.queue[0].created)
            if start > until:
                return
            item = self.queue.popleft()
            del self.dirty[item.key]
            self.processing, self.done_at = item, start + item.creator.service
            self.handled.append((item.creator, start, self.done_at, False))
            self.handled += [(a, start, self.done_at, True) for a in item.absorbed]

    def next_pop(self) -> int | None:
        if self.processing is not None:
            return self.done_at
        if not self.queue:
            return None
        return max(self.done_at, self.queue[0].created)


QUEUES: dict[ClientQueue, type[FifoQueue] | type[DeltaFifoQueue] | type[WorkQueue]] = {
    ClientQueue.FIFO: FifoQueue, ClientQueue.DELTA_FIFO: DeltaFifoQueue,
    ClientQueue.WORKQUEUE: WorkQueue}


def conflicting_rows(discipline: ClientQueue, key: np.ndarray, received: np.ndarray,
                     dequeued: np.ndarray, applied: np.ndarray) -> np.ndarray:
    """Where ``discipline`` could differ from the ``fifo`` times given (one watch's arrivals, in
    order): each arrival whose key's previous arrival was still queued (``delta_fifo``) or not yet
    handled (``workqueue``) in that schedule.  Before the first such arrival of a busy period the
    two schedules are the same; a busy period without one is the same throughout."""
    if discipline == ClientQueue.FIFO or len(key) < 2:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((np.arange(len(key)), key))
    same = key[order[1:]] == key[order[:-1]]
    later, earlier = order[1:][same], order[:-1][same]
    until = dequeued if discipline == ClientQueue.DELTA_FIFO else applied
    return np.sort(later[received[later] < until[earlier]])


def busy_periods(received: np.ndarray, applied: np.ndarray) -> np.ndarray:
    """The first arrival of each busy period of a work-conserving queue with these (``fifo``)
    times: one that finds the handler idle.  Every discipline has the same idle instants, or
    more (a coalesced event needs no work), so each busy period can be evaluated alone."""
    if len(received) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.r_[True, received[1:] >= applied[:-1]])
