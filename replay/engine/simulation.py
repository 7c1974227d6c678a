"""The what-if engine: replays a trace's workload while a model's components make the placements.

It owns time (``core.Environment``), the truth (``cluster.Truth``), the watch pipeline
(``Pipeline.step``, the same definitions the observe model scans with), randomness (named
streams) and the run's tables.  A model plugs in through the public methods of ``Simulation``
(docs/models.md is their reference; ``replay.engine.api`` gathers everything a model imports):
it creates views for its watchers, asks to be told about the writes it reacts to (``react``),
sets timers (``at``, ``after``) and commits writes (``commit``).

Every write commits at the simulation's current time, so commits are in time order and get
resource versions 1, 2, ... in that order.  Each watcher whose filter matches a write is sent it
through the pipeline; the delivery is handed to the watcher's view (applied lazily) and, if the
model reacts to it, a timer is set at its applied time.  A delivery the pipeline holds back (a
watch closed or full, a client queue that may still merge it) is handed over when the pipeline
makes it, at a timer set for the pipeline's next event.
"""

from __future__ import annotations

import contextlib
import gc
from array import array
from collections.abc import Callable, Collection, Iterator
from enum import IntEnum
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from replay import memory
from replay.engine.client import Client
from replay.engine.cluster import (NEVER, NO_NODE, NODE_KINDS, Allocatable, Attempt, Outcome, Pod,
                                   Reason, Truth, Write, WriteKind, object_key)
from replay.engine.config import RunConfig, WatcherSpec
from replay.engine.core import Deadlines, Environment, Item, Timer
from replay.engine.pipeline import LISTED_CODE, SOURCES, Delivery, Pipeline, Source, Watches
from replay.engine.rundir import ROW_GROUP_ROWS, RunTables
from replay.engine.view import Inboxes, View
from replay.engine.watchcache import capacities
from replay.engine.watchers import Streams, watchers_table
from replay.engine.workload import Workload
from replay.progress import progress
from replay.rng import stream
from replay.trace.schema import NO_POD_LIMIT

TS = pl.Datetime("us", "UTC")
# deliveries per part of the deliveries table, made as the run goes (rather than the whole table
# at the end, with the log it comes from: 3 GB at a million pods); the run directory's row group
DELIVERY_PART = ROW_GROUP_ROWS
# The garbage collector's thresholds during a replay.  A young collection scans the objects
# made since the last one that are still alive; CPython's (700, 10, 10) would run one every 700
# objects made (a write, its deliveries, a timer: thousands a second of simulated time), 10-17 %
# of a what-if replay's CPU time.  At (100_000, 50, 100) collections still took 5.3 s of a
# 1M-pod Gödel replay, at these 1.4 s (benchmarks/ROUNDS.md, eighteenth round): collections
# further apart find more of a write's objects already freed.  No shipped model makes garbage
# cycles while it runs, so rarer collections cost nothing in memory; a plugin's cycles are
# still collected, only later.
REPLAY_GC_THRESHOLDS = (1_000_000, 50, 100)
# The kinds the engine tests once or twice per write, and each kind's HTTP status when a model
# writes it, as module globals (quicker than an enum's members and properties)
_CREATE, _BIND, _DELETE, _NODE_DELETE, _OTHER, _FAIL = (
    WriteKind.POD_CREATE, WriteKind.POD_BIND, WriteKind.POD_DELETE, WriteKind.NODE_DELETE,
    WriteKind.OTHER, WriteKind.POD_FAIL)
_STATUS = {kind: 201 if kind.api_call[0] == "create" else 200 for kind in WriteKind}
_MARKS = len(Source)  # a logged delivery's ``mark``: 1 + its source + _MARKS if coalesced
Handler = Callable[[Write], None]
Wants = Callable[[Write], bool]
# What the engine does with a watcher's deliveries: its view (None: it has none), the kinds of
# write it reacts to (None: none), which of them it wants and its handler
_Sink = tuple[View | None, frozenset[WriteKind] | None, Wants | None, Handler | None]
# a piped target's reaction to a kind of write in a ``_Fan``: its place among the fan's watches,
# its handler, and which writes of the kind it wants
_FanSink = tuple[int, Handler, Wants | None]


class Origin(IntEnum):
    """Where an event comes from: the events table's ``origin``."""

    TRACE = 0  # replayed from the trace
    MODEL = 1  # written by the model
    LIST = 2  # an object the trace did not see created, as the first list held it


class _Fan:
    """The watchers whose filter matches writes of one resource on one node: all of them
    (``targets``), the pipeline's ``watches`` of the piped ones, and what ``_hand_over_fanned``
    does with a write the compiled fan-out delivered to every one of those watches."""

    __slots__ = ("targets", "watches", "watchers", "size", "_piped", "sinks", "views",
                 "positions", "applied", "applied_at", "made_for")

    def __init__(self, targets: list[int], piped: list[int], watches: Watches):
        """``piped``: the targets that have a watch (numbered as the run's watchers)."""
        self.targets, self.watches = targets, watches
        # such a write's watchers as the delivery log takes them, and how many
        self.watchers = np.array(piped, dtype=np.int32).tobytes()
        self.size = len(piped)
        self._piped = piped
        # per kind of write, the piped targets that react to it; those with a view (their
        # views' numbers in the views' ``Inboxes``) and their places among the fan's watches
        self.sinks: list[list[_FanSink]] = []
        self.views = self.positions = self.applied = np.zeros(0, dtype=np.int64)
        self.applied_at = self.applied.data  # (``applied`` element by element)
        self.made_for: list[_Sink] | None = None  # the engine's sinks these come from

    def sinks_of(self, sinks: list[_Sink]) -> list[list[_FanSink]]:
        """``sinks``' reactions for the piped targets, by kind of write (and ``views``,
        ``positions``), remade when the engine's have changed."""
        if self.made_for is not sinks:
            self.sinks = [[(j, handler, wants) for j, watcher in enumerate(self._piped)
                           for _, kinds, wants, handler in [sinks[watcher]]
                           if kinds is not None and handler is not None and kind in kinds]
                          for kind in WriteKind]
            viewed = [(view._index, j) for j, watcher in enumerate(self._piped)
                      for view in [sinks[watcher][0]] if view is not None]
            self.views, self.positions = np.array(viewed, dtype=np.int64).reshape(-1, 2).T.copy()
            # the fan-out's applied times (its answer's row, current after each call)
            self.applied = self.watches.times[3]
            self.applied_at = self.applied.data
            self.made_for = sinks
        return self.sinks


class Simulation:
    """One what-if replay.  Its public methods are the model API; the rest is the engine's."""

    def __init__(self, trace: pl.DataFrame, config: RunConfig, watchers: list[WatcherSpec],
                 instant: frozenset[str] = frozenset()):
        """``instant`` names watchers that see every write at its commit, outside the pipeline
        (the oracle's)."""
        self._trace, self._config, self._watchers = trace, config, watchers
        self._workload = Workload.of(trace)
        self._truth = Truth(self._workload.node_names)
        start = self._workload.start
        self._env = Environment(start)
        self._index = {w.name: i for i, w in enumerate(watchers)}
        self._instant = [w.name in instant for w in watchers]
        piped = [i for i, w in enumerate(watchers) if w.name not in instant]
        streams = Streams([watchers[i] for i in piped],
                          ["pods", "nodes", *trace["resource"].unique()])
        self._pipeline: Pipeline[Write] = Pipeline(
            config, [watchers[i] for i in piped], streams.resources, capacities(
                streams.resources, streams.codes(trace["resource"]),
                trace["ts"].dt.epoch("us").to_numpy()))
        self._identify_objects(trace)
        self._wakeup: Timer | None = None
        self._piped_index = {i: k for k, i in enumerate(piped)}
        self._watcher_of_piped = piped
        self._all_piped = len(piped) == len(watchers)
        self._filters(watchers)
        self._views: dict[int, View] = {}
        self._inboxes = Inboxes()  # the views' deliveries not yet applied
        self._reactions: dict[int, tuple[frozenset[WriteKind], Wants | None, Handler]] = {}
        self._sinks: list[_Sink] | None = None
        # per resource (its code) and node (NO_NODE first), the fan of its writes, once made
        self._fans: list[list[_Fan | None]] = [[None] * (len(self._truth.nodes) + 1)
                                               for _ in self._pipeline.streams.resources]
        # per node, the fan of the writes of a pod in a terminal phase (``Pod.ended``)
        self._ended_fans: list[_Fan | None] = [None] * (len(self._truth.nodes) + 1)
        self._pods: list[Pod] = []
        # the incarnations the workload deletes at their recorded time, created and not yet
        # deleted by it (the workload's delete is the only lookup)
        self._pod_of_incarnation: dict[int, Pod] = {}
        w = self._workload
        self._deleted_by_workload = np.zeros(len(w.name), dtype=bool)
        self._deleted_by_workload[w.pod[(w.kind == WriteKind.POD_DELETE) & (w.pod >= 0)]] = True
        # Incarnations created again under a name whose previous incarnation still exists here
        # (it started later than recorded, so it ends later): each waits for the name, in order;
        # ``_named`` holds each name's incarnation that exists
        self._named: dict[str, Pod] = {}
        self._waiting_for_name: dict[str, list[tuple[int, int]]] = {}
        self._attempts: list[Attempt] = []
        self._placed_members: dict[str, int] = {}  # per gang: members bound or deleted
        self._listeners: list[Handler] = []
        self._resources = trace["resource"].to_numpy()
        self._log = _Log(watchers, self._instant)

    # -- time -----------------------------------------------------------------------------------
    @property
    def now(self) -> int:
        """The simulated time, µs since the epoch."""
        return self._env.now

    def at(self, time: int, callback: Callable[..., Any], *args: Any) -> Timer:
        """Run ``callback(*args)`` at ``time`` (not before now); ``cancel()`` the timer to stop it."""
        return self._env.at(time, callback, *args)

    def after(self, delay: int, callback: Callable[..., Any], *args: Any) -> Timer:
        """Run ``callback(*args)`` ``delay`` µs from now; ``cancel()`` the timer to stop it."""
        return self._env.at(self._env.now + delay, callback, *args)

    def deadlines(self, delay: int, fire: Callable[[Item], Any]) -> Deadlines[Item]:
        """Items that each fall due ``delay`` µs after they are ``add``ed, unless ``discard``ed
        before: ``fire(item)`` then (a time to live: no timer per item)."""
        return Deadlines(self._env, delay, fire)

    def call_at(self, time: int, callback: Callable[..., Any], *args: Any) -> None:
        """``at`` for a timer never cancelled: no ``Timer`` is made (the shared scheduler, a
        worker and a client set several a pod, millions in a large replay)."""
        self._env.call_at(time, callback, *args)

    def call_after(self, delay: int, callback: Callable[..., Any], *args: Any) -> None:
        """``after`` for a timer never cancelled (see ``call_at``)."""
        self._env.call_at(self._env.now + delay, callback, *args)

    def random(self, name: str) -> np.random.Generator:
        """A generator of the model's own, named, derived from the run's seed."""
        return stream(self._config.seed, "model", name)

    # -- watchers -------------------------------------------------------------------------------
    def view(self, watcher: str) -> View:
        """The cache of ``watcher`` (made on first use): only watchers with a view keep one.  A
        scheduler's cache counts pods assumed by Gödel schedulers (their assume patches); the
        others (Gödel's binder, a kubelet) count only bound pods."""
        index = self._index[watcher]
        if index not in self._views:
            self._views[index] = View(len(self._truth.nodes), self._clock,
                                      counts_assumed=self._watchers[index].role == "scheduler",
                                      inboxes=self._inboxes)
            self._sinks = None
        return self._views[index]

    def react(self, watcher: str, kinds: Collection[WriteKind], handler: Handler,
              wants: Wants | None = None) -> None:
        """Call ``handler(write)`` when ``watcher`` has applied a write of one of ``kinds`` (and,
        with ``wants``, for which ``wants(write)``, asked when the write commits); its view has
        applied every delivery due by then.  (The handler set when the write commits is the one
        called: its timer calls it directly.)"""
        self._reactions[self._index[watcher]] = (frozenset(kinds), wants, handler)
        self._sinks = None

    def on_commit(self, listener: Handler) -> None:
        """Call ``listener(write)`` as each write commits, after the truth has applied it (for
        what the API server itself does on a write, such as assigning a pod to a scheduler)."""
        self._listeners.append(listener)

    def client(self, qps: float, burst: int, latency_us: int) -> Client:
        """A component's API client: its writes wait for a token bucket of ``qps`` and ``burst``
        (client-go's rate limiter; ``qps`` <= 0: no limit), then take ``latency_us`` to commit."""
        return Client(self._env, qps, burst, latency_us)

    def kubelets(self) -> list[tuple[str, int]]:
        """(watcher name, node index) of every kubelet watcher bound to a node of the trace."""
        index = self._truth.node_index
        return [(w.name, index[w.node]) for w in self._watchers
                if w.role == "kubelet" and w.node is not None and w.node in index]

    def message(self, watcher: str, callback: Callable[..., Any], *args: Any) -> Timer:
        """Send ``watcher`` a message straight from a peer (no API server, no watch): it arrives
        after one network hop, drawn like ``watcher``'s network stage from a stream of its own."""
        index = self._index[watcher]
        delay = 0 if self._instant[index] else self._pipeline.hop(self._piped_index[index])
        return self.after(delay, callback, *args)

    # -- the cluster ----------------------------------------------------------------------------
    @property
    def node_count(self) -> int:
        return len(self._truth.nodes)

    def allocatable(self, node: int) -> Allocatable:
        """The node's allocatable (cpu_milli, memory_bytes, gpu_milli, pods) in the truth now."""
        a = self._truth.nodes[node].alloc
        return a[0], a[1], a[2], a[3]

    def node_version(self, node: int) -> int | None:
        """The node's change count in the truth (Omega's sequence number); None if the node
        does not exist now."""
        truth = self._truth.nodes[node]
        return truth.changes if truth.present else None

    def fits(self, placements: list[tuple[Pod, int]]) -> bool:
        """Whether the truth has room now for all these (pod, node) placements at once."""
        return self._truth.fits(placements)

    def gang_size(self, group: str) -> int:
        """How many pods of the workload belong to gang ``group``."""
        return self._workload.group_size.get(group, 1)

    def gang_unplaced(self, group: str) -> int:
        """How many pods of gang ``group`` are still to be placed: its size less the members
        bound or deleted so far (a gang partly placed waits only for the rest)."""
        return self.gang_size(group) - self._placed_members.get(group, 0)

    def scheduler_names(self) -> list[str]:
        """The distinct ``spec.schedulerName`` values of the workload's pods, sorted."""
        return sorted({n for n in self._workload.scheduler_name if n is not None})

    def workload_notes(self) -> list[str]:
        """What the workload set aside from the trace that bears on the numbers, one sentence
        each (pods that existed before the trace began)."""
        return list(self._workload.notes)

    # -- writes and attempts --------------------------------------------------------------------
    def commit(self, kind: WriteKind, pod: Pod | None, component: str, node: int = NO_NODE,
               attempt: Attempt | None = None) -> Write:
        """Commit a write now: apply it to the truth, log it and send it to its watchers.

        The attempt's ``committed`` time is its first write's (a Gödel scheduler's assume patch,
        not the binder's binding that follows it)."""
        return self._commit(kind, pod, component, node, attempt)

    def assign(self, pod: Pod, instance: int) -> None:
        """Record that ``pod`` is assigned to scheduler instance ``instance`` (``pod.instance``:
        its spec.schedulerName, or Gödel's dispatcher annotation)."""
        pod.instance = instance

    def replacement(self, pod: Pod, suffix: str) -> Pod:
        """A new pod like ``pod`` (a controller's replacement for a failed one), to be created
        with ``commit(WriteKind.POD_CREATE, ...)``."""
        new = Pod(len(self._pods), pod.namespace, f"{pod.name}-{suffix}", pod.request,
                  created=self.now, run_us=pod.run_us, scheduler_name=pod.scheduler_name,
                  group=pod.group, priority=pod.priority)
        self._pods.append(new)
        return new

    def new_attempt(self, pod: Pod, scheduler: str, enqueued: int, node: int, view_lag_us: int,
                    seen_version: int = 0, cycle: Attempt | None = None) -> Attempt:
        """A scheduling attempt of ``pod`` by ``scheduler`` starting now, choosing ``node``
        (NO_NODE: none fits) on a view ``view_lag_us`` behind; ``seen_version`` is the node's
        sequence number in that view; ``cycle`` the first attempt of the scheduling cycle it
        belongs to (a gang's members are decided in one), None if it is the first."""
        now = self.now
        pod.attempts += 1
        if pod.first_attempt < 0:
            pod.first_attempt = now
        number = len(self._attempts) + 1
        attempt = Attempt(number, pod, scheduler, enqueued, now, node, view_lag_us, seen_version,
                          cycle.id if cycle is not None else number)
        self._attempts.append(attempt)
        return attempt

    def attempt(self, attempt_id: int) -> Attempt:
        """The attempt with this id (a write's ``attempt``)."""
        return self._attempts[attempt_id - 1]

    def mark_decided(self, attempt: Attempt) -> None:
        """The scheduler has decided ``attempt`` now."""
        attempt.decided = self.now

    def mark_forgotten(self, attempt: Attempt, at: int) -> None:
        """The scheduler dropped its assumption of ``attempt`` at ``at`` (ForgetPod)."""
        attempt.forgotten = at

    def settle(self, attempt: Attempt, outcome: Outcome, reason: Reason | None = None) -> None:
        """``attempt`` ended with ``outcome``; one that ends without a committed write ends now
        (its ``committed`` time)."""
        attempt.outcome, attempt.reason = outcome, reason
        if attempt.committed == NEVER and outcome != Outcome.BOUND:
            attempt.committed = self.now
        if (outcome in (Outcome.UNSCHEDULABLE, Outcome.ERROR) and attempt.node >= 0
                and attempt.forgotten == NEVER and not self._assumed_by(attempt)):
            # a placement that failed before its scheduler assumed it (a gang member left
            # unplaced, its pod deleted during the decision) was never held: it is forgotten at
            # its decision, or the capacity windows would hold it until the end of the run
            attempt.forgotten = attempt.decided if attempt.decided != NEVER else self.now

    def _assumed_by(self, attempt: Attempt) -> bool:
        """Whether the view of ``attempt``'s scheduler holds its pod as assumed."""
        view = self._views.get(self._index.get(attempt.scheduler, -1))
        return view is not None and view.assumes(attempt.pod)

    # -- the engine: committing, feeding the workload -------------------------------------------
    def _commit(self, kind: WriteKind, pod: Pod | None, component: str, node: int = NO_NODE,
                attempt: Attempt | None = None, row: int = -1, code: int = 0,
                alloc: Allocatable | None = None, by_model: bool = True) -> Write:
        now = self._env.now
        rv = self._log.rv + 1
        code = code or _STATUS[kind]
        write = Write(rv, now, kind, pod, node, component, attempt.id if attempt else 0, row, code,
                      alloc)
        self._truth.apply(write)
        places = kind == _BIND or (kind == _CREATE and node >= 0)  # (a mirror pod's create)
        if pod is not None and pod.group is not None and (
                places or (kind == _DELETE and pod.node < 0)):
            self._member_placed(pod.group)
        for listener in self._listeners:
            listener(write)
        self._log.event(write, Origin.MODEL if by_model else Origin.TRACE)
        if attempt is not None and attempt.committed < 0:
            attempt.committed = now
        if places and pod is not None and pod.run_us != NEVER:
            self._env.call_at(now + pod.run_us, self._end_of_run, pod)
        self._send(write)
        if kind == _DELETE and pod is not None:
            self._name_freed(pod)
        elif kind == _FAIL and pod is not None:
            pod.ended = True
        return write

    def _member_placed(self, group: str) -> None:
        """A member of gang ``group`` is placed, or deleted unplaced (``gang_unplaced``)."""
        self._placed_members[group] = self._placed_members.get(group, 0) + 1

    def _name_freed(self, pod: Pod) -> None:
        """``pod`` is deleted: its name is free for the next incarnation waiting for it, and the
        engine forgets what it kept to find the pod by its name or its object."""
        key = pod.key
        if self._named.get(key) is pod:
            del self._named[key]
        waiting = self._waiting_for_name.get(key)
        if waiting:
            self._env.call_at(self._env.now, self._create, *waiting.pop(0), True)
            if not waiting:
                del self._waiting_for_name[key]

    def _feed(self, i: int) -> None:
        """Commit workload write ``i`` and schedule the next one at its recorded time."""
        w = self._workload  # (``item`` gives a Python int without a numpy scalar in between)
        kind, row = w.kind.item(i), w.row.item(i)
        if kind == WriteKind.POD_CREATE:
            self._create(w.pod.item(i), row)
        elif kind == WriteKind.POD_DELETE:
            pod = self._pod_of_incarnation.pop(w.pod.item(i), None)
            if pod is not None and pod.deleted < 0:
                self._commit(WriteKind.POD_DELETE, pod, "workload", row=row, by_model=False)
            elif pod is None:  # deleted before its name was free: it never exists here
                for waiting in self._waiting_for_name.values():
                    waiting[:] = [(k, r) for k, r in waiting if k != w.pod.item(i)]
        else:
            alloc: Allocatable | None = None
            if kind == WriteKind.NODE_SET:
                cpu, memory_bytes, gpu, pods = w.alloc[i].tolist()
                alloc = (cpu, memory_bytes, gpu, pods)
            self._commit(WriteKind(kind), None, "workload", node=w.node.item(i), row=row,
                         alloc=alloc, by_model=False)
        if i + 1 < len(w.row):
            self._env.call_at(w.ts.item(i + 1), self._feed, i + 1)

    def _create(self, incarnation: int, row: int, waited: bool = False) -> None:
        """Create a pod of the workload now, or once the previous incarnation of its name is
        deleted: a name exists once in etcd, and a StatefulSet controller creates a pod again
        only after its predecessor is gone."""
        w = self._workload
        key = object_key(w.namespace[incarnation], w.name[incarnation])
        previous = self._named.get(key)
        if (previous is not None and previous.deleted < 0) or (
                not waited and self._waiting_for_name.get(key)):
            self._waiting_for_name.setdefault(key, []).append((incarnation, row))
            return
        self._named[key] = self._new_pod(incarnation, self.now)
        self._commit(WriteKind.POD_CREATE, self._named[key], "workload",
                     node=w.created_on.item(incarnation), row=row, by_model=False)

    def _new_pod(self, incarnation: int, created: int) -> Pod:
        """Pod ``incarnation`` of the workload, made now (``created``: NEVER for a listed pod,
        which the trace did not see created)."""
        w = self._workload
        pod = Pod(len(self._pods), w.namespace[incarnation], w.name[incarnation],
                  w.request[incarnation], created=created, run_us=w.run_us.item(incarnation),
                  scheduler_name=w.scheduler_name[incarnation],
                  group=w.group[incarnation], priority=w.priority.item(incarnation))
        self._pods.append(pod)
        if self._deleted_by_workload[incarnation]:
            self._pod_of_incarnation[incarnation] = pod
        return pod

    def _end_of_run(self, pod: Pod) -> None:
        if pod.deleted < 0:
            self._commit(WriteKind.POD_DELETE, pod, "workload", by_model=False)

    def _list(self) -> None:
        """The objects the trace did not see created, in every cache at its first write and
        before it, as an informer's first list leaves them (observe's ``InitialList``): the
        listed nodes (``Workload.listed_node``), then the listed pods (``listed_pod``), each a
        create of origin ``list`` (rvs 1, 2, ...) delivered to every watcher of it at its commit,
        every stage at once (source ``LIST``), and in their watches' stores, so that a re-list
        lists it.  A pod listed on its node is created bound there: it holds the node, each
        cache counts it and its kubelet runs it, until it ended in the recording; a pod listed
        pending is the model's to schedule, as any pod it is sent the create of."""
        w, now = self._workload, self._env.now
        for node, alloc in zip(w.listed_node.tolist(), w.listed_alloc.tolist()):
            cpu, memory, gpu, pods = alloc
            self._listed(Write(0, now, WriteKind.NODE_SET, None, node, "", 0, -1, LISTED_CODE,
                               (cpu, memory, gpu, pods)), "nodes", self._nodes_code, node)
        for incarnation in w.listed_pod.tolist():
            node = w.created_on.item(incarnation)
            pod = self._new_pod(incarnation, NEVER)
            self._named[pod.key] = pod
            self._listed(Write(0, now, WriteKind.POD_CREATE, pod, node, "", 0, -1, LISTED_CODE),
                         "pods", self._pods_code, self._queue_key(pod))
            if node >= 0 and pod.run_us != NEVER:
                self._env.call_at(now + pod.run_us, self._end_of_run, pod)

    def _listed(self, write: Write, resource: str, code: int, key: int) -> None:
        """Commit ``write``, of an object of ``resource`` (its ``code``) and client-queue
        ``key`` in the first list (``_list``), and deliver it."""
        now, node, pod = write.commit, write.node, write.pod
        fans = self._fans[code]
        fan = fans[node + 1]
        if fan is None:
            fan = fans[node + 1] = self._targets_of(resource, node, code)
        write.rv = self._pipeline.listed(now, fan.watches, code, key)
        self._truth.apply(write)
        if pod is not None and pod.group is not None and node >= 0:
            self._member_placed(pod.group)
        for listener in self._listeners:
            listener(write)
        self._log.event(write, Origin.LIST)
        self._log.cached.append(now)
        self._log.dispatched.append(now)
        self._hand_over([(t, write.rv, write, now, now, now, now, Source.LIST, False)
                         for t in fan.targets], write.rv, piped=False)

    # -- watch --------------------------------------------------------------------------------
    def _filters(self, watchers: list[WatcherSpec]) -> None:
        self._by_resource: dict[str, list[int]] = {}
        self._by_node: dict[tuple[int, str], list[int]] = {}
        node_index = self._truth.node_index
        for i, w in enumerate(watchers):
            for resource in w.resources:
                if w.node is None:
                    self._by_resource.setdefault(resource, []).append(i)
                elif w.node in node_index:
                    self._by_node.setdefault((node_index[w.node], resource), []).append(i)

    def _identify_objects(self, trace: pl.DataFrame) -> None:
        """What the pipeline needs to know of each write besides its watchers: its resource and
        object (a client queue's key), and whether it deletes the object."""
        code = self._pipeline.resource_code
        self._pods_code, self._nodes_code = code("pods"), code("nodes")
        self._row_code = self._pipeline.streams.codes(trace["resource"])
        self._row_deletes = trace.select((pl.col("verb") == "delete")
                                         & pl.col("subresource").is_null()).to_series() \
            .fill_null(False).to_numpy()
        self._row_names = trace.select(pl.concat_str(pl.col("namespace").fill_null(""), "name",
                                                     separator="/")).to_series()
        self._object_ids: dict[str, int] = {}  # by namespace/name: incarnations share their key

    def _object(self, name: str) -> int:
        ids = self._object_ids
        found = ids.get(name)
        if found is None:
            found = ids[name] = len(ids)
        return found

    def _queue_key(self, pod: Pod) -> int:
        """``pod.queue_key``, numbered at its first write."""
        pod.queue_key = self._object(pod.key)
        return pod.queue_key

    def _send(self, write: Write) -> None:
        """Send a committed write to every watcher whose filter matches it: of a pod in a
        terminal phase (``Pod.ended``), not to the watches of non-terminal pods."""
        kind = write.kind
        if kind == _OTHER:
            row = write.row
            resource, node = str(self._resources[row]), NO_NODE
            code, deleted = int(self._row_code[row]), bool(self._row_deletes[row])
            key = self._object(self._row_names[row] or "")
            fans = self._fans[code]
        elif kind in NODE_KINDS:
            resource, node, code = "nodes", write.node, self._nodes_code
            key, deleted = write.node, kind == _NODE_DELETE
            fans = self._fans[code]
        else:
            pod = write.pod
            assert pod is not None
            resource, node, code = "pods", pod.node, self._pods_code
            key, deleted = pod.queue_key, kind == _DELETE
            if key < 0:
                key = self._queue_key(pod)
            fans = self._ended_fans if pod.ended else self._fans[code]
        found = fans[node + 1]
        if found is None:
            found = fans[node + 1] = self._targets_of(resource, node, code,
                                                      fans is self._ended_fans)
        pipeline = self._pipeline
        _, cached, dispatched, deliveries, fanned = pipeline.step_fanned(
            write.commit, found.watches, code, key, deleted, write, kind == _FAIL)
        log = self._log
        log.cached.append(cached)
        log.dispatched.append(dispatched)
        # (a write the compiled fan-out delivered to every watch left none pending; most writes
        # bring no earlier write's deliveries: two calls a write that did nothing, saved)
        if not fanned and pipeline.pending:
            of = self._watcher_of_piped
            for w in pipeline.pending:
                view = self._views.get(of[w])
                if view is not None:
                    view._expect(write)
        if deliveries:
            self._hand_over(deliveries, write.rv)
        if fanned:
            self._hand_over_fanned(found, write)
        if not self._all_piped:
            now = write.commit
            self._hand_over([(t, write.rv, write, now, now, now, now, Source.WATCH, False)
                             for t in found.targets if self._instant[t]], write.rv, piped=False)
        if pipeline.next_wakeup is not None:
            self._arm()

    def _targets_of(self, resource: str, node: int, code: int, ended: bool = False) -> _Fan:
        """The watchers whose filter matches a write of ``resource`` on ``node`` (``ended``: of
        a pod in a terminal phase), and the pipeline's watches of them (the instant watchers
        have none)."""
        targets = self._by_resource.get(resource, [])
        if node >= 0:
            targets = targets + self._by_node.get((node, resource), [])
        if ended:
            targets = [t for t in targets if self._watchers[t].sees_terminal_pods]
        piped = [t for t in targets if not self._instant[t]]
        return _Fan(targets, piped, self._pipeline.watches(
            code, [self._piped_index[t] for t in piped]))

    def _hand_over(self, deliveries: list[Delivery], current: int, piped: bool = True) -> None:
        """Log each delivery, hand it to its watcher's view and set its reaction; a delivery of
        a write other than ``current`` was held back by the pipeline and expected by the view."""
        if not deliveries:
            return
        call_at = self._env.call_at
        sinks = self._sinks if self._sinks is not None else self._make_sinks()
        if piped and not self._all_piped:  # from the pipeline's numbering to the watchers'
            of = self._watcher_of_piped
            deliveries = [(of[d[0]], *d[1:]) for d in deliveries]
        self._log.delivered(deliveries)
        for watcher, rv, write, _, _, _, applied, _, _ in deliveries:
            view, kinds, wants, handler = sinks[watcher]
            if view is not None:
                view._deliver(applied, write, rv != current)
            if (kinds is not None and write.kind in kinds and handler is not None
                    and (wants is None or wants(write))):
                call_at(applied, handler, write)

    def _hand_over_fanned(self, fan: _Fan, write: Write) -> None:
        """``_hand_over`` of ``write``'s deliveries to every watch of ``fan``, made by the
        compiled fan-out: logged from its arrays as they are, handed to the views in one
        call and to the reactions with no tuple per delivery."""
        sinks = self._sinks if self._sinks is not None else self._make_sinks()
        # (``sinks_of``'s own check, inlined: the call alone cost more than the check per write)
        reactions = fan.sinks if fan.made_for is sinks else fan.sinks_of(sinks)
        self._log.fanned(fan.watches.block, fan.watchers, fan.size)
        if len(fan.views):
            self._inboxes.push(fan.views, fan.positions, fan.applied, write)
        call_at, applied = self._env.call_at, fan.applied_at
        for j, handler, wants in reactions[write.kind]:
            if wants is None or wants(write):
                call_at(applied[j], handler, write)

    def _make_sinks(self) -> list[_Sink]:
        """Per watcher, what ``_hand_over`` does with its deliveries: its view (None: no
        view), the kinds it reacts to (None: none), its ``wants`` and handler.  Made again after
        ``view`` or ``react`` changed them."""
        sinks: list[_Sink] = []
        for index in range(len(self._watchers)):
            kinds, wants, handler = self._reactions.get(index, (None, None, None))
            sinks.append((self._views.get(index), kinds, wants, handler))
        self._sinks = sinks
        return sinks

    def _arm(self) -> None:
        """A timer at the pipeline's next event (a watch's recovery, a held delivery, a client
        queue's pop), unless one is set already by then."""
        due = self._pipeline.next_wakeup
        if due is None:
            return
        timer = self._wakeup
        if timer is not None and timer.pending and timer.time <= due:
            return
        if timer is not None:
            timer.cancel()
        self._wakeup = self._env.at(max(due, self._env.now), self._advance_pipeline)

    def _advance_pipeline(self) -> None:
        self._wakeup = None
        self._hand_over(self._pipeline.advance(self._env.now), 0)
        self._arm()

    def _clock(self) -> int:
        return self._env.now

    # -- running and the tables ---------------------------------------------------------------
    def replay(self) -> RunTables:
        """Run the workload to its end (and every timer it set), then build the tables."""
        tables: dict[str, list[pa.Table | pl.DataFrame]] = {}
        for name, table in self.tables():
            tables.setdefault(name, []).append(table)
        return RunTables(**{name: _concatenated(parts) for name, parts in tables.items()})

    def close(self) -> None:
        """Drop everything the run holds, once its tables have been taken; nothing may use the
        simulation after.

        A spent run is millions of objects (pods, attempts, timers, the views' state) that refer
        to each other through the simulation.  Left to the garbage collector, which must
        traverse them all to free them, they cost a 300k-pod Gödel run 2.1 s before its
        derivation could have their memory; dropped here, most go by reference counting."""
        self._pipeline.close()
        vars(self).clear()

    def tables(self) -> Iterator[tuple[str, pa.Table | pl.DataFrame]]:
        """Run the workload to its end (and every timer it set), giving the run's tables as
        (name, table): the deliveries in parts of DELIVERY_PART rows while the run goes on (the
        run directory's row groups), the others once it has ended.

        Once the loop has ended, the pages glibc's malloc holds free go back to the system
        (``replay.memory``): what the loop freed (each part's temporaries, the timers and
        lookups of pods gone) lies in holes between its live objects, which the replay's malloc
        settings never trim, and the tables made next from its records are the run's peak
        (150 MiB of free holes in a 100k-pod Gödel run of 980 MiB).  Once only: given back every
        few seconds as the parts passed, those pages were faulted in again within seconds; in a
        1M-pod Gödel run that was 1.4M page faults more, 7-9 s of system time, and its replay
        took 10 s longer (benchmarks/ROUNDS.md, the twenty-fifth round)."""
        with _fewer_collections():
            yield from self._tables()

    def _tables(self) -> Iterator[tuple[str, pa.Table | pl.DataFrame]]:
        w, log = self._workload, self._log
        self._list()
        if len(w.row):
            self._env.call_at(int(w.ts[0]), self._feed, 0)
        end = int(w.ts[-1]) if len(w.ts) else 0
        with progress(max(end - self._env.now, 1) // 1_000_000, "what-if replay", "s") as bar:
            start, done = self._env.now, [0]

            def tick(now: int) -> bool:
                seconds = min(now, end) - start
                bar.update(max(seconds // 1_000_000 - done[0], 0))
                done[0] = max(done[0], seconds // 1_000_000)
                return bool(log.parts)  # pause, to hand the parts on

            while self._env.run(on_step=tick):
                yield from log.take_parts()
        self._hand_over(self._pipeline.finish(), 0)  # (the timers leave nothing: for safety)
        for view in self._views.values():  # deliveries still in flight at the end
            view._catch_up()
        log.end()
        yield from log.take_parts()
        memory.give_back()  # (``tables``: the loop's holes, before the run's peak)
        for events in self._events_tables():
            yield "events", events
        yield "attempts", self._attempts_table()
        yield "pods", self._pods_table()
        yield "watchers", watchers_table(self._watchers)
        yield from self._pipeline.incidents().items()

    def _events_tables(self) -> Iterator[pl.DataFrame]:
        """The events table in parts of ROW_GROUP_ROWS rows (the run directory's row groups:
        each part's columns, strings gathered from the pods and the trace, cost hundreds of
        bytes a row while it is made).  Writes replayed from the trace keep their recorded
        columns, but for a pod create's node: the node it was created on here (a mirror pod's,
        unless the model has no such node and schedules it); the others are described from
        what they are (their kind, pod and node)."""
        log = self._log
        pods = {"namespace": pl.Series([p.namespace for p in self._pods], dtype=pl.String),
                "name": pl.Series([p.name for p in self._pods], dtype=pl.String)}
        requests = np.array([p.request for p in self._pods], dtype=np.int64).reshape(-1, 3)
        nodes = pl.Series(self._workload.node_names, dtype=pl.String)
        rows = len(log.kind)
        for start in range(0, max(rows, 1), ROW_GROUP_ROWS):
            yield self._events_part(slice(start, min(start + ROW_GROUP_ROWS, rows)), pods,
                                    requests, nodes)

    def _events_part(self, part: slice, pods: dict[str, pl.Series], requests: np.ndarray,
                     nodes: pl.Series) -> pl.DataFrame:
        log = self._log
        kind = pl.Series(np.frombuffer(log.kind, dtype=np.int8)[part])
        row = np.frombuffer(log.row, dtype=np.int64)[part]
        from_trace, recorded = pl.Series(row >= 0), np.maximum(row, 0)
        recorded_node = from_trace & (kind != WriteKind.POD_CREATE)
        return pl.DataFrame({
            "rv": np.arange(part.start + 1, part.stop + 1, dtype=np.int64),
            "commit_ts": pl.Series(np.frombuffer(log.commit, dtype=np.int64)[part]).cast(TS),
            # one column at a time: its recorded and described values, then the one it keeps
            **{c: pl.select(pl.when(recorded_node if c == "node" else from_trace)
                            .then(self._trace[c].gather(recorded))
                            .otherwise(described).alias(c)).to_series()
               for c, described in self._described(part, kind, pods, requests, nodes)},
            "origin": pl.Series(np.frombuffer(log.origin, dtype=np.int8)[part]).replace_strict(
                {o.value: o.name.lower() for o in Origin}, return_dtype=pl.String),
            "attempt_id": pl.Series(np.frombuffer(log.attempt, dtype=np.int64)[part])
            .replace(0, None),
            "pod_state": kind.replace_strict({k.value: k.pod_state for k in WriteKind},
                                             return_dtype=pl.String),
        })

    def _described(self, part: slice, kind: pl.Series, pods: dict[str, pl.Series],
                   requests: np.ndarray, nodes: pl.Series) -> Iterator[tuple[str, pl.Series]]:
        """The events' columns as a model's write describes them (from its kind, pod and node),
        one at a time, each made when it is asked for: a part's columns cost hundreds of bytes
        a row while they all exist at once."""
        log = self._log
        pod = _index(np.frombuffer(log.pod, dtype=np.int64)[part])
        node = np.frombuffer(log.node, dtype=np.int64)[part]
        for i, c in enumerate(("verb", "resource", "subresource")):
            yield c, kind.replace_strict({k.value: k.api_call[i] for k in WriteKind},
                                         return_dtype=pl.String)
        # the listed nodes' creates: the first events (``_list``)
        listed = np.arange(part.start, min(part.stop, len(self._workload.listed_node)))
        yield "namespace", pods["namespace"].gather(pod)
        yield "name", _listed_first(pods["name"].gather(pod), nodes.gather(node[:len(listed)]))
        # (a create's node: a pod listed on its node; the others' is NO_NODE)
        places = np.isin(kind.to_numpy(), [WriteKind.POD_CREATE, WriteKind.POD_BIND,
                                           WriteKind.POD_ASSUME, *NODE_KINDS])
        yield "node", nodes.gather(_index(np.where(places, node, -1)))
        creates = (kind == WriteKind.POD_CREATE).to_numpy()
        created = _index(np.where(creates, pod.fill_null(-1), -1))
        allocatable = self._workload.listed_alloc[listed]
        for i, c in enumerate(("cpu_milli", "memory_bytes", "gpu_milli")):
            yield c, _listed_first(pl.Series(requests[:, i]).gather(created),
                                   pl.Series(allocatable[:, i]))
        yield "code", pl.Series(np.frombuffer(log.code, dtype=np.int64)[part].astype(np.int32))
        yield "component", pl.Series(log.component[part], dtype=pl.String)
        limits = pl.Series(allocatable[:, 3]).replace(NO_POD_LIMIT, None)  # (none said: null)
        yield "max_pods", _listed_first(pl.repeat(None, len(kind), dtype=pl.Int64, eager=True),
                                        limits)

    def _attempts_table(self) -> pl.DataFrame:
        nodes = self._workload.node_names
        a = self._attempts

        return pl.DataFrame({
            "attempt_id": pl.Series([x.id for x in a], dtype=pl.Int64),
            "pod": pl.Series([x.pod.key for x in a], dtype=pl.String),
            "scheduler": pl.Series([x.scheduler for x in a], dtype=pl.String),
            "enqueued_ts": _times([x.enqueued for x in a]),
            "started_ts": _times([x.started for x in a]),
            "decided_ts": _times([x.decided for x in a]),
            "committed_ts": _times([x.committed for x in a]),
            "node": pl.Series([nodes[x.node] if x.node >= 0 else None for x in a], dtype=pl.String),
            "outcome": pl.Series([x.outcome.value if x.outcome else "pending" for x in a],
                                 dtype=pl.String),
            "reason": pl.Series([x.reason.value if x.reason else None for x in a],
                                dtype=pl.String),
            "view_lag_ms": pl.Series([x.view_lag_us / 1000 for x in a], dtype=pl.Float64),
            "forgotten_ts": _times([x.forgotten for x in a]),
            "cycle_id": pl.Series([x.cycle for x in a], dtype=pl.Int64),
            "throttled_ms": pl.Series([x.throttled_us / 1000 for x in a], dtype=pl.Float64),
        })

    def _pods_table(self) -> pl.DataFrame:
        nodes = self._workload.node_names
        p = self._pods

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


@contextlib.contextmanager
def _fewer_collections() -> Iterator[None]:
    """The garbage collector at REPLAY_GC_THRESHOLDS, then as it was."""
    before = gc.get_threshold()
    gc.set_threshold(*REPLAY_GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def _concatenated(parts: list[pa.Table | pl.DataFrame]) -> pa.Table | pl.DataFrame:
    """One table of the parts of a table (all Arrow, or all polars)."""
    if len(parts) == 1:
        return parts[0]
    if all(isinstance(part, pa.Table) for part in parts):
        return pa.concat_tables(parts)
    return pl.concat(parts)


def _index(values: np.ndarray) -> pl.Series:
    """Indices for ``gather``, -1 meaning none (null)."""
    return pl.Series(values).replace(-1, None)


def _listed_first(column: pl.Series, listed: pl.Series) -> pl.Series:
    """``column`` with its first rows, the listed objects', set to ``listed``."""
    if not len(listed):
        return column
    return pl.concat([listed.cast(column.dtype), column.slice(len(listed))])


def _nullable(values: list[int]) -> pl.Series:
    """Integers with -1 meaning none (null)."""
    return pl.Series(values, dtype=pl.Int64).replace(-1, None)


def _times(values: list[int]) -> pl.Series:
    """Microseconds with -1 meaning never (null), as timestamps."""
    return _nullable(values).cast(TS)


class _Log:
    """The events of a replay, kept in compact typed arrays until the end, and its deliveries,
    turned into the deliveries table DELIVERY_PART rows at a time as the run goes."""

    def __init__(self, watchers: list[WatcherSpec], instant: list[bool]) -> None:
        """``instant`` watchers skip the pipeline: each of their stage times is the commit."""
        self.rv = 0
        self.commit, self.row, self.pod, self.node = (array("q") for _ in range(4))
        self.code, self.attempt = array("q"), array("q")
        self.kind, self.origin = array("b"), array("b")
        self.component: list[str | None] = []  # (None: a listed object's, which none wrote)
        self.cached, self.dispatched = array("q"), array("q")
        # the deliveries logged and not yet in a part, a block per call: a write's deliveries to
        # each of its k targets as six rows of k ``int64`` (sent, received, dequeued, applied,
        # ``mark``, rv: the compiled fan-out's answer as it is, copied in one call), their k
        # watchers (``int32``) and k itself.  Appended as each write is logged, while its numbers
        # are in the CPU's cache (reading them back later cost 0.7 us a delivery at 100k pods);
        # three copies a write where a column each took eight.  ``mark`` is 1 + source + _MARKS
        # * coalesced (the fan-out's 1: delivered, on the live watch, not coalesced).
        self.blocks, self.block_watchers, self.block_sizes = array("q"), array("i"), array("q")
        self._put_block, self._put_watchers = self.blocks.frombytes, self.block_watchers.frombytes
        self._put_size = self.block_sizes.append
        from replay.engine.fanoutkernel import unblock  # (numba's, for what-if replays only)
        self._unblock = unblock
        self.left: dict[str, np.ndarray] = {}  # the rows a part's cut left, as columns
        self.room = DELIVERY_PART  # rows to log until the next part is complete
        self.parts: list[pa.Table] = []  # deliveries made into table parts, not yet taken
        self.made_parts = 0
        self.names = [w.name for w in watchers]
        # each role once in its dictionary: Parquet writes a dictionary with repeated values
        # differently from one process to the next (the same rows, other bytes)
        self.roles = sorted({w.role for w in watchers})
        self.role_of = np.array([self.roles.index(w.role) for w in watchers], dtype=np.int8)
        self.instant = np.asarray(instant, dtype=bool)

    def delivered(self, deliveries: list[Delivery]) -> None:
        """Log these deliveries (their watcher numbered as the run's watchers), a block of one
        each; every DELIVERY_PART of them make a part."""
        put_block, put_watcher, put_size = self.blocks.extend, self.block_watchers.append, \
            self._put_size
        for watcher, rv, _, sent, received, dequeued, applied, source, coalesced in deliveries:
            put_block((sent, received, dequeued, applied, 1 + source + _MARKS * coalesced, rv))
            put_watcher(watcher)
            put_size(1)
        if len(self.block_watchers) >= self.room:
            self._make_parts()

    def fanned(self, block: memoryview, watchers: bytes, size: int) -> None:
        """Log one write's deliveries to ``size`` targets as the compiled fan-out gave them:
        ``block``, its answer (``Watches.block``), and ``watchers`` (``int32``)."""
        self._put_block(block)
        self._put_watchers(watchers)
        self._put_size(size)
        if len(self.block_watchers) >= self.room:
            self._make_parts()

    def _make_parts(self) -> None:
        """Every DELIVERY_PART deliveries logged make a part; the rows left wait in ``left``."""
        columns = self._unblocked()
        while len(columns["rv"]) >= DELIVERY_PART:
            self.parts.append(self._part({name: column[:DELIVERY_PART]
                                          for name, column in columns.items()}))
            columns = {name: column[DELIVERY_PART:].copy() for name, column in columns.items()}
        self.left, self.room = columns, DELIVERY_PART - len(columns["rv"])

    def _unblocked(self) -> dict[str, np.ndarray]:
        """The deliveries logged as columns, after those ``left``; the blocks emptied."""
        times = np.empty((6, len(self.block_watchers)), dtype=np.int64)
        self._unblock(np.frombuffer(self.blocks, dtype=np.int64),
                      np.frombuffer(self.block_sizes, dtype=np.int64), times)
        sent, received, dequeued, applied, mark, rv = times
        mark -= 1
        columns: dict[str, np.ndarray] = {
            "rv": rv, "watcher": np.frombuffer(self.block_watchers, dtype=np.int32).copy(),
            "sent": sent, "received": received, "dequeued": dequeued, "applied": applied,
            "source": (mark % _MARKS).astype(np.int8), "coalesced": mark >= _MARKS}
        for logged in (self.blocks, self.block_watchers, self.block_sizes):
            del logged[:]
        if self.left:
            columns = {name: np.concatenate([self.left[name], column])
                       for name, column in columns.items()}
        return columns

    def end(self) -> None:
        """The run has ended: the deliveries left make the last part (or the only one, empty)."""
        self._make_parts()
        if len(self.left["rv"]) or not self.made_parts:
            self.parts.append(self._part(self.left))
        self.left = {}

    def take_parts(self) -> Iterator[tuple[str, pa.Table]]:
        """The parts made so far, each once, as ("deliveries", part)."""
        parts, self.parts = self.parts, []
        for part in parts:
            yield "deliveries", part

    def event(self, write: Write, origin: Origin) -> None:
        self.rv = write.rv
        self.commit.append(write.commit)
        self.row.append(write.row)
        self.pod.append(write.pod.index if write.pod is not None else -1)
        self.node.append(write.node)
        self.code.append(write.code)
        self.attempt.append(write.attempt)
        self.kind.append(write.kind)
        self.origin.append(origin)
        self.component.append(write.component if origin != Origin.LIST else None)

    def _part(self, columns: dict[str, np.ndarray]) -> pa.Table:
        """These deliveries (``_unblocked``'s columns) as a part of the deliveries table."""
        self.made_parts += 1
        rv, watchers = columns["rv"], columns["watcher"]
        at = rv - 1
        ts = pa.timestamp("us", tz="UTC")
        per_write = [np.frombuffer(a, dtype=np.int64)[at] for a in (self.commit, self.cached,
                                                                     self.dispatched)]
        skipped = self.instant[watchers]
        if skipped.any():
            for shared in per_write[1:]:
                shared[skipped] = per_write[0][skipped]
        return pa.table({
            "rv": pa.array(rv),
            "watcher": pa.DictionaryArray.from_arrays(pa.array(watchers), self.names),
            "role": pa.DictionaryArray.from_arrays(pa.array(self.role_of[watchers]), self.roles),
            **{name: pa.array(v).cast(ts) for name, v in zip(
                ("commit_ts", "cached_ts", "dispatched_ts", "sent_ts", "received_ts",
                 "dequeued_ts", "applied_ts"),
                per_write + [columns[f] for f in ("sent", "received", "dequeued", "applied")])},
            "source": pa.DictionaryArray.from_arrays(pa.array(columns["source"]), SOURCES),
            "coalesced": pa.array(columns["coalesced"]),
        })
