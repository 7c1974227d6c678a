"""The list-watch delay pipeline: when each stage hands each write on to each watcher.

For write i committed at ``commit_i`` (in commit order, rv = i) and each watcher w it matches:

    cached_i     = max(commit_i + latency_i, cached_{i-1}) + service_i          storage_to_cache
    dispatched_i = max(cached_i, dispatched_{i-1}) + service_i
                   + per_watcher_i * (number of watchers matching write i)      cacher_queue
    sent         = max(dispatched_i, previous sent of w) + service               watcher_queue
    received     = max(sent + latency, previous received of w)                  network
    applied      = max(received, previous applied of w) + handler service        handler
    dequeued     = applied - handler service                                    (client_queue
                                                                                 ends here)

Every queue is FIFO (Lindley's recursion) and a stream never reorders, so delay grows with load.
The recursions are defined once here and evaluated two ways that give identical results:
``Pipeline.scan`` over whole arrays (a Lindley recursion is a cumulative maximum, see ``lindley``)
for the observe model, and ``Pipeline.step`` one write at a time for the what-if models, whose
writes depend on what was delivered before.

Draws: the shared stages draw with counter = rv; a watcher's own stages draw with counter = the
index of the delivery among that watcher's deliveries (0, 1, 2, ...), so ``step`` can draw ahead
in blocks per watcher.  All times are integer microseconds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from replay.arrays import Segments, lindley
from replay.engine.config import STAGES, RunConfig, WatcherSpec
from replay.engine.distributions import Constant, Distribution, Ints
from replay.rng import Keys, Stream, UInts, name_hash

STAGE_COLUMNS = ("commit_ts", "cached_ts", "dispatched_ts", "sent_ts", "received_ts",
                 "dequeued_ts", "applied_ts")
DRAW_CHUNK = 1 << 16
SHARED_BLOCK = 4096  # step() draws the shared stages this many writes at a time


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

    def draw(self, counters: UInts, keys: Keys | None = None) -> Ints:
        return self.dist.sample_us(self.stream, counters, keys)

    def draw_shared(self, writes: int) -> np.ndarray:
        """The draws of writes rv = 1..``writes`` (a shared stage's counter is the rv)."""
        return self.draw_parts(writes, lambda part: np.arange(part.start + 1, part.stop + 1,
                                                              dtype=np.uint64))

    def draw_parts(self, size: int, counters: Callable[[slice], np.ndarray],
                   keys: Callable[[slice], np.ndarray] | None = None) -> np.ndarray:
        """``size`` draws, made a cache-sized part at a time from that part's ``counters`` and
        ``keys``; a constant needs neither."""
        if isinstance(self.dist, Constant):
            return np.full(size, self.draw(np.zeros(1, dtype=np.uint64))[0])
        return _in_chunks(size, lambda part: self.draw(counters(part),
                                                       None if keys is None else keys(part)))


class _DrawsAhead:
    """Draws of one watcher's stage parameter, made in growing blocks for ``Pipeline.step``."""

    __slots__ = ("cost", "key", "buffer", "next", "start")

    def __init__(self, cost: _Cost, key: Keys):
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


_NOT_YET = _DrawsAhead(_Cost(Constant(0.0), Stream(0)), np.uint64(0))  # a watcher with no draws yet


class SharedTimes(NamedTuple):
    """Per write (rv = 1..n): its commit, and when the API server's shared stages handed it on."""

    commit: np.ndarray
    cached: np.ndarray
    dispatched: np.ndarray


class Resume(NamedTuple):
    """Where a watcher's deliveries stopped at the end of a part of a scan: how many of them came
    before, and the last one's sent, received and applied times."""

    done: int
    sent: int
    received: int
    applied: int

    @classmethod
    def after(cls, times: dict[str, np.ndarray], delivery_watcher: np.ndarray,
              resumed: Resume | None) -> Resume:
        """After the part that ``times`` (of ``delivery_watcher``, itself ``resumed``) scanned,
        for the next part, which begins with more deliveries of this part's last watcher."""
        first = int(np.searchsorted(delivery_watcher, delivery_watcher[-1]))
        before = len(delivery_watcher) - first + (resumed.done if resumed and not first else 0)
        return cls(before, *(int(times[c][-1]) for c in ("sent_ts", "received_ts", "applied_ts")))


class Pipeline:
    """The pipeline for a fixed list of watchers; ``scan`` and ``step`` share these costs."""

    _PER_WATCHER = (("watcher_queue", "service"), ("network", "latency"), ("handler", "service"))

    def __init__(self, config: RunConfig, watchers: list[WatcherSpec]):
        self.watchers = watchers
        hashes = np.array([name_hash(w.name) for w in watchers], dtype=np.uint64)
        streams = {(stage, param): Stream.of(config.seed, stage, param)
                   for stage, params in STAGES.items() for param in params}
        # Each watcher's key in each per-watcher stream
        self.keys = {key: streams[key].watcher_keys(hashes) for key in self._PER_WATCHER}

        def cost(stage: str, param: str, watcher: WatcherSpec | None = None) -> _Cost:
            return _Cost(config.costs(watcher)[stage][param], streams[stage, param])

        self.storage_latency = cost("storage_to_cache", "latency")
        self.storage_service = cost("storage_to_cache", "service")
        self.cacher_service = cost("cacher_queue", "service")
        self.cacher_per_watcher = cost("cacher_queue", "per_watcher")
        # Per watcher stage costs: (stage, param) -> the run's, and those of the watchers with
        # stages of their own (made only for them: a run may have 20,000 kubelets)
        self.common = {key: cost(*key) for key in self._PER_WATCHER}
        special = [i for i, w in enumerate(watchers) if w.stages]
        self.own = {key: {i: cost(*key, watchers[i]) for i in special} for key in self._PER_WATCHER}
        # ... and the watchers that share each cost, to draw for all of them in one call
        self.sharing: dict[tuple[str, str], dict[_Cost, list[int]]] = {}
        for key, costs in self.own.items():
            groups = {self.common[key]: [i for i, w in enumerate(watchers) if not w.stages]}
            for index, own in costs.items():
                groups.setdefault(own, []).append(index)
            self.sharing[key] = groups
        self._hop_stream = Stream.of(config.seed, "direct", "latency")
        self._hops: dict[int, _DrawsAhead] = {}
        self._reset_step_state()

    # -- whole arrays ------------------------------------------------------------------------
    def scan(self, commit: np.ndarray, delivery_write: np.ndarray,
             delivery_watcher: np.ndarray) -> dict[str, np.ndarray]:
        """Stage times of every delivery at once.

        ``commit`` holds the commit times of writes rv = 1..n in order; each delivery is a write
        index (0-based) and a watcher index, sorted by watcher and then by write.  Returns one array
        per ``STAGE_COLUMNS`` entry, aligned with the deliveries.
        """
        shared = self.shared_stages(commit, np.bincount(delivery_write, minlength=len(commit)))
        return self.watcher_stages(shared, delivery_write, delivery_watcher)

    def shared_stages(self, commit: np.ndarray, matches: np.ndarray) -> SharedTimes:
        """The API server's stages of writes rv = 1..n committed at ``commit``; ``matches``:
        how many watchers each write goes to."""
        writes = len(commit)
        arrive = self.storage_latency.draw_shared(writes)
        arrive += commit
        cached = lindley(arrive, self.storage_service.draw_shared(writes))
        dispatch_cost = self.cacher_per_watcher.draw_shared(writes)
        dispatch_cost *= matches
        dispatch_cost += self.cacher_service.draw_shared(writes)
        return SharedTimes(commit, cached, lindley(cached, dispatch_cost))

    def watcher_stages(self, shared: SharedTimes, delivery_write: np.ndarray,
                       delivery_watcher: np.ndarray,
                       resume: Resume | None = None) -> dict[str, np.ndarray]:
        """``scan``'s result for a run of consecutive deliveries, so that a long scan can be
        done (and written) a part at a time.  ``resume``: where the first watcher's deliveries
        stopped if the part begins in their midst (``Resume.after`` the previous part)."""
        commit, cached, dispatched = shared
        segments = Segments(delivery_watcher, resume.done if resume else 0)
        queue_cost, net_cost, handler_cost = (
            self._draw_own(key, segments) for key in self._PER_WATCHER)
        from_cacher = dispatched[delivery_write]
        sent = segments.lindley(from_cacher, queue_cost, last=resume.sent if resume else None)
        received = net_cost
        received += sent
        if resume and len(received):
            received[0] = max(received[0], resume.received)
        segments.cummax(received)
        applied = segments.lindley(received, handler_cost, scratch=queue_cost,
                                   last=resume.applied if resume else None)
        dequeued = np.subtract(applied, handler_cost, out=handler_cost)
        return dict(zip(STAGE_COLUMNS, (commit[delivery_write], cached[delivery_write], from_cacher,
                                        sent, received, dequeued, applied)))

    def _draw_own(self, key: tuple[str, str], segments: Segments) -> np.ndarray:
        """Per-delivery draws of a per-watcher stage; watchers sharing a distribution draw in one
        vectorised call."""
        groups = self.sharing[key]
        if len(groups) == 1:  # every watcher has the run's cost
            return self._draw_at(next(iter(groups)), key, segments, None)
        out = np.zeros(len(segments.ids), dtype=np.int64)
        for cost, members in groups.items():
            rows = np.flatnonzero(np.isin(segments.ids, members))
            out[rows] = self._draw_at(cost, key, segments, rows)
        return out

    def _draw_at(self, cost: _Cost, key: tuple[str, str], segments: Segments,
                 rows: np.ndarray | None) -> np.ndarray:
        """``cost``'s draws for the deliveries at ``rows`` (all if None); a delivery's counter is
        its index among its watcher's deliveries."""
        keys, watcher = self.keys[key], segments.ids

        def at(part: slice) -> slice | np.ndarray:
            return part if rows is None else rows[part]

        return cost.draw_parts(len(watcher) if rows is None else len(rows),
                               lambda part: segments.sequence(at(part)),
                               lambda part: keys[watcher[at(part)]])

    # -- one write at a time -----------------------------------------------------------------
    def _reset_step_state(self) -> None:
        self._rv = 0
        self._cached = self._dispatched = np.iinfo(np.int64).min
        self._block = -1
        self._drawn: list[list[int]] = []  # the shared stages' draws for the current block
        self._last = [[np.iinfo(np.int64).min] * 3 for _ in self.watchers]  # sent, recv, applied
        # Each watcher's draws ahead, made when it receives its first write
        self._ahead: dict[tuple[str, str], list[_DrawsAhead]] = {
            key: [_NOT_YET] * len(self.watchers) for key in self._PER_WATCHER}

    def _own_cost(self, key: tuple[str, str], watcher: int) -> _Cost:
        return self.own[key].get(watcher, self.common[key])

    def _start_drawing(self, watcher: int) -> None:
        for key, ahead in self._ahead.items():
            ahead[watcher] = _DrawsAhead(self._own_cost(key, watcher), self.keys[key][watcher])

    def step(self, commit: int,
             targets: list[int]) -> tuple[int, int, int, list[tuple[int, int, int, int, int]]]:
        """Commit the next write (rv = previous + 1) at ``commit`` to the watchers ``targets``.

        Returns ``(rv, cached, dispatched, deliveries)`` with one ``(watcher, sent, received,
        dequeued, applied)`` tuple per target: the same numbers ``scan`` gives.  (Plain tuples:
        this runs once per delivery of a what-if replay.)
        """
        self._rv += 1
        rv = self._rv
        block, at = divmod(rv - 1, SHARED_BLOCK)
        if block != self._block:
            self._block, self._drawn = block, self._draw_shared_block(block)
        latency, service, cacher, per_watcher = (d[at] for d in self._drawn)
        self._cached = cached = max(commit + latency, self._cached) + service
        self._dispatched = dispatched = (max(cached, self._dispatched) + cacher
                                         + per_watcher * len(targets))
        out = []
        queue, network, handler = (self._ahead[key] for key in self._PER_WATCHER)
        last_of = self._last
        for w in targets:
            if queue[w] is _NOT_YET:
                self._start_drawing(w)
            last = last_of[w]
            sent = max(dispatched, last[0]) + queue[w].take()
            received = max(sent + network[w].take(), last[1])
            service = handler[w].take()
            applied = max(received, last[2]) + service
            last[0], last[1], last[2] = sent, received, applied
            out.append((w, sent, received, applied - service, applied))
        return rv, cached, dispatched, out

    def _draw_shared_block(self, block: int) -> list[list[int]]:
        """The shared stages' draws for writes ``block * SHARED_BLOCK + 1 ...``, all at once."""
        counters = np.arange(block * SHARED_BLOCK + 1, (block + 1) * SHARED_BLOCK + 1,
                             dtype=np.uint64)
        return [cost.draw(counters).tolist() for cost in (
            self.storage_latency, self.storage_service, self.cacher_service,
            self.cacher_per_watcher)]

    def hop(self, watcher: int) -> int:
        """The latency of one message sent straight to ``watcher``, outside any watch stream
        (same distribution as its network stage, drawn from a stream of its own)."""
        ahead = self._hops.get(watcher)
        if ahead is None:
            cost = _Cost(self._own_cost(("network", "latency"), watcher).dist, self._hop_stream)
            key = self._hop_stream.watcher_keys(np.uint64(name_hash(self.watchers[watcher].name)))
            ahead = self._hops[watcher] = _DrawsAhead(cost, key)
        return ahead.take()


def view_lag_us(commit: np.ndarray, applied: np.ndarray, at: np.ndarray) -> np.ndarray:
    """How stale one watcher's view is at each time in ``at``: the age of the oldest write it
    had been committed but not yet applied (0 when it is up to date).

    ``commit`` and ``applied`` are the watcher's deliveries in commit order; ``applied`` never
    decreases along them, so the writes not applied by t are a suffix, and the oldest is the first.
    """
    first_pending = np.searchsorted(applied, at, side="right")
    pending = first_pending < len(commit)
    oldest = commit[np.minimum(first_pending, max(len(commit) - 1, 0))] if len(commit) else at
    return np.where(pending & (oldest <= at), at - oldest, 0)
