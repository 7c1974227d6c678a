"""A watcher's cache of node capacity, as its informer has applied it, plus its own assumptions.

Kubernetes' scheduler cache (``pkg/scheduler/internal/cache``) in miniature: capacity per node
from the node objects and the pods bound to them as the watch delivered them, plus the pods the
scheduler has assumed itself (``AssumePod``) until it forgets them (``ForgetPod``: the binding came
back through the watch, or the placement failed).  Free capacity per node lives in numpy arrays so
that a scheduler can filter and score thousands of nodes in one compiled call
(``snapshot``, read-only).

Deliveries are applied lazily: the engine hands each one to the watcher's view as soon as its
applied time is known (``_deliver``; usually when the write commits), and every read first applies
the deliveries due by the simulation's clock, as the informer would have by then.  So a write
nobody reacts to costs no event in the simulation's queue, and a model never sees a view that is
behind its own watch.  A watcher has one watch, and one informer, per resource: each keeps its
own inbox, whose applied times never decrease.  A write whose delivery its watch holds back (the
watch is closed, or its buffer full) is ``_expect``ed until then: the view's lag counts it.  The
inboxes, and the view's state per pod and node, are arrays, handed over and applied by compiled
loops (``viewkernel``): the views of a simulation share one ``Inboxes``, so that a write's
deliveries to all of them are one call (``Inboxes.push``).

A pod counts on a node from its applied binding (or its applied create on it: a pod listed on its
node, ``Simulation._list``) until its applied delete, or its applied failure
(status.phase Failed: the scheduler's informer drops terminal pods); in a cache that counts
assumed pods (a Gödel scheduler's: ``AssumedPodOfGodel`` in ``pkg/scheduler/cache``), also from
its applied assume patch until its applied rejection.  The watcher's own assumptions count from
``assume`` until it forgets them: when the watch brings its own write back (the binding, or its
assume patch), or the placement failed.  This is the definition the analysis queries use
(docs/run-directory.md).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Collection
from typing import Any, NamedTuple, TypeVar

import numpy as np
import numpy.typing as npt

from replay.engine.cluster import NODE_KINDS, Pod, Request, Write, WriteKind
from replay.engine import viewkernel
from replay.engine.viewkernel import (ALLOC, BASE, CAPACITY_ROWS, DONE, END, FIELDS, FIRST, FREE,
                                      GIVE_BACKS, GROW, LIMIT, NOTHING_DUE, RESOURCES, SLOTS,
                                      VERSION_ROW, ZERO_REQUESTS)

Ints = npt.NDArray[np.int64]
_INBOX = {kind: 0 if kind in NODE_KINDS else 2 if kind == WriteKind.OTHER else 1
          for kind in WriteKind}  # a write's informer: nodes, pods, or another resource
_NOTHING = (0, 0, 0, 0)  # what a write that is neither a pod's nor a NODE_SET's carries
_FIRST = np.zeros(1, dtype=np.int64)  # (``push``'s positions for one delivery)

# ``viewkernel``'s compiled kernels, module globals as the hot paths call them, set when the first
# ``Inboxes`` is made (``_load_kernels``)
push: Callable[..., int]
apply_due: Callable[..., tuple[int, int]]
oldest: Callable[[Ints, Ints, int], tuple[int, int]]
next_due: Callable[[Ints, Ints, int, npt.NDArray[np.bool_]], int]


def _load_kernels() -> None:
    """Compile (load) ``viewkernel``'s kernels, once: a replay without views never does."""
    global push, apply_due, oldest, next_due
    push, apply_due, oldest, next_due = viewkernel.compiled()


class Snapshot(NamedTuple):
    """A view's capacity per node (read-only arrays, indexed by node): what a scheduler filters
    and scores on (the scheduler's ``Snapshot`` of its cache)."""

    alloc: Ints  # (4, nodes): cpu_milli, memory_bytes, gpu_milli, pods allocatable
    # (4, nodes): allocatable less the requests counted on the node, and less one pod for each
    free: Ints
    present: npt.NDArray[np.bool_]  # the node exists in this view
    version: Ints  # the node's change count as this view last applied it
    # (2, nodes): how many of the pods counted on the node request no cpu, no memory (which
    # kube-scheduler's and Gödel's resource scores count as a default request: ``selectkernel``)
    zero_requests: Ints


class Inboxes:
    """The deliveries handed to a simulation's views and not yet applied (``viewkernel``'s
    module docstring): ``entries`` (entry, field), ``ends`` (slot: first, end, base, limit),
    ``due`` per view.  A slot's segment doubles when it fills; a view added later adds its
    slots."""

    ROOM = 64  # entries a slot holds at first

    def __init__(self) -> None:
        _load_kernels()
        self.entries = np.zeros((0, FIELDS), dtype=np.int64)
        self.ends = np.zeros((0, 4), dtype=np.int64)
        self.due = np.zeros(0, dtype=np.int64)
        # ``due`` element by element as Python ints (every read of a view tests it)
        self.due_now = self.due.data
        self._one = np.zeros(1, dtype=np.int64)  # ``push_one``'s applied time

    def add_view(self) -> int:
        """A new view's number (its slots appended)."""
        view = len(self.due)
        self._lay_out(np.append(self.ends[:, LIMIT] - self.ends[:, BASE], [self.ROOM] * SLOTS))
        self.due = np.append(self.due, np.int64(NOTHING_DUE))
        self.due_now = self.due.data
        return view

    def push(self, views: Ints, positions: Ints, applied: Ints, write: Write) -> None:
        """Hand ``write`` to each of ``views``, applied at ``applied[positions[k]]`` in view k."""
        pod = write.pod
        if pod is not None:  # its request, and the one pod it is
            index, (cpu, memory, gpu), pods = pod.index, pod.request, 1
        else:  # a NODE_SET's allocatable
            index, (cpu, memory, gpu, pods) = -1, write.alloc or _NOTHING
        informer = _INBOX[write.kind]
        while (full := push(self.entries, self.ends, self.due, views, positions, applied,
                            informer, write.rv, write.commit, write.kind, index, write.node,
                            write.node_version, cpu, memory, gpu, pods)) >= 0:
            self._make_room(full)

    def push_one(self, view: Ints, applied: int, write: Write) -> None:
        """``push`` to one view (``view``: its number in an array)."""
        self._one[0] = applied
        self.push(view, _FIRST, self._one, write)

    def _make_room(self, slot: int) -> None:
        """Room at the end of ``slot``'s segment: its entries moved to the segment's start if
        that frees half of it (else every push would move them all again), or the segment twice
        as long."""
        first, end, base, limit = self.ends[slot].tolist()
        if 2 * (first - base) >= limit - base:
            self.entries[base:base + end - first] = self.entries[first:end].copy()
            self.ends[slot, FIRST:END + 1] = base, base + end - first
        else:
            rooms = self.ends[:, LIMIT] - self.ends[:, BASE]
            rooms[slot] = 2 * (limit - base)
            self._lay_out(rooms)

    def _lay_out(self, rooms: Ints) -> None:
        """The slots' segments ``rooms`` long (the slots beyond ``ends``' new and empty), each
        slot's entries kept, at its segment's start."""
        limits = np.cumsum(rooms, dtype=np.int64)
        bases = limits - rooms
        entries = np.zeros((int(limits[-1]), FIELDS), dtype=np.int64)
        ends = np.stack([bases, bases, bases, limits], axis=1)
        for slot, (first, end, _, _) in enumerate(self.ends.tolist()):
            entries[bases[slot]:bases[slot] + end - first] = self.entries[first:end]
            ends[slot, END] += end - first
        self.entries, self.ends = entries, ends


class View:
    _FORGOTTEN = 64  # assumptions one call of the compiled catch-up can end

    def __init__(self, node_count: int, clock: Callable[[], int], counts_assumed: bool = False,
                 inboxes: Inboxes | None = None):
        """``clock()``: the simulation's time now; ``counts_assumed``: the cache counts pods
        assumed by Gödel schedulers (assume patches) as it counts bound ones; ``inboxes``: the
        simulation's views' (None: its own)."""
        self.counts_assumed = counts_assumed
        self._inboxes = inboxes if inboxes is not None else Inboxes()
        self._index = self._inboxes.add_view()
        self._me = np.array([self._index], dtype=np.int64)
        # per node: allocatable, free, version, the pods without a cpu or memory request
        # (``viewkernel``'s rows); the free capacity's rows and the last two as memoryviews, for
        # this watcher's own changes: an element read or written as a Python int (85 ns a
        # read-modify-write, 160 through numpy's scalars or a 1-d index)
        self._capacity = np.zeros((CAPACITY_ROWS, node_count), dtype=np.int64)
        self._alloc = self._capacity[ALLOC:ALLOC + RESOURCES]
        self._free = self._capacity[FREE:FREE + RESOURCES]
        self._rows = tuple(memoryview(self._capacity[FREE + r]) for r in range(RESOURCES))
        self._zero_requests = self._capacity[ZERO_REQUESTS:ZERO_REQUESTS + 2]
        self._zero_rows = tuple(memoryview(self._capacity[ZERO_REQUESTS + r]) for r in range(2))
        self._present = np.zeros(node_count, dtype=bool)
        self._version = self._capacity[VERSION_ROW]
        self._pods = np.zeros((2, 0), dtype=np.int64)  # per pod: placed by the watch, assumed
        self._placed, self._assumed = memoryview(self._pods[0]), memoryview(self._pods[1])
        self._assumed_pods: dict[int, Pod] = {}  # the pods of this watcher's own assumptions
        self._counters = np.zeros(1, dtype=np.int64)
        self._counts = self._counters.data  # (as ``_rows``)
        self._forgotten = np.zeros((self._FORGOTTEN, 2), dtype=np.int64)
        self._expected: dict[int, int] = {}  # rv -> commit of writes sent, not yet handed over
        self._clock = clock
        self._snapshot = Snapshot(_read_only(self._alloc), _read_only(self._free),
                                  _read_only(self._present), _read_only(self._version),
                                  _read_only(self._zero_requests))
        self.on_forget: Callable[[Pod, int], None] | None = None  # (pod, now) when forgotten

    # -- the informer ---------------------------------------------------------------------------
    def _expect(self, write: Write) -> None:
        """The engine's word that ``write`` was sent to this watcher and will be delivered
        later (``_deliver``), once its watch lets it through."""
        self._expected[write.rv] = write.commit

    def _deliver(self, applied: int, write: Write, expected: bool = False) -> None:
        """The engine's hand-over of a delivery, to be applied at ``applied`` (``expected``: it
        was ``_expect``ed).  (A write's deliveries to several views: ``Inboxes.push``.)"""
        if expected:
            self._expected.pop(write.rv, None)
        self._inboxes.push_one(self._me, applied, write)

    def _catch_up(self) -> None:
        """Apply every delivery due by now (one informer after the other)."""
        now = self._clock()
        if now >= self._inboxes.due_now[self._index]:
            self._apply_due(now)

    def _apply_due(self, now: int) -> None:
        """The compiled catch-up, called until it is done: the assumptions it ended told to
        ``on_forget`` after each call, the per-pod arrays grown when it asks."""
        inboxes, forgotten = self._inboxes, self._forgotten
        while True:
            status, n = apply_due(inboxes.entries, inboxes.ends, inboxes.due, self._index, now,
                                  self._pods, self._capacity, self._present, self._counters,
                                  self.counts_assumed, forgotten)
            if n:
                for pod, at in forgotten[:n].tolist():
                    self._forgot(self._assumed_pods.pop(pod), at)
            if status == DONE:
                return
            if status == GROW:
                self._grow(2 * self._pods.shape[1] + 1)

    def _grow(self, pods: int) -> None:
        """Room for ``pods`` pods in the per-pod arrays."""
        grown = np.full((2, pods), -1, dtype=np.int64)
        grown[:, :self._pods.shape[1]] = self._pods
        self._pods = grown
        self._placed, self._assumed = memoryview(grown[0]), memoryview(grown[1])

    def _counted(self, pod: Pod) -> int:
        """``pod``'s index, the per-pod arrays grown to hold it."""
        index = pod.index
        if index >= self._pods.shape[1]:
            self._grow(max(2 * self._pods.shape[1], index + 1))
        return index

    @property
    def give_backs(self) -> int:
        """How many applied changes gave capacity back (they may let an unschedulable pod fit)."""
        self._catch_up()
        return self._counts[GIVE_BACKS]

    def oldest_unapplied(self) -> int | None:
        """Commit time of the oldest write sent to this watcher and not yet applied."""
        self._catch_up()
        rv, commit = oldest(self._inboxes.entries, self._inboxes.ends, self._index)
        if self._expected:
            first = next(iter(self._expected))  # (expected in the order sent: by rv)
            if first < rv:
                return self._expected[first]
        return commit if rv != NOTHING_DUE else None

    def next_due(self, kinds: Collection[WriteKind]) -> int | None:
        """When the next delivery of one of ``kinds`` already on its way will be applied."""
        self._catch_up()
        inboxes = self._inboxes
        due = next_due(inboxes.entries, inboxes.ends, self._index, _kinds_mask(frozenset(kinds)))
        return None if due == NOTHING_DUE else due

    def _take(self, node: int, request: Request, sign: int) -> None:
        self._add(node, request, sign)
        if sign > 0:
            self._counts[GIVE_BACKS] += 1

    def _add(self, node: int, request: Request, sign: int) -> None:
        cpu, memory, gpu, pods = self._rows
        cpu[node] += sign * request[0]
        memory[node] += sign * request[1]
        if request[2]:
            gpu[node] += sign * request[2]
        pods[node] += sign
        if not request[0]:
            self._zero_rows[0][node] -= sign
        if not request[1]:
            self._zero_rows[1][node] -= sign

    # -- reading ----------------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """The capacity arrays as they are now (read-only: change them through ``assume``; they
        are current when taken, so take one per decision)."""
        self._catch_up()
        return self._snapshot

    def fits(self, node: int, request: Request) -> bool:
        self._catch_up()
        cpu, memory, gpu, pods = self._rows
        return bool(self._present[node] and cpu[node] >= request[0]
                    and memory[node] >= request[1] and gpu[node] >= request[2] and pods[node] > 0)

    def has_placed(self, pod: Pod) -> bool:
        """Whether this view counts ``pod`` from the watch: it has applied its binding (or, in a
        cache that counts assumed pods, its assume patch), and not its delete, rejection or
        failure."""
        self._catch_up()
        index = self._counted(pod)  # (first: it may grow ``_placed``)
        return self._placed[index] >= 0

    def holding(self) -> contextlib.AbstractContextManager[Callable[[int, Request], None]]:
        """A ``hold(node, request)`` that counts a request on a node until the block ends, for
        placing the members of a gang one after another (each sees the room the others took)."""
        self._catch_up()
        return _Holding(self._add)

    # -- the watcher's own placements -----------------------------------------------------------
    def assumes(self, pod: Pod) -> bool:
        """Whether ``pod`` is one of the watcher's own placements, not yet confirmed or forgotten."""
        self._catch_up()
        index = self._counted(pod)  # (first: it may grow ``_assumed``)
        return self._assumed[index] >= 0

    def assume(self, pod: Pod, node: int) -> None:
        """Count ``pod`` on ``node`` at once, before any write about it comes back."""
        self._catch_up()
        index = self._counted(pod)
        if self._placed[index] < 0 and self._assumed[index] < 0:
            self._assumed[index] = node
            self._assumed_pods[index] = pod
            self._take(node, pod.request, -1)

    def forget(self, pod: Pod) -> None:
        """Drop an assumption that failed (the write was refused or the placement rejected)."""
        self._catch_up()
        index = self._counted(pod)
        node = self._assumed[index]
        if node >= 0:
            self._assumed[index] = -1
            del self._assumed_pods[index]
            self._take(node, pod.request, 1)
            self._forgot(pod, self._clock())

    def _forgot(self, pod: Pod, at: int) -> None:
        if self.on_forget is not None:
            self.on_forget(pod, at)


@functools.lru_cache(maxsize=64)
def _kinds_mask(kinds: frozenset[WriteKind]) -> npt.NDArray[np.bool_]:
    """``kinds`` as a mask indexed by kind, for ``next_due``'s kernel (one per set asked for:
    a scheduler asks each time a pod turns out unschedulable)."""
    mask = np.zeros(max(WriteKind) + 1, dtype=bool)
    mask[[int(kind) for kind in kinds]] = True
    return mask


class _Holding:
    """``View.holding``'s block: the requests held, given back at its end."""

    def __init__(self, add: Callable[[int, Request, int], None]):
        self._add = add
        self._held: list[tuple[int, Request]] = []

    def __enter__(self) -> Callable[[int, Request], None]:
        return self.hold

    def hold(self, node: int, request: Request) -> None:
        self._add(node, request, -1)
        self._held.append((node, request))

    def __exit__(self, *exc: object) -> None:
        for node, request in self._held:
            self._add(node, request, 1)


Array = TypeVar("Array", bound=npt.NDArray[Any])


def _read_only(array: Array) -> Array:
    out: Array = array.view()
    out.flags.writeable = False
    return out
