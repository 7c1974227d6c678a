"""The views' deliveries handed over and applied in compiled loops (numba): ``view``'s inboxes.

A Gödel pod brings about 20 deliveries to the views (five writes to four views), each of them a
Python step in a plain view (a hand-over, a catch-up iteration, an apply: about 0.9 µs together,
a tenth of the event loop), though most change nothing (a create, a dispatch patch) or little (a
node version, a pod's node).  Here a view's state is kept in arrays (per pod its
node as the watch placed it and as the watcher assumed it; per node capacity and version), a
write's deliveries to the views of its targets are entries written by one call (``push``), and
a view's catch-up applies every entry due in one call (``apply_due``), which hands back the
assumptions it ended for the view's ``on_forget``.

The inboxes: a row of entries per (view, informer), ``SLOTS`` informers a view (nodes, pods,
another resource: each applies in the order its watch delivered, its applied times never
decreasing), each entry a write's fields (``FIELDS``).  The rows are segments of one array of
entries: a slot's are from ``ends[slot, FIRST]`` (the oldest not applied) to ``ends[slot, END]``,
within its segment from ``ends[slot, BASE]`` to ``ends[slot, LIMIT]`` (each slot's as long as it
needs: a view that reads rarely has a long one, and the others keep theirs short).
``due[view]`` is the earliest applied time of a view's entries.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from replay.engine.cluster import WriteKind
from replay.jit import compiled_entry, njit

Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]

SLOTS = 3  # informers a view: nodes, pods, other resources
# An entry: when it applies, and the write's rv, commit, kind, pod (index, -1: none), node,
# node version, and its pod's request and the one pod it counts (a NODE_SET's allocatable,
# ``Allocatable``)
APPLIED, RV, COMMIT, KIND, POD, NODE, VERSION, CPU, MEMORY, GPU, PODS = range(11)
FIELDS = 11
RESOURCES = 4  # cpu, memory, gpu, pods: an allocatable's
NOTHING_DUE = 2**63 - 1  # the due time of a view with no entry waiting
FIRST, END, BASE, LIMIT = range(4)  # a slot's ``ends``
# A view's counters (``apply_due`` adds to them): the applied changes that gave capacity back
GIVE_BACKS = 0
# A view's capacity per node: allocatable (4 rows), free (4 rows: the last, the pods it has room
# for), version, and how many of the pods counted there request no cpu, no memory (2 rows:
# ``Snapshot.zero_requests``) (the Snapshot's arrays are views of these rows)
ALLOC, FREE, VERSION_ROW, ZERO_REQUESTS, CAPACITY_ROWS = 0, 4, 8, 9, 11
# ``apply_due``'s answers besides the assumptions it forgot: done; a pod beyond the view's pod
# arrays (grow them and call again); the buffer of forgotten assumptions full (call again)
DONE, GROW, FULL = 0, 1, 2
# the kinds, as constants the kernels compile in
_NODE_SET, _NODE_DELETE = int(WriteKind.NODE_SET), int(WriteKind.NODE_DELETE)
_CREATE, _BIND, _ASSUME = (int(WriteKind.POD_CREATE), int(WriteKind.POD_BIND),
                           int(WriteKind.POD_ASSUME))
_REJECT, _FAIL, _DELETE = (int(WriteKind.POD_REJECT), int(WriteKind.POD_FAIL),
                           int(WriteKind.POD_DELETE))


def _push(entries: Ints, ends: Ints, due: Ints, views: Ints, positions: Ints, applied: Ints,
          informer: int, rv: int, commit: int, kind: int, pod: int, node: int, version: int,
          cpu: int, memory: int, gpu: int, pods: int) -> int:
    """Hand write ``rv`` to ``views``' inboxes of ``informer``, view k's delivery applied at
    ``applied[positions[k]]``: -1, or the slot that has no room (nothing changed: make room and
    call again)."""
    for view in views:
        if ends[view * SLOTS + informer, END] == ends[view * SLOTS + informer, LIMIT]:
            return int(view * SLOTS + informer)
    for k in range(len(views)):
        slot, at = views[k] * SLOTS + informer, applied[positions[k]]
        e = entries[ends[slot, END]]
        e[APPLIED], e[RV], e[COMMIT], e[KIND], e[POD] = at, rv, commit, kind, pod
        e[NODE], e[VERSION] = node, version
        e[CPU], e[MEMORY], e[GPU], e[PODS] = cpu, memory, gpu, pods
        ends[slot, END] += 1
        if at < due[views[k]]:
            due[views[k]] = at
    return -1


def _apply_due(entries: Ints, ends: Ints, due: Ints, view: int, now: int, pods: Ints,
               capacity: Ints, present: Bools, counters: Ints, counts_assumed: bool,
               forgotten: Ints) -> tuple[int, int]:
    """Apply ``view``'s entries due by ``now``, informer after informer, to its state (``pods``:
    per pod the node the watch placed it on, and the node the watcher assumed it on, -1: none;
    ``capacity``, ``present``, ``counters``): (DONE, GROW or FULL, how many assumptions it
    ended, as (pod, applied time) in ``forgotten``)."""
    n = 0
    for informer in range(SLOTS):
        slot = view * SLOTS + informer
        head, tail = ends[slot, FIRST], ends[slot, END]
        while head < tail and entries[head, APPLIED] <= now:
            e = entries[head]
            if e[POD] >= pods.shape[1] or n == len(forgotten):
                ends[slot, FIRST] = head
                return (GROW if e[POD] >= pods.shape[1] else FULL), n
            n = _apply(e, pods, capacity, present, counters, counts_assumed, forgotten, n)
            head += 1
        if head == tail:  # empty: its entries start again at its segment's start
            ends[slot, END] = head = ends[slot, BASE]
        ends[slot, FIRST] = head
    earliest = NOTHING_DUE
    for slot in range(view * SLOTS, view * SLOTS + SLOTS):
        first = ends[slot, FIRST]
        if first < ends[slot, END] and entries[first, APPLIED] < earliest:
            earliest = entries[first, APPLIED]
    due[view] = earliest
    return DONE, n


@njit(cache=True, nogil=True)
def _apply(e: Ints, pods: Ints, capacity: Ints, present: Bools, counters: Ints,
           counts_assumed: bool, forgotten: Ints, n: int) -> int:
    """One delivery (``View``'s definition, module docstring of ``view``)."""
    kind, pod, node, version = e[KIND], e[POD], e[NODE], e[VERSION]
    if version != 0 and version > capacity[VERSION_ROW, node]:
        capacity[VERSION_ROW, node] = version
    if kind == _BIND or (kind == _ASSUME and counts_assumed) or (kind == _CREATE and node >= 0):
        n = _place(e, pods, capacity, counters, forgotten, n)
    elif kind == _DELETE or kind == _REJECT or kind == _FAIL:
        for row in (1, 0):  # its own assumption ends, then its placement
            held = pods[row, pod]
            if held >= 0:
                pods[row, pod] = -1
                _take(capacity, counters, held, e, 1)
                if row == 1:
                    forgotten[n, 0], forgotten[n, 1] = pod, e[APPLIED]
                    n += 1
    elif kind == _NODE_SET or kind == _NODE_DELETE:
        grew = False
        for r in range(RESOURCES):
            new = e[CPU + r] if kind == _NODE_SET else 0
            grew |= new > capacity[ALLOC + r, node]
            capacity[FREE + r, node] += new - capacity[ALLOC + r, node]
            capacity[ALLOC + r, node] = new
        present[node] = kind == _NODE_SET
        counters[GIVE_BACKS] += grew
    return n


@njit(cache=True, nogil=True)
def _place(e: Ints, pods: Ints, capacity: Ints, counters: Ints, forgotten: Ints, n: int) -> int:
    """The watch has brought the pod on its node: it counts there from now on, once (an own
    assumption of it ends: confirmed)."""
    pod, node = e[POD], e[NODE]
    placed = pods[0, pod]
    if placed == node:
        return n  # assumed there, now bound there
    mine = pods[1, pod]
    if mine >= 0:
        pods[1, pod] = -1
        forgotten[n, 0], forgotten[n, 1] = pod, e[APPLIED]
        n += 1
    held = placed if placed >= 0 else mine
    if held != node:
        if held >= 0:
            _take(capacity, counters, held, e, 1)
        _take(capacity, counters, node, e, -1)
    pods[0, pod] = node
    return n


@njit(cache=True, nogil=True)
def _take(capacity: Ints, counters: Ints, node: int, e: Ints, sign: int) -> None:
    """The entry's pod's request, and its one pod, taken from (-1) or given back to (1) the
    node's free capacity (and the pod counted there, or not, among those that request no cpu or
    no memory)."""
    for r in range(RESOURCES):
        capacity[FREE + r, node] += sign * e[CPU + r]
    for r in range(2):
        if e[CPU + r] == 0:
            capacity[ZERO_REQUESTS + r, node] -= sign
    if sign > 0:
        counters[GIVE_BACKS] += 1


def _oldest(entries: Ints, ends: Ints, view: int) -> tuple[int, int]:
    """The lowest rv among ``view``'s entries and its commit time (NOTHING_DUE, 0: none)."""
    rv, commit = NOTHING_DUE, 0
    for slot in range(view * SLOTS, view * SLOTS + SLOTS):
        for i in range(ends[slot, FIRST], ends[slot, END]):
            if entries[i, RV] < rv:
                rv, commit = entries[i, RV], entries[i, COMMIT]
    return rv, commit


def _next_due(entries: Ints, ends: Ints, view: int, wanted: Bools) -> int:
    """When ``view``'s first entry of a kind in ``wanted`` (indexed by kind) applies, the
    earliest among its informers (NOTHING_DUE: none waiting)."""
    due = NOTHING_DUE
    for slot in range(view * SLOTS, view * SLOTS + SLOTS):
        for i in range(ends[slot, FIRST], ends[slot, END]):
            if wanted[entries[i, KIND]]:
                due = min(due, entries[i, APPLIED])
                break
    return due


class Kernels(NamedTuple):
    """The kernels ``view`` calls, each compiled for its one signature."""

    push: Callable[..., int]
    apply_due: Callable[..., tuple[int, int]]
    oldest: Callable[[Ints, Ints, int], tuple[int, int]]
    next_due: Callable[[Ints, Ints, int, Bools], int]


@cache
def compiled() -> Kernels:
    """The kernels, compiled (loaded from numba's cache) when the first views' inboxes are made,
    not when this module is imported: every replay imports it (the engine's API, ``view``), and
    an observe replay, which has no views, spent 0.15 s of its start loading them."""
    ints, rows = "int64[::1]", "int64[:, ::1]"
    return Kernels(
        push=compiled_entry(  # type: ignore[arg-type]
            _push, f"int64({rows}, {rows}, {ints}, {ints}, {ints}, {ints}, "
                   + ", ".join(["int64"] * 11) + ")"),
        apply_due=compiled_entry(  # type: ignore[arg-type]
            _apply_due, f"UniTuple(int64, 2)({rows}, {rows}, {ints}, int64, int64, {rows}, "
                        f"{rows}, boolean[::1], {ints}, boolean, {rows})"),
        oldest=compiled_entry(  # type: ignore[arg-type]
            _oldest, f"UniTuple(int64, 2)({rows}, {rows}, int64)"),
        next_due=compiled_entry(  # type: ignore[arg-type]
            _next_due, f"int64({rows}, {rows}, int64, boolean[::1])"))
