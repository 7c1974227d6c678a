"""A run directory's tables as numpy and Arrow arrays, for checks over millions of rows.

Grouping a million pod names or twenty thousand nodes with a DuckDB window costs seconds; here
each grouping is one dictionary encoding, one radix sort of its codes and segment scans
(``replay.arrays``).  ``replay.analysis.check`` builds its invariants on these:

- ``Deliveries``: the deliveries by watcher, then rv;
- ``pod_history``: every write to a named pod with its incarnation and its latest binding;
- ``lives``: one row per pod incarnation (its bindings and deletes);
- ``free_after_each_change``: a node's free capacity after each change of ``capacity_changes``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from replay.arrays import segmented_cummax, stable_order
from replay.engine.pipeline import SOURCES
from replay.jit import njit

STAGES = ("commit_ts", "cached_ts", "dispatched_ts", "sent_ts", "received_ts", "dequeued_ts",
          "applied_ts")
KINDS = ("create", "binding", "delete", "other")  # what a write to a pod does


@dataclass
class Deliveries:
    """The deliveries as numpy arrays (times in µs, -1 for null), ordered by watcher and then
    rv whatever the file's order; ``watcher`` codes index ``names``; ``source`` is a
    ``Source`` value (-1: none of them); ``coalesced`` a boolean per delivery."""

    rv: np.ndarray
    watcher: np.ndarray
    names: list[str]
    times: dict[str, np.ndarray]
    nulls: dict[str, int]
    source: np.ndarray
    coalesced: np.ndarray

    @classmethod
    def read(cls, path: Path) -> Deliveries:
        """The deliveries of the table file ``path``, read a column at a time, each put in the
        final order as it is read and its Arrow column dropped then.

        Read whole, then reordered (a what-if run's file is in rv order), the 27.1M deliveries
        of a 1M-pod what-if run held the Arrow table, its arrays and their reordered copies at
        once: 10.4 GB, the peak of ``replay check``, and 31 s beside the check's DuckDB
        queries.  A column at a time, no more than one column is held twice."""
        file = pq.ParquetFile(path, read_dictionary=["watcher", "source"])
        keys = file.read(columns=["rv", "watcher"]).unify_dictionaries()
        watcher = codes(keys["watcher"])
        rv, code = ints(keys["rv"]), watcher.indices.to_numpy(zero_copy_only=False)
        names = watcher.dictionary.to_pylist()
        del keys, watcher
        order = watcher_then_rv(code, rv, len(names))

        def arranged(values: np.ndarray) -> np.ndarray:
            return values if order is None else values[order]

        def column(name: str) -> pa.ChunkedArray:
            return file.read(columns=[name]).unify_dictionaries().column(name)

        times, nulls = {}, {}
        for stage in STAGES:
            values = column(stage)
            nulls[stage] = values.null_count
            times[stage] = arranged(ints(values))
            del values
        source = codes(column("source"))
        known = np.array([SOURCES.index(s) if s in SOURCES else -1
                          for s in source.dictionary.to_pylist()] + [-1], dtype=np.int8)
        source_code = known[pc.fill_null(source.indices, len(known) - 1).to_numpy(
            zero_copy_only=False)]
        coalesced = pc.fill_null(column("coalesced"), False).to_numpy()
        return cls(arranged(rv), arranged(code).astype(np.int64), names, times, nulls,
                   arranged(source_code), arranged(coalesced))

    @cached_property
    def starts(self) -> np.ndarray:
        """Whether each delivery is its watcher's first."""
        return np.r_[True, self.watcher[1:] != self.watcher[:-1]] if len(self.rv) else \
            np.zeros(0, dtype=bool)

    @cached_property
    def piped(self) -> np.ndarray:
        """Whether each delivery went through the pipeline: not every one of its times is the
        commit (an instant watcher, such as the oracle's, skips it)."""
        commit = self.times["commit_ts"]
        skips = np.ones(len(commit), dtype=bool)
        for column in STAGES[1:]:
            skips &= self.times[column] == commit
        return ~skips

    def row(self, i: int) -> dict[str, Any]:
        source = int(self.source[i])
        return {"rv": int(self.rv[i]), "watcher": self.names[self.watcher[i]],
                "source": SOURCES[source] if source >= 0 else None,
                **{c: iso(self.times[c][i]) for c in STAGES}}


def ints(column: pa.ChunkedArray) -> np.ndarray:
    """A numeric or timestamp column as int64 (timestamps in µs), null as -1."""
    if pa.types.is_timestamp(column.type):
        if column.type.unit != "us":
            column = column.cast(pa.timestamp("us", tz="UTC"))
        column = column.view(pa.int64()) if isinstance(column, pa.Array) else \
            pa.chunked_array([c.view(pa.int64()) for c in column.chunks], pa.int64())
    if column.null_count:
        column = pc.fill_null(column, -1)
    return column.to_numpy().astype(np.int64, copy=False)


def codes(column: pa.ChunkedArray | pa.Array) -> pa.DictionaryArray:
    """A string column as a dictionary: each distinct value once, and a code per row."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    return column if pa.types.is_dictionary(column.type) else column.dictionary_encode()


def segments(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The order that groups equal ``key`` values together (each group in its original order),
    and whether each position of that order begins a group."""
    order = stable_order(key, int(key.max()) + 1) if len(key) else np.zeros(0, dtype=np.int64)
    grouped = key[order]
    return order, np.r_[True, grouped[1:] != grouped[:-1]] if len(key) else np.zeros(0, bool)


def segmented_cumsum(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Running sum restarting where ``starts`` is true."""
    total = np.cumsum(values)
    first = np.maximum.accumulate(np.where(starts, np.arange(len(values)), 0))
    return total - (total - values)[first]


def pod_history(events: pa.Table, is_pod: np.ndarray) -> pa.Table:
    """The committed writes to named pods (``is_pod``: which events are pod writes; in rv order),
    each with its pod (``namespace/name``),
    its ``kind`` (create, binding, delete, other), whether it ``binds`` the pod to a node (a
    binding, or a create that names the node), its incarnation ``life`` (how many creates of
    the name came before it, its own included: 0 for writes to a pod created before the trace)
    and ``bound_rv``, the rv of its incarnation's latest such write at or before it (null if
    none).

    Grouped by pod with a radix sort of codes and segment scans: a window over a million pod
    names in DuckDB costs seconds.
    """
    named = pc.fill_null(pc.not_equal(events["name"], ""), False).to_numpy(zero_copy_only=False)
    pods = events.filter(pa.array(is_pod & named))
    pod = pc.binary_join_element_wise(pods["namespace"], pods["name"], "/",
                                      null_handling="skip")
    verb, sub = pods["verb"], pods["subresource"]
    create = pc.and_kleene(pc.equal(verb, "create"), pc.is_null(sub)).to_numpy(False)
    binding = pc.and_kleene(pc.equal(verb, "create"), pc.equal(sub, "binding"))
    binding = pc.fill_null(binding, False).to_numpy(False)
    # a create that names its node places the pod too (views.sql's claims: a mirror pod)
    binds = binding | (create & pc.is_valid(pods["node"]).to_numpy(zero_copy_only=False))
    delete = pc.fill_null(pc.and_kleene(pc.equal(verb, "delete"), pc.is_null(sub)),
                          False).to_numpy(False)
    kind = np.select([create, binding, delete], [KINDS.index(k) for k in KINDS[:3]],
                     KINDS.index("other")).astype(np.int8)
    rv = ints(pods["rv"])
    pod_id = codes(pod).indices.to_numpy(zero_copy_only=False).astype(np.int64)
    order, starts = segments(pod_id)
    life = np.empty(len(rv), dtype=np.int64)
    life[order] = segmented_cumsum(create[order].astype(np.int64), starts)
    # the latest create or placement so far, 2 rv + 1 for a placement: one of this life if odd
    mark = np.where(binds, 2 * rv + 1, np.where(create, 2 * rv, -1))[order]
    segment = np.cumsum(starts)
    latest = np.empty(len(rv), dtype=np.int64)
    latest[order] = segmented_cummax(mark, segment)
    bound = (latest >= 0) & (latest % 2 == 1)
    return pods.select(["rv", "commit_ts", "node"]).append_column("pod", pod).append_column(
        "pod_id", pa.array(pod_id)).append_column(
        "kind", pa.DictionaryArray.from_arrays(pa.array(kind), KINDS)).append_column(
        "kind_code", pa.array(kind)).append_column("binds", pa.array(binds)).append_column(
        "life", pa.array(life)).append_column("bound_rv", pa.array(latest // 2, mask=~bound))


def lives(history: pa.Table) -> pa.Table:
    """One row per incarnation of ``_pod_history``: pod, pod_id, life, how many ``bindings``
    (writes that bind it: ``binds``), the first one's rv (``bind_rv``), node and commit
    (``bound_ts``), the first delete's rv
    (``first_delete_rv``), the last one's (``delete_rv``) and its commit (``deleted_ts``)."""
    kind = history["kind_code"].to_numpy()
    pod_id, life = ints(history["pod_id"]), ints(history["life"])
    key = pod_id * (int(life.max(initial=0)) + 1) + life
    order = stable_order(key, int(key.max(initial=0)) + 1)
    grouped = key[order]
    first = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]]) if len(order) else \
        np.zeros(0, dtype=np.int64)
    never = len(kind)  # a position past every row: none

    def reduce(ufunc, where: np.ndarray, otherwise: int) -> np.ndarray:
        """Per incarnation, the first or last (``ufunc``) row where ``where`` holds (rows of an
        incarnation are in rv order)."""
        return ufunc.reduceat(np.where(where[order], order, otherwise), first) \
            if len(first) else np.zeros(0, dtype=np.int64)

    binding = history["binds"].to_numpy(zero_copy_only=False)
    delete = kind == KINDS.index("delete")
    bind_at = reduce(np.minimum, binding, never)
    first_delete, last_delete = reduce(np.minimum, delete, never), reduce(np.maximum, delete, -1)
    bindings = np.add.reduceat(binding[order].astype(np.int64), first) if len(first) else bind_at

    def at(rows: np.ndarray, column: str) -> pa.Array:
        """``column`` at ``rows``, null where a row is none."""
        missing = (rows < 0) | (rows >= never)
        return history[column].take(pa.array(np.where(missing, 0, rows), mask=missing))

    return pa.table({
        "pod": history["pod"].take(pa.array(order[first])), "pod_id": pod_id[order[first]],
        "life": life[order[first]], "bindings": bindings,
        "bind_rv": at(bind_at, "rv"), "bind_node": at(bind_at, "node"),
        "bound_ts": at(bind_at, "commit_ts"), "first_delete_rv": at(first_delete, "rv"),
        "delete_rv": at(last_delete, "rv"), "deleted_ts": at(last_delete, "commit_ts")})


def ended_writes(history: pa.Table, terminal: np.ndarray) -> np.ndarray:
    """Per row of ``_pod_history`` (``terminal``: whether its write set or found a terminal
    phase, its event's ``pod_state``), whether its pod had ended before it, so that a watch of
    non-terminal pods does not receive it: a later write of an incarnation that a write before
    set in a terminal phase, or any write of one that the run did not create (``life`` 0: not
    in the trace, not listed) whose first terminal write is its delete (it ran to its end
    before the trace)."""
    rows = np.flatnonzero(terminal)
    if not len(rows):
        return np.zeros(len(terminal), dtype=bool)
    pod_id, life, rv = ints(history["pod_id"]), ints(history["life"]), ints(history["rv"])
    _, incarnation = np.unique(pod_id * (int(life.max(initial=0)) + 1) + life,
                               return_inverse=True)
    first = np.full(int(incarnation.max()) + 1, len(rv))  # its first terminal row (rv order)
    np.minimum.at(first, incarnation[rows], rows)
    ends = first < len(rv)
    at = np.minimum(first, len(rv) - 1)
    end_rv = np.where(ends, rv[at], np.iinfo(np.int64).max)
    before = ends & (life[at] == 0) & (history["kind_code"].to_numpy()[at] == KINDS.index("delete"))
    ended: np.ndarray = (rv > end_rv[incarnation]) | before[incarnation]
    return ended


def free_after_each_change(changes: pa.Table) -> pa.Table:
    """``changes`` (capacity_changes) with, per node in rv order, the free capacity after each
    and ``last_shrink_rv`` (the rv of the node's latest allocatable decrease so far)."""
    rv = ints(changes["rv"])
    node = codes(changes["node"]).indices.to_numpy(zero_copy_only=False).astype(np.int64)
    by_rv = np.argsort(rv)  # rvs are distinct
    order = by_rv[stable_order(node[by_rv], int(node.max(initial=0)) + 1)]
    grouped = node[order]
    starts = np.r_[True, grouped[1:] != grouped[:-1]] if len(order) else np.zeros(0, bool)
    deltas = {r: pc.fill_null(changes[c], 0).to_numpy() for r, c in
              (("cpu", "cpu_milli"), ("memory", "memory_bytes"), ("gpu", "gpu_milli"))}
    free = {}
    for resource, delta in deltas.items():
        free[resource] = np.empty(len(delta), dtype=np.int64)
        free[resource][order] = segmented_cumsum(delta[order].astype(np.int64), starts)
    node_change = pc.equal(changes["change"], "node").to_numpy(zero_copy_only=False)
    shrinks = node_change & (np.minimum.reduce(list(deltas.values())) < 0)
    last = np.empty(len(rv), dtype=np.int64)
    last[order] = segmented_cummax(np.where(shrinks, rv, -1)[order], np.cumsum(starts))
    return changes.select(["rv", "commit_ts", "node", "change", "pod", "attempt_id", "cpu_milli",
                           "memory_bytes", "gpu_milli"]).append_column(
        "free_cpu", pa.array(free["cpu"])).append_column(
        "free_memory", pa.array(free["memory"])).append_column(
        "free_gpu", pa.array(free["gpu"])).append_column(
        "last_shrink_rv", pa.array(last, mask=last < 0))


# how deliveries are ordered (``_how_ordered``): by watcher, then rv, already; each watcher's rvs
# never decreasing, so that a stable sort by watcher orders them; neither
IN_ORDER, RISING, UNORDERED = range(3)


def watcher_then_rv(watcher: np.ndarray, rv: np.ndarray, watchers: int) -> np.ndarray | None:
    """The order that sorts deliveries by watcher (codes below ``watchers``), then rv, equal
    ones keeping their order; None if they are already (each watcher's deliveries together, in
    increasing rv: the documented order).

    The what-if models write their deliveries in rv order: a stable radix sort by watcher is
    then the whole order, at a fraction of ``np.lexsort``'s cost (27.1M deliveries).  Which
    case holds is one compiled pass (``_how_ordered``); numpy's whole-array tests of it, the
    second on the watchers and rvs gathered in the sorted order, took 1.0-2.2 s of a 1M-pod
    what-if run's check."""
    if len(rv) < 2:
        return None
    how = _how_ordered(watcher, rv, max(watchers, 1))
    if how == IN_ORDER:
        return None
    if how == RISING:
        return stable_order(watcher, max(watchers, 1))
    return np.lexsort((rv, watcher))


@njit(cache=True, nogil=True)
def _how_ordered(watcher, rv, watchers):  # pragma: no cover - compiled
    """``IN_ORDER``, ``RISING`` or ``UNORDERED``: each watcher's latest rv in a slot."""
    latest = np.empty(watchers, rv.dtype)
    seen = np.zeros(watchers, np.bool_)
    together = increasing = True
    for i in range(len(rv)):
        w = watcher[i]
        if seen[w]:
            if rv[i] < latest[w]:
                return UNORDERED
            increasing = increasing and rv[i] > latest[w]
            together = together and watcher[i - 1] == w
        latest[w], seen[w] = rv[i], True
    return IN_ORDER if together and increasing else RISING


def iso(us: int) -> str | None:
    if us == -1:
        return None
    return np.datetime64(int(us), "us").astype(str) + "Z"
