"""The view as it was before its deliveries were applied by a compiled loop (``viewkernel``): its
definition in plain Python, a delivery at a time, which ``test_view`` compares the view with."""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Collection
from typing import Any, NamedTuple, TypeVar

import numpy as np
import numpy.typing as npt

from replay.engine.cluster import NODE_KINDS, Pod, Request, Write, WriteKind

Ints = npt.NDArray[np.int64]
_INBOX = {kind: 0 if kind in NODE_KINDS else 2 if kind == WriteKind.OTHER else 1
          for kind in WriteKind}  # a write's informer: nodes, pods, or another resource
# The pod writes after which a pod no longer counts on its node in any cache
_LEAVES = frozenset({WriteKind.POD_DELETE, WriteKind.POD_REJECT, WriteKind.POD_FAIL})
_NODE_SET, _NODE_DELETE = WriteKind.NODE_SET, WriteKind.NODE_DELETE  # (a module global is
_POD_BIND, _POD_ASSUME = WriteKind.POD_BIND, WriteKind.POD_ASSUME  # quicker than an enum's)
_NOTHING_DUE = 2**63 - 1  # the due time of a view with no delivery waiting


class Snapshot(NamedTuple):
    """A view's capacity per node (read-only arrays, indexed by node): what a scheduler filters
    and scores on (the scheduler's ``Snapshot`` of its cache)."""

    alloc: Ints  # (3, nodes): cpu_milli, memory_bytes, gpu_milli allocatable
    free: Ints  # (3, nodes): allocatable less the requests counted on the node
    present: npt.NDArray[np.bool_]  # the node exists in this view
    version: Ints  # the node's change count as this view last applied it


class PlainView:
    def __init__(self, node_count: int, clock: Callable[[], int], counts_assumed: bool = False):
        """``clock()``: the simulation's time now; ``counts_assumed``: the cache counts pods
        assumed by Gödel schedulers (assume patches) as it counts bound ones."""
        self.counts_assumed = counts_assumed
        self._alloc = np.zeros((3, node_count), dtype=np.int64)
        self._free = np.zeros((3, node_count), dtype=np.int64)
        # the free capacity's rows as memoryviews: an element read or written as a Python int
        # (85 ns a read-modify-write, 160 through numpy's scalars or a 1-d index)
        self._rows = (memoryview(self._free[0]), memoryview(self._free[1]),
                      memoryview(self._free[2]))
        self._present = np.zeros(node_count, dtype=bool)
        self._version = np.zeros(node_count, dtype=np.int64)
        self._versions = self._version.data  # (as ``_rows``: read and written per apply)
        self._placed: dict[Pod, int] = {}  # pods on nodes as applied from the watch
        self._assumed: dict[Pod, int] = {}  # pods this watcher placed itself, not yet confirmed
        # per informer (nodes, pods, other resources): (applied_us, write), not yet applied
        self._inboxes: tuple[deque[tuple[int, Write]], ...] = (deque(), deque(), deque())
        self._due = _NOTHING_DUE  # the earliest applied time in the inboxes
        self._places = frozenset({_POD_BIND, _POD_ASSUME} if counts_assumed else {_POD_BIND})
        self._unapplied: deque[Write] = deque()  # sent to it, not yet applied, by rv ...
        self._applied_early: set[int] = set()  # ... but for these rvs, already applied
        self._clock = clock
        self._snapshot = Snapshot(_read_only(self._alloc), _read_only(self._free),
                                  _read_only(self._present), _read_only(self._version))
        self._give_backs = 0
        self.on_forget: Callable[[Pod, int], None] | None = None  # (pod, now) when forgotten

    # -- the informer ---------------------------------------------------------------------------
    def _expect(self, write: Write) -> None:
        """The engine's word that ``write`` was sent to this watcher and will be delivered
        later (``_deliver``), once its watch lets it through."""
        self._unapplied.append(write)

    def _deliver(self, applied: int, write: Write, expected: bool = False) -> None:
        """The engine's hand-over of a delivery, to be applied at ``applied`` (``expected``: it
        was ``_expect``ed)."""
        self._inboxes[_INBOX[write.kind]].append((applied, write))
        if applied < self._due:
            self._due = applied
        if not expected:
            self._unapplied.append(write)

    def _catch_up(self) -> None:
        """Apply every delivery due by now (one informer after the other)."""
        now = self._clock()
        if now < self._due:
            return
        unapplied, apply = self._unapplied, self._apply
        for inbox in self._inboxes:
            while inbox and inbox[0][0] <= now:
                applied, write = inbox.popleft()
                apply(write, applied)
                if unapplied and unapplied[0] is write:  # in the order it was sent
                    unapplied.popleft()
                    if self._applied_early:
                        self._forget_applied_early()
                else:
                    self._applied_early.add(write.rv)
        # the earliest applied time left (a loop: ``min`` over a comprehension cost 0.5 µs)
        due = _NOTHING_DUE
        for inbox in self._inboxes:
            if inbox and inbox[0][0] < due:
                due = inbox[0][0]
        self._due = due

    def _forget_applied_early(self) -> None:
        unapplied, early = self._unapplied, self._applied_early
        while early and unapplied and unapplied[0].rv in early:
            early.remove(unapplied.popleft().rv)

    @property
    def give_backs(self) -> int:
        """How many applied changes gave capacity back (they may let an unschedulable pod fit)."""
        self._catch_up()
        return self._give_backs

    def oldest_unapplied(self) -> int | None:
        """Commit time of the oldest write sent to this watcher and not yet applied."""
        self._catch_up()
        return self._unapplied[0].commit if self._unapplied else None

    def next_due(self, kinds: Collection[WriteKind]) -> int | None:
        """When the next delivery of one of ``kinds`` already on its way will be applied."""
        self._catch_up()
        due = [next((applied for applied, write in inbox if write.kind in kinds), None)
               for inbox in self._inboxes]
        return min((t for t in due if t is not None), default=None)

    def _apply(self, write: Write, now: int) -> None:
        kind, pod, version = write.kind, write.pod, write.node_version
        if version and version > self._versions[write.node]:
            self._versions[write.node] = version
        if kind in self._places:
            assert pod is not None
            self._place(pod, write.node, now)
        elif kind in _LEAVES:
            assert pod is not None
            if self._assumed:
                self._forget(pod, now)
            node = self._placed.pop(pod, None)
            if node is not None:
                self._take(node, pod.request, 1)
        elif kind == _NODE_SET:
            self._set_node(write.node, write.alloc)
        elif kind == _NODE_DELETE:
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
