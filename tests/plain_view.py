"""The view as it was before its deliveries were applied by a compiled loop (``viewkernel``): its
definition in plain Python, a delivery at a time, which ``test_view`` compares the view with
(its capacity's reads and holds are the view's own)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection

import numpy as np

from replay.engine.cluster import NODE_KINDS, Allocatable, Pod, Request, Write, WriteKind
from replay.engine.view import Snapshot, View, _read_only

_INBOX = {kind: 0 if kind in NODE_KINDS else 2 if kind == WriteKind.OTHER else 1
          for kind in WriteKind}  # a write's informer: nodes, pods, or another resource
# The pod writes after which a pod no longer counts on its node in any cache
_LEAVES = frozenset({WriteKind.POD_DELETE, WriteKind.POD_REJECT, WriteKind.POD_FAIL})
_NODE_SET, _NODE_DELETE = WriteKind.NODE_SET, WriteKind.NODE_DELETE  # (a module global is
_POD_BIND, _POD_ASSUME = WriteKind.POD_BIND, WriteKind.POD_ASSUME  # quicker than an enum's)
_NOTHING_DUE = 2**63 - 1  # the due time of a view with no delivery waiting


class PlainView:
    def __init__(self, node_count: int, clock: Callable[[], int], counts_assumed: bool = False):
        """``clock()``: the simulation's time now; ``counts_assumed``: the cache counts pods
        assumed by Gödel schedulers (assume patches) as it counts bound ones."""
        self.counts_assumed = counts_assumed
        # cpu, memory, gpu and pods (``Allocatable``)
        self._alloc = np.zeros((4, node_count), dtype=np.int64)
        self._free = np.zeros((4, node_count), dtype=np.int64)
        # the free capacity's rows as memoryviews: an element read or written as a Python int
        # (85 ns a read-modify-write, 160 through numpy's scalars or a 1-d index)
        self._rows = tuple(memoryview(row) for row in self._free)
        # how many of the pods counted on a node request no cpu, no memory (``_add``'s rows)
        self._zero_requests = np.zeros((2, node_count), dtype=np.int64)
        self._zero_rows = (memoryview(self._zero_requests[0]), memoryview(self._zero_requests[1]))
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
                                  _read_only(self._present), _read_only(self._version),
                                  _read_only(self._zero_requests))
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
        if kind in self._places or (kind == WriteKind.POD_CREATE and write.node >= 0):
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

    def _set_node(self, node: int, alloc: Allocatable | None) -> None:
        new = np.zeros(4, dtype=np.int64) if alloc is None else np.asarray(alloc, dtype=np.int64)
        grew = bool((new > self._alloc[:, node]).any())
        self._free[:, node] += new - self._alloc[:, node]
        self._alloc[:, node] = new
        self._present[node] = alloc is not None
        self._give_backs += grew

    def _take(self, node: int, request: Request, sign: int) -> None:
        self._add(node, request, sign)
        if sign > 0:
            self._give_backs += 1

    # -- reading (the view's own: they read only the capacity's arrays) ---------------------------
    _add = View._add
    snapshot = View.snapshot
    fits = View.fits
    holding = View.holding

    def has_placed(self, pod: Pod) -> bool:
        """Whether this view counts ``pod`` from the watch: it has applied its binding (or, in a
        cache that counts assumed pods, its assume patch), and not its delete, rejection or
        failure."""
        self._catch_up()
        return pod in self._placed

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
