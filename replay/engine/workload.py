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
dispatcher patches), which belonged to them; and failed writes, which changed nothing.

The objects made before the trace began are listed, as observe lists them (``InitialList``): in
every cache from the trace's first write.  A node with the allocatable its writes say
(``listed_node``); a pod with the requests its writes' bodies say, on the node they say it ran
on (``listed_pod``, ``created_on``): it holds that node until it ended in the recording
(its first terminal status write, else its delete, at its recorded time).  A pod listed pending
(its writes say no node, or the trace binds it) is the model's to schedule, as a pod created at
the trace's first write; once bound it runs as long as it ran in the recording.  A pod whose
writes say neither its node nor its requests (a Metadata-level log), or that ran to its end
before the trace, is set aside: the replays know nothing of it.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import polars as pl

from replay.engine.cluster import NEVER, NODE_KINDS, Request, WriteKind
from replay.trace.recorded import (IS_BINDING, IS_POD, RESOURCE_COLUMNS, InitialList,
                                   PodHistory, RowMasks, allocatable_unknown, created_before,
                                   created_placed, mask, phases_unknown, unborn_effect,
                                   without_bodies)
from replay.trace.schema import NO_POD_LIMIT


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
    alloc: np.ndarray  # (rows, 4) allocatable of NODE_SET writes (``Allocatable``)
    # The nodes the trace did not see created, listed in every cache at its first write with
    # the allocatable their first writes say (``InitialList.nodes``), and that allocatable
    listed_node: np.ndarray  # node index
    listed_alloc: np.ndarray  # (listed, 4)
    # The pods it did not see created, listed after them (``InitialList.pods``), in the
    # order of their names
    listed_pod: np.ndarray  # pod (incarnation) index
    # Per pod (incarnation)
    created_on: np.ndarray  # the node it is created on (listed there, or a mirror pod's), or -1
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

        committed = np.flatnonzero(ok)
        start = int(ts[committed[0]]) if len(committed) else 0
        created = history.first(masks.ok_create)
        has_create = created >= 0
        listed = InitialList.of(trace, masks, lambda: history)
        listed_pod, created_on = _created_on(trace, listed.pods, created, node_index)
        replayed = has_create.copy()
        replayed[listed_pod] = True
        deleted = history.last(masks.ok_delete)
        started, never_ran = _starts(trace, masks, history, created, ts,
                                     np.where(has_create, ts[np.maximum(created, 0)], start))
        kind[created[has_create]] = WriteKind.POD_CREATE
        on_time = has_create & (deleted >= 0) & never_ran  # deleted at its recorded time
        kind[deleted[on_time]] = WriteKind.POD_DELETE
        ended = _ends(history, masks, deleted)
        run_us = np.where(replayed & (ended >= 0) & ~never_ran,
                          ts[np.maximum(ended, 0)] - started, NEVER)

        rows = np.flatnonzero(kind >= 0)
        row_names = trace["name"].to_numpy()[rows]
        node_of_row = np.array([node_index.get(n, -1) if k in NODE_KINDS
                                else -1 for n, k in zip(row_names, kind[rows].tolist())],
                               dtype=np.int64)
        alloc = (trace.select(pl.col("cpu_milli", "memory_bytes", "gpu_milli").fill_null(0),
                              _pod_limits(trace, is_node))
                 .to_numpy()[rows].astype(np.int64))
        pod_of_row = np.where(history.incarnation[rows] >= 0, history.incarnation[rows], -1)
        spec_rows = np.where(has_create, created, 0)  # (a pod's create, or its listing's row)
        spec_rows[listed.pods["incarnation"].to_numpy()] = listed.pods["spec_row"].to_numpy()
        pods = trace[spec_rows].select(
            "namespace", "name", "scheduler_name", "group",
            pl.col("cpu_milli", "memory_bytes", "gpu_milli").fill_null(0),
            pl.col("priority").fill_null(0))
        groups = pods.filter(pl.Series(replayed) & pl.col("group").is_not_null())["group"]
        return cls(
            node_names=names, start=start, row=rows,
            ts=ts[rows], kind=kind[rows], node=node_of_row, pod=pod_of_row, alloc=alloc,
            listed_node=np.array([node_index[n] for n in listed.nodes["name"]], dtype=np.int64),
            listed_alloc=listed.nodes.select(
                pl.col(RESOURCE_COLUMNS).fill_null(0),
                _pod_limit(pl.col("max_pods") if "max_pods" in listed.nodes.columns else None))
            .to_numpy().astype(np.int64).reshape(-1, 4),
            listed_pod=listed_pod, created_on=created_on,
            namespace=_shared(pods["namespace"].to_list()), name=pods["name"].to_list(),
            request=_shared(pods.select("cpu_milli", "memory_bytes", "gpu_milli").iter_rows()),
            run_us=run_us, scheduler_name=_shared(pods["scheduler_name"].to_list()),
            group=_shared(pods["group"].to_list()), priority=pods["priority"].to_numpy(),
            group_size={g: n for g, n in groups.value_counts().iter_rows()},
            notes=_notes(trace, masks, history, has_create, listed.pods.height,
                         listed.pods.height - len(listed_pod), names),
        )


def _pod_limits(trace: pl.DataFrame, is_node: np.ndarray) -> pl.Expr:
    """Per row, the pods its node runs at once as the trace said last (``max_pods``), at a
    node's rows: a node write that does not say it (a patch of another resource) keeps what
    the node's writes said before."""
    if "max_pods" not in trace.columns or trace["max_pods"].null_count() == trace.height:
        return _pod_limit(None)
    nodes = pl.Series(is_node)
    said = trace.select(pl.when(nodes).then(pl.col("max_pods")).alias("said"),
                        pl.when(nodes).then(pl.col("name")).alias("node"))
    return _pod_limit(pl.lit(said.select(pl.col("said").forward_fill().over("node"))["said"]))


def _pod_limit(said: pl.Expr | None) -> pl.Expr:
    """``said`` as a limit of pods: none said, or one beyond ``NO_POD_LIMIT``, is no limit."""
    if said is None:
        return pl.lit(NO_POD_LIMIT, pl.Int64).alias("max_pods")
    return said.fill_null(NO_POD_LIMIT).clip(upper_bound=NO_POD_LIMIT).alias("max_pods")


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


def _created_on(trace: pl.DataFrame, listed: pl.DataFrame, created: np.ndarray,
                node_index: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """The listed pods (``InitialList.pods``) the workload keeps, and per pod the node it is
    created on: a listed pod's (-1: listed pending), or a pod whose create names its node (a
    static pod's mirror pod, which its kubelet creates; -1: the model places the others).  A
    node that no node write or binding of the trace names is in no cache of a what-if model
    (``node_names``): a pod listed on one is set aside, one created on one is scheduled anew."""
    created_on = np.full(len(created), -1, dtype=np.int64)
    has_create = np.flatnonzero(created >= 0)
    named = trace["node"].gather(created[has_create])
    on_node = named.is_not_null().to_numpy()  # (few: a loop over a million creates is 0.2 s)
    created_on[has_create[on_node]] = [node_index.get(n, -1) for n in named.filter(on_node)]
    node = np.array([node_index.get(n, -2) if n is not None else -1 for n in listed["node"]],
                    dtype=np.int64)
    kept = node >= -1
    listed_pod = listed["incarnation"].to_numpy()[kept]
    created_on[listed_pod] = node[kept]
    return listed_pod, created_on


def _notes(trace: pl.DataFrame, masks: RowMasks, history: PodHistory, has_create: np.ndarray,
           listed: int, elsewhere: int, nodes: list[str]) -> list[str]:
    """What the workload sets aside or cannot know that bears on the numbers (``listed``: the
    pods the trace describes, of which ``elsewhere`` on nodes the model does not have)."""
    existed = int(np.count_nonzero(~has_create))
    return [*created_before(existed, history.incarnations, unborn_effect(
                existed, listed, "they are set aside, so the model places the others on nodes "
                "that hold none of them")),
            *([f"{elsewhere:,} pods listed at the trace's start ran on nodes that no node write "
               "or binding of the trace names, which a what-if model does not have: they are "
               "set aside"] if elsewhere else []),
            *without_bodies(trace, masks, bindings=False),
            *phases_unknown(trace, masks, "a pod runs until its recorded delete"),
            *allocatable_unknown(trace, masks, nodes, "a what-if model places no pod on them",
                                 "a what-if model places no pod on them until then"),
            *created_placed(trace, masks, "the model creates each on its node, as the trace "
                            "does, unless no node write or binding of the trace names that node "
                            "(then the model schedules it anew)")]


def _ends(history: PodHistory, masks: RowMasks, deleted: np.ndarray) -> np.ndarray:
    """Per pod, the row where it stopped holding its node in the recording (-1 if none): its
    first status write setting a terminal phase (a Job's pod that ran to its end; the Job keeps
    it until much later), else its last delete."""
    terminal = history.first(masks.ok_end)
    return np.where(terminal >= 0, terminal, deleted)


def _starts(trace: pl.DataFrame, masks: RowMasks, history: PodHistory, created: np.ndarray,
            ts: np.ndarray, first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per pod: when it started running in the recording (µs), and whether it never did.  Its
    binding's commit, else its ``scheduled_ts``, else ``first``: its create's, or the trace's
    start for a listed pod."""
    bound = history.first(masks.ok_binding)
    start = np.where(bound >= 0, ts[np.maximum(bound, 0)], first)
    never_ran = np.zeros(len(created), dtype=bool)
    if "scheduled_ts" in trace.columns:
        scheduled = trace["scheduled_ts"].dt.epoch("us").to_numpy()[np.maximum(created, 0)]
        known = ~np.isnan(scheduled.astype(float)) if scheduled.dtype.kind == "f" else \
            ~pl.Series(scheduled).is_null().to_numpy()
        start = np.where((bound < 0) & known, scheduled, start)
        never_ran = (bound < 0) & ~known & (created >= 0)
    return start.astype(np.int64), never_ran
