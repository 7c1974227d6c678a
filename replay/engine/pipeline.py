"""The list-watch delay pipeline: when each stage hands each write on to each watcher.

Each resource r has its own watch cache (``k8s.io/apiserver/pkg/storage/cacher``).  For write i of
r (rv = i, in commit order over all resources; i- is r's previous write):

    cached_i     = max(commit_i + latency_i, cached_i-) + service_i                 storage_to_cache
    dispatched_i = max(cached_i, released_i-) + service_i
                   + per_watcher_i * (watches of r that match i)                   cacher_queue
    released_i   = dispatched_i, or later while a full buffer blocks the dispatcher

A watcher has one watch (a *stream*) per resource it watches.  Event k of stream s, entering the
stream's buffer at ``entry_k`` (= dispatched_i unless the dispatcher blocked on it):

    sent_k       = max(entry_k, sent_k-1) + service_k                                watcher_queue
    received_k   = max(sent_k + latency_k, received_k-1)                              network
    applied_k    = the stream's client queue (``clientqueue``; fifo: max(received_k,
                   applied_k-1) + handler service_k)                    client_queue + handler
    dequeued_k   = applied_k - handler service_k

Under load (docs/watch-pipeline.md): a watch holds at most K = 2 x buffer + 2 events not yet
sent (upstream's ``input`` and ``result`` channels, each ``buffer`` long, and one event between
them and one being written).  When event k finds the buffer full (``sent_k-K > dispatched_i``)
the dispatcher of r blocks on it, holding back every later event of r, within a time budget per
resource that refills over time (``time_budget.go``); a watch still full when the budget runs out
is terminated.  Its client receives what had reached the result channel (the events with
``max(entry, sent_k-buffer-1)`` by the termination), then watches again from the last of them; if
the watch cache's window no longer holds that version ("410 Gone") it lists again, whose deltas
bring its view to the listed state, and watches from the list's version.  Every write a watch
matched reaches it exactly once: live (``watch``), re-sent by a re-watch (``rewatch``), or
covered by a re-list (``relist``).

The recursions are defined once and evaluated two ways that give identical results:

- ``Pipeline.step``, one write at a time, for the what-if models (whose writes depend on what was
  delivered before), and ``advance``/``finish`` for what happens between writes (a watch's
  recovery, a held event's delivery, a client queue's pops): the definition, event by event
  (for the what-if models, a write's targets in the common case in one compiled call,
  ``fanoutkernel``, the same recursions over the same state as ``_Watch``);
- ``Pipeline.scan`` (and ``Scan``, which observe writes a part at a time) over whole arrays for
  the observe model, by "compute unbounded, detect, fall back": every queue without bounds is a
  Lindley recursion, a cumulative maximum (``replay.arrays.lindley``); if no watch's buffer would
  ever be full in that schedule, no dispatcher ever blocks and it is the exact one; a resource
  whose schedule has a full buffer is evaluated again by ``step`` (from its first write), and a
  ``delta_fifo`` or ``workqueue`` watch whose fifo schedule has a key arriving while its previous
  event waits is evaluated again by its client queue, busy period by busy period.

Draws: the shared stages draw with counter = rv; a stream's own stages with counter = the index
of the event among the stream's events (0, 1, 2, ...; an event dropped by a termination keeps
its draws, and its re-sending gets the next index), so ``step`` can draw ahead in blocks per
stream.  All times are integer microseconds.
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import repeat
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Generic, NamedTuple, TypeVar

import numpy as np
import numpy.typing as npt
import polars as pl

from replay.arrays import Segments, fifo_departure, lindley
from replay.engine.clientqueue import (QUEUES, Arrival, FifoQueue, busy_periods,
                                       conflicting_rows)
from replay.engine.config import STAGES, ClientQueue, RunConfig, WatcherSpec
from replay.engine.distributions import Constant, Distribution, Ints
from replay.engine.streamstate import (BASE, BLOCKS, BUFFER, CONNECTED, CURSOR, EARLIEST,
                                       FIFO_LAST, FRONT, KERNEL, RECEIVED, REFILL, ROOM, ROW,
                                       SENT)
from replay.engine.watchcache import LOWER_CAPACITY, channel_size
from replay.engine.watchers import Streams
from replay.jit import njit
from replay.rng import Keys, Stream, UInts, name_hash

STAGE_COLUMNS = ("commit_ts", "cached_ts", "dispatched_ts", "sent_ts", "received_ts",
                 "dequeued_ts", "applied_ts")
DRAW_CHUNK = 1 << 16
SHARED_BLOCK = 4096  # step() draws the shared stages this many writes at a time
FIRST_PIECE = 16  # step() makes a stream's first row of draws Python ints this many at a time
LATEST = 1 << 62  # after any time
TERMINATION_REASON = "unresponsive"  # cache_watcher.go: "Forcing ... watcher close due to
# unresponsiveness"


class Source(IntEnum):
    """How a delivery reached its watcher."""

    WATCH = 0  # dispatched on a live watch
    REWATCH = 1  # re-sent from the watch cache's window when the watcher watched again
    RELIST = 2  # covered by a re-list: its object's delta in the list's Replace
    LIST = 3  # in the watcher's first list: its object existed when the run began (a log of a
    # running cluster: observe's ``InitialList``, the what-if workload's listed nodes)


SOURCES = tuple(s.name.lower() for s in Source)
LISTED_CODE = 200  # the HTTP status of a listed object's event: its first list's answer
_WATCH = Source.WATCH  # (a module global is quicker than an enum's member, once per delivery)
_WATCHES, _FALSES = repeat(_WATCH), repeat(False)  # (for zip: never used up)


def _slicer(values: np.ndarray) -> Callable[[slice], np.ndarray]:
    """``part -> values[part]``."""
    return lambda part: values[part]


def _composed(outer: Callable[[np.ndarray], np.ndarray],
              rows: np.ndarray) -> Callable[[slice], np.ndarray]:
    """``part -> outer(rows[part])``."""
    return lambda part: outer(rows[part])


def _positions(part: slice) -> np.ndarray:
    """The positions of ``part``, as draw counters."""
    return np.arange(part.start, part.stop, dtype=np.uint64)


def _as_counters(positions: np.ndarray) -> np.ndarray:
    return positions.astype(np.uint64)


def _in_chunks(size: int, draw: Callable[[slice], np.ndarray]) -> np.ndarray:
    """``draw(part)`` for consecutive parts of ``range(size)``, one after another: the draws are
    element-wise, so drawing by parts whose temporaries stay in the CPU cache gives the same
    numbers, and millions of them cost half as much."""
    out = np.empty(size, dtype=np.int64)
    for start in range(0, size, DRAW_CHUNK):
        part = slice(start, min(start + DRAW_CHUNK, size))
        out[part] = draw(part)
    return out


@dataclass(frozen=True)
class _Cost:
    """One stage parameter: its distribution and its stream."""

    dist: Distribution
    stream: Stream

    @property
    def constant(self) -> bool:
        return isinstance(self.dist, Constant)

    def draw(self, counters: UInts, keys: Keys | None = None) -> Ints:
        return self.dist.sample_us(self.stream, counters, keys)

    def draw_parts(self, size: int, counters: Callable[[slice], np.ndarray],
                   keys: Callable[[slice], np.ndarray] | None = None) -> np.ndarray:
        """``size`` draws, made a cache-sized part at a time from that part's ``counters`` and
        ``keys``; a constant needs neither."""
        if self.constant:
            return np.full(size, self.draw(np.zeros(1, dtype=np.uint64))[0])
        return _in_chunks(size, lambda part: self.draw(counters(part),
                                                       None if keys is None else keys(part)))


class _DrawsAhead:
    """Draws of one stream's stage parameter (or one shared block), made in growing blocks."""

    __slots__ = ("cost", "key", "buffer", "next", "start")

    def __init__(self, cost: _Cost, key: Keys | None):
        self.cost, self.key = cost, key
        self.buffer: list[int] = []
        self.next = 0  # index into buffer
        self.start = 0  # counter of buffer[0]

    def take(self) -> int:
        if self.next == len(self.buffer):
            self.start += len(self.buffer)
            size = min(max(16, 2 * len(self.buffer)), 4096)
            counters = np.arange(self.start, self.start + size, dtype=np.uint64)
            self.buffer = self.cost.draw(counters, self.key).tolist()
            self.next = 0
        value = self.buffer[self.next]
        self.next += 1
        return value


class _EventDraws:
    """The draws of one stream's three per-event stages (watcher_queue service, network latency,
    handler service).  The engine keeps the ROW draws in use of every stream, one row per stream
    in three arrays (``_Engine.arrays``), which the compiled fan-out reads at the stream's cursor
    (``_Engine.state``) and the Python path through ``ahead``: the first row is drawn for every
    stream at once (``Pipeline._first_blocks``; most streams of a large cluster are a kubelet's,
    with a few events each, and a small block's draws cost mostly their numpy calls), the next
    ones are copied from blocks drawn ahead, growing to 4096 draws."""

    __slots__ = ("costs", "keys", "rows", "stream", "ahead", "taken", "block", "used", "drawn")

    def __init__(self, costs: tuple[_Cost, ...], keys: tuple[Keys, ...],
                 rows: tuple[np.ndarray, ...], stream: int):
        self.costs, self.keys, self.rows, self.stream = costs, keys, rows, stream
        # the Python path's draws not yet taken, as (queue, network, handler): an iterator over
        # three lists, a piece of the row (``next(ahead, None)`` per event, None when used up)
        self.ahead: Iterator[tuple[int, int, int]] = iter(())
        self.taken = 0  # where in the row ``ahead`` ends
        self.block: list[np.ndarray] = []  # draws beyond the row, ``used`` of them copied to it
        self.used = 0
        self.drawn = ROW  # the counter after the last drawn

    def refilled(self) -> tuple[int, int, int]:
        """The next piece of the row, refilled if used up, and the first of its draws (the piece
        used up: ``_Watch.enter`` takes them from ``ahead``).  Made Python ints FIRST_PIECE at a
        time in the first row: a tuple of three ints costs 21 KB for a whole row, and a large
        cluster has tens of thousands of streams."""
        if self.taken == ROW:
            self.refill()
            self.taken = 0
        end = min(self.taken + FIRST_PIECE, ROW) if self.drawn == ROW else ROW
        queue, network, handler = (row[self.stream, self.taken:end].tolist()
                                   for row in self.rows)
        self.ahead = zip(queue, network, handler)
        self.taken = end
        return next(self.ahead)

    def refill(self) -> None:
        """The row, used up, gets the stream's next ROW draws."""
        if self.used == len(self.block[0] if self.block else ()):
            size = min(max(2 * ROW, 2 * self.drawn), 4096)
            counters = np.arange(self.drawn, self.drawn + size, dtype=np.uint64)
            self.block = [cost.draw(counters, key) for cost, key in zip(self.costs, self.keys)]
            self.drawn += size
            self.used = 0
        for row, block in zip(self.rows, self.block):
            row[self.stream] = block[self.used:self.used + ROW]
        self.used += ROW

    def position(self) -> int:
        """Where in the row the Python path's next draw is (the compiled fan-out's turn: the
        Python path takes them again from ``resume``)."""
        left = sum(1 for _ in self.ahead)
        self.ahead = iter(())
        return self.taken - left

    def resume(self, cursor: int) -> None:
        """The Python path's turn, at ``cursor`` in the row."""
        self.ahead, self.taken = iter(()), cursor


class SharedTimes(NamedTuple):
    """Per write (rv = 1..n): its commit, and when its resource's watch cache handed it on."""

    commit: np.ndarray
    cached: np.ndarray
    dispatched: np.ndarray


class Resume(NamedTuple):
    """Where a stream's deliveries stopped at the end of a part of a scan: how many of them came
    before, and the last one's sent, received and applied times."""

    done: int
    sent: int
    received: int
    applied: int

    @classmethod
    def after(cls, times: Mapping[str, np.ndarray], delivery_stream: np.ndarray,
              resumed: Resume | None) -> Resume:
        """After the part that ``times`` (of ``delivery_stream``, itself ``resumed``) scanned,
        for the next part, which begins with more deliveries of this part's last stream."""
        first = int(np.searchsorted(delivery_stream, delivery_stream[-1]))
        before = len(delivery_stream) - first + (resumed.done if resumed and not first else 0)
        return cls(before, *(int(times[c][-1]) if c in times else 0
                             for c in ("sent_ts", "received_ts", "applied_ts")))


class _Resource:
    """One resource's watch cache: its two queues, its dispatcher's budget, its window."""

    __slots__ = ("code", "name", "capacity", "costs", "cached", "released", "budget",
                 "budget_at", "max_budget", "refill", "window_cached", "window_rv", "objects",
                 "holders")

    def __init__(self, code: int, name: str, capacity: int, costs: tuple[_Cost, ...],
                 max_budget_us: int, refill_us_per_s: int):
        self.code, self.name, self.capacity, self.costs = code, name, capacity, costs
        self.cached = self.released = EARLIEST
        self.max_budget, self.refill = max_budget_us, refill_us_per_s
        self.budget, self.budget_at = max_budget_us, EARLIEST  # full: the server ran before
        # cached time and rv of each event, in rv order (typed arrays: a list of ints costs 40
        # bytes a write, 8 here, and a large replay has millions of writes)
        self.window_cached, self.window_rv = array("q"), array("q")
        # each object that exists: key -> its watches (a deleted one is dropped: a list no
        # longer holds it, and a large replay deletes millions)
        self.objects: dict[int, list[_Watch]] = {}
        # each object in the store of a watch of every node's objects: key -> those watches'
        # ``bit``s (a write delivered to all its targets costs one dict operation, not a set
        # operation per target: 5 sets, most of them large, missed the cache at 3 us a write)
        self.holders: dict[int, int] = {}

    def store(self, key: int, deleted: bool, mask: int) -> None:
        """The watches of ``mask`` (their ``bit``s) hold ``key`` in their store, or not if
        ``deleted``."""
        holders = self.holders
        if deleted:
            left = holders.pop(key, 0) & ~mask
            if left:
                holders[key] = left
        elif mask:
            holders[key] = holders.get(key, 0) | mask

    def keeps(self, rv: int, at: int) -> bool:
        """Whether a watch from ``rv`` can start at ``at``: the window (the last ``capacity``
        events cached before ``at``) still reaches back to it (watch_cache_history.go:
        "too old resource version" when rv < oldest - 1)."""
        cached = bisect_left(self.window_cached, at)
        if cached <= self.capacity:
            return True
        return rv >= self.window_rv[cached - self.capacity] - 1

    def block(self, start: int, blocked: list[_Watch], rv: int,
              waits: list[tuple[int, int, int, int, int, bool]]
              ) -> tuple[int, dict[_Watch, int], int]:
        """The dispatcher, at ``start``, finds ``blocked`` full with event ``rv``: it waits for
        each in turn within the budget it takes (``Cacher.dispatchEvent``), and logs each wait
        in ``waits``.  Returns when it is released, when each watch that made room got the
        event, and the deadline at which the others are terminated."""
        if self.budget_at != EARLIEST:
            self.budget = min(self.max_budget,
                              self.budget + (start - self.budget_at) * self.refill // 1_000_000)
        self.budget_at = start
        timeout, self.budget = self.budget, 0
        deadline, clock = start + timeout, start
        entries: dict[_Watch, int] = {}
        for watch in sorted(blocked, key=lambda w: w.index):
            room = watch.recent[0]
            if room <= deadline:
                clock = max(clock, room)
                entries[watch] = clock
            else:
                clock = deadline
            waits.append((self.code, watch.watcher, rv, start, clock, watch not in entries))
        self.budget = min(self.max_budget, timeout - (clock - start))  # returnUnused
        return clock, entries, deadline


class _Watch:
    """One stream: a watcher's watch of one resource, server and client side."""

    def __init__(self, engine: _Engine, index: int, watcher: int, resource: _Resource,
                 buffer: int, discipline: ClientQueue, event_draws: _EventDraws,
                 draws: tuple[_DrawsAhead, _DrawsAhead, _DrawsAhead, _DrawsAhead]):
        """``draws``: the reflector's re-watch delay and re-list backoff, the list's cost per
        object and the handler's cost per delta of a re-list."""
        self.engine, self.index, self.watcher, self.resource = engine, index, watcher, resource
        self.buffer, self.room = buffer, 2 * buffer + 2
        self.discipline = discipline
        self.queue = QUEUES[discipline]()
        self.fifo: FifoQueue | None = self.queue if isinstance(self.queue, FifoQueue) else None
        self.event_draws = event_draws
        self.rewatch_draws, self.relist_draws, self.list_draws, self.replace_draws = draws
        self.connected = True
        self.live = 0  # events dispatched to the current connection
        # the sent times of its last 2 x buffer + 2 events (the first: the one a new event needs
        # sent to find room) and of its last buffer + 1 (the first: the one that must be sent
        # before a new event reaches the result channel, safe from a termination)
        self.recent: deque[int] = deque(maxlen=self.room)
        self.recent_result: deque[int] = deque(maxlen=buffer + 1)
        # recent[0] once the watch can block its dispatcher (``live`` >= buffer and ``recent``
        # full), EARLIEST before: a write dispatched before it finds the watch full
        self.front = EARLIEST
        self.last_sent = self.last_received = EARLIEST
        self.last_rv = 0  # the last event that entered the buffer
        # the last event delivered before those held: its sent, received, rv
        self.before_held: tuple[int, int, int] = (EARLIEST, EARLIEST, 0)
        self.held: deque[tuple[Any, ...]] = deque()  # entered, not yet safe from a termination
        self.missed: list[tuple[int, Any, int, bool, int]] = []  # while disconnected
        # each write missed and not yet applied: the termination that first missed it (a write
        # re-sent after one termination may be dropped again by the next: it still counts to
        # the first one's recovery)
        self.missed_by: dict[int, int] = {}
        self.resume_rv = 0  # the version a new watch starts from
        # the keys in its store (``known``): a watch of one node's objects, which sees few,
        # keeps them in ``own``; the others are ``bit`` in their resource's ``holders``
        # (``_Engine`` numbers them)
        self.bit = 0
        self.own: set[int] = set()
        self.incident = -1  # its latest termination
        self.safe_token = self.pop_token = 0
        self.kernel = False  # the compiled fan-out's turn (``to_kernel``)
        # a watch of non-terminal pods: a write setting a pod's terminal phase deletes it here
        self.non_terminal = bool(engine.pipeline.streams.non_terminal[index])

    # -- the hand-over between the compiled fan-out and this Python path ----------------------
    def to_python(self) -> None:
        """This path's turn: the stream's state from the engine's arrays, where the compiled
        fan-out keeps it while the stream is in the common case."""
        if not self.kernel:
            return
        self.kernel = False
        row = self.engine.state[self.index]
        row[KERNEL] = 0
        (self.last_sent, self.last_received, self.live, self.front, self.last_rv,
         last, count, head, cursor, base) = row[:ROOM].tolist()
        assert self.fifo is not None
        self.fifo.last = last
        ring = self.engine.ring[base:base + self.room]
        recent = ring[head:].tolist() + ring[:head].tolist() if count == self.room else \
            ring[:count].tolist()
        self.recent = deque(recent, maxlen=self.room)
        self.recent_result = deque(recent[-self.buffer - 1:], maxlen=self.buffer + 1)
        self.event_draws.resume(cursor)

    def to_kernel(self) -> None:
        """The compiled fan-out's turn, if the stream is in the common case (connected, a fifo
        client queue, nothing held); ``recent_result`` is the end of ``recent``."""
        if self.kernel or not self.engine.compiled or self.fifo is None or not self.connected \
                or self.held:
            return
        self.kernel = True
        row = self.engine.state[self.index]
        base = int(row[BASE])
        self.engine.ring[base:base + len(self.recent)] = self.recent
        row[:BASE] = (self.last_sent, self.last_received, self.live, self.front, self.last_rv,
                      self.fifo.last, len(self.recent), 0, self.event_draws.position())
        row[KERNEL] = 1

    # -- the server: the watch's buffer ----------------------------------------------------------
    def enter(self, rv: int, payload: Any, key: int, deleted: bool, entry: int, source: Source,
              live: bool, dispatched: int) -> bool:
        """Event ``rv`` enters the buffer at ``entry``; False if it is held (it may yet be
        dropped, or an earlier one is held).  (Written for speed: it runs once per delivery.)"""
        draws = self.event_draws
        queue, network, service = next(draws.ahead, None) or draws.refilled()
        last_sent, last_received = self.last_sent, self.last_received
        sent = queue + (entry if entry > last_sent else last_sent)
        received = sent + network
        if received < last_received:
            received = last_received
        self.last_sent, self.last_received = sent, received
        result = self.recent_result
        safe = result[0] if len(result) > self.buffer else entry
        result.append(sent)
        recent = self.recent
        recent.append(sent)
        if live:
            self.live += 1
        if self.live >= self.buffer and len(recent) == self.room:
            self.front = self.engine.state[self.index, FRONT] = recent[0]
        held = self.held
        if safe > entry or held:
            if not held:
                self.before_held = (last_sent, last_received, self.last_rv)
            held.append((rv, payload, key, deleted, max(safe, entry), sent, received, service,
                         source, dispatched))
            self.last_rv = rv
            if len(held) == 1:
                self.safe_token += 1
                self.engine.wake(max(safe, entry), _SAFE, self, self.safe_token)
            return False
        self.last_rv = rv
        fifo = self.fifo
        if fifo is None or source != _WATCH:
            return self.deliver((rv, payload, key, deleted, entry, sent, received, service,
                                 source, dispatched))
        # deliver(), inlined for the common case: a live event to a fifo client queue
        self.store(key, deleted)
        dequeued = received if received > fifo.last else fifo.last
        fifo.last = applied = dequeued + service
        self.engine.out.append((self.watcher, rv, payload, sent, received, dequeued, applied,
                                source, False))
        return True

    def safe(self, now: int) -> None:
        """Held events whose time to be dropped has passed go on to the client."""
        held = self.held
        while held and held[0][4] <= now:
            event = held.popleft()
            self.before_held = (event[5], event[6], event[0])
            self.deliver(event)
        if held:
            self.safe_token += 1
            self.engine.wake(held[0][4], _SAFE, self, self.safe_token)

    def terminate(self, at: int, rv: int) -> None:
        """The dispatcher closes the watch at ``at`` on event ``rv``: what had not reached the
        result channel is dropped, and the client watches again once it has the rest."""
        engine = self.engine
        self.incident = len(engine.terminations)
        self.connected = False
        engine.state[self.index, CONNECTED] = 0
        kept = [event for event in self.held if event[4] <= at]
        if kept:  # the client gets them, and resumes from the last
            self.last_sent, self.last_received, self.resume_rv = kept[-1][5], kept[-1][6], \
                kept[-1][0]
        elif self.held:  # all dropped: back to the last delivered event
            self.last_sent, self.last_received, self.resume_rv = self.before_held
        else:
            self.resume_rv = self.last_rv
        # watcher, resource, ts, rv, recovery, recovered, resume_rv, missed
        engine.terminations.append([self.watcher, self.resource.code, at, rv, "rewatch", None,
                                    self.resume_rv, 0])
        for event in list(self.held)[len(kept):]:
            self.miss(event[0], event[1], event[2], event[3], event[9])
        self.held = deque(kept)
        self.engine.wake(max(at, self.last_received) + self.rewatch_draws.take(), _REWATCH, self)

    def miss(self, rv: int, payload: Any, key: int, deleted: bool, dispatched: int) -> None:
        """Write ``rv`` does not reach the disconnected client: a re-watch or a re-list owes it;
        the first termination that missed it counts it."""
        self.missed.append((rv, payload, key, deleted, dispatched))
        if rv not in self.missed_by:
            self.missed_by[rv] = self.incident
            self.engine.terminations[self.incident][7] += 1

    def rewatch(self, now: int) -> None:
        """The client watches again from ``resume_rv``: from the window, or after a "410 Gone"
        and the reflector's backoff, from a list."""
        if self.resource.keeps(self.resume_rv, now):
            self.connected, self.live, self.front = True, 0, EARLIEST
            self.engine.state[self.index, [CONNECTED, FRONT]] = 1, EARLIEST
            self.recent.clear()
            self.recent_result.clear()
            missed, self.missed = self.missed, []
            for rv, payload, key, deleted, dispatched in missed:
                self.enter(rv, payload, key, deleted, max(now, dispatched), Source.REWATCH, False,
                           dispatched)
        else:
            self.engine.terminations[self.incident][4] = "relist"
            self.engine.wake(now + self.relist_draws.take(), _LIST, self)

    def relist(self, now: int) -> None:
        """A LIST at ``now``, served from the watch cache once it holds the current version, at
        a cost per object; its ``Replace`` goes through the client queue, one delta per object
        (and one per object gone), and the client watches from the list's version."""
        engine, resource = self.engine, self.resource
        version = engine.last_rv_before(now)
        last = bisect_right(resource.window_rv, version) - 1
        start = max(now, resource.window_cached[last]) if last >= 0 else now
        listed = sorted(key for key, watches in resource.objects.items() if self in watches)
        served = start + self.list_draws.take() * len(listed)
        gone = sorted(self.known.difference(listed))
        number = len(engine.relists)
        engine.relists.append([self.watcher, resource.code, now, served, len(listed), version])
        covered: dict[int, list[tuple[int, Any]]] = {}
        for rv, payload, key, _, _ in self.missed:
            covered.setdefault(key, []).append((rv, payload))
        self.missed = []
        # DeltaFIFO.Replace queues the listed objects, then the deletions; RealFIFO (and so a
        # shared informer since client-go 1.33) the deletions first
        deltas = [(key, False) for key in listed]
        deltas = (deltas + [(key, True) for key in gone]
                  if self.discipline == ClientQueue.DELTA_FIFO
                  else [(key, True) for key in gone] + deltas)
        arrivals = [Arrival(served, key, self.replace_draws.take(), deleted,
                            [(rv, payload, served, Source.RELIST)
                             for rv, payload in covered.pop(key, ())], number)
                    for key, deleted in deltas]
        for key in sorted(covered):  # objects made and gone while disconnected: no delta
            for rv, payload in covered[key]:
                self.report(rv, payload, served, served, served, served, Source.RELIST, False)
        for arrival in arrivals:
            self.queue.arrive(arrival)
        self.relisted(listed, gone)
        self.resume_rv = version
        self.drain()
        engine.wake(served, _REWATCH, self)

    # -- the client ---------------------------------------------------------------------------
    @property
    def known(self) -> set[int]:
        """The keys in its client's store: each object whose last event to reach it (or its
        last re-list) did not delete it."""
        if not self.bit:
            return self.own
        return {key for key, mask in self.resource.holders.items() if mask & self.bit}

    def listed(self, key: int) -> None:
        """Its first list held ``key``: in its store, and the watch among the object's."""
        self.resource.objects.setdefault(key, []).append(self)
        self.store(key, False)

    def store(self, key: int, deleted: bool) -> None:
        """An event of ``key`` reaches the client: its store holds the object, or not."""
        if self.bit:
            self.resource.store(key, deleted, self.bit)
        elif deleted:
            self.own.discard(key)
        else:
            self.own.add(key)

    def relisted(self, listed: list[int], gone: list[int]) -> None:
        """A re-list replaced the store with ``listed``; ``gone`` were in it and are not."""
        if not self.bit:  # (in place: the targets' ``own`` hold it)
            self.own.clear()
            self.own.update(listed)
            return
        for key in gone:
            self.resource.store(key, True, self.bit)
        for key in listed:
            self.resource.store(key, False, self.bit)

    def deliver(self, event: tuple[Any, ...]) -> bool:
        """An event reaches the client queue (it is safe: no termination can drop it now); False
        if the queue holds it for a later pop (a ``delta_fifo`` or ``workqueue`` busy with an
        earlier one), so that the step counts the write as sent and not yet delivered."""
        rv, payload, key, deleted, _, sent, received, service, source, _ = event
        self.store(key, deleted)
        fifo = self.fifo
        if fifo is not None:
            dequeued = max(received, fifo.last)
            fifo.last = dequeued + service
            self.report(rv, payload, sent, received, dequeued, fifo.last, source, False)
            return True
        out = self.engine.out
        reported = len(out)
        self.queue.arrive(Arrival(received, key, service, deleted, [(rv, payload, sent, source)]))
        self.drain()
        return any(delivery[1] == rv for delivery in out[reported:])

    def pop(self, now: int) -> None:
        self.queue.flush(now)
        self.drain()

    def drain(self) -> None:
        """Report what the client queue has handled; wake up for its next pop."""
        relists = self.engine.relists
        for arrival, dequeued, applied, coalesced in self.queue.take():
            if arrival.tag >= 0:
                relists[arrival.tag][3] = max(relists[arrival.tag][3], applied)
            for rv, payload, sent, source in arrival.rows:
                self.report(rv, payload, sent, arrival.received, dequeued, applied, source,
                            coalesced)
        next_pop = self.queue.next_pop()
        if next_pop is not None:
            self.pop_token += 1
            self.engine.wake(next_pop, _POP, self, self.pop_token)

    def report(self, rv: int, payload: Any, sent: int, received: int, dequeued: int,
               applied: int, source: Source, coalesced: bool) -> None:
        if source != Source.WATCH:
            incident = self.engine.terminations[self.missed_by.pop(rv)]
            incident[5] = applied if incident[5] is None else max(incident[5], applied)
        self.engine.out.append((self.watcher, rv, payload, sent, received, dequeued, applied,
                                source, coalesced))


_SAFE, _POP, _REWATCH, _LIST = range(4)  # kinds of wake-up


class _Targets(list[_Watch]):
    """A write's target watches (``Pipeline.watches``), with what the compiled fan-out needs of
    them (unless ``compiled`` is False: observe's evaluation by event makes one per write)."""

    __slots__ = ("streams", "watchers", "times", "block", "mask", "own")

    def __init__(self, watches: list[_Watch], compiled: bool = True):
        super().__init__(watches)
        if compiled:
            self.streams = np.array([w.index for w in watches], dtype=np.int64)
            self.watchers = [w.watcher for w in watches]
            # the fan-out's answer: per target its sent, received, dequeued and applied times,
            # 1 if it delivered there, and the rv
            self.times = np.zeros((6, len(watches)), dtype=np.int64)
            # ``times`` as bytes, current after each call: a write's deliveries to every target
            # for a caller that copies them as they are (no Python int per delivery)
            self.block = self.times.reshape(-1).data.cast("B")  # (a view: current)
            # their stores (``_Watch.known``): the ``bit``s of some, the ``own`` sets of the others
            self.mask = 0
            for w in watches:
                self.mask |= w.bit
            self.own = [w.own for w in watches if not w.bit]

    def deliveries(self, rv: int, payload: Any) -> list[Delivery]:
        """The deliveries of write ``rv`` that the compiled fan-out made to every target, as
        tuples (``Pipeline.step_fanned``'s ``fanned``)."""
        sent, received, dequeued, applied = self.times[:4].tolist()
        return list(zip(self.watchers, repeat(rv), repeat(payload), sent, received, dequeued,
                        applied, _WATCHES, _FALSES))


class _Engine:
    """The pipeline evaluated event by event: the definition (module docstring).  A write's
    targets in the common case are fanned out by one compiled call (``fanoutkernel``), the others
    by ``_Watch``, over the same state (``arrays``: ``state``, ``ring`` and the rows of draws)."""

    COMPILED = True  # what-if replays' default (False: every target by ``_Watch``; the tests
    # compare the two)

    def __init__(self, pipeline: Pipeline[Any], last_rv_before: Callable[[int], int],
                 compiled: bool):
        self.pipeline, self.last_rv_before = pipeline, last_rv_before
        self.resources = [pipeline._resource_state(code)
                          for code in range(len(pipeline.streams.resources))]
        self.compiled = compiled
        if compiled:  # the compiled fan-out, for what-if replays only
            from replay.engine.fanoutkernel import fan_out
            self.fan_out = fan_out
        queue, network, handler = pipeline._first_blocks()
        buffers = np.array(pipeline.buffer, dtype=np.int64)
        self.state = np.zeros((len(buffers), KERNEL + 1), dtype=np.int64)
        self.state[:, [SENT, RECEIVED, FRONT, FIFO_LAST]] = EARLIEST
        self.state[:, ROOM] = rooms = 2 * buffers + 2
        self.state[:, BASE] = np.cumsum(rooms) - rooms
        self.state[:, BUFFER] = buffers
        self.state[:, CONNECTED] = 1
        self.ring = np.zeros(int(rooms.sum()), dtype=np.int64)
        self.arrays = (self.state, self.ring, queue, network, handler)  # fan_out's
        self.watches = [pipeline._watch_state(self, s, self.resources[int(r)],
                                              (queue, network, handler))
                        for s, r in enumerate(pipeline.streams.resource)]
        for watch in self.watches:
            watch.to_kernel()
        self._number_holders(pipeline.watchers)
        # per resource, each watcher's watch of it (None if it does not watch it)
        self.watch_of: list[list[_Watch | None]] = [
            [None] * len(pipeline.watchers) for _ in self.resources]
        for watch in self.watches:
            self.watch_of[watch.resource.code][watch.watcher] = watch
        self.out: list[tuple[Any, ...]] = []
        self.fanned = False  # the last step's deliveries are its targets' ``times``, not in out
        self.pending: list[int] = []  # watchers the last step's write is not yet delivered to
        self.terminations: list[list[Any]] = []  # watcher, resource, ts, rv, recovery, recovered
        self.relists: list[list[Any]] = []  # watcher, resource, start, end, objects, rv
        self.waits: list[tuple[int, int, int, int, int, bool]] = []  # see _Resource.block
        self.wakeups: list[tuple[int, int, int, _Watch, int]] = []
        self.sequence = 0
        self.shared_block = -1
        self.shared_draws: dict[Any, list[list[int]]] = {}
        # resources with the same shared costs draw the same numbers: once per block
        self.same_costs = [("costs", min(c for c, r in enumerate(self.resources)
                                         if r.costs == resource.costs))
                           for resource in self.resources]

    def _number_holders(self, watchers: list[WatcherSpec]) -> None:
        """Each watch of every node's objects gets a ``bit`` of its resource's ``holders``, in
        the order of the streams (a watch of one node's objects keeps its ``own`` set: with
        a bit each, a resource watched by 20,000 kubelets would make every key's mask 20,000
        bits)."""
        numbers = [0] * len(self.resources)
        for watch in self.watches:
            if watchers[watch.watcher].node is None:
                code = watch.resource.code
                watch.bit = 1 << numbers[code]
                numbers[code] += 1

    def wake(self, at: int, kind: int, watch: _Watch, token: int = 0) -> None:
        self.sequence += 1
        heapq.heappush(self.wakeups, (at, self.sequence, kind, watch, token))

    def advance(self, now: int) -> None:
        """Everything that happens by ``now`` between writes (all writes committed before
        ``now`` have been stepped, and none after)."""
        wakeups = self.wakeups
        while wakeups and wakeups[0][0] <= now:
            at, _, kind, watch, token = heapq.heappop(wakeups)
            watch.to_python()
            if kind == _SAFE:
                if token == watch.safe_token:
                    watch.safe(at)
            elif kind == _POP:
                if token == watch.pop_token:
                    watch.pop(at)
            elif kind == _REWATCH:
                watch.rewatch(at)
            else:
                watch.relist(at)
            watch.to_kernel()

    @property
    def next_wakeup(self) -> int | None:
        wakeups = self.wakeups
        while wakeups:
            _, _, kind, watch, token = wakeups[0]
            if (kind == _SAFE and token != watch.safe_token) or (
                    kind == _POP and token != watch.pop_token):
                heapq.heappop(wakeups)
                continue
            return wakeups[0][0]
        return None

    def shared(self, resource: _Resource, rv: int) -> tuple[int, int, int, int]:
        """The shared stages' draws of write ``rv`` (latency, service, cacher service, per
        watcher), drawn a block of rvs at a time for each distinct set of costs."""
        block, at = divmod(rv - 1, SHARED_BLOCK)
        if block != self.shared_block:
            self.shared_block, self.shared_draws = block, {}
        drawn = self.shared_draws.get(resource.code)
        if drawn is None:
            counters = np.arange(block * SHARED_BLOCK + 1, (block + 1) * SHARED_BLOCK + 1,
                                 dtype=np.uint64)
            same = self.same_costs[resource.code]
            drawn = self.shared_draws.get(same)
            if drawn is None:
                drawn = [cost.draw(counters).tolist() for cost in resource.costs]
            self.shared_draws[same] = self.shared_draws[resource.code] = drawn
        return drawn[0][at], drawn[1][at], drawn[2][at], drawn[3][at]

    def step(self, rv: int, commit: int, resource: _Resource, key: int, deleted: bool,
             targets: _Targets, payload: Any, ends: bool = False) -> tuple[int, int]:
        """Write ``rv`` of ``resource`` on object ``key``, committed at ``commit``, to the
        watches ``targets``; returns its cached and dispatched times (its deliveries go to
        ``out``, those not yet made to ``pending``).  ``ends``: it sets a pod's terminal phase,
        which deletes the pod from the watches of non-terminal pods (``_Watch.non_terminal``).
        (Written for speed: it runs per write.)"""
        latency, service, cacher, per_watcher = self.shared(resource, rv)
        cached = commit + latency
        if cached < resource.cached:
            cached = resource.cached
        cached += service
        resource.cached = cached
        resource.window_cached.append(cached)
        resource.window_rv.append(rv)
        start = cached if cached > resource.released else resource.released
        if self.compiled:
            dispatched, done = self.fan_out(*self.arrays, targets.streams, rv, start, cacher,
                                            per_watcher, targets.times)
            while done == REFILL:
                self._refill(targets)
                dispatched, done = self.fan_out(*self.arrays, targets.streams, rv, start,
                                                cacher, per_watcher, targets.times)
        else:
            dispatched, done = self._dispatch(targets, start, cacher, per_watcher)
        if done == BLOCKS:
            self._blocking_step(rv, resource, key, deleted, targets, payload, dispatched, ends)
        else:
            resource.released = dispatched
            if targets and done == len(targets):
                self._delivered(resource, key, deleted, targets, ends)
            else:
                self._fall_back(rv, key, deleted, targets, payload, dispatched, done, ends)
        holders: list[_Watch] = targets
        if ends and not deleted:  # the watches that still hold it (a kubelet's, an observer's)
            holders = [watch for watch in targets if not watch.non_terminal]
            deleted = not holders
        if deleted:
            resource.objects.pop(key, None)
        else:
            resource.objects[key] = holders
        return cached, dispatched

    @staticmethod
    def _dispatch(targets: _Targets, start: int, cacher: int, per_watcher: int
                  ) -> tuple[int, int]:
        """``fan_out``'s answer when every target is left to ``_Watch``: when the write is
        dispatched, and BLOCKS if a target is full then, else 0 (delivered to none yet)."""
        live, front = 0, EARLIEST
        for watch in targets:
            if watch.connected:
                live += 1
                front = max(front, watch.front)
        dispatched = start + cacher + per_watcher * live
        return dispatched, BLOCKS if front > dispatched else 0

    def _refill(self, targets: _Targets) -> None:
        """The rows of draws the compiled fan-out used up, refilled."""
        state = self.state
        for watch in targets:
            if watch.kernel and state[watch.index, CURSOR] == ROW:
                watch.event_draws.refill()
                state[watch.index, CURSOR] = 0

    def _delivered(self, resource: _Resource, key: int, deleted: bool,
                   targets: _Targets, ends: bool) -> None:
        """The compiled fan-out delivered the write to every target (its deliveries in
        ``targets.times``, left there for ``Pipeline.step_fanned``); the targets' stores
        updated: those with a ``bit`` at once, the others one by one."""
        self.fanned, self.pending = True, []
        if ends and not deleted:
            for watch in targets:
                watch.store(key, watch.non_terminal)
            return
        resource.store(key, deleted, targets.mask)
        if deleted:
            for own in targets.own:
                own.discard(key)
        else:
            for own in targets.own:
                own.add(key)

    def _fall_back(self, rv: int, key: int, deleted: bool, targets: _Targets, payload: Any,
                   dispatched: int, done: int, ends: bool) -> None:
        """``step``'s deliveries when some targets were left to ``_Watch`` (``done`` of them
        were not: the compiled fan-out's, in ``times``), in the targets' order."""
        times = targets.times.T.tolist() if done else None
        out, pending, ending = self.out, [], ends and not deleted
        for j, watch in enumerate(targets):
            if ending:
                deleted = watch.non_terminal
            if times is not None and times[j][4]:
                watch.store(key, deleted)
                out.append((watch.watcher, rv, payload, *times[j][:4], _WATCH, False))
            elif not watch.connected:
                watch.miss(rv, payload, key, deleted, dispatched)
                pending.append(watch.watcher)
            else:
                watch.to_python()
                if not watch.enter(rv, payload, key, deleted, dispatched, _WATCH, True,
                                   dispatched):
                    pending.append(watch.watcher)
                watch.to_kernel()
        self.pending = pending

    def _blocking_step(self, rv: int, resource: _Resource, key: int, deleted: bool,
                       targets: list[_Watch], payload: Any, dispatched: int, ends: bool) -> None:
        """``step`` when the dispatcher finds a watch full with write ``rv``."""
        for watch in targets:
            watch.to_python()
        blocked = [w for w in targets if w.connected and w.front > dispatched]
        released, entries, deadline = resource.block(dispatched, blocked, rv, self.waits)
        resource.released = released
        pending = self.pending = []
        ending = ends and not deleted
        for watch in targets:
            if ending:
                deleted = watch.non_terminal
            if not watch.connected:
                watch.miss(rv, payload, key, deleted, dispatched)
                pending.append(watch.watcher)
            elif watch in blocked:
                if watch in entries:
                    if not watch.enter(rv, payload, key, deleted, entries[watch], Source.WATCH,
                                       True, dispatched):
                        pending.append(watch.watcher)
                else:
                    watch.terminate(deadline, rv)
                    watch.miss(rv, payload, key, deleted, dispatched)
                    pending.append(watch.watcher)
            elif not watch.enter(rv, payload, key, deleted, dispatched, Source.WATCH, True,
                                 dispatched):
                pending.append(watch.watcher)
        for watch in targets:
            watch.to_kernel()

    def finish(self) -> None:
        self.advance(LATEST)

    def take(self) -> list[tuple[Any, ...]]:
        out, self.out = self.out, []
        return out


Payload = TypeVar("Payload")
# A delivery as step, advance and finish return it: (watcher, rv, payload, sent, received,
# dequeued, applied, source, coalesced)
Delivery = tuple[int, int, Any, int, int, int, int, Source, bool]
Watches = _Targets  # opaque to callers: ``Pipeline.watches`` makes them for ``step_to``


class Pipeline(Generic[Payload]):
    """The pipeline for a fixed list of watchers; ``scan`` and ``step`` share these costs.

    ``resources``: resources the writes may name besides those watched; ``capacities``: each
    resource's watch cache window by upstream's rule (``watchcache.capacities`` of the trace),
    unless the config sets it."""

    _PER_WATCH = (("watcher_queue", "service"), ("network", "latency"), ("handler", "service"))
    _STREAM_DRAWS = _PER_WATCH + (("reflector", "rewatch_delay"), ("reflector", "relist_backoff"),
                                  ("list", "per_object"), ("handler", "replace"))

    def __init__(self, config: RunConfig, watchers: list[WatcherSpec],
                 resources: Sequence[str] = (), capacities: Mapping[str, int] | None = None):
        self.config, self.watchers = config, watchers
        self.streams = streams = Streams(watchers, resources)
        names = streams.resources
        shared = {(stage, param): Stream.of(config.seed, stage, param)
                  for stage in ("storage_to_cache", "cacher_queue") for param in STAGES[stage]}
        self.shared_costs = [tuple(_Cost(config.costs(resource=name)[stage][param],
                                         shared[stage, param]) for stage, param in shared)
                             for name in names]
        servers = [config.server_for(name) for name in names]
        capacities = capacities or {}
        self.capacity = [s.capacity or capacities.get(name, LOWER_CAPACITY)
                         for s, name in zip(servers, names)]
        self.servers = servers
        # Each stream's costs, buffer and keys
        hashes = np.array([name_hash(f"{names[r]}\x00{watchers[w].name}")
                           for w, r in zip(streams.watcher, streams.resource)], dtype=np.uint64)
        self.stream_costs: dict[tuple[str, str], list[_Cost]] = {}
        self.stream_groups: dict[tuple[str, str], tuple[list[_Cost], np.ndarray]] = {}
        self.keys: dict[tuple[str, str], UInts] = {}
        # streams whose watcher has no costs of its own share their resource's
        kinds = [(w if watchers[w].stages else -1, r)
                 for w, r in zip(streams.watcher.tolist(), streams.resource.tolist())]
        for key in self._STREAM_DRAWS:
            rng = Stream.of(config.seed, *key)
            self.keys[key] = rng.watcher_keys(hashes)
            costs: dict[tuple[int, int], _Cost] = {}
            for w, r in dict.fromkeys(kinds):
                costs[w, r] = _Cost(self._distribution(*key, watchers[w] if w >= 0 else None,
                                                       names[r]), rng)
            distinct = list(dict.fromkeys(costs.values()))
            self.stream_costs[key] = [costs[kind] for kind in kinds]
            self.stream_groups[key] = (distinct, np.array(
                [distinct.index(cost) for cost in self.stream_costs[key]], dtype=np.int64)
                if len(distinct) > 1 else np.zeros(0, dtype=np.int64))
        self.buffer = [watchers[w].buffer or servers[r].buffer or channel_size(
            self.capacity[r], names[r], watchers[w].node is not None)
            for w, r in zip(streams.watcher, streams.resource)]
        self.discipline = [watchers[w].client_queue for w in streams.watcher]
        self._hop_stream = Stream.of(config.seed, "direct", "latency")
        self._hops: dict[int, _DrawsAhead] = {}
        self._rv = 0
        self._commits = array("q")  # per write, in rv order
        self._engine: _Engine | None = None

    def _distribution(self, stage: str, param: str, watcher: WatcherSpec | None,
                      resource: str) -> Distribution:
        if stage == "reflector":
            reflector: Distribution = getattr(self.config.reflector, param)
            return reflector
        if stage == "list":
            return self.config.server_for(resource).list_per_object
        return self.config.costs(watcher, resource)[stage][
            "service" if (stage, param) == ("handler", "replace") else param]

    # -- the state of one evaluation event by event -------------------------------------------
    def _resource_state(self, code: int) -> _Resource:
        server = self.servers[code]
        return _Resource(code, self.streams.resources[code], self.capacity[code],
                         self.shared_costs[code], round(server.timeout_budget_ms * 1000),
                         round(server.budget_refill_ms_per_s * 1000))

    def _first_blocks(self) -> list[np.ndarray]:
        """Per per-event stage (``_PER_WATCH``), the draws of every stream's first ROW
        events (counters 0 .. ROW - 1), one row per stream: one vectorised call per
        distinct distribution instead of one per stream."""
        streams = len(self.streams.watcher)
        counters = np.tile(np.arange(ROW, dtype=np.uint64), streams)
        out = []
        for key in self._PER_WATCH:
            distinct, group = self.stream_groups[key]
            keys = np.repeat(np.asarray(self.keys[key], dtype=np.uint64), ROW)
            if len(distinct) == 1:
                drawn = distinct[0].draw(counters, keys)
            else:
                drawn = np.empty(len(counters), dtype=np.int64)
                of = np.repeat(group, ROW)
                for number, cost in enumerate(distinct):
                    rows = np.flatnonzero(of == number)
                    drawn[rows] = cost.draw(counters[rows], keys[rows])
            out.append(np.asarray(drawn, dtype=np.int64).reshape(streams, ROW))
        return out

    def _watch_state(self, engine: _Engine, s: int, resource: _Resource,
                     rows: tuple[np.ndarray, np.ndarray, np.ndarray]) -> _Watch:
        events = _EventDraws(tuple(self.stream_costs[key][s] for key in self._PER_WATCH),
                             tuple(self.keys[key][s] for key in self._PER_WATCH), rows, s)
        rewatch, relist, per_object, replace = (
            _DrawsAhead(self.stream_costs[key][s], self.keys[key][s])
            for key in self._STREAM_DRAWS[len(self._PER_WATCH):])
        return _Watch(engine, s, int(self.streams.watcher[s]), resource, self.buffer[s],
                      self.discipline[s], events, (rewatch, relist, per_object, replace))

    # -- one write at a time -------------------------------------------------------------------
    def resource_code(self, name: str) -> int:
        return self.streams.code[name]

    def step(self, commit: int, targets: Sequence[int], resource: int = 0, key: int | None = None,
             deleted: bool = False, payload: Payload | None = None, ends: bool = False
             ) -> tuple[int, int, int, list[Delivery]]:
        """Commit the next write (rv = previous + 1) at ``commit``, of ``resource`` (a code) and
        object ``key`` (default: its own rv), to the watchers ``targets``; ``deleted``: it
        deletes the object; ``ends``: it sets a pod's terminal phase (for the watches of
        non-terminal pods, the pod's deletion).

        Returns ``(rv, cached, dispatched, deliveries)``: the deliveries made by now, of this
        write or of earlier ones (the same numbers ``scan`` gives; plain tuples, which the
        what-if engine makes only for writes out of the compiled fan-out's common case:
        ``step_fanned``).  ``pending`` then lists the targets this write is not
        delivered to yet (their watch is held up or closed): ``advance`` and ``finish`` deliver
        it later.
        """
        return self.step_to(commit, self.watches(resource, targets), resource, key, deleted,
                            payload, ends)

    def watches(self, resource: int, targets: Sequence[int]) -> Watches:
        """The watches of ``resource`` by the watchers ``targets``, for ``step_to`` (a caller
        that sends many writes to the same watchers keeps them)."""
        engine = self._engine
        if engine is None:
            engine = self._engine = _Engine(self, self._last_rv_before, _Engine.COMPILED)
        watch_of = engine.watch_of[resource]
        return _Targets([watch_of[w] for w in targets],  # type: ignore[misc]
                        engine.compiled)

    def step_to(self, commit: int, watches: Watches, resource: int = 0, key: int | None = None,
                deleted: bool = False, payload: Payload | None = None, ends: bool = False
                ) -> tuple[int, int, int, list[Delivery]]:
        """``step`` to the ``watches(resource, targets)``."""
        rv, cached, dispatched, out, fanned = self.step_fanned(commit, watches, resource, key,
                                                               deleted, payload, ends)
        if fanned:
            out += watches.deliveries(rv, payload)
        return rv, cached, dispatched, out

    def step_fanned(self, commit: int, watches: Watches, resource: int = 0,
                    key: int | None = None, deleted: bool = False, payload: Payload | None = None,
                    ends: bool = False) -> tuple[int, int, int, list[Delivery], bool]:
        """``step_to``, and whether the compiled fan-out delivered the write to every one of
        ``watches``: then its deliveries are not among those returned (which are earlier
        writes') but in ``watches.times``, six rows of a column per target, in their order
        (sent, received, dequeued, applied, 1, rv: from the source ``WATCH``, none coalesced),
        and as bytes in ``watches.block``, for a caller that takes them as arrays
        (``Watches.deliveries`` makes them tuples).  (A Gödel pod's write goes to about 5
        watches: tuples of 9 fields for each, made and read back, cost about what the compiled
        call does.)"""
        engine = self._engine
        assert engine is not None
        if engine.wakeups and engine.wakeups[0][0] <= commit:
            engine.advance(commit)
        self._rv += 1
        rv = self._rv
        self._commits.append(commit)
        engine.fanned = False
        cached, dispatched = engine.step(rv, commit, engine.resources[resource],
                                         rv if key is None else key, deleted, watches, payload,
                                         ends)
        out, engine.out = engine.out, []
        return rv, cached, dispatched, out, engine.fanned

    def listed(self, commit: int, watches: Watches, resource: int, key: int) -> int:
        """The next rv, for object ``key`` of ``resource`` that every one of ``watches`` holds
        from its first list at ``commit``, before the first write (a node a what-if replay
        lists at the trace's start): in their stores and among the resource's objects, as
        ``Scan`` leaves its listed objects, so that a re-list lists it.  Its deliveries are the
        caller's (source ``LIST``, every stage at ``commit``): it is no event of any watch."""
        engine = self._engine
        assert engine is not None and isinstance(watches, _Targets)
        self._rv += 1
        self._commits.append(commit)
        for watch in watches:
            watch.listed(key)
        return self._rv

    @property
    def pending(self) -> list[int]:
        return self._engine.pending if self._engine is not None else []

    def _last_rv_before(self, at: int) -> int:
        return bisect_left(self._commits, at)

    @property
    def next_wakeup(self) -> int | None:
        """When something next happens between writes (``advance`` then), if anything."""
        return self._engine.next_wakeup if self._engine is not None else None

    def advance(self, now: int) -> list[Delivery]:
        """The deliveries made by ``now`` between writes (call it before stepping a write
        committed after ``now``)."""
        if self._engine is None:
            return []
        self._engine.advance(now)
        return self._engine.take()

    def finish(self) -> list[Delivery]:
        """Everything still to happen after the last write."""
        if self._engine is None:
            return []
        self._engine.finish()
        return self._engine.take()

    def close(self) -> None:
        """Drop the evaluation's state, once its deliveries and incidents have been taken;
        nothing may use the pipeline after.  Its watches and its engine refer to each other, so
        that left to the garbage collector they would wait for a full collection (a watch per
        kubelet: 940k objects for 20k nodes, 0.45 s before the derivation)."""
        engine = self._engine
        if engine is not None:
            for watch in engine.watches:
                vars(watch).clear()
            vars(engine).clear()
        vars(self).clear()

    def incidents(self) -> dict[str, pl.DataFrame]:
        """The dispatchers' waits, the terminations and the re-lists so far, as the run's
        ``dispatch_waits``, ``watch_terminations`` and ``relists`` tables."""
        engine = self._engine
        return incident_tables(self, engine.waits if engine else [],
                               engine.terminations if engine else [],
                               engine.relists if engine else [])

    # -- whole arrays --------------------------------------------------------------------------
    def scan(self, commit: np.ndarray, delivery_write: np.ndarray, delivery_stream: np.ndarray,
             resource: np.ndarray | None = None, key: np.ndarray | None = None,
             deleted: np.ndarray | None = None,
             ends: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Stage times of every delivery at once (the same as ``step``).

        ``commit`` holds the commit times of writes rv = 1..n in order (``resource``: their
        resource codes, default 0; ``key``: their objects, default each its own; ``deleted``:
        whether each deletes it; ``ends``: whether each sets a pod's terminal phase); each
        delivery is a write index (0-based) and a stream, sorted by stream and then by write.
        Returns one array per ``STAGE_COLUMNS`` entry, plus ``source`` and ``coalesced``,
        aligned with the deliveries.
        """
        scan = Scan(self, commit, delivery_write, delivery_stream, resource,
                    (lambda: key) if key is not None else None,
                    (lambda: deleted) if deleted is not None else None,
                    ends=(lambda: ends) if ends is not None else None)
        parts = list(scan.parts(max(len(delivery_write), 1)))
        self.scanned = scan
        return parts[0]

    def shared_stages(self, commit: np.ndarray, resource: np.ndarray,
                      matches: np.ndarray) -> SharedTimes:
        """The watch caches' stages of writes rv = 1..n committed at ``commit``, of resources
        ``resource``; ``matches``: how many watches each write goes to.

        Each resource's queues are Lindley recursions over its own writes.  The busiest resource
        is computed in place over all writes, the others' made neutral (an arrival before any and
        no service leave a Lindley recursion as it was); the rest are gathered."""
        n = len(commit)
        if n == 0:
            return SharedTimes(commit, commit.copy(), commit.copy())
        counters = np.arange(1, n + 1, dtype=np.uint64)
        drawn: dict[tuple[_Cost, ...], list[np.ndarray]] = {}
        for costs in dict.fromkeys(self.shared_costs):
            drawn[costs] = [cost.draw_parts(n, _slicer(counters)) for cost in costs]
        latency, service, cacher, per_watcher = (
            drawn[self.shared_costs[0]] if len(drawn) == 1 else
            [np.choose(resource, [drawn[c][k] for c in self.shared_costs]) for k in range(4)])
        per_watcher *= matches
        per_watcher += cacher  # the dispatch cost
        latency += commit  # the arrival at the watch cache
        counts = np.bincount(resource, minlength=len(self.shared_costs))
        busiest = int(np.argmax(counts)) if n else 0
        if counts[busiest] == n:
            cached = lindley(latency, service)
            return SharedTimes(commit, cached, lindley(cached, per_watcher))
        smaller = [np.flatnonzero(resource == code) for code in np.flatnonzero(counts).tolist()
                   if code != busiest]
        own = [(rows, latency[rows], service[rows], per_watcher[rows]) for rows in smaller]
        others = np.concatenate(smaller)
        latency[others], service[others], per_watcher[others] = EARLIEST, 0, 0
        cached = lindley(latency, service)
        arrival = cached.copy()
        arrival[others] = EARLIEST
        dispatched = lindley(arrival, per_watcher)
        for rows, arrive, serve, cost in own:
            cached[rows] = lindley(arrive, serve)
            dispatched[rows] = lindley(cached[rows], cost)
        return SharedTimes(commit, cached, dispatched)

    def _draw_stream(self, key: tuple[str, str], segments: Segments) -> np.ndarray:
        """Per-delivery draws of a stream stage; streams sharing a distribution draw in one
        vectorised call.  A delivery's counter is its index among its stream's deliveries."""
        distinct, group = self.stream_groups[key]
        ids, keys = segments.ids, self.keys[key]
        if len(ids) and not all(cost.constant for cost in distinct):
            # draw at counter = position, from keys shifted by each stream's start
            first, last = int(ids[0]), int(ids[-1]) + 1
            keys = keys.copy()
            keys[first:last] = Stream.shifted_keys(keys[first:last], segments.first_positions())
        if len(distinct) == 1:
            return distinct[0].draw_parts(len(ids), _positions, lambda part: keys[ids[part]])
        of = group[ids]
        out = np.zeros(len(ids), dtype=np.int64)
        for number, cost in enumerate(distinct):
            rows = np.flatnonzero(of == number)
            if len(rows):
                out[rows] = cost.draw_parts(len(rows), _composed(_as_counters, rows),
                                            _composed(lambda at: keys[ids[at]], rows))
        return out

    def hop(self, watcher: int) -> int:
        """The latency of one message sent straight to ``watcher``, outside any watch stream
        (its network stage's distribution, drawn from a stream of its own)."""
        ahead = self._hops.get(watcher)
        if ahead is None:
            cost = _Cost(self.config.costs(self.watchers[watcher])["network"]["latency"],
                         self._hop_stream)
            key = self._hop_stream.watcher_keys(np.uint64(name_hash(self.watchers[watcher].name)))
            ahead = self._hops[watcher] = _DrawsAhead(cost, key)
        return ahead.take()


@njit(cache=True, nogil=True)
def _sent(dispatched: Ints, write: Ints, cost: Ints, stream: npt.NDArray[np.int32], start: int,
          room: Ints, last: int, continues: bool, sent: Ints,
          full: npt.NDArray[np.bool_]) -> None:  # pragma: no cover - compiled
    """The sent times of the deliveries ``start``, ``start + 1``, ... (of writes ``write``,
    each ``cost`` to send; ``stream`` and ``sent`` are every delivery's): per stream a FIFO
    queue of the writes' dispatched times (``lindley``), the first one continuing after
    ``last`` if it ``continues`` a stream; and ``full[s]`` set where an event of stream ``s``
    was dispatched before the event ``room[s]`` before it in the stream was sent.  One pass: as
    numpy steps, the dispatched times gathered, the queue's five passes and the check's
    shifted slices took a fifth of a second of the 1M-pod observe replay before its first
    deliveries could be written."""
    departure = last
    for i in range(len(write)):
        at = start + i
        arrival = dispatched[write[i]]
        departure = fifo_departure(departure, arrival, cost[i],
                                   continues if i == 0 else stream[at] == stream[at - 1])
        sent[at] = departure
        before = at - room[stream[at]]
        if before >= 0 and stream[before] == stream[at] and sent[before] > arrival:
            full[stream[at]] = True


class Scan:
    """The pipeline over whole arrays (module docstring: compute unbounded, detect, fall back).

    The server side (up to ``sent``) is computed first for every delivery, a part at a time, and
    checked for full buffers; resources with one are evaluated again event by event, and
    ``delta_fifo`` and ``workqueue`` streams whose fifo schedule has a key arriving while its
    previous event waits have their client queue evaluated again.  ``parts`` then yields the
    deliveries' times a part at a time, so that observe writes each while it computes the next.
    ``key``, ``deleted`` and ``ends`` (per write, as ``Pipeline.scan``'s) are asked for only if
    needed.
    """

    def __init__(self, pipeline: Pipeline[Any], commit: np.ndarray, write: np.ndarray,
                 stream: np.ndarray, resource: np.ndarray | None = None,
                 key: Callable[[], np.ndarray] | None = None,
                 deleted: Callable[[], np.ndarray] | None = None, part: int = 1 << 20,
                 listed: Callable[[], tuple[np.ndarray, np.ndarray]] | None = None,
                 ends: Callable[[], np.ndarray] | None = None):
        """``listed``: the objects in the streams' stores before the first write (observe's
        first list of what its trace did not see created), as (key, stream) pairs, asked for
        only if a resource is evaluated event by event: a re-list lists them too."""
        self.pipeline, self.write, self.stream, self.part = pipeline, write, stream, part
        self.resource = resource if resource is not None else np.zeros(len(commit), np.int64)
        self._key, self._deleted, self._listed, self._ends = key, deleted, listed, ends
        streams = pipeline.streams
        self.shared = pipeline.shared_stages(commit, self.resource,
                                             np.bincount(write, minlength=len(commit)))
        self.starts = np.searchsorted(stream, np.arange(len(streams) + 1, dtype=stream.dtype))
        self.sent, blocked = self._server_side()
        self.waits: list[tuple[int, int, int, int, int, bool]] = []
        self.terminations: list[list[Any]] = []
        self.relists: list[list[Any]] = []
        self.fixed: dict[int, dict[str, np.ndarray]] = {}  # stream -> its times, recomputed
        for code in blocked:
            self._evaluate_by_event(code)
        for s, discipline in enumerate(pipeline.discipline):
            if (discipline != ClientQueue.FIFO and s not in self.fixed
                    and self.starts[s + 1] > self.starts[s]):
                self._client_queue_again(s)

    def _server_side(self) -> tuple[np.ndarray, list[int]]:
        """Every delivery's sent time with unbounded buffers, and the resources whose
        dispatcher would find a buffer full in that schedule: some event of a stream dispatched
        before the event 2 x buffer + 2 before it in the stream was sent (``_sent``)."""
        sent = np.empty(len(self.write), dtype=np.int64)
        room = 2 * np.array(self.pipeline.buffer, dtype=np.int64) + 2
        full = np.zeros(len(room), dtype=bool)
        resume = None
        for start in range(0, max(len(self.write), 1), self.part):
            part = slice(start, start + self.part)
            stream = self.stream[part]
            if len(stream) == 0:
                break
            segments = Segments(stream, resume.done if resume else 0)
            cost = self.pipeline._draw_stream(("watcher_queue", "service"), segments)
            _sent(self.shared.dispatched, self.write[part], cost, self.stream, start, room,
                  resume.sent if resume else 0, resume is not None, sent, full)
            more = start + self.part < len(self.write) and self.stream[start + self.part] == \
                stream[-1]
            resume = Resume.after({"sent_ts": sent[part]}, stream, resume) if more else None
        return sent, sorted(set(self.pipeline.streams.resource[full].tolist()))

    def _objects(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = len(self.shared.commit)
        key = self._key() if self._key is not None else np.arange(1, n + 1)
        deleted = self._deleted() if self._deleted is not None else np.zeros(n, dtype=bool)
        ends = self._ends() if self._ends is not None else np.zeros(n, dtype=bool)
        return key, deleted, ends

    def _evaluate_by_event(self, code: int) -> None:
        """Resource ``code``'s writes through the definition, event by event."""
        pipeline, commit = self.pipeline, self.shared.commit
        # (observe's: without the compiled fan-out and its per-write arrays, the what-if replays')
        engine = _Engine(pipeline, lambda at: int(np.searchsorted(commit, at, side="left")),
                         False)
        if self._listed is not None:
            self._store_listed(engine, code)
        key, deleted, ends = self._objects()
        mine = np.flatnonzero(self.pipeline.streams.resource == code)
        rows = np.concatenate([np.arange(self.starts[s], self.starts[s + 1]) for s in mine])
        by_write = rows[np.argsort(self.write[rows], kind="stable")]
        writes = np.flatnonzero(self.resource == code)
        bounds = np.searchsorted(self.write[by_write], writes)
        bounds = np.r_[bounds, len(by_write)]
        target = [engine.watches[s] for s in self.stream[by_write].tolist()]
        resource = engine.resources[code]
        cached, dispatched = self.shared.cached, self.shared.dispatched
        delivered: list[tuple[Any, ...]] = []
        for n, i in enumerate(writes.tolist()):
            if engine.wakeups and engine.wakeups[0][0] <= commit[i]:
                engine.advance(int(commit[i]))
                delivered += engine.take()
            cached[i], dispatched[i] = engine.step(
                i + 1, int(commit[i]), resource, int(key[i]), bool(deleted[i]),
                _Targets(target[bounds[n]:bounds[n + 1]], False), None, bool(ends[i]))
            delivered += engine.take()
        engine.finish()
        delivered += engine.take()
        streams = pipeline.streams
        stream_of = {(int(streams.watcher[s]), int(streams.resource[s])): int(s) for s in mine}
        ordered = sorted(delivered, key=lambda d: (stream_of[d[0], code], d[1]))
        columns = np.array([d[3:7] for d in ordered], dtype=np.int64).reshape(-1, 4)
        flags = np.array([(d[7], d[8]) for d in ordered], dtype=np.int64).reshape(-1, 2)
        at = 0
        for s in mine.tolist():
            size = int(self.starts[s + 1] - self.starts[s])
            if size:
                self.fixed[s] = {"sent_ts": columns[at:at + size, 0],
                                 "received_ts": columns[at:at + size, 1],
                                 "dequeued_ts": columns[at:at + size, 2],
                                 "applied_ts": columns[at:at + size, 3],
                                 "source": flags[at:at + size, 0].astype(np.int8),
                                 "coalesced": flags[at:at + size, 1].astype(bool)}
            at += size
        assert at == len(ordered), "every write a watch matched reaches it exactly once"
        self.waits += engine.waits
        self.terminations += engine.terminations
        self.relists += engine.relists

    def _store_listed(self, engine: _Engine, code: int) -> None:
        """The listed objects of resource ``code`` in their watches' stores and among the
        resource's objects, as a first list leaves them."""
        assert self._listed is not None
        keys, streams = self._listed()
        mine = self.pipeline.streams.resource[streams] == code
        for key, s in zip(keys[mine].tolist(), streams[mine].tolist()):
            engine.watches[s].listed(key)

    def _client_queue_again(self, s: int) -> None:
        """Stream ``s``'s client queue by its own discipline, where it differs from fifo."""
        lo, hi = int(self.starts[s]), int(self.starts[s + 1])
        segments = Segments(self.stream[lo:hi])
        times = self._client_side(segments, self.sent[lo:hi], None)
        key, deleted, ends = self._objects()
        keys = key[self.write[lo:hi]]
        discipline = self.pipeline.discipline[s]
        conflicts = conflicting_rows(discipline, keys, times["received_ts"],
                                     times["dequeued_ts"], times["applied_ts"])
        if len(conflicts) == 0:
            return
        periods = np.r_[busy_periods(times["received_ts"], times["applied_ts"]), hi - lo]
        service = times.pop("service")
        times["coalesced"] = np.zeros(hi - lo, dtype=bool)
        times["source"] = np.zeros(hi - lo, dtype=np.int8)
        times["sent_ts"] = self.sent[lo:hi]
        gone = deleted[self.write[lo:hi]]
        if self.pipeline.streams.non_terminal[s]:
            gone = gone | ends[self.write[lo:hi]]
        for period in np.unique(np.searchsorted(periods, conflicts, side="right") - 1).tolist():
            first, last = int(periods[period]), int(periods[period + 1])
            queue = QUEUES[discipline]()
            for row in range(first, last):
                queue.arrive(Arrival(int(times["received_ts"][row]), int(keys[row]),
                                     int(service[row]), bool(gone[row]), [row]))
            queue.flush(LATEST)
            for arrival, dequeued, applied, coalesced in queue.take():
                row = arrival.rows[0]
                times["dequeued_ts"][row], times["applied_ts"][row] = dequeued, applied
                times["coalesced"][row] = coalesced
        self.fixed[s] = times

    def _client_side(self, segments: Segments, sent: np.ndarray,
                     resume: Resume | None) -> dict[str, np.ndarray]:
        """Received, dequeued and applied times (fifo client queues) of a run of deliveries."""
        pipeline = self.pipeline
        received = pipeline._draw_stream(("network", "latency"), segments)
        received += sent
        if resume and len(received):
            received[0] = max(received[0], resume.received)
        segments.cummax(received)
        service = pipeline._draw_stream(("handler", "service"), segments)
        applied = segments.lindley(received, service, last=resume.applied if resume else None)
        return {"received_ts": received, "dequeued_ts": applied - service, "applied_ts": applied,
                "service": service}

    def parts(self, size: int | None = None,
              shared: bool = True) -> Iterator[dict[str, np.ndarray]]:
        """Every delivery's times (``STAGE_COLUMNS``, ``source``, ``coalesced``), a part of
        ``size`` deliveries at a time; without the shared stages' (``commit_ts``, ``cached_ts``,
        ``dispatched_ts``: its write's, in ``self.shared``) unless ``shared``."""
        size = size or self.part
        commit, cached, dispatched = self.shared
        resume = None
        fixed = np.array(sorted(self.fixed), dtype=np.int64)
        for start in range(0, max(len(self.write), 1), size):
            part = slice(start, start + size)
            stream, write = self.stream[part], self.write[part]
            segments = Segments(stream, resume.done if resume else 0)
            sent = self.sent[part]
            times = self._client_side(segments, sent, resume)
            del times["service"]
            more = start + size < len(self.write) and self.stream[start + size] == stream[-1]
            resume = Resume.after({"sent_ts": sent, **times}, stream, resume) if (
                more and len(stream)) else None
            of_write = {"commit_ts": commit[write], "cached_ts": cached[write],
                        "dispatched_ts": dispatched[write]} if shared else {}
            out = {**of_write, "sent_ts": sent, **times,
                   "source": np.zeros(len(write), dtype=np.int8),
                   "coalesced": np.zeros(len(write), dtype=bool)}
            if len(fixed) and len(stream):
                lo, hi = np.searchsorted(fixed, [stream[0], stream[-1]], side="left")
                for s in fixed[lo:hi + 1].tolist():
                    self._overwrite(out, s, start, start + len(stream))
            yield out

    def _overwrite(self, out: dict[str, np.ndarray], s: int, lo: int, hi: int) -> None:
        """The recomputed times of stream ``s`` into the part [lo, hi)."""
        first, last = max(int(self.starts[s]), lo), min(int(self.starts[s + 1]), hi)
        if first >= last:
            return
        values = self.fixed[s]
        mine = slice(first - int(self.starts[s]), last - int(self.starts[s]))
        if out["sent_ts"].base is self.sent:  # a view of the server side: not to be changed
            out["sent_ts"] = out["sent_ts"].copy()
        for column, drawn in values.items():
            out[column][first - lo:last - lo] = drawn[mine]

    def incidents(self) -> dict[str, pl.DataFrame]:
        """As ``Pipeline.incidents``."""
        return incident_tables(self.pipeline, self.waits, self.terminations, self.relists)


def incident_tables(pipeline: Pipeline[Any], waits: list[tuple[int, int, int, int, int, bool]],
                    terminations: list[list[Any]],
                    relists: list[list[Any]]) -> dict[str, pl.DataFrame]:
    """The ``dispatch_waits``, ``watch_terminations`` and ``relists`` tables from the
    engine's records, in time order."""
    names = [w.name for w in pipeline.watchers]
    resources = pipeline.streams.resources
    ts = pl.Datetime("us", "UTC")
    waits = sorted(waits, key=lambda w: (w[3], w[2], w[1]))
    terms = sorted(terminations, key=lambda t: (t[2], t[0], t[1]))
    lists = sorted(relists, key=lambda t: (t[2], t[0], t[1]))
    return {"dispatch_waits": pl.DataFrame({
        "resource": [resources[w[0]] for w in waits], "watcher": [names[w[1]] for w in waits],
        "rv": [w[2] for w in waits], "start_ts": [w[3] for w in waits],
        "end_ts": [w[4] for w in waits], "terminated": [w[5] for w in waits],
    }, schema={"resource": pl.String, "watcher": pl.String, "rv": pl.Int64, "start_ts": pl.Int64,
               "end_ts": pl.Int64, "terminated": pl.Boolean})
        .with_columns(pl.col("start_ts", "end_ts").cast(ts)),
        "watch_terminations": pl.DataFrame({
        "watcher": [names[t[0]] for t in terms], "resource": [resources[t[1]] for t in terms],
        "ts": [t[2] for t in terms], "rv": [t[3] for t in terms],
        "reason": [TERMINATION_REASON] * len(terms), "recovery": [t[4] for t in terms],
        "recovered_ts": [t[5] for t in terms], "resume_rv": [t[6] for t in terms],
        "missed": [t[7] for t in terms],
    }, schema={"watcher": pl.String, "resource": pl.String, "ts": pl.Int64, "rv": pl.Int64,
               "reason": pl.String, "recovery": pl.String, "recovered_ts": pl.Int64,
               "resume_rv": pl.Int64, "missed": pl.Int64})
        .with_columns(pl.col("ts", "recovered_ts").cast(ts)),
        "relists": pl.DataFrame({
            "watcher": [names[t[0]] for t in lists], "resource": [resources[t[1]] for t in lists],
            "start_ts": [t[2] for t in lists], "end_ts": [t[3] for t in lists],
            "objects": [t[4] for t in lists], "rv": [t[5] for t in lists],
        }, schema={"watcher": pl.String, "resource": pl.String, "start_ts": pl.Int64,
                   "end_ts": pl.Int64, "objects": pl.Int64, "rv": pl.Int64})
        .with_columns(pl.col("start_ts", "end_ts").cast(ts))}


def view_lag_us(commit: np.ndarray, applied: np.ndarray, at: np.ndarray) -> np.ndarray:
    """How stale one watcher's view is at each time in ``at``: the age of the oldest write it
    had been sent and had not yet applied (0 when it is up to date).

    ``commit`` and ``applied`` are the watcher's deliveries in commit order.  The oldest write not
    applied by t is the first whose applied time is after t, which is also the first at which the
    running maximum of applied times passes t (a client queue may apply a later write first)."""
    reached = np.maximum.accumulate(applied) if len(applied) else applied
    first_pending = np.searchsorted(reached, at, side="right")
    pending = first_pending < len(commit)
    oldest = commit[np.minimum(first_pending, max(len(commit) - 1, 0))] if len(commit) else at
    return np.where(pending & (oldest <= at), at - oldest, 0)
