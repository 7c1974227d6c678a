"""A watcher's cache of node capacity, as its informer has applied it, plus its own assumptions.

Kubernetes' scheduler cache (``pkg/scheduler/internal/cache``) in miniature: capacity per node
from the node objects and the pods bound to them as the watch delivered them, plus the pods the
scheduler has assumed itself (``AssumePod``) until it forgets them (``ForgetPod``: the binding came
back through the watch, or the placement failed).  Free capacity per node lives in numpy arrays so
that a scheduler can filter and score thousands of nodes in one compiled call
(``snapshot``, read-only).

Deliveries are applied lazily: the engine hands each one to the watcher's view as soon as its
applied time is known (``_takers_by_kind``; usually when the write commits), and every read first
applies the deliveries due by the simulation's clock, as the informer would have by then.  So a
write nobody reacts to costs no event in the simulation's queue, and a model never sees a view
that is behind its own watch.  A watcher has one watch, and one informer, per resource: each
keeps its own inbox, whose applied times never decrease.  A delivery of a kind that changes
nothing in a cache (``IDLE_KINDS``) only counts as sent: it enters no inbox and is never applied.
A write whose delivery its watch holds back (the watch is closed, or its buffer full) is
``_expect``ed until then: the view's lag counts it.

A pod counts on a node from its applied binding until its applied delete, or its applied failure
(status.phase Failed: the scheduler's informer drops terminal pods); in a cache that counts
assumed pods (a Gödel scheduler's: ``AssumedPodOfGodel`` in ``pkg/scheduler/cache``), also from
its applied assume patch until its applied rejection.  The watcher's own assumptions count from
``assume`` until it forgets them: when the watch brings its own write back (the binding, or its
assume patch), or the placement failed.  This is the definition the analysis queries use
(docs/run-directory.md).
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Collection
from typing import Any, Final, NamedTuple, TypeVar

import numpy as np
import numpy.typing as npt

from replay.engine.cluster import NODE_KINDS, Pod, Request, Write, WriteKind
from replay.engine.pipeline import Delivery

Ints = npt.NDArray[np.int64]
_INBOX = tuple(0 if kind in NODE_KINDS else 2 if kind == WriteKind.OTHER else 1
               for kind in WriteKind)  # by kind: a write's informer (nodes, pods, other)
# The kinds of write that change nothing in a cache: no capacity, and the truth stamps no node
# version on them (``Truth.apply``).  Their deliveries only count as sent and not yet applied
# (``oldest_unapplied``, ``next_due``): 8 of the 20 a Gödel pod brings to the views
IDLE_KINDS = frozenset({WriteKind.NODE_OTHER, WriteKind.POD_CREATE, WriteKind.POD_DISPATCH,
                  WriteKind.OTHER})
# The pod writes after which a pod no longer counts on its node in any cache
_LEAVES = frozenset({WriteKind.POD_DELETE, WriteKind.POD_REJECT, WriteKind.POD_FAIL})
_NODE_SET, _NODE_DELETE = WriteKind.NODE_SET, WriteKind.NODE_DELETE
_POD_BIND, _POD_ASSUME = WriteKind.POD_BIND, WriteKind.POD_ASSUME
_NOTHING_DUE = 2**63 - 1  # the due time of a view with no delivery waiting
_APPLIED: Final = 6  # a delivery's applied time, in the pipeline's tuple (``Delivery``)
_PAYLOAD: Final = 2  # ... and its write


class Snapshot(NamedTuple):
    """A view's capacity per node (read-only arrays, indexed by node): what a scheduler filters
    and scores on (the scheduler's ``Snapshot`` of its cache)."""

    alloc: Ints  # (3, nodes): cpu_milli, memory_bytes, gpu_milli allocatable
    free: Ints  # (3, nodes): allocatable less the requests counted on the node
    present: npt.NDArray[np.bool_]  # the node exists in this view
    version: Ints  # the node's change count as this view last applied it


class View:
    def __init__(self, node_count: int, clock: Callable[[], int], counts_assumed: bool = False):
        """``clock()``: the simulation's time now; ``counts_assumed``: the cache counts pods
        assumed by Gödel schedulers (assume patches) as it counts bound ones."""
        self.counts_assumed = counts_assumed
        self._alloc = np.zeros((3, node_count), dtype=np.int64)
        self._free = np.zeros((3, node_count), dtype=np.int64)
        # the free capacity's rows as memoryviews: an element read or written as a Python int,
        # 40% quicker than through numpy's scalars
        self._rows = (memoryview(self._free[0]), memoryview(self._free[1]),
                      memoryview(self._free[2]))
        self._present = np.zeros(node_count, dtype=bool)
        self._version = np.zeros(node_count, dtype=np.int64)
        self._placed: dict[Pod, int] = {}  # pods on nodes as applied from the watch
        self._assumed: dict[Pod, int] = {}  # pods this watcher placed itself, not yet confirmed
        # per informer (nodes, pods, other resources): the deliveries to apply, in the order
        # they will be (their applied times never decrease); idle kinds' are not kept
        self._inboxes: tuple[deque[Delivery], ...] = (deque(), deque(), deque())
        self._due = _NOTHING_DUE  # the earliest applied time in the inboxes
        # Every delivery sent to it, in the order sent (rv), until it and those before it are
        # applied: the oldest not applied is the first with its applied time still to come.  A
        # write the watch holds back is a placeholder here (``_awaiting``) until delivered
        self._sent: deque[Delivery | list[Any]] = deque()
        self._awaiting: dict[int, list[Any]] = {}  # by rv: the placeholders
        by_kind = {_POD_BIND: self._apply_place, _NODE_SET: self._apply_node_set,
                   _NODE_DELETE: self._apply_node_delete,
                   **{kind: self._apply_leave for kind in _LEAVES}}
        if counts_assumed:
            by_kind[_POD_ASSUME] = self._apply_place
        # by kind: what applying a delivery does (None: only the node version it carries)
        self._appliers = tuple(by_kind.get(kind) for kind in WriteKind)
        # by kind: how a delivery made as its write was sent is taken (``_takers_by_kind``)
        self._takers = tuple(self._sent.append if kind in IDLE_KINDS else self._deliver
                             for kind in WriteKind)
        self._clock = clock
        self._snapshot = Snapshot(_read_only(self._alloc), _read_only(self._free),
                                  _read_only(self._present), _read_only(self._version))
        self._give_backs = 0
        self.on_forget: Callable[[Pod, int], None] | None = None  # (pod, now) when forgotten

    # -- the informer ---------------------------------------------------------------------------
    def _expect(self, write: Write) -> None:
        """The engine's word that ``write`` was sent to this watcher and will be delivered
        later (``_deliver_late``), once its watch lets it through."""
        placeholder = [None, write.rv, write, None, None, None, _NOTHING_DUE]
        self._sent.append(placeholder)
        self._awaiting[write.rv] = placeholder

    def _takers_by_kind(self) -> tuple[Callable[[Delivery], None], ...]:
        """The engine's hand-over of a delivery made as its write was sent, by the write's kind:
        an idle kind's is only counted as sent (one ``deque.append``, no Python call)."""
        return self._takers

    def _deliver(self, delivery: Delivery) -> None:
        """Take a delivery (not idle) made as its write was sent."""
        self._sent.append(delivery)
        self._into_inbox(delivery)

    def _deliver_late(self, delivery: Delivery) -> None:
        """Take the delivery of a write ``_expect``ed when it was sent, or of one its client
        queue held (a ``delta_fifo`` or ``workqueue`` watcher's): the pipeline does not tell
        of those when their write is sent, so they never count as not yet applied."""
        placeholder = self._awaiting.pop(delivery[1], None)
        if placeholder is not None:
            placeholder[_APPLIED] = delivery[_APPLIED]
        if placeholder is None or delivery[_PAYLOAD].kind not in IDLE_KINDS:
            self._into_inbox(delivery)

    def _into_inbox(self, delivery: Delivery) -> None:
        inbox = self._inboxes[_INBOX[delivery[_PAYLOAD].kind]]
        if not inbox and delivery[_APPLIED] < self._due:  # (behind a front, it is not earlier)
            self._due = delivery[_APPLIED]
        inbox.append(delivery)

    def _catch_up(self) -> None:
        """Apply every delivery due by now (one informer after the other)."""
        now = self._clock()
        sent = self._sent
        while sent and sent[0][_APPLIED] <= now:
            sent.popleft()
        if now < self._due:
            return
        appliers, versions = self._appliers, self._version
        for inbox in self._inboxes:
            while inbox and inbox[0][_APPLIED] <= now:
                delivery = inbox.popleft()
                write = delivery[_PAYLOAD]
                version = write.node_version
                if version and version > versions[write.node]:
                    versions[write.node] = version
                apply = appliers[write.kind]
                if apply is not None:
                    apply(write, delivery[_APPLIED])
        self._due = min([inbox[0][_APPLIED] for inbox in self._inboxes if inbox],
                        default=_NOTHING_DUE)

    @property
    def give_backs(self) -> int:
        """How many applied changes gave capacity back (they may let an unschedulable pod fit)."""
        self._catch_up()
        return self._give_backs

    def oldest_unapplied(self) -> int | None:
        """Commit time of the oldest write sent to this watcher and not yet applied."""
        self._catch_up()
        sent = self._sent
        return sent[0][_PAYLOAD].commit if sent else None

    def next_due(self, kinds: Collection[WriteKind]) -> int | None:
        """When the next delivery of one of ``kinds`` already on its way will be applied."""
        self._catch_up()
        now = self._clock()
        waiting = [*(d for d in self._sent if now < d[_APPLIED] < _NOTHING_DUE),  # (idle kinds')
                   *(d for inbox in self._inboxes for d in inbox)]
        return min((d[_APPLIED] for d in waiting if d[_PAYLOAD].kind in kinds), default=None)

    def _apply_place(self, write: Write, now: int) -> None:
        assert write.pod is not None
        self._place(write.pod, write.node, now)

    def _apply_leave(self, write: Write, now: int) -> None:
        pod = write.pod
        assert pod is not None
        if self._assumed:
            self._forget(pod, now)
        node = self._placed.pop(pod, None)
        if node is not None:
            self._take(node, pod.request, 1)

    def _apply_node_set(self, write: Write, now: int) -> None:
        self._set_node(write.node, write.alloc)

    def _apply_node_delete(self, write: Write, now: int) -> None:
        self._set_node(write.node, None)

    def _place(self, pod: Pod, node: int, now: int) -> None:
        """The watch has brought ``pod`` on ``node``: it counts there from now on, once (an own
        assumption of it ends: confirmed)."""
        if self._placed.get(pod) == node:
            return  # assumed there, now bound there
        mine = self._assumed.pop(pod, None)
        if mine is not None and self.on_forget is not None:
            self.on_forget(pod, now)
        held = self._placed.pop(pod, mine)
        if held != node:
            if held is not None:
                self._take(held, pod.request, 1)
            self._take(node, pod.request, -1)
        self._placed[pod] = node

    def _set_node(self, node: int, alloc: Request | None) -> None:
        new = np.zeros(3, dtype=np.int64) if alloc is None else np.asarray(alloc, dtype=np.int64)
        grew = bool((new > self._alloc[:, node]).any())
        self._free[:, node] += new - self._alloc[:, node]
        self._alloc[:, node] = new
        self._present[node] = alloc is not None
        self._give_backs += grew

    def _take(self, node: int, request: Request, sign: int) -> None:
        self._add(node, request, sign)
        if sign > 0:
            self._give_backs += 1

    def _add(self, node: int, request: Request, sign: int) -> None:
        cpu, memory, gpu = self._rows
        cpu[node] += sign * request[0]
        memory[node] += sign * request[1]
        if request[2]:
            gpu[node] += sign * request[2]

    # -- reading ----------------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """The capacity arrays as they are now (read-only: change them through ``assume``; they
        are current when taken, so take one per decision)."""
        self._catch_up()
        return self._snapshot

    def fits(self, node: int, request: Request) -> bool:
        self._catch_up()
        cpu, memory, gpu = self._rows
        return bool(self._present[node] and cpu[node] >= request[0]
                    and memory[node] >= request[1] and gpu[node] >= request[2])

    def has_placed(self, pod: Pod) -> bool:
        """Whether this view counts ``pod`` from the watch: it has applied its binding (or, in a
        cache that counts assumed pods, its assume patch), and not its delete, rejection or
        failure."""
        self._catch_up()
        return pod in self._placed

    def holding(self) -> contextlib.AbstractContextManager[Callable[[int, Request], None]]:
        """A ``hold(node, request)`` that counts a request on a node until the block ends, for
        placing the members of a gang one after another (each sees the room the others took)."""
        self._catch_up()
        return _Holding(self._add)

    # -- the watcher's own placements -----------------------------------------------------------
    def assumes(self, pod: Pod) -> bool:
        """Whether ``pod`` is one of the watcher's own placements, not yet confirmed or forgotten."""
        self._catch_up()
        return pod in self._assumed

    def assume(self, pod: Pod, node: int) -> None:
        """Count ``pod`` on ``node`` at once, before any write about it comes back."""
        self._catch_up()
        if pod not in self._placed and pod not in self._assumed:
            self._assumed[pod] = node
            self._take(node, pod.request, -1)

    def forget(self, pod: Pod) -> None:
        """Drop an assumption that failed (the write was refused or the placement rejected)."""
        self._catch_up()
        self._forget(pod, self._clock())

    def _forget(self, pod: Pod, now: int) -> None:
        node = self._assumed.pop(pod, None)
        if node is not None:
            self._take(node, pod.request, 1)
            if self.on_forget is not None:
                self.on_forget(pod, now)


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
