"""The workload a what-if replay keeps from a trace, and what it sets aside.

Kept, at their recorded times: node writes (creates and allocatable changes, deletes, heartbeats),
pod creates, and writes to every other resource (they load the API server's pipeline too).  Pod
deletes are kept but re-timed: a pod runs for as long as it ran in the recording, counted from its
binding in the what-if replay (the recording's binding, else its ``scheduled_ts`` column, else its
create marks when it started; its first status write setting a terminal phase, else its delete,
when it ended: a Job's pod that ran to its end is deleted in the replay when it ended, for every
cache drops a terminal pod).  A pod that the recording says never ran (a trace with a
``scheduled_ts`` column where this pod's is null) is deleted at its recorded time instead.  Set
aside: the recorded placements (bindings) and every other pod write (status patches, scheduler and
dispatcher patches), which belonged to them; failed writes, which changed nothing; and writes to
pods created before the trace began (observe lists them as every cache held them, ``InitialList``;
a what-if model starts from none of them).  Nodes made before the trace are listed, as observe
lists them: in every cache from the trace's first write, with the allocatable their writes say
(``listed_node``).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import polars as pl

from replay.engine.cluster import NEVER, NODE_KINDS, Request, WriteKind
from replay.trace.recorded import (IS_BINDING, IS_POD, RESOURCE_COLUMNS, PodHistory, RowMasks,
                                   allocatable_unknown, created_before, created_placed,
                                   listed_nodes, mask, phases_unknown, without_bodies)


@dataclass
class Workload:
    node_names: list[str]
    start: int  # the trace's first commit (µs): when the listed nodes are in every cache
    # The writes replayed at their recorded times, in trace order
    row: np.ndarray  # trace row
    ts: np.ndarray  # µs
    kind: np.ndarray
    node: np.ndarray  # node index, -1 if none
    pod: np.ndarray  # pod (incarnation) index, -1 if none
    alloc: np.ndarray  # (rows, 3) allocatable of NODE_SET writes
    # The nodes the trace did not see created, listed in every cache at its first write with
    # the allocatable their first writes say (``recorded.listed_nodes``), and that allocatable
    listed_node: np.ndarray  # node index
    listed_alloc: np.ndarray  # (listed, 3)
    # Per pod (incarnation)
    namespace: list[str | None]
    name: list[str]
    request: list[Request]  # equal requests are one tuple
    run_us: np.ndarray  # how long it runs once bound; NEVER: until the end
    scheduler_name: list[str | None]
    group: list[str | None]
    priority: np.ndarray
    group_size: dict[str, int]
    notes: list[str]  # what the workload set aside that bears on the numbers

    @classmethod
    def of(cls, trace: pl.DataFrame) -> Workload:
        masks = RowMasks(trace)  # (one set of row masks for the history, the times and the notes)
        history = PodHistory.of(trace, masks)
        ok = masks.ok
        ts = trace["ts"].dt.epoch("us").to_numpy()
        names = node_names(trace)
        node_index = {name: i for i, name in enumerate(names)}

        kind = np.full(trace.height, -1, dtype=np.int8)
        is_node = mask(trace, pl.col("resource") == "nodes") & ok
        sets = is_node & mask(trace, pl.col("verb").is_in(["create", "update", "patch"])
                              & pl.col("cpu_milli").is_not_null())
        kind[is_node] = WriteKind.NODE_OTHER
        kind[sets] = WriteKind.NODE_SET
        kind[is_node & mask(trace, pl.col("verb").is_in(["delete", "deletecollection"]))] = WriteKind.NODE_DELETE
        kind[ok & ~mask(trace, IS_POD) & ~is_node] = WriteKind.OTHER

        created = history.first(masks.ok_create)
        has_create = created >= 0
        deleted = history.last(masks.ok_delete)
        started, never_ran = _starts(trace, masks, history, created, ts)
        kind[created[has_create]] = WriteKind.POD_CREATE
        on_time = has_create & (deleted >= 0) & never_ran  # deleted at its recorded time
        kind[deleted[on_time]] = WriteKind.POD_DELETE
        ended = _ends(history, masks, deleted)
        run_us = np.where(has_create & (ended >= 0) & ~never_ran,
                          ts[np.maximum(ended, 0)] - started, NEVER)

        rows = np.flatnonzero(kind >= 0)
        row_names = trace["name"].to_numpy()[rows]
        node_of_row = np.array([node_index.get(n, -1) if k in NODE_KINDS
                                else -1 for n, k in zip(row_names, kind[rows].tolist())],
                               dtype=np.int64)
        alloc = (trace.select(pl.col("cpu_milli", "memory_bytes", "gpu_milli").fill_null(0))
                 .to_numpy()[rows].astype(np.int64))
        pod_of_row = np.where(history.incarnation[rows] >= 0, history.incarnation[rows], -1)
        create_rows = np.where(has_create, created, 0)
        pods = trace[create_rows].select(
            "namespace", "name", "scheduler_name", "group",
            pl.col("cpu_milli", "memory_bytes", "gpu_milli").fill_null(0),
            pl.col("priority").fill_null(0))
        groups = pods.filter(pl.Series(has_create) & pl.col("group").is_not_null())["group"]
        listed = listed_nodes(trace, masks)
        committed = np.flatnonzero(ok)
        return cls(
            node_names=names, start=int(ts[committed[0]]) if len(committed) else 0, row=rows,
            ts=ts[rows], kind=kind[rows], node=node_of_row, pod=pod_of_row, alloc=alloc,
            listed_node=np.array([node_index[n] for n in listed["name"]], dtype=np.int64),
            listed_alloc=listed.select(pl.col(RESOURCE_COLUMNS).fill_null(0)).to_numpy()
            .astype(np.int64).reshape(-1, 3),
            namespace=_shared(pods["namespace"].to_list()), name=pods["name"].to_list(),
            request=_shared(pods.select("cpu_milli", "memory_bytes", "gpu_milli").iter_rows()),
            run_us=run_us, scheduler_name=_shared(pods["scheduler_name"].to_list()),
            group=_shared(pods["group"].to_list()), priority=pods["priority"].to_numpy(),
            group_size={g: n for g, n in groups.value_counts().iter_rows()},
            notes=_notes(trace, masks, history, has_create, names),
        )


Shared = TypeVar("Shared", bound=Hashable)


def _shared(values: Iterable[Shared]) -> list[Shared]:
    """The values as a list in which equal values are one object: a namespace, a scheduler
    name or a request repeats for many pods (a copy each would be 60-100 bytes a pod)."""
    seen: dict[Shared, Shared] = {}
    return [seen.setdefault(value, value) for value in values]


def node_names(trace: pl.DataFrame) -> list[str]:
    """Every node the trace names: node objects and binding targets, sorted."""
    return pl.concat([
        trace.filter(pl.col("resource") == "nodes")["name"],
        trace.filter(IS_BINDING)["node"].drop_nulls(),
    ]).unique().sort().to_list()


def _notes(trace: pl.DataFrame, masks: RowMasks, history: PodHistory, has_create: np.ndarray,
           nodes: list[str]) -> list[str]:
    """What the workload sets aside or cannot know that bears on the numbers."""
    return [*created_before(int(np.count_nonzero(~has_create)), history.incarnations,
                            "they are set aside (a what-if model starts from none of them, "
                            "whatever their writes' bodies say of them), so the model places "
                            "the others on nodes that hold none of them"),
            *without_bodies(trace, masks, bindings=False),
            *phases_unknown(trace, masks, "a pod runs until its recorded delete"),
            *allocatable_unknown(trace, masks, nodes, "a what-if model places no pod on them",
                                 "a what-if model places no pod on them until then"),
            *created_placed(trace, masks, "the model schedules these pods anew")]


def _ends(history: PodHistory, masks: RowMasks, deleted: np.ndarray) -> np.ndarray:
    """Per pod, the row where it stopped holding its node in the recording (-1 if none): its
    first status write setting a terminal phase (a Job's pod that ran to its end; the Job keeps
    it until much later), else its last delete."""
    terminal = history.first(masks.ok_end)
    return np.where(terminal >= 0, terminal, deleted)


def _starts(trace: pl.DataFrame, masks: RowMasks, history: PodHistory, created: np.ndarray,
            ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per pod: when it started running in the recording (µs), and whether it never did."""
    bound = history.first(masks.ok_binding)
    start = np.where(bound >= 0, ts[np.maximum(bound, 0)], ts[np.maximum(created, 0)])
    never_ran = np.zeros(len(created), dtype=bool)
    if "scheduled_ts" in trace.columns:
        scheduled = trace["scheduled_ts"].dt.epoch("us").to_numpy()[np.maximum(created, 0)]
        known = ~np.isnan(scheduled.astype(float)) if scheduled.dtype.kind == "f" else \
            ~pl.Series(scheduled).is_null().to_numpy()
        start = np.where((bound < 0) & known, scheduled, start)
        never_ran = (bound < 0) & ~known & (created >= 0)
    return start.astype(np.int64), never_ran
