"""``observe``: keep the decisions recorded in the trace; model what each watcher saw, and when.

Every committed write of the trace (a write verb with a 2xx code) goes through the watch pipeline
in trace order; failed writes change nothing in etcd, so nobody is sent them, but a failed binding
is a recorded conflict in ``attempts``.  Nothing here feeds back into the writes, so the whole
replay is a handful of vectorised scans (``Pipeline.scan``).

Default watchers: one per scheduling component in the trace (every component that wrote a binding,
and any Gödel scheduler, binder or dispatcher), watching pods and nodes; and one kubelet per node,
watching its own node and the pods bound to it.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa

from replay.engine.config import RunConfig, WatcherSpec
from replay.engine.pipeline import STAGE_COLUMNS, Pipeline, view_lag_us
from replay.engine.rundir import RunTables
from replay.engine.watchers import match, watchers_table
from replay.models.base import Model
from replay.models.recorded import (IS_BINDING, IS_POD_CREATE, IS_POD_DELETE, OK, PodHistory,
                                    mask, pod_name)

ROLE_OF_COMPONENT = {
    "kube-scheduler": "scheduler",
    "godel-scheduler": "scheduler",
    "godel-binder": "binder",
    "godel-dispatcher": "dispatcher",
}
TS = pl.Datetime("us", "UTC")


class ObserveModel(Model):
    name = "observe"
    description = ("Replay the placements recorded in the trace; model only what each watcher "
                   "saw, and when.")

    def default_watchers(self, trace: pl.DataFrame) -> list[WatcherSpec]:
        binders = trace.filter(IS_BINDING)["component"].unique().to_list()
        present = set(trace["component"].unique().to_list()) & set(ROLE_OF_COMPONENT)
        schedulers = [WatcherSpec(c, ROLE_OF_COMPONENT.get(c, "scheduler"), ("pods", "nodes"))
                      for c in sorted(set(binders) | present)]
        nodes = pl.concat([
            trace.filter(pl.col("resource") == "nodes")["name"],
            trace.filter(IS_BINDING)["node"].drop_nulls(),
        ]).unique().sort().to_list()
        kubelets = [WatcherSpec(f"kubelet/{n}", "kubelet", ("pods", "nodes"), node=n)
                    for n in nodes]
        return schedulers + kubelets

    def replay(self, trace: pl.DataFrame, config: RunConfig,
               watchers: list[WatcherSpec]) -> RunTables:
        history = PodHistory.of(trace)
        ok = mask(trace, OK)
        committed_rows = np.flatnonzero(ok)
        committed = trace.with_columns(history.bound_node).filter(ok)
        target = committed.select(
            pl.when(pl.col("resource") == "pods").then(pl.col("bound_node"))
            .when(pl.col("resource") == "nodes").then(pl.col("name"))).to_series()
        write, watcher = match(watchers, committed["resource"], target)
        commit_us = committed["ts"].dt.epoch("us").to_numpy()
        times = Pipeline(config, watchers).scan(commit_us, write, watcher)
        seen = _Seen(write, watcher, times, watchers)
        rv_of_row = np.cumsum(ok)  # the rv of each committed row
        attempts, attempt_rows = _attempts(trace, history, rv_of_row, seen)
        attempt_of_row = np.zeros(trace.height, dtype=np.int64)
        attempt_of_row[attempt_rows] = np.arange(1, len(attempt_rows) + 1)
        events = committed.select(
            rv=pl.int_range(1, pl.len() + 1, dtype=pl.Int64), commit_ts="ts", verb="verb",
            resource="resource", subresource="subresource", namespace="namespace", name="name",
            node="node", cpu_milli="cpu_milli", memory_bytes="memory_bytes",
            gpu_milli="gpu_milli", code="code", component="component", origin=pl.lit("trace"),
            attempt_id=pl.Series(attempt_of_row[committed_rows]).replace(0, None))
        return RunTables(events=events, deliveries=_deliveries_table(write, watcher, times, watchers),
                         attempts=attempts, pods=_pods(trace, history, attempts, attempt_rows),
                         watchers=watchers_table(watchers))


def _deliveries_table(write: np.ndarray, watcher: np.ndarray, times: dict[str, np.ndarray],
                      watchers: list[WatcherSpec]) -> pa.Table:
    """Watcher and role stay dictionary-encoded: 5M copies of a name are not worth building."""
    index = pa.array(watcher.astype(np.int32))
    ts = pa.timestamp("us", tz="UTC")
    columns = {
        "rv": pa.array(write + 1),
        "watcher": pa.DictionaryArray.from_arrays(index, [w.name for w in watchers]),
        "role": pa.DictionaryArray.from_arrays(index, [w.role for w in watchers]),
        **{name: pa.array(times[name]).cast(ts) for name in STAGE_COLUMNS},
    }
    return pa.table(columns)


def _attempts(trace: pl.DataFrame, history: PodHistory, rv_of_row: np.ndarray,
              seen: "_Seen") -> tuple[pl.DataFrame, np.ndarray]:
    """One attempt per recorded binding (committed or failed), in trace order; and their rows.

    ``enqueued_ts``: for a pod's first attempt, when its scheduler applied the pod's create (the
    create's commit if that scheduler is not a watcher); for a retry, the previous attempt's
    commit.  ``started_ts`` is not recorded in a trace and stays null.  ``decided_ts`` is the
    binding's ``received_ts``.  ``view_lag_ms`` is the age, at decision, of the oldest write the
    scheduler watches that was committed but not yet applied (null if it is not a watcher).
    ``forgotten_ts``: the scheduler assumed its own binding from the decision until it applied
    that binding from its watch, or, for a failed binding, until the failure came back.
    """
    rows = np.flatnonzero(mask(trace, IS_BINDING))
    code = pl.col("code")
    bindings = trace.filter(mask(trace, IS_BINDING)).select(
        pod=pod_name(), scheduler=pl.col("component"),
        decided_ts=pl.coalesce("received_ts", "ts"), committed_ts=pl.col("ts"), node="node",
        outcome=pl.when(code.is_between(200, 299)).then(pl.lit("bound"))
        .when(code == 409).then(pl.lit("conflict")).otherwise(pl.lit("error")),
        reason=pl.when(code == 409).then(pl.lit("api_conflict"))
        .when(~code.is_between(200, 299)).then(pl.format("http_{}", code)))
    committed_us = bindings["committed_ts"].dt.epoch("us").to_numpy()
    incarnation = history.incarnation[rows]
    previous = _previous_in_group(incarnation, committed_us)
    create_row = history.first(mask(trace, OK & IS_POD_CREATE))[incarnation]
    has_create = create_row >= 0
    created_us = np.where(has_create, trace["ts"].dt.epoch("us").to_numpy()[create_row], -1)
    applied = seen.applied_at(bindings["scheduler"], np.where(has_create, rv_of_row[create_row], 0))
    enqueued = np.where(previous >= 0, previous, np.where(applied >= 0, applied, created_us))
    lag = seen.view_lag_ms(bindings["scheduler"], bindings["decided_ts"])
    confirmed = seen.applied_at(bindings["scheduler"], rv_of_row[rows])
    forgotten = np.where(bindings["outcome"].to_numpy() == "bound", confirmed, committed_us)
    table = bindings.select(
        attempt_id=pl.int_range(1, pl.len() + 1, dtype=pl.Int64), pod="pod", scheduler="scheduler",
        enqueued_ts=_timestamps(enqueued), started_ts=pl.lit(None, dtype=TS),
        decided_ts="decided_ts", committed_ts="committed_ts", node="node", outcome="outcome",
        reason="reason", view_lag_ms=lag, forgotten_ts=_timestamps(forgotten))
    return table, rows


def _previous_in_group(group: np.ndarray, values: np.ndarray) -> np.ndarray:
    """For each element, the value of the element before it with the same group (-1 if none)."""
    order = np.argsort(group, kind="stable")
    grouped = group[order]
    shifted = np.r_[-1, values[order][:-1]] if len(order) else values
    same = np.r_[False, grouped[1:] == grouped[:-1]] if len(order) else np.zeros(0, bool)
    out = np.empty_like(values)
    out[order] = np.where(same, shifted, -1)
    return out


def _timestamps(us: np.ndarray) -> pl.Series:
    """Microseconds since the epoch as timestamps, -1 as null."""
    return pl.Series(us).replace(-1, None).cast(TS)


class _Seen:
    """The deliveries of each watcher, for questions about what a watcher had applied when."""

    def __init__(self, write: np.ndarray, watcher: np.ndarray, times: dict[str, np.ndarray],
                 watchers: list[WatcherSpec]):
        starts = np.searchsorted(watcher, np.arange(len(watchers) + 1))
        self.segment = {w.name: slice(starts[i], starts[i + 1]) for i, w in enumerate(watchers)}
        self.rv = write + 1
        self.commit, self.applied = times["commit_ts"], times["applied_ts"]

    def applied_at(self, names: pl.Series, rv: np.ndarray) -> np.ndarray:
        """When the watcher ``names[i]`` applied write ``rv[i]`` (-1 if it never received it)."""
        out = np.full(len(names), -1, dtype=np.int64)
        for name, mask in self._by_watcher(names):
            seg_rv, seg_applied = self.rv[self.segment[name]], self.applied[self.segment[name]]
            at = np.minimum(np.searchsorted(seg_rv, rv[mask]), max(len(seg_rv) - 1, 0))
            found = (seg_rv[at] == rv[mask]) if len(seg_rv) else np.zeros(mask.sum(), bool)
            out[mask] = np.where(found, seg_applied[at] if len(seg_rv) else -1, -1)
        return out

    def view_lag_ms(self, names: pl.Series, at: pl.Series) -> pl.Series:
        """For each (watcher, time): ms since the oldest write it had not yet applied."""
        out = np.full(len(names), np.nan)
        at_us = at.dt.epoch("us").to_numpy()
        for name, mask in self._by_watcher(names):
            seg = self.segment[name]
            out[mask] = view_lag_us(self.commit[seg], self.applied[seg], at_us[mask]) / 1000.0
        return pl.Series("view_lag_ms", out).fill_nan(None)

    def _by_watcher(self, names: pl.Series):
        for name in names.unique().sort().to_list():
            if name in self.segment:
                yield name, (names == name).to_numpy()


def _pods(trace: pl.DataFrame, history: PodHistory, attempts: pl.DataFrame,
          attempt_rows: np.ndarray) -> pl.DataFrame:
    """One row per pod incarnation, ordered by creation (incarnations with no create last)."""
    create = history.first(mask(trace, OK & IS_POD_CREATE))
    binding = history.first(mask(trace, OK & IS_BINDING))
    delete = history.last(mask(trace, OK & IS_POD_DELETE))
    any_row = history.first(np.ones(trace.height, dtype=bool))
    tried = np.bincount(history.incarnation[attempt_rows], minlength=history.incarnations)
    decided = attempts["decided_ts"].dt.epoch("us").to_numpy()
    first_try = np.full(history.incarnations, np.iinfo(np.int64).max)
    np.minimum.at(first_try, history.incarnation[attempt_rows], decided)

    def at(rows: np.ndarray, column: str) -> pl.Series:
        return trace[column].gather(pl.Series(rows).replace(-1, None))

    return pl.DataFrame({
        "pod": trace.select("namespace", "name")[any_row].select(pod_name()).to_series(),
        "created_ts": at(create, "ts"),
        "first_attempt_ts": _timestamps(np.where(tried > 0, first_try, -1)),
        "bound_ts": at(binding, "ts"),
        "node": at(binding, "node"),
        "deleted_ts": at(delete, "ts"),
        "attempts": tried.astype(np.int64),
        "cpu_milli": at(create, "cpu_milli"),
        "memory_bytes": at(create, "memory_bytes"),
        "gpu_milli": at(create, "gpu_milli"),
    }).sort(pl.coalesce("created_ts", "bound_ts", "deleted_ts"), "pod", nulls_last=True)
