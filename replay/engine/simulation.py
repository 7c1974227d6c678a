"""The what-if engine: replays a trace's workload while a model's components make the placements.

It owns time (``core.Environment``), the truth (``cluster.Truth``), the watch pipeline
(``Pipeline.step``, the same definitions the observe model scans with), randomness (named
streams) and the run's tables.  A model plugs in by creating views for its watchers, asking to
be told about the writes it reacts to (``react``), setting timers (``env.at``) and committing
writes (``commit``); see ``replay.models.whatif`` and docs/models.md.

Every write commits at the simulation's current time, so commits are in time order and get
resource versions 1, 2, ... in that order.  Each watcher whose filter matches a write is sent it
through the pipeline; the delivery is appended to the watcher's view inbox (applied lazily) and,
if the model reacts to it, an event is scheduled at its applied time.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable

import numpy as np
import polars as pl
import pyarrow as pa

from replay.engine.cluster import (
    NODE_DELETE,
    NODE_OTHER,
    NODE_SET,
    OTHER,
    POD_BIND,
    POD_CREATE,
    POD_DELETE,
    SHAPE,
    Attempt,
    Pod,
    Truth,
    Write,
)
from replay.engine.config import RunConfig, WatcherSpec
from replay.engine.core import Environment
from replay.engine.pipeline import Pipeline
from replay.engine.rundir import RunTables
from replay.engine.view import View
from replay.engine.watchers import watchers_table
from replay.engine.workload import NEVER, Workload
from replay.progress import progress
from replay.rng import stream

TS = pl.Datetime("us", "UTC")
NODE_KINDS = (NODE_SET, NODE_DELETE, NODE_OTHER)


class Simulation:
    def __init__(self, trace: pl.DataFrame, config: RunConfig, watchers: list[WatcherSpec],
                 instant: frozenset[str] = frozenset()):
        """``instant`` names watchers that see every write at its commit, outside the pipeline
        (the oracle's)."""
        self.trace, self.config, self.watchers = trace, config, watchers
        self.workload = Workload.of(trace)
        self.truth = Truth(self.workload.node_names)
        start = int(self.workload.ts[0]) if len(self.workload.ts) else 0
        self.env = Environment(start)
        self.index = {w.name: i for i, w in enumerate(watchers)}
        self.instant = [w.name in instant for w in watchers]
        piped = [i for i, w in enumerate(watchers) if w.name not in instant]
        self.pipeline = Pipeline(config, [watchers[i] for i in piped])
        self.piped_of = {i: k for k, i in enumerate(piped)}
        self.watcher_of_piped = piped
        self.all_piped = len(piped) == len(watchers)
        self._filters(watchers)
        self.views: dict[int, View] = {}
        self.reactions: dict[int, tuple[frozenset[int], Callable[[Write], bool] | None,
                                        Callable[[Write], None]]] = {}
        self.pods: list[Pod] = []
        self.pod_of_incarnation: dict[int, Pod] = {}
        self.attempts: list[Attempt] = []
        self.listeners: list[Callable[[Write], None]] = []
        self._resources = trace["resource"].to_numpy()
        self._log = _Log()

    # -- what a model uses --------------------------------------------------------------------
    def view(self, watcher: str) -> View:
        """The cache of ``watcher`` (made on first use): only watchers with a view keep one."""
        index = self.index[watcher]
        if index not in self.views:
            self.views[index] = View(len(self.truth.nodes), self._alloc_of)
        return self.views[index]

    def react(self, watcher: str, kinds: set[int], handler: Callable[[Write], None],
              wants: Callable[[Write], bool] | None = None) -> None:
        """Call ``handler(write)`` when ``watcher`` has applied a write of one of ``kinds`` (and,
        with ``wants``, for which ``wants(write)``, asked when the write commits); its view is
        synced first."""
        self.reactions[self.index[watcher]] = (frozenset(kinds), wants, handler)

    def on_commit(self, listener: Callable[[Write], None]) -> None:
        """Call ``listener(write)`` as each write commits, after the truth has applied it (for
        what the API server itself does on a write, such as assigning a pod to a scheduler)."""
        self.listeners.append(listener)

    def random(self, name: str) -> np.random.Generator:
        """A generator of the model's own, named, derived from the run's seed."""
        return stream(self.config.seed, "model", name)

    def new_attempt(self, pod: Pod, scheduler: str, enqueued: int, started: int, node: int,
                    lag_us: int) -> Attempt:
        pod.attempts += 1
        if pod.first_attempt < 0:
            pod.first_attempt = started
        attempt = Attempt(len(self.attempts) + 1, pod, scheduler, enqueued, started, node=node,
                          view_lag_us=lag_us)
        self.attempts.append(attempt)
        return attempt

    def settle(self, attempt: Attempt, outcome: str, reason: str | None = None) -> None:
        attempt.outcome, attempt.reason = outcome, reason

    def commit(self, kind: int, pod: Pod | None, component: str, node: int = -1,
               attempt: Attempt | None = None, row: int = -1, code: int = 0,
               alloc: tuple[int, int, int] | None = None, by_model: bool = True) -> Write:
        """Commit a write now: apply it to the truth, log it and send it to its watchers.

        The attempt's ``committed`` time is its first write's (a Gödel scheduler's assume patch,
        not the binder's binding that follows it)."""
        now = self.env.now
        rv = self._log.rv + 1
        code = code or (201 if SHAPE[kind][0] == "create" else 200)
        write = Write(rv, now, kind, pod, node, component, attempt.id if attempt else 0, row, code)
        self.truth.apply(write, alloc)
        for listener in self.listeners:
            listener(write)
        self._log.event(write, by_model)
        if attempt is not None and attempt.committed < 0:
            attempt.committed = now
        if kind == POD_BIND and pod.run_us != NEVER:
            self.env.at(now + pod.run_us, self._end_of_run, pod)
        self._send(write)
        return write

    # -- the workload -------------------------------------------------------------------------
    def _feed(self, i: int) -> None:
        """Commit workload write ``i`` and schedule the next one at its recorded time."""
        w = self.workload
        kind, row = int(w.kind[i]), int(w.row[i])
        if kind == POD_CREATE:
            self.commit(POD_CREATE, self._new_pod(int(w.pod[i])), "workload", row=row,
                        by_model=False)
        elif kind == POD_DELETE:
            pod = self.pod_of_incarnation.get(int(w.pod[i]))
            if pod is not None and pod.deleted < 0:
                self.commit(POD_DELETE, pod, "workload", row=row, by_model=False)
        else:
            alloc = tuple(int(v) for v in w.alloc[i]) if kind == NODE_SET else None
            self.commit(kind, None, "workload", node=int(w.node[i]), row=row, alloc=alloc,
                        by_model=False)
        if i + 1 < len(w.row):
            self.env.at(int(w.ts[i + 1]), self._feed, i + 1)

    def _new_pod(self, incarnation: int) -> Pod:
        w = self.workload
        pod = Pod(len(self.pods), w.namespace[incarnation], w.name[incarnation],
                  tuple(int(v) for v in w.request[incarnation]), created=self.env.now,
                  run_us=int(w.run_us[incarnation]), scheduler_name=w.scheduler_name[incarnation],
                  group=w.group[incarnation], priority=int(w.priority[incarnation]))
        self.pods.append(pod)
        self.pod_of_incarnation[incarnation] = pod
        return pod

    def replacement(self, pod: Pod, suffix: str) -> Pod:
        """A new pod like ``pod`` (a controller's replacement for a failed one), created now."""
        new = Pod(len(self.pods), pod.namespace, f"{pod.name}-{suffix}", pod.request,
                  created=self.env.now, run_us=pod.run_us, scheduler_name=pod.scheduler_name,
                  group=pod.group, priority=pod.priority, origin="model")
        self.pods.append(new)
        return new

    def _end_of_run(self, pod: Pod) -> None:
        if pod.deleted < 0:
            self.commit(POD_DELETE, pod, "workload", by_model=False)

    # -- watch --------------------------------------------------------------------------------
    def _filters(self, watchers: list[WatcherSpec]) -> None:
        self.by_resource: dict[str, list[int]] = {}
        self.by_node: dict[tuple[int, str], list[int]] = {}
        node_index = self.truth.node_index
        for i, w in enumerate(watchers):
            for resource in w.resources:
                if w.node is None:
                    self.by_resource.setdefault(resource, []).append(i)
                elif w.node in node_index:
                    self.by_node.setdefault((node_index[w.node], resource), []).append(i)

    def _send(self, write: Write) -> None:
        """Send a committed write to every watcher whose filter matches it."""
        kind = write.kind
        if kind == OTHER:
            resource, node = self._resources[write.row], -1
        elif kind in NODE_KINDS:
            resource, node = "nodes", write.node
        else:
            resource, node = "pods", write.pod.node
        targets = self.by_resource.get(resource, [])
        if node >= 0:
            targets = targets + self.by_node.get((node, resource), [])
        if self.all_piped:  # pipeline watcher i is watcher i
            _, cached, dispatched, deliveries = self.pipeline.step(write.commit, targets)
        else:
            piped = [self.piped_of[t] for t in targets if not self.instant[t]]
            _, cached, dispatched, deliveries = self.pipeline.step(write.commit, piped)
            now = write.commit
            deliveries = [(self.watcher_of_piped[w], *times) for w, *times in deliveries] + [
                (t, now, now, now, now) for t in targets if self.instant[t]]
        log = self._log
        log.cached.append(cached)
        log.dispatched.append(dispatched)
        views, reactions = self.views, self.reactions
        record, rv, at = log.deliveries.extend, write.rv, self.env.at
        for watcher, sent, received, dequeued, applied in deliveries:
            record((rv, watcher, sent, received, dequeued, applied))
            view = views.get(watcher)
            if view is not None:
                view.inbox.append((applied, write))
            reaction = reactions.get(watcher)
            if reaction is not None and kind in reaction[0] and (
                    reaction[1] is None or reaction[1](write)):
                at(applied, self._react, watcher, write)

    def _react(self, watcher: int, write: Write) -> None:
        view = self.views.get(watcher)
        if view is not None:
            view.sync(self.env.now)
        self.reactions[watcher][2](write)

    def _alloc_of(self, write: Write) -> tuple[int, int, int]:
        return tuple(self.truth.nodes[write.node].alloc) if write.kind == NODE_SET else (0, 0, 0)

    # -- running and the tables ---------------------------------------------------------------
    def run(self) -> RunTables:
        w = self.workload
        if len(w.row):
            self.env.at(int(w.ts[0]), self._feed, 0)
        end = int(w.ts[-1]) if len(w.ts) else 0
        with progress(max(end - self.env.now, 1) // 1_000_000, "what-if replay", "s") as bar:
            start, done = self.env.now, [0]

            def tick(now: int) -> None:
                seconds = min(now, end) - start
                bar.update(max(seconds // 1_000_000 - done[0], 0))
                done[0] = max(done[0], seconds // 1_000_000)

            self.env.run(on_step=tick)
        for view in self.views.values():  # deliveries still in flight at the end
            view.sync(self.env.now)
        return RunTables(events=self._events_table(), deliveries=self._log.deliveries_table(
            self.watchers), attempts=self._attempts_table(), pods=self._pods_table(),
            watchers=watchers_table(self.watchers))

    def _events_table(self) -> pl.DataFrame:
        """Writes replayed from the trace keep their recorded columns; the others are described
        from what they are (their kind, pod and node)."""
        log = self._log
        kind = pl.Series(np.frombuffer(log.kind, dtype=np.int8))
        row = np.frombuffer(log.row, dtype=np.int64)
        pod = _index(np.frombuffer(log.pod, dtype=np.int64))
        node = np.frombuffer(log.node, dtype=np.int64)
        names = pl.Series(self.workload.node_names, dtype=pl.String)
        requests = np.array([p.request for p in self.pods], dtype=np.int64).reshape(-1, 3)
        creates = (kind == POD_CREATE).to_numpy()
        places = np.isin(kind.to_numpy(), (POD_BIND, *NODE_KINDS))
        described = pl.DataFrame({
            **{c: kind.replace_strict({k: v[i] for k, v in SHAPE.items()}, return_dtype=pl.String)
               for i, c in enumerate(("verb", "resource", "subresource"))},
            "namespace": pl.Series([p.namespace for p in self.pods], dtype=pl.String).gather(pod),
            "name": pl.Series([p.name for p in self.pods], dtype=pl.String).gather(pod),
            "node": names.gather(_index(np.where(places, node, -1))),
            **{c: pl.Series(requests[:, i]).gather(_index(np.where(creates, pod.fill_null(-1), -1)))
               for i, c in enumerate(("cpu_milli", "memory_bytes", "gpu_milli"))},
            "code": np.frombuffer(log.code, dtype=np.int64).astype(np.int32),
            "component": pl.Series(log.component, dtype=pl.String),
        })
        recorded = self.trace.select(described.columns)[np.maximum(row, 0)]
        from_trace = pl.Series(row >= 0)
        return pl.DataFrame({
            "rv": np.arange(1, len(row) + 1, dtype=np.int64),
            "commit_ts": pl.Series(np.frombuffer(log.commit, dtype=np.int64)).cast(TS),
        }).with_columns(
            *(pl.when(from_trace).then(recorded[c]).otherwise(described[c]).alias(c)
              for c in described.columns),
            origin=pl.when(pl.Series(np.frombuffer(log.origin, dtype=np.int8) == 1))
            .then(pl.lit("model")).otherwise(pl.lit("trace")),
            attempt_id=pl.Series(np.frombuffer(log.attempt, dtype=np.int64)).replace(0, None),
        )

    def _attempts_table(self) -> pl.DataFrame:
        nodes = self.workload.node_names
        a = self.attempts

        return pl.DataFrame({
            "attempt_id": pl.Series([x.id for x in a], dtype=pl.Int64),
            "pod": pl.Series([x.pod.key for x in a], dtype=pl.String),
            "scheduler": pl.Series([x.scheduler for x in a], dtype=pl.String),
            "enqueued_ts": _times([x.enqueued for x in a]),
            "started_ts": _times([x.started for x in a]),
            "decided_ts": _times([x.decided for x in a]),
            "committed_ts": _times([x.committed for x in a]),
            "node": pl.Series([nodes[x.node] if x.node >= 0 else None for x in a], dtype=pl.String),
            "outcome": pl.Series([x.outcome or "pending" for x in a], dtype=pl.String),
            "reason": pl.Series([x.reason for x in a], dtype=pl.String),
            "view_lag_ms": pl.Series([x.view_lag_us / 1000 for x in a], dtype=pl.Float64),
            "forgotten_ts": _times([x.forgotten for x in a]),
        })

    def _pods_table(self) -> pl.DataFrame:
        nodes = self.workload.node_names
        p = self.pods

        requests = np.array([x.request for x in p], dtype=np.int64).reshape(-1, 3)
        return pl.DataFrame({
            "pod": pl.Series([x.key for x in p], dtype=pl.String),
            "created_ts": _times([x.created for x in p]),
            "first_attempt_ts": _times([x.first_attempt for x in p]),
            "bound_ts": _times([x.bound for x in p]),
            "bound_rv": _nullable([x.bound_rv for x in p]),
            "node": pl.Series([nodes[x.node] if x.node >= 0 else None for x in p], dtype=pl.String),
            "deleted_ts": _times([x.deleted for x in p]),
            "deleted_rv": _nullable([x.deleted_rv for x in p]),
            "attempts": pl.Series([x.attempts for x in p], dtype=pl.Int64),
            "cpu_milli": requests[:, 0], "memory_bytes": requests[:, 1],
            "gpu_milli": requests[:, 2],
        })


def _index(values: np.ndarray) -> pl.Series:
    """Indices for ``gather``, -1 meaning none (null)."""
    return pl.Series(values).replace(-1, None)


def _nullable(values: list[int]) -> pl.Series:
    """Integers with -1 meaning none (null)."""
    return pl.Series(values, dtype=pl.Int64).replace(-1, None)


def _times(values: list[int]) -> pl.Series:
    """Microseconds with -1 meaning never (null), as timestamps."""
    return _nullable(values).cast(TS)


class _Log:
    """The events and deliveries of a replay, kept in compact typed arrays until the end."""

    def __init__(self):
        self.rv = 0
        self.commit, self.row, self.pod, self.node = (array("q") for _ in range(4))
        self.code, self.attempt = array("q"), array("q")
        self.kind, self.origin = array("b"), array("b")
        self.component: list[str] = []
        self.cached, self.dispatched = array("q"), array("q")
        # per delivery: rv, watcher, sent, received, dequeued, applied
        self.deliveries = array("q")

    def event(self, write: Write, by_model: bool) -> None:
        self.rv = write.rv
        self.commit.append(write.commit)
        self.row.append(write.row)
        self.pod.append(write.pod.index if write.pod is not None else -1)
        self.node.append(write.node)
        self.code.append(write.code)
        self.attempt.append(write.attempt)
        self.kind.append(write.kind)
        self.origin.append(1 if by_model else 0)
        self.component.append(write.component)

    def deliveries_table(self, watchers: list[WatcherSpec]) -> pa.Table:
        fields = np.frombuffer(self.deliveries, dtype=np.int64).reshape(-1, 6)
        rv = fields[:, 0].copy()
        at = rv - 1
        watcher = pa.array(fields[:, 1].astype(np.int32))
        # each role once in its dictionary: Parquet writes a dictionary with repeated values
        # differently from one process to the next (the same rows, other bytes)
        roles = sorted({w.role for w in watchers})
        role_of = np.array([roles.index(w.role) for w in watchers], dtype=np.int8)
        ts = pa.timestamp("us", tz="UTC")
        per_write = [np.frombuffer(a, dtype=np.int64)[at] for a in (self.commit, self.cached,
                                                                     self.dispatched)]
        own = [fields[:, k].copy() for k in range(2, 6)]
        return pa.table({
            "rv": pa.array(rv),
            "watcher": pa.DictionaryArray.from_arrays(watcher, [w.name for w in watchers]),
            "role": pa.DictionaryArray.from_arrays(pa.array(role_of[fields[:, 1]]), roles),
            **{name: pa.array(v).cast(ts) for name, v in zip(
                ("commit_ts", "cached_ts", "dispatched_ts", "sent_ts", "received_ts",
                 "dequeued_ts", "applied_ts"), per_write + own)},
        })
