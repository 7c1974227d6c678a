"""What a recorded trace says about each pod: its incarnations, bindings, deletes and attempts.

A pod is a name (``namespace/name``); a committed create starts a new *incarnation* of that name
(StatefulSets re-create pods under the same name), and writes to a pod created before the trace
began form an incarnation with no create.  Everything here is computed with one sort of the pod
rows by name and numpy segment operations, because grouping a million pod names with dataframe
window functions costs seconds.

The replays' notes (``Model.notes``: pods created before the trace began, bodies a Metadata-level
log leaves out, pods created already placed, phases unknown, nodes whose allocatable no write
says) are worded here, once for observe and the what-if workload.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import polars as pl

from replay.arrays import hash_sort
from replay.jit import njit
from replay.trace.schema import WRITE_VERBS

OK = pl.col("code").is_between(200, 299) & pl.col("verb").is_in(WRITE_VERBS)
IS_POD = pl.col("resource") == "pods"
IS_BINDING = IS_POD & pl.col("subresource").eq_missing("binding") & (pl.col("verb") == "create")
IS_POD_CREATE = IS_POD & (pl.col("verb") == "create") & pl.col("subresource").is_null()
IS_POD_DELETE = IS_POD & (pl.col("verb") == "delete") & pl.col("subresource").is_null()
# a write that places a pod on a node: a binding, or a create that names the node already (a
# static pod's mirror pod, which its kubelet creates; a pod an operator placed by hand)
PLACES = IS_BINDING | (IS_POD_CREATE & pl.col("node").is_not_null())
# a pod in either phase runs no more and holds nothing: the schedulers' informers select
# non-terminal pods (``newPodInformer``, pkg/scheduler/scheduler.go) and a kubelet admits
# against its active ones
TERMINAL_PHASES = ("Succeeded", "Failed")
# a pod's status write that sets a terminal phase (the trace's optional ``phase`` column)
ENDS = IS_POD & pl.col("phase").is_in(TERMINAL_PHASES)
NO_BODIES = "the log left out their bodies, as a Metadata-level log does"


def mask(trace: pl.DataFrame, condition: pl.Expr) -> np.ndarray:
    """``condition`` per trace row as a numpy boolean array (null counts as false)."""
    return trace.select(condition.fill_null(False)).to_series().to_numpy()


def pod_name() -> pl.Expr:
    """``namespace/name``, or just the name for a pod with no namespace."""
    return pl.concat_str("namespace", "name", separator="/", ignore_nulls=True)


class RowMasks:
    """The row masks of one trace that the models ask for, each computed once, when first
    asked for (numpy booleans; null counts as false)."""

    def __init__(self, trace: pl.DataFrame):
        self.trace = trace

    @cached_property
    def ok(self) -> np.ndarray:
        return mask(self.trace, OK)

    @cached_property
    def binding(self) -> np.ndarray:
        """Every recorded binding, committed or failed."""
        return mask(self.trace, IS_BINDING)

    @cached_property
    def ok_binding(self) -> np.ndarray:
        return self.ok & self.binding

    @cached_property
    def ok_placement(self) -> np.ndarray:
        """Every committed write that places a pod on a node (``PLACES``)."""
        return self.ok & mask(self.trace, PLACES)

    @cached_property
    def ok_end(self) -> np.ndarray:
        """Every committed status write that sets a pod's terminal phase (``ENDS``); none in a
        trace without the optional ``phase`` column."""
        if "phase" not in self.trace.columns:
            return np.zeros(self.trace.height, dtype=bool)
        return self.ok & mask(self.trace, ENDS)

    @cached_property
    def ok_create(self) -> np.ndarray:
        return self.ok & mask(self.trace, IS_POD_CREATE)

    @cached_property
    def ok_delete(self) -> np.ndarray:
        return self.ok & mask(self.trace, IS_POD_DELETE)

    @cached_property
    def node(self) -> np.ndarray:
        """Writes to node objects."""
        return mask(self.trace, pl.col("resource") == "nodes")

    @cached_property
    def named_pod(self) -> np.ndarray:
        return mask(self.trace, IS_POD & pl.col("name").ne(""))


# --- what a replay says about the trace it replays (``Model.notes``) ---------------------------

def created_before(pods: int, incarnations: int, effect: str) -> list[str]:
    """The note of a replay ``pods`` of whose ``incarnations`` have writes but no create in the
    trace (they existed before it began, as in a log of a running cluster), with its
    ``effect``; none when every pod is created in the trace."""
    if not pods:
        return []
    return [f"{pods:,} of {incarnations:,} pods existed before the trace began (writes but no "
            f"create): {effect} (traces/README.md: a log of a running cluster)"]


def unborn_effect(existed: int, listed: int, unknown: str) -> str:
    """What becomes of the ``existed`` pods the trace did not see created, ``listed`` of which
    their writes' bodies describe (``InitialList``); ``unknown``: of the others."""
    if not listed:
        return unknown
    said = ("listed at its start (events.origin 'list') with the node and requests that their "
            "writes' bodies say")
    if listed == existed:
        return f"all are {said}"
    return (f"{listed:,} are {said}; of the other {existed - listed:,} (their bodies say "
            f"neither, or they ran to their end before it) {unknown}")


def without_bodies(trace: pl.DataFrame, masks: RowMasks, bindings: bool) -> list[str]:
    """The notes of a replay of a trace whose writes lack the bodies their columns come from
    (a Metadata-level audit log): pod creates with no requests and, if ``bindings`` are
    replayed, bindings with no node."""
    notes = []
    creates = np.count_nonzero(masks.ok_create)
    unknown = np.count_nonzero(masks.ok_create & mask(trace, pl.all_horizontal(
        pl.col("cpu_milli", "memory_bytes", "gpu_milli").is_null())))
    if unknown:
        notes.append(f"{unknown:,} of {creates:,} pod creates carry no requests ({NO_BODIES}): "
                     "those pods request nothing in this replay")
    nowhere = np.count_nonzero(masks.ok_binding & mask(trace, pl.col("node").is_null())) \
        if bindings else 0
    if nowhere:
        notes.append(f"{nowhere:,} of {np.count_nonzero(masks.ok_binding):,} bindings name no "
                     f"node ({NO_BODIES}): those pods are bound to no node, so no kubelet sees "
                     "them and they hold no capacity")
    return notes


def allocatable_unknown(trace: pl.DataFrame, masks: RowMasks, nodes: list[str], effect: str,
                        late_effect: str) -> list[str]:
    """The notes of a replay of ``nodes`` whose allocatable no write carries (a node made before
    the trace, whose status writes the log keeps without their bodies, or whose kubelet's patches
    leave allocatable out, as they do when it has not changed), with its ``effect``; and of nodes
    created in the trace by a create that does not say it, a later write saying it, with its
    ``late_effect``.  (A node made before the trace is listed with the allocatable its later
    writes say: ``InitialList.nodes``.)"""
    says = pl.any_horizontal(pl.col(RESOURCE_COLUMNS).is_not_null())
    said = trace.filter(pl.Series(masks.ok & masks.node)).group_by("name").agg(
        any=says.any(), late=(pl.col("verb").first() == "create") & ~says.first())
    named = pl.DataFrame({"name": nodes}, schema={"name": pl.String}).join(
        said, on="name", how="left")
    never = named.height - int(named["any"].sum())
    late = int((named["any"] & named["late"]).sum())
    notes = []
    if never:
        notes.append(f"{never:,} of {len(nodes):,} nodes: no write of theirs says their "
                     f"allocatable (made before the trace, with status writes that leave it out): "
                     f"{effect} (traces/README.md: a log of a running cluster)")
    if late:
        notes.append(f"{late:,} of {len(nodes):,} nodes: their create does not say their "
                     f"allocatable, a later write does (the log left out the create's body): "
                     f"{late_effect}")
    return notes


def phases_unknown(trace: pl.DataFrame, masks: RowMasks, effect: str) -> list[str]:
    """The note of a replay of a trace whose pod status writes say no phase anywhere (a
    Metadata-level log, or a trace made before its optional ``phase`` column), with its
    ``effect``: a pod that ran to its end is not seen to end before its delete."""
    known = "phase" in trace.columns and trace["phase"].null_count() < trace.height
    writes = 0 if known else np.count_nonzero(masks.ok & mask(
        trace, IS_POD & (pl.col("subresource") == "status")))
    if not writes:
        return []
    none = "none saying" if writes > 1 else "not saying"
    return [f"{writes:,} pod status write{'s' if writes > 1 else ''}, {none} the pod's phase (the "
            f"log left out their bodies, or the trace has no phase column): {effect} "
            "(traces/README.md: a pod that ran to its end)"]


def created_placed(trace: pl.DataFrame, masks: RowMasks, effect: str) -> list[str]:
    """The note of a what-if replay of a trace whose pod creates name their node already (a
    static pod's mirror pod, which its kubelet creates), with its ``effect``: observe places
    such a pod at its create (``PLACES``), and so do the what-if models where they have its
    node."""
    placed = np.count_nonzero(masks.ok_create & mask(trace, pl.col("node").is_not_null()))
    if not placed:
        return []
    return [f"{placed:,} of {np.count_nonzero(masks.ok_create):,} pod creates name their node "
            f"already (static pods' mirror pods, or pods placed by whoever created them): "
            f"{effect}"]


def bound_again(history: PodHistory, masks: RowMasks) -> list[str]:
    """The note of a replay of a trace that binds a pod again while it is placed (bound, or
    created on its node), which the API server refuses (409): the log lost the pod's delete and
    create between the two."""
    pods = history.incarnation[masks.ok_placement]
    twice = np.count_nonzero(np.bincount(pods[pods >= 0], minlength=history.incarnations) > 1)
    if not twice:
        return []
    pods_are, them = ("pods are", "them") if twice > 1 else ("pod is", "it")
    return [f"{twice:,} {pods_are} bound again while bound, with no delete between, which the "
            "API server refuses (409): the log lost rows (an audit backend in batch mode drops "
            f"events when its buffer is full); the first node's kubelet keeps {them}, and "
            "`replay check` fails one_binding_per_incarnation"]


@dataclass
class InitialList:
    """The objects a trace did not see created, as every cache held them when it began.

    A log of a running cluster begins after its pods and nodes were created, and every cache
    had them then: an informer starts from a list (client-go's reflector, ``ListAndWatch``) and
    a scheduler waits for its caches to sync before it schedules.  What the trace says of such
    an object is what its later writes' bodies carry: a pod's node (its spec.nodeName, unless
    the trace binds it: then it was pending) and requests, a node's allocatable (each resource
    the first value written).  A pod whose first write saying its phase is a delete finding it
    ``Succeeded`` or ``Failed`` ran to its end before the trace and holds nothing: it is not
    listed.  An object whose writes carry none of these (a Metadata-level log) is not listed
    either: the replays know nothing of it.

    ``pods``: incarnation, namespace, name, node, cpu_milli, memory_bytes, gpu_milli, and
    ``spec_row``, the row whose body said its requests (else its first row: a what-if replay
    reads its scheduler name, gang and priority there); ``nodes``: name, cpu_milli,
    memory_bytes, gpu_milli, and max_pods where the trace has it; each in the order of their
    names."""

    pods: pl.DataFrame
    nodes: pl.DataFrame

    @classmethod
    def of(cls, trace: pl.DataFrame, masks: RowMasks,
           history: Callable[[], PodHistory]) -> InitialList:
        """``history`` is asked for only if some pod write could describe a pod (its node or
        requests, outside creates and bindings): a trace made by synth, or of a Metadata-level
        log, lists no pod without the history (half a second at a million pods, which observe
        needs before its first table only then)."""
        return cls(_listed_pods(trace, masks, history), _listed_nodes(trace, masks))

    def __len__(self) -> int:
        return self.pods.height + self.nodes.height

    @cached_property
    def events(self) -> pl.DataFrame:
        """The listed objects as creates (nodes, then pods): namespace, name, resource, node
        (a node's own name), cpu_milli, memory_bytes, gpu_milli, max_pods (a node's, where the
        trace says it)."""
        limit = pl.col("max_pods") if "max_pods" in self.nodes.columns else pl.lit(None, pl.Int64)
        nodes = self.nodes.select(pl.lit(None, pl.String).alias("namespace"), "name",
                                  pl.lit("nodes").alias("resource"), pl.col("name").alias("node"),
                                  *RESOURCE_COLUMNS, limit.alias("max_pods"))
        pods = self.pods.select("namespace", "name", pl.lit("pods").alias("resource"), "node",
                                *RESOURCE_COLUMNS, pl.lit(None, pl.Int64).alias("max_pods"))
        return pl.concat([nodes, pods])


RESOURCE_COLUMNS = ("cpu_milli", "memory_bytes", "gpu_milli")


@dataclass(frozen=True)
class TerminalPhases:
    """Per trace row, as a watch of non-terminal pods sees it (a scheduler's:
    ``WatcherSpec.sees_terminal_pods``): whether it ``ends`` its pod, being the first committed
    write of the pod's incarnation to set or find a terminal phase (to such a watch, the pod's
    deletion), and whether its pod had ``ended`` before it (such a watch does not receive it)."""

    ends: np.ndarray
    ended: np.ndarray


def terminal_phases(masks: RowMasks, history: PodHistory, listed: np.ndarray) -> TerminalPhases:
    """``TerminalPhases`` of a trace.  A pod that ran to its end before the trace had ended
    before each of its writes: one the trace did not see created, not in the first list
    (``listed``: those incarnations; ``InitialList``), whose first terminal write is its
    delete."""
    first_end = history.first(masks.ok_end)
    before = (history.first(masks.ok_create) < 0) & (first_end >= 0) \
        & masks.ok_delete[np.maximum(first_end, 0)]
    before[listed] = False
    incarnation = history.incarnation
    pod = incarnation >= 0
    end_row = np.where(pod, first_end[np.maximum(incarnation, 0)], -1)
    ended_before = pod & before[np.maximum(incarnation, 0)]
    rows = np.arange(len(incarnation))
    return TerminalPhases(ends=(end_row == rows) & ~ended_before,
                          ended=((end_row >= 0) & (rows > end_row)) | ended_before)


def _listed_pods(trace: pl.DataFrame, masks: RowMasks,
                 history_of: Callable[[], PodHistory]) -> pl.DataFrame:
    """``InitialList.pods``."""
    committed_pod = masks.ok & masks.named_pod
    names_node = committed_pod & mask(trace, pl.col("node").is_not_null())
    requests = committed_pod & mask(trace, pl.any_horizontal(
        pl.col(RESOURCE_COLUMNS).is_not_null()))
    if not np.any((names_node & ~masks.binding | requests) & ~masks.ok_create):
        return pl.DataFrame(schema={"incarnation": pl.Int64, "namespace": pl.String,
                                    "name": pl.String, "node": pl.String,
                                    **dict.fromkeys(RESOURCE_COLUMNS, pl.Int64),
                                    "spec_row": pl.Int64})
    history = history_of()
    unborn = history.first(masks.ok_create) < 0
    placed_later = history.first(masks.ok_placement) >= 0
    node_row = history.first(names_node)
    request_row = history.first(requests)
    phase_row = (history.first(committed_pod & mask(trace, pl.col("phase").is_not_null()))
                 if "phase" in trace.columns else np.full(history.incarnations, -1))
    ended_before = (phase_row >= 0) & (masks.ok_end & masks.ok_delete)[np.maximum(phase_row, 0)]
    on_node = (node_row >= 0) & ~placed_later
    listed = np.flatnonzero(unborn & ~ended_before & (on_node | (request_row >= 0)))
    first_row = history.rows[history.starts[listed]]
    columns = trace.select("namespace", "name", "node", *RESOURCE_COLUMNS).rechunk()
    at = {"name": first_row, "node": np.where(on_node[listed], node_row[listed], -1),
          "requests": request_row[listed]}
    return pl.concat([pl.DataFrame({"incarnation": listed}),
                      columns.select("namespace", "name")[at["name"]],
                      gathered(columns, ["node"], at["node"]),
                      gathered(columns, list(RESOURCE_COLUMNS), at["requests"]),
                      pl.DataFrame({"spec_row": np.where(at["requests"] >= 0, at["requests"],
                                                         first_row)})],
                     how="horizontal").sort("namespace", "name", nulls_last=False)


def gathered(columns: pl.DataFrame, names: list[str], rows: np.ndarray) -> pl.DataFrame:
    """``columns``' ``names`` at ``rows``, null where a row is -1 (rows in any order: polars
    gathers from one chunk fifteen times faster than from a trace's row groups, so
    ``columns`` should be rechunked)."""
    return columns.select(pl.when(pl.Series(rows >= 0)).then(
        pl.col(names).gather(np.maximum(rows, 0))))


def _listed_nodes(trace: pl.DataFrame, masks: RowMasks) -> pl.DataFrame:
    """``InitialList.nodes``: the nodes whose first committed write is not their create, with
    the first value of each resource written before their first create or delete."""
    limits = [c for c in ("max_pods",) if c in trace.columns]  # (a trace read without it)
    writes = trace.select("verb", "name", *RESOURCE_COLUMNS, *limits).filter(
        pl.Series(masks.ok & masks.node))
    starts_life = pl.col("verb").is_in(["create", "delete"])
    return (writes.filter((starts_life.cum_sum().over("name") == 0)
                          & ~(pl.col("verb").first().over("name") == "create"))
            .group_by("name").agg(pl.col(*RESOURCE_COLUMNS, *limits).drop_nulls().first())
            .filter(pl.any_horizontal(pl.col(RESOURCE_COLUMNS).is_not_null()))
            .sort("name"))


def by_name(names: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """The order that puts ``names`` together by name, each name's rows in their own order, and
    per row of that order whether it begins a name.

    The rows are sorted by a 64-bit hash of the name, two to three times faster than by the
    strings.  Two names can share a hash (with about 2**-65 times the squared number of names as
    probability, 3e-8 for a million pods), and would then be one pod.  A second hash, with
    another seed, checks every name's rows; where it differs within one first hash, the rows
    are sorted again by the first hash and then by the name itself.  What remains is two names
    sharing both hashes: 2**-128 for a pair."""
    key = name_hash(names, seed=0)
    order, sorted_key = hash_sort(key)
    if len(order) == 0:
        return order, np.zeros(0, dtype=bool)
    new_name = np.r_[True, sorted_key[1:] != sorted_key[:-1]]
    check = name_hash(names, seed=1)[order]
    if np.any((check[1:] != check[:-1]) & ~new_name[1:]):
        exact = names.rank("dense").to_numpy()
        order = np.lexsort((exact, key))  # stable: each name's rows stay in their order
        sorted_name = exact[order]  # one rank per name: where it changes, a name begins
        new_name = np.r_[True, sorted_name[1:] != sorted_name[:-1]]
    return order, new_name


def name_hash(names: pl.Series, seed: int) -> np.ndarray:
    """polars' 64-bit hash of each name."""
    return names.hash(seed=seed).to_numpy()


@dataclass
class PodHistory:
    """Per trace row (all rows, -1 for rows that are not pod writes): the pod incarnation it
    belongs to, and the row of that incarnation's latest committed placement (``PLACES``) as of
    that row.

    Numbering the incarnations, and finding each one's first or last row of a kind, are
    compiled loops over the rows (``_incarnations``, ``_row_per``): as numpy's whole-array
    steps (a running sum, gathers and scatters, ``np.minimum.at``) they were a third of
    ``PodHistory`` at a million pods."""

    incarnation: np.ndarray  # int64 per trace row
    incarnations: int
    rows: np.ndarray  # the pod rows by incarnation, each incarnation's rows in trace order
    starts: np.ndarray  # where each incarnation begins in ``rows``
    pods: pl.Series  # each incarnation's pod (``namespace/name``)
    ok_placement: np.ndarray  # per trace row: a committed write that places a pod

    @classmethod
    def of(cls, trace: pl.DataFrame, masks: RowMasks | None = None) -> PodHistory:
        masks = masks or RowMasks(trace)
        pod_rows = np.flatnonzero(masks.named_pod)
        names = (trace.select("namespace", "name").filter(pl.Series(masks.named_pod))
                 .select(pod_name()).to_series().rechunk())  # one chunk: gathers 15x faster
        order, new_name = by_name(names)
        rows = pod_rows[order]
        per_row, starts = _incarnations(rows, new_name, masks.ok_create, trace.height)
        return cls(per_row, len(starts), rows, starts, names.gather(order[starts]),
                   masks.ok_placement)

    @cached_property
    def last_placement(self) -> np.ndarray:
        """int64 per trace row (made when first asked for: only node-bound watchers need it)."""
        return _latest_placement(self.rows, self.starts, self.ok_placement,
                                 len(self.incarnation))

    def first(self, where: np.ndarray) -> np.ndarray:
        """Per incarnation, the first trace row where ``where`` holds (-1 if none)."""
        return _row_per(self.incarnation, where, self.incarnations, True)

    def last(self, where: np.ndarray) -> np.ndarray:
        """Per incarnation, the last trace row where ``where`` holds (-1 if none)."""
        return _row_per(self.incarnation, where, self.incarnations, False)


@njit(cache=True, nogil=True)
def _incarnations(rows, new_name, ok_create, height):  # pragma: no cover - compiled
    """Per trace row, the incarnation of ``rows`` (sorted by name, ``new_name`` where a name
    begins) it is in, -1 if none; and where each incarnation begins in ``rows``: at a name's
    first row and at each committed create."""
    per_row = np.full(height, -1, np.int64)
    starts = np.empty(len(rows), np.int64)
    count = 0
    for i in range(len(rows)):
        if new_name[i] or ok_create[rows[i]]:
            starts[count] = i
            count += 1
        per_row[rows[i]] = count - 1
    return per_row, starts[:count].copy()


@njit(cache=True, nogil=True)
def _latest_placement(rows, starts, ok_placement, height):  # pragma: no cover - compiled
    """Per trace row, the latest committed placement of its incarnation up to it (-1 if
    none)."""
    out = np.full(height, -1, np.int64)
    begins, latest = 0, -1
    for i in range(len(rows)):
        if begins < len(starts) and starts[begins] == i:
            begins, latest = begins + 1, -1
        if ok_placement[rows[i]]:
            latest = rows[i]
        out[rows[i]] = latest
    return out


@njit(cache=True, nogil=True)
def _row_per(incarnation, where, count, first):  # pragma: no cover - compiled
    """Per incarnation, its ``first`` (else last) trace row where ``where`` holds, -1 if none."""
    out = np.full(count, -1, np.int64)
    for row in range(len(where)):
        if where[row] and incarnation[row] >= 0 and (not first or out[incarnation[row]] < 0):
            out[incarnation[row]] = row
    return out
