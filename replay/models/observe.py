"""``observe``: keep the decisions recorded in the trace; model what each watcher saw, and when.

Every committed write of the trace (a write verb with a 2xx code) goes through the watch pipeline
in trace order; failed writes change nothing in etcd, so nobody is sent them, but a failed binding
is a recorded conflict in ``attempts``.  Nothing here feeds back into the writes, so the whole
replay is a handful of vectorised scans (``Pipeline.scan``).  The tables come one at a time
(``ObserveModel.tables``), so that ``replay run`` writes each while it computes the next.

Default watchers: one per scheduling component in the trace (every component that wrote a binding,
and any Gödel scheduler, binder or dispatcher), watching pods and nodes; and one kubelet per node,
watching its own node and the pods placed on it.

A pod is placed on a node by its first committed binding, or by its create if the create names
the node (``PLACES``: a static pod's mirror pod, which its kubelet creates already placed): its
kubelet receives its writes from then on, it holds its requests there, and the pods table's
``bound_ts``, ``bound_rv`` and ``node`` are that write's.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property, partial

import numpy as np
import polars as pl
import pyarrow as pa

from replay.arrays import previous_in_group, stable_sort
from replay.engine.api import (LISTED_CODE, OUTCOMES, SOURCES, STAGE_COLUMNS, Pipeline,
                               RunConfig, RunTables, Scan, Source, Streams, WatcherSpec,
                               capacities, match, node_index, view_lag_us, watchers_table)
from replay.models.base import Model
from replay.trace.recorded import (IS_BINDING, IS_POD, RESOURCE_COLUMNS, InitialList, PodHistory,
                                   RowMasks, TerminalPhases, allocatable_unknown, bound_again,
                                   created_before, gathered, phases_unknown, terminal_phases,
                                   unborn_effect, without_bodies)

ROLE_OF_COMPONENT = {
    "kube-scheduler": "scheduler",
    "godel-scheduler": "scheduler",
    "godel-binder": "binder",
    "godel-dispatcher": "dispatcher",
}
TS = pa.timestamp("us", tz="UTC")
EVENT_COLUMNS = ("verb", "resource", "subresource", "namespace", "name", "node", "cpu_milli",
                 "memory_bytes", "gpu_milli", "code", "component", "max_pods")
LATEST = np.iinfo(np.int64).max  # later than any time: the start of a running minimum
PART = 1 << 20  # deliveries scanned, and then written as a row group, at a time
# every node the trace names: node objects, and the nodes pod writes name (a kubelet's each)
NODES = pl.col("name").filter(pl.col("resource") == "nodes").append(
    pl.col("node").filter(IS_POD).drop_nulls()).unique().sort()


class ObserveModel(Model):
    name = "observe"
    description = ("Replay the placements recorded in the trace; model only what each watcher "
                   "saw, and when.")
    trace_columns = ("ts", "received_ts", *EVENT_COLUMNS, "phase")

    def default_watchers(self, trace: pl.DataFrame) -> list[WatcherSpec]:
        binders, present, nodes = trace.select(
            binders=pl.col("component").filter(IS_BINDING).unique().implode(),
            present=pl.col("component").unique().implode(),
            nodes=NODES.implode(),
        ).row(0)
        schedulers = [WatcherSpec(c, ROLE_OF_COMPONENT.get(c, "scheduler"), ("pods", "nodes"))
                      for c in sorted(set(binders) | (set(present) & set(ROLE_OF_COMPONENT)))]
        kubelets = [WatcherSpec(f"kubelet/{n}", "kubelet", ("pods", "nodes"), node=n)
                    for n in nodes]
        return schedulers + kubelets

    def replay(self, trace: pl.DataFrame, config: RunConfig,
               watchers: list[WatcherSpec]) -> RunTables:
        parts: dict[str, list[pa.Table | pl.DataFrame]] = {}
        for name, part in self.tables(trace, config, watchers):
            parts.setdefault(name, []).append(part)
        return RunTables(**{name: pa.concat_tables(tables) if len(tables) > 1 else tables[0]
                            for name, tables in parts.items()})

    def tables(self, trace: pl.DataFrame, config: RunConfig,
               watchers: list[WatcherSpec]) -> Iterator[tuple[str, pa.Table | pl.DataFrame]]:
        """The run's tables as (name, table), each as soon as it is complete; the deliveries in
        parts, so that each is written while the next is computed, and first: writing them is
        the longest of the writer's jobs, which then runs while the pods are computed."""
        replay = _Replay(trace, config, watchers)
        yield "watchers", watchers_table(watchers)
        yield "events", replay.events()
        for part in replay.deliveries():
            yield "deliveries", part
        yield "pods", replay.pods()
        yield "attempts", replay.attempts()
        yield from replay.incidents().items()
        self.notes += replay.notes()  # (last: the pod history is made while deliveries are written)


class _Replay:
    """One observe replay: what its tables share is computed once, when first needed."""

    def __init__(self, trace: pl.DataFrame, config: RunConfig, watchers: list[WatcherSpec]):
        self.trace, self.config, self.watchers = trace, config, watchers
        self.masks = RowMasks(trace)
        self.ts = trace["ts"].dt.epoch("us").to_numpy()
        self.attempt_rows = np.flatnonzero(self.masks.binding)

    def notes(self) -> list[str]:
        """What the trace lacks, or holds, that bears on the numbers: pods created before it
        began, bodies a Metadata-level log leaves out, phases unknown, pods placed twice."""
        existed = int(np.count_nonzero(self.create < 0))
        return [*created_before(existed, self.history.incarnations,
                                unborn_effect(existed, self.listed.pods.height,
                                              "their requests are unknown, so they hold no "
                                              "capacity on their nodes, and the capacity their "
                                              "deletes free is missed")),
                *without_bodies(self.trace, self.masks, bindings=True),
                *phases_unknown(self.trace, self.masks, "a pod that ran to its end holds its "
                                "node until its delete"),
                *allocatable_unknown(self.trace, self.masks,
                                     self.trace.select(NODES).to_series().to_list(),
                                     "each of their resources is 0 here, so no pending pod that "
                                     "requests any fits on them, and none of their stale "
                                     "windows is wasted", "each of their resources is 0 until "
                                     "then"),
                *bound_again(self.history, self.masks)]

    @cached_property
    def history(self) -> PodHistory:
        return PodHistory.of(self.trace, self.masks)

    @cached_property
    def listed(self) -> InitialList:
        """The objects the trace did not see created, as the caches held them when it began:
        events and deliveries of their own (``origin`` and ``source`` 'list') at the first
        commit, ahead of the trace's writes, whose rvs follow theirs."""
        return InitialList.of(self.trace, self.masks, lambda: self.history)

    @cached_property
    def phases(self) -> TerminalPhases | None:
        """Per trace row, whether it ends its pod and whether its pod had ended before it, as
        the watches of non-terminal pods see them (``terminal_phases``); None for a trace that
        says no terminal phase (then neither is ever so)."""
        if not np.any(self.masks.ok_end):
            return None
        return terminal_phases(self.masks, self.history,
                               self.listed.pods["incarnation"].to_numpy())

    @cached_property
    def start(self) -> int:
        """The first commit of the trace (µs): when the listed objects are in every cache."""
        committed = np.flatnonzero(self.masks.ok)
        return int(self.ts[committed[0]]) if len(committed) else 0

    @cached_property
    def create(self) -> np.ndarray:
        """Per incarnation, the row of its create (-1 if none)."""
        return self.history.first(self.masks.ok_create)

    @cached_property
    def recorded_attempts(self) -> pl.DataFrame:
        """The trace's columns that the attempts read, at their rows (the bindings), and
        ``decided``: the binding's ``received_ts`` (else ``ts``) in µs.  Filtered, not gathered:
        polars gathers from a trace's row groups a few times slower."""
        return self.trace.select(
            "code", "component", "node",
            decided=pl.coalesce("received_ts", "ts").dt.epoch("us")).filter(
            pl.Series(self.masks.binding))

    @cached_property
    def decided(self) -> np.ndarray:
        """Per attempt, when its scheduler decided."""
        return self.recorded_attempts["decided"].to_numpy()

    def events(self) -> pa.Table:
        """The committed writes in commit order; the trace's own columns if all committed."""
        ok = self.masks.ok
        frame = self.trace.select(pl.col("ts").alias("commit_ts"), *EVENT_COLUMNS)
        attempt = np.zeros(self.trace.height, dtype=np.int64)
        attempt[self.attempt_rows] = np.arange(1, len(self.attempt_rows) + 1)
        if not ok.all():
            frame, attempt = frame.filter(pl.Series(ok)), attempt[ok]
        listed = len(self.listed)
        if listed:
            frame = pl.concat([self._listed_events(frame.schema), frame])
            attempt = np.r_[np.zeros(listed, dtype=np.int64), attempt]
        rows = frame.height
        origins = ["trace", "list"] if listed else ["trace"]
        origin = np.zeros(rows, dtype=np.int8)
        origin[:listed] = 1
        states = self._pod_states(ok)
        return (frame.to_arrow(compat_level=pl.CompatLevel.newest())
                .append_column("rv", _array(np.arange(1, rows + 1)))
                .append_column("origin", pa.DictionaryArray.from_arrays(_array(origin),
                                                                        pa.array(origins)))
                .append_column("attempt_id", _array(attempt, nulls=attempt == 0))
                .append_column("pod_state", pa.concat_arrays(
                    [pa.nulls(listed, states.type), states]) if listed else states))

    def _listed_events(self, schema: pl.Schema) -> pl.DataFrame:
        """The listed objects as the events' first rows: creates committed at ``start``."""
        return self.listed.events.select(
            pl.lit(self.start).cast(pl.Datetime("us", "UTC")).alias("commit_ts"),
            pl.lit("create").alias("verb"), "resource", pl.lit(None).alias("subresource"),
            "namespace", "name", "node", "cpu_milli", "memory_bytes", "gpu_milli",
            pl.lit(LISTED_CODE).alias("code"), pl.lit(None).alias("component"), "max_pods",
        ).cast(dict(schema))  # type: ignore[arg-type]

    def _pod_states(self, ok: np.ndarray) -> pa.Array:
        """Per committed write, the pod state it sets: ``failed`` or ``succeeded`` for a pod's
        status write setting that terminal phase (``RowMasks.ok_end``: every cache then drops
        the pod), else null."""
        ends = self.masks.ok_end
        if not ends.any():
            return pa.nulls(int(np.count_nonzero(ok)), pa.string())
        states = self.trace.select(pl.when(pl.Series(ends)).then(
            pl.col("phase").str.to_lowercase()))
        return states.filter(pl.Series(ok)).to_series().to_arrow()

    def deliveries(self) -> Iterator[pa.Table]:
        """Every committed write through the pipeline to every watcher it matches, in parts of a
        million deliveries (a row group each); afterwards ``seen`` holds what each watcher applied
        when, and ``scan`` the watches' terminations and re-lists."""
        committed = np.flatnonzero(self.masks.ok)
        resource = self.trace["resource"]
        if len(committed) < self.trace.height:
            resource = resource.gather(committed)
        commit_ts = self.ts[committed]
        streams = Streams(self.watchers, resource.unique().to_list())
        codes = streams.codes(resource)
        pipeline: Pipeline[None] = Pipeline(self.config, self.watchers, streams.resources,
                                            capacities(streams.resources, codes, commit_ts))
        listed = None
        if len(self.listed):
            objects = self.listed.events
            listed_write, listed_stream = match(pipeline.streams,
                                                streams.codes(objects["resource"]),
                                                node_index(self.watchers, objects["node"]))
            yield self._listed_deliveries(listed_write, listed_stream, pipeline)
            listed = partial(self._listed_in_streams, listed_write, listed_stream)
        phases = self.phases
        write, stream = match(pipeline.streams, codes, self._targets()[committed],
                              phases.ended[committed] if phases else None)
        self.scan = Scan(pipeline, commit_ts, write, stream, codes,
                         lambda: self._keys(committed), lambda: self._deletes(committed), PART,
                         listed, (lambda: phases.ends[committed]) if phases else None)
        watcher_of = pipeline.streams.watcher.astype(np.int32)
        applied: list[np.ndarray] = []
        names = [w.name for w in self.watchers]
        roles, role_of = self.roles
        starts = self.scan.starts
        of_write = _OfWrite(self.scan, [self.watchers[w].node is None for w in watcher_of],
                            pipeline.streams.non_terminal if phases else None)
        start = 0
        for times in self.scan.parts(shared=False):
            part = slice(start, start + len(times["applied_ts"]))
            start = part.stop
            applied.append(times["applied_ts"])
            shared = of_write.columns(part)
            write[part] += 1  # now its write's rv in the trace (the scan is done with this part)
            yield pa.table({
                "rv": _array(write[part] + len(self.listed) if len(self.listed) else write[part]),
                # dictionary-encoded: millions of copies of a name are not worth building, and a
                # dictionary of each role once is half as costly to write as one of 20,000
                "watcher": pa.DictionaryArray.from_arrays(
                    _array(_per_delivery(watcher_of, starts, part)), names),
                "role": pa.DictionaryArray.from_arrays(
                    _array(_per_delivery(role_of[watcher_of], starts, part)), roles),
                **shared,
                **{name: _timestamps_of(times[name]) for name in STAGE_COLUMNS
                   if name not in shared},
                "source": pa.DictionaryArray.from_arrays(_array(times["source"]), SOURCES),
                "coalesced": _flags(times["coalesced"]),
            })
        self.seen = _Seen(write, starts[np.searchsorted(watcher_of, np.arange(len(names) + 1))],
                          commit_ts, applied, self.watchers)

    @cached_property
    def roles(self) -> tuple[list[str], np.ndarray]:
        """The watchers' roles, sorted, and each watcher's as an index into them."""
        roles = sorted({w.role for w in self.watchers})
        return roles, np.array([roles.index(w.role) for w in self.watchers], dtype=np.int8)

    def incidents(self) -> dict[str, pl.DataFrame]:
        """The scan's ``dispatch_waits``, ``watch_terminations`` and ``relists``, their rvs the
        events' (after the listed objects': a watch resumed before the trace's first write had
        received the first list)."""
        tables = self.scan.incidents()
        if not len(self.listed):
            return tables
        rvs = {"dispatch_waits": ["rv"], "watch_terminations": ["rv", "resume_rv"],
               "relists": ["rv"]}
        return {name: table.with_columns(pl.col(rvs[name]) + len(self.listed))
                for name, table in tables.items()}

    def _listed_deliveries(self, write: np.ndarray, stream: np.ndarray,
                           pipeline: Pipeline[None]) -> pa.Table:
        """Each listed object (``write``: its index in the list) to every watcher whose filter
        matches it (``stream``), in its first list: at ``start``, every stage at once (it was
        in the cache before the trace began), ordered by watcher, then resource, then rv."""
        watcher = pipeline.streams.watcher[stream].astype(np.int32)
        roles, role_of = self.roles
        at = _timestamps_of(np.full(len(write), self.start, dtype=np.int64))
        return pa.table({
            "rv": _array(write.astype(np.int64) + 1),
            "watcher": pa.DictionaryArray.from_arrays(_array(watcher),
                                                      [w.name for w in self.watchers]),
            "role": pa.DictionaryArray.from_arrays(_array(role_of[watcher]), roles),
            **{name: at for name in STAGE_COLUMNS},
            "source": pa.DictionaryArray.from_arrays(
                _array(np.full(len(write), Source.LIST, dtype=np.int8)), SOURCES),
            "coalesced": _flags(np.zeros(len(write), dtype=bool)),
        })

    def _keys(self, committed: np.ndarray) -> np.ndarray:
        """Per committed write, its object (resource, namespace and name) as a number, in the
        order of their names."""
        names: np.ndarray = self.trace.select(_object_name().rank("dense").cast(pl.Int64)) \
            .to_series().to_numpy()
        out: np.ndarray = names[committed]
        return out

    def _listed_in_streams(self, write: np.ndarray, stream: np.ndarray
                           ) -> tuple[np.ndarray, np.ndarray]:
        """The listed objects' (key, stream) pairs for the scan (``Scan``'s ``listed``): each
        listed object (``write``) in each stream of its first list."""
        return self._listed_keys()[write], stream

    def _listed_keys(self) -> np.ndarray:
        """Per listed object, its object's number (``_keys``: its place among the trace's
        objects' names, all of which the trace writes)."""
        names = self.trace.select(_object_name()).to_series().unique().sort()
        listed = self.listed.events.select(_object_name()).to_series()
        found: np.ndarray = names.search_sorted(listed).to_numpy().astype(np.int64) + 1
        return found

    def _deletes(self, committed: np.ndarray) -> np.ndarray:
        """Per committed write, whether it deletes its object."""
        deletes: np.ndarray = self.trace.select(
            (pl.col("verb") == "delete") & pl.col("subresource").is_null()).to_series() \
            .fill_null(False).to_numpy()
        out: np.ndarray = deletes[committed]
        return out

    def _targets(self) -> np.ndarray:
        """Per trace row, the node it concerns as an index into ``watched_nodes`` (-1 if none):
        a node write's own node; a pod write's, the node its pod was placed on by then."""
        target = np.full(self.trace.height, -1, dtype=np.int64)
        if all(w.node is None for w in self.watchers):
            return target
        placed = np.full(self.trace.height, -1, dtype=np.int64)
        placements = np.flatnonzero(self.masks.ok_placement)
        placed[placements] = node_index(self.watchers, self.trace["node"].gather(placements))
        last_placement = self.history.last_placement
        pods = np.flatnonzero(last_placement >= 0)
        target[pods] = placed[last_placement[pods]]
        listed_on = np.full(self.history.incarnations + 1, -1, dtype=np.int64)  # [-1]: none
        listed_on[self.listed.pods["incarnation"].to_numpy()] = node_index(
            self.watchers, self.listed.pods["node"])
        unplaced = np.flatnonzero(last_placement < 0)
        target[unplaced] = listed_on[self.history.incarnation[unplaced]]
        nodes = np.flatnonzero(self.masks.node)
        target[nodes] = node_index(self.watchers, self.trace["name"].gather(nodes))
        return target

    def pods(self) -> pa.Table:
        """One row per pod incarnation, ordered by creation (incarnations with no create last)."""
        history, masks, ts = self.history, self.masks, self.ts
        incarnation = history.incarnation[self.attempt_rows]
        tried = np.bincount(incarnation, minlength=history.incarnations)
        first_try = np.full(history.incarnations, LATEST)
        np.minimum.at(first_try, incarnation, self.decided)
        create = self.create
        placement = history.first(masks.ok_placement)
        delete = history.last(masks.ok_delete)
        since = np.full(history.incarnations, ts[-1] + 1 if len(ts) else 0)  # none: after all
        for rows in (delete, placement, create):  # the first of them that exists
            since = np.where(rows >= 0, ts[rows], since)
        order = _creation_order(since, history.pods)
        create, placement, delete = create[order], placement[order], delete[order]
        table = pa.table({
            "pod": _arrow(history.pods.gather(order)),
            "created_ts": _times_at(ts, create),
            "first_attempt_ts": _timestamps(np.where(tried > 0, first_try, -1)[order]),
            "bound_ts": _times_at(ts, placement),
            "bound_rv": self._rvs_at(placement),
            **_take(self.trace, ["node"], placement),
            "deleted_ts": _times_at(ts, delete),
            "deleted_rv": self._rvs_at(delete),
            "attempts": _array(tried[order].astype(np.int64)),
            **_take(self.trace, ["cpu_milli", "memory_bytes", "gpu_milli"], create),
        })
        return self._with_listed(table, order) if self.listed.pods.height else table

    def _with_listed(self, table: pa.Table, order: np.ndarray) -> pa.Table:
        """The pods table with each listed pod's requests, and where it was listed on a node,
        ``bound_ts``, ``bound_rv`` and ``node``: its listed create's (``start``, its rv)."""
        listed = self.listed.pods
        at = np.empty(len(order), dtype=np.int64)
        at[order] = np.arange(len(order))  # each incarnation's row in the table
        rows = at[listed["incarnation"].to_numpy()]
        rv = self.listed.nodes.height + 1 + np.arange(listed.height)  # (nodes, then pods)
        on_node = listed["node"].is_not_null().to_numpy()
        values = {"bound_ts": (rows[on_node], self.start), "bound_rv": (rows[on_node], rv[on_node]),
                  "node": (rows[on_node], listed["node"].filter(pl.Series(on_node))),
                  **{name: (rows, listed[name]) for name in RESOURCE_COLUMNS}}
        for name, (where, value) in values.items():
            column = pl.Series(name, table[name]).scatter(where, value)
            table = table.set_column(table.schema.get_field_index(name), name, _arrow(column))
        return table

    @cached_property
    def rv_of_row(self) -> np.ndarray:
        """Per trace row, its rv if it committed (rvs number the committed rows in order)."""
        return np.cumsum(self.masks.ok)

    def _rvs_at(self, rows: np.ndarray) -> pa.Array:
        """The events' rv of each of ``rows`` (committed rows: after the listed objects'), null
        where a row is -1."""
        return _array(self.rv_of_row[rows] + len(self.listed), nulls=rows < 0)

    def attempts(self) -> pa.Table:
        """One attempt per recorded binding (committed or failed), in trace order.

        ``enqueued_ts``: for a pod's first attempt, when its scheduler applied the pod's create
        (the create's commit if that scheduler is not a watcher); for a retry, the previous
        attempt's commit.  ``started_ts`` is not recorded in a trace and stays null.
        ``decided_ts`` is the binding's ``received_ts``.  ``view_lag_ms`` is the age, at
        decision, of the oldest write the scheduler watches that was committed but not yet
        applied (null if it is not a watcher).  ``forgotten_ts``: the scheduler assumed its own
        binding from the decision until it applied that binding from its watch, or, for a
        failed binding, until the failure came back.
        """
        rows, ts, seen = self.attempt_rows, self.ts, self.seen
        recorded = self.recorded_attempts
        code = recorded["code"].to_numpy()
        committed = ts[rows]
        incarnation = self.history.incarnation[rows]
        previous = previous_in_group(incarnation, committed, self.history.incarnations)
        create_row = self.create[incarnation]
        has_create = create_row >= 0
        rv_of_row = self.rv_of_row
        scheduler = recorded["component"]
        groups = seen.groups(scheduler)
        applied = seen.applied_at(groups, np.where(has_create, rv_of_row[create_row], 0))
        created = np.where(has_create, ts[create_row], -1)
        enqueued = np.where(previous >= 0, previous, np.where(applied >= 0, applied, created))
        bound = (code >= 200) & (code <= 299)
        forgotten = np.where(bound, seen.applied_at(groups, rv_of_row[rows]), committed)
        return pa.table({
            "attempt_id": _array(np.arange(1, len(rows) + 1)),
            "pod": _arrow(self.history.pods.gather(incarnation)),
            "scheduler": _arrow(scheduler),
            "enqueued_ts": _timestamps(enqueued),
            "started_ts": pa.nulls(len(rows), TS),
            "decided_ts": _array(self.decided, TS),
            "committed_ts": _array(committed, TS),
            "node": _arrow(recorded["node"]),
            "outcome": _outcomes(code, bound),
            "reason": _reasons(code, bound),
            "view_lag_ms": seen.view_lag_ms(groups, self.decided),
            "forgotten_ts": _timestamps(forgotten),
            "cycle_id": pa.nulls(len(rows), pa.int64()),  # what-if models only
            "throttled_ms": pa.nulls(len(rows), pa.float64()),
        })


def _object_name() -> pl.Expr:
    """An object's resource, namespace and name as one string (``_Replay._keys``)."""
    return pl.concat_str("resource", pl.col("namespace").fill_null(""), "name", separator="/")


def _outcomes(code: np.ndarray, bound: np.ndarray) -> pa.DictionaryArray:
    """``bound`` for a 2xx, ``conflict`` for a 409, else ``error``."""
    index = np.where(bound, OUTCOMES.index("bound"),
                     np.where(code == 409, OUTCOMES.index("conflict"), OUTCOMES.index("error")))
    return pa.DictionaryArray.from_arrays(_array(index.astype(np.int8)), pa.array(OUTCOMES))


def _reasons(code: np.ndarray, bound: np.ndarray) -> pa.DictionaryArray:
    """``api_conflict`` for a 409, ``http_CODE`` for any other failure, null for a 2xx."""
    failed = np.unique(code[~bound & (code != 409)])
    index = np.where(bound | (code == 409), 0, 1 + np.searchsorted(failed, code))
    labels = ["api_conflict", *(f"http_{c}" for c in failed.tolist())]
    return pa.DictionaryArray.from_arrays(_array(index.astype(np.int32), nulls=bound),
                                          pa.array(labels))


def _timestamps(us: np.ndarray) -> pa.Array:
    """Microseconds since the epoch as timestamps, -1 as null."""
    return _array(us, TS, nulls=us == -1)


def _array(values: np.ndarray, kind: pa.DataType | None = None,
           nulls: np.ndarray | None = None) -> pa.Array:
    """Fixed-width numpy numbers as an Arrow array of ``kind`` (default: their own type), null
    where ``nulls`` holds, without ``pa.array``: no copy (``pa.array(us, type=TS)`` copies, a
    quarter of a second for a million pods' deliveries) and the null bitmap packed by numpy."""
    values = np.ascontiguousarray(values)
    kind = kind or pa.from_numpy_dtype(values.dtype)
    if nulls is None or not nulls.any():
        return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)],
                                     null_count=0)
    valid = pa.py_buffer(np.packbits(~nulls, bitorder="little"))
    return pa.Array.from_buffers(kind, len(values), [valid, pa.py_buffer(values)],
                                 null_count=int(np.count_nonzero(nulls)))


def _per_delivery(values: np.ndarray, starts: np.ndarray, part: slice) -> np.ndarray:
    """``values[stream]`` of each delivery of ``part``, from where each stream's deliveries
    begin (``starts``; the deliveries are sorted by stream): a fill per stream, twenty times
    cheaper than gathering by each delivery's stream."""
    return np.repeat(values, np.diff(np.clip(starts, part.start, part.stop)))


def _timestamps_of(us: np.ndarray) -> pa.Array:
    """int64 microseconds as timestamps, without a copy."""
    return _array(us, TS)


def _flags(values: np.ndarray) -> pa.Array:
    """A boolean column from numpy's bools, packed to bits by numpy (several times faster than
    ``pa.array``'s own packing)."""
    bits = np.packbits(values, bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])


def _times_at(ts: np.ndarray, rows: np.ndarray) -> pa.Array:
    """The trace's ``ts`` at ``rows``, null where a row is -1."""
    return _array(ts[rows], TS, nulls=rows < 0)


def _take(trace: pl.DataFrame, columns: list[str], rows: np.ndarray) -> dict[str, pa.Array]:
    """The trace's ``columns`` at ``rows``, null where a row is -1, as Arrow."""
    taken = gathered(trace.select(columns).rechunk(), columns, rows)
    return {name: _arrow(taken[name]) for name in columns}


def _arrow(series: pl.Series) -> pa.Array:
    """A polars column as Arrow, without copying (strings stay string views)."""
    return series.to_arrow(compat_level=pl.CompatLevel.newest())


class _OfWrite:
    """The shared stages' times of each delivery (its write's ``commit_ts``, ``cached_ts`` and
    ``dispatched_ts``) as Arrow columns in chunks, without a gather per delivery.

    ``match`` gives the stream of a watcher of the whole cluster every write of its resource,
    in order (for a watch of non-terminal pods, every one to a pod not yet ended): its
    deliveries' times are those of its resource's writes, gathered once per resource (and
    selection) and sliced for every such stream (three fresh columns of every delivery were a
    third of the deliveries' fresh memory: 360 MB at a million pods).  The streams of
    node-bound watchers (kubelets) are gathered, a chunk per run of them in a part.  A Parquet
    writer takes a column in chunks as in one: pages end at 20,000 rows, the delta encoding and
    the statistics carry over from one chunk to the next."""

    def __init__(self, scan: Scan, whole: list[bool], selective: np.ndarray | None):
        """``whole``: per stream, whether its watcher watches the whole cluster; ``selective``
        (None: none), whether it receives fewer of its resource's writes than the others (a
        watch of non-terminal pods, in a trace where pods end)."""
        self.scan, self.whole = scan, np.array(whole, dtype=bool)
        self.times = dict(zip(("commit_ts", "cached_ts", "dispatched_ts"), scan.shared))
        self.by_resource: dict[tuple[str, int, bool], np.ndarray] = {}
        self.selective = selective if selective is not None else np.zeros(len(whole), bool)
        starts, resource = scan.starts, scan.pipeline.streams.resource
        for s in np.flatnonzero(self.whole).tolist():  # before any delivery's write is its rv
            writes = scan.write[starts[s]:starts[s + 1]]
            for name, times in self.times.items():
                key = (name, int(resource[s]), bool(self.selective[s]))
                if key not in self.by_resource:
                    self.by_resource[key] = times[writes]

    def columns(self, part: slice) -> dict[str, pa.ChunkedArray]:
        """The part's deliveries' times of their writes, by column."""
        runs = self._runs(part)
        return {name: pa.chunked_array([_array(self._chunk(name, *run), TS) for run in runs],
                                       TS) for name in self.times}

    def _runs(self, part: slice) -> list[tuple[int, int, int]]:
        """The part as runs (lo, hi, stream): a watcher of the whole cluster's stream, or -1 for
        the node-bound streams' deliveries between two of those."""
        starts, runs, at = self.scan.starts, [], part.start
        first = int(np.searchsorted(starts, part.start, side="right")) - 1
        last = int(np.searchsorted(starts, part.stop, side="left"))
        for s in (first + np.flatnonzero(self.whole[first:last])).tolist():
            lo, hi = max(int(starts[s]), part.start), min(int(starts[s + 1]), part.stop)
            if lo < hi:
                runs += [(at, lo, -1)] * (lo > at) + [(lo, hi, s)]
                at = hi
        return runs + [(at, part.stop, -1)] * (part.stop > at)

    def _chunk(self, name: str, lo: int, hi: int, stream: int) -> np.ndarray:
        if stream < 0:
            gathered: np.ndarray = self.times[name][self.scan.write[lo:hi]]
            return gathered
        first = int(self.scan.starts[stream])
        resource = int(self.scan.pipeline.streams.resource[stream])
        key = (name, resource, bool(self.selective[stream]))
        return self.by_resource[key][lo - first:hi - first]


class _Seen:
    """The deliveries of each watcher, for questions about what a watcher had applied when.

    The applied times stay in the parts the scan made them in (the deliveries' tables hold the
    same arrays): one array of them all would be a fresh copy of every delivery's, of which only
    the watchers that scheduled something are ever asked; each of those has its applied times
    laid out by rv once (``by_rv``)."""

    def __init__(self, rv: np.ndarray, starts: np.ndarray, commit: np.ndarray,
                 applied: list[np.ndarray], watchers: list[WatcherSpec]):
        """Per delivery (sorted by watcher): ``rv``, and ``applied`` in consecutive parts;
        ``starts``: where each watcher's deliveries begin, and their end; per write:
        ``commit``."""
        self.segment = {w.name: slice(int(starts[i]), int(starts[i + 1]))
                        for i, w in enumerate(watchers)}
        self.rv, self.commit, self.applied = rv, commit, applied
        self.part_starts = np.cumsum([0, *(len(part) for part in applied)]).tolist()
        self.writes = len(commit)
        self._by_rv: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def groups(self, names: pl.Series) -> list[tuple[str, np.ndarray]]:
        """For each watcher in ``names``: its name, and where ``names`` holds it."""
        return [(name, (names == name).to_numpy())
                for name in names.unique().sort().to_list() if name in self.segment]

    def by_rv(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """Watcher ``name``'s applied time of each write, by rv (-1 where it received none; 0 is
        no write), and the rvs it received, ascending."""
        if name not in self._by_rv:
            segment = self.segment[name]
            applied = np.full(self.writes + 1, -1, dtype=np.int64)
            received = np.zeros(self.writes + 1, dtype=bool)
            for start, part in zip(self.part_starts, self.applied):
                lo, hi = max(segment.start, start), min(segment.stop, start + len(part))
                if lo < hi:
                    applied[self.rv[lo:hi]] = part[lo - start:hi - start]
                    received[self.rv[lo:hi]] = True
            self._by_rv[name] = applied, np.flatnonzero(received)
        return self._by_rv[name]

    def applied_at(self, groups: list[tuple[str, np.ndarray]], rv: np.ndarray) -> np.ndarray:
        """When the watcher of each element (``groups``) applied write ``rv`` (-1 if it never
        received it)."""
        out = np.full(len(rv), -1, dtype=np.int64)
        for name, mine in groups:
            out[mine] = self.by_rv(name)[0][rv[mine]]
        return out

    def view_lag_ms(self, groups: list[tuple[str, np.ndarray]], at: np.ndarray) -> pa.Array:
        """For each element, ms since the oldest write its watcher had not yet applied at
        ``at`` (null if it is not a watcher)."""
        out = np.full(len(at), np.nan)
        for name, mine in groups:
            applied, received = self.by_rv(name)  # its streams, merged by rv
            out[mine] = view_lag_us(self.commit[received - 1], applied[received],
                                    at[mine]) / 1000.0
        return _array(out, nulls=np.isnan(out))


def _creation_order(since: np.ndarray, pod: pl.Series) -> np.ndarray:
    """The order that sorts by ``since``, then by ``pod``, equal ones keeping their order.

    Only where ``since`` ties are the strings compared: sorting a million of them costs ten
    times more than sorting the times.
    """
    order, ordered = stable_sort(since)
    tie = ordered[1:] == ordered[:-1]
    runs = np.flatnonzero(np.r_[tie, False] | np.r_[False, tie])
    if len(runs):
        tied = pl.DataFrame({"since": ordered[runs], "pod": pod.gather(order[runs]),
                             "at": order[runs]})
        order[runs] = tied.sort("since", "pod", maintain_order=True)["at"].to_numpy()
    return order
