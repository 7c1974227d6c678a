"""The watch pipeline under load: per-resource watch caches, bounded buffers that block the
dispatcher, terminated watchers that re-watch or re-list, and the three client queues.

Hand-worked scenarios pin each mechanism; a property test checks that the vectorised scan (which
falls back to the event-by-event definition where its unbounded schedule would block) gives the
same tables as ``Pipeline.step``; ``stream_invariants`` states what holds of a run's deliveries
with terminations and re-lists (docs/run-directory.md), and is checked on the stress scenario.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from replay.engine.clientqueue import QUEUES, Arrival
from replay.engine.config import (PROFILES, REFLECTOR_PROFILES, ClientQueue, ResourceSettings,
                                  RunConfig, ServerSettings, WatcherSpec)
from replay.engine.distributions import Constant, Exponential
from replay.engine.pipeline import STAGE_COLUMNS, Pipeline, Scan, Source
from conftest import budget

MS = 1000


def config(seed=0, server=None, resources=None, **stages) -> RunConfig:
    """The zero profile with ``stages`` (``stage__param=distribution``) and server settings."""
    costs = {stage: dict(params) for stage, params in PROFILES["zero"].items()}
    for key, dist in stages.items():
        stage, param = key.rsplit("__", 1)
        costs[stage][param] = dist
    return RunConfig(seed=seed, profile="zero", stages=costs,
                     server=server or ServerSettings(), resources=resources or {},
                     reflector=REFLECTOR_PROFILES["zero"])


def watcher(name, resources=("pods",), queue=ClientQueue.FIFO, role="observer", **own):
    """A watcher with its own stage costs ``own`` (``stage__param=distribution``)."""
    stages: dict = {}
    for key, dist in own.items():
        stage, param = key.rsplit("__", 1)
        stages.setdefault(stage, {})[param] = dist
    return WatcherSpec(name, role, tuple(resources), stages=stages, client_queue=queue)


@dataclasses.dataclass
class Writes:
    """A workload for the pipeline: per write its commit, resource code, object, whether it
    deletes it, whether it sets a pod's terminal phase, and the watchers it goes to."""

    commit: list[int]
    targets: list[list[int]]
    resource: list[int] | None = None
    key: list[int] | None = None
    deleted: list[bool] | None = None
    ends: list[bool] | None = None

    def __post_init__(self):
        n = len(self.commit)
        self.resource = self.resource or [0] * n
        self.key = self.key or list(range(1, n + 1))
        self.deleted = self.deleted or [False] * n
        self.ends = self.ends or [False] * n


def stepped(pipeline: Pipeline, writes: Writes):
    """The writes one at a time, with what happens between them: rows (watcher, rv, sent,
    received, dequeued, applied, source, coalesced) and the incident tables."""
    rows, shared = [], []

    def keep(deliveries):
        rows.extend((w, rv, sent, received, dequeued, applied, int(source), bool(coalesced))
                    for w, rv, _, sent, received, dequeued, applied, source, coalesced
                    in deliveries)

    for i, commit in enumerate(writes.commit):
        keep(pipeline.advance(commit))
        _, cached, dispatched, deliveries = pipeline.step(
            commit, writes.targets[i], writes.resource[i], writes.key[i], writes.deleted[i],
            ends=writes.ends[i])
        shared.append((cached, dispatched))
        keep(deliveries)
    keep(pipeline.finish())
    return sorted(rows), shared, pipeline.incidents()


def scanned(pipeline: Pipeline, writes: Writes, part: int | None = None):
    """The same writes through ``scan``: the same rows, per-write times and incidents; with
    ``part``, scanned that many deliveries at a time, as observe does."""
    streams = pipeline.streams
    pairs = [(streams.of[w, writes.resource[i]], i) for i, targets in enumerate(writes.targets)
             for w in targets]
    pairs.sort()
    stream = np.array([s for s, _ in pairs], dtype=np.int64)
    write = np.array([i for _, i in pairs], dtype=np.int64)
    arrays = (np.array(writes.commit, dtype=np.int64), write, stream, np.array(writes.resource))
    key, deleted, ends = np.array(writes.key), np.array(writes.deleted), np.array(writes.ends)
    if part is not None:
        scan = Scan(pipeline, *arrays, lambda: key, lambda: deleted, part=part,
                    ends=lambda: ends)
        parts = list(scan.parts())
        times = {c: np.concatenate([p[c] for p in parts]) for c in parts[0]}
        rows = sorted((int(streams.watcher[s]), int(i) + 1,
                       *(int(times[c][k]) for c in STAGE_COLUMNS[3:]), int(times["source"][k]),
                       bool(times["coalesced"][k])) for k, (s, i) in enumerate(zip(stream, write)))
        return rows, None, scan.incidents()
    times = pipeline.scan(*arrays, key, deleted, ends)
    rows = sorted((int(streams.watcher[s]), int(i) + 1,
                   *(int(times[c][k]) for c in STAGE_COLUMNS[3:]), int(times["source"][k]),
                   bool(times["coalesced"][k])) for k, (s, i) in enumerate(zip(stream, write)))
    shared = list(zip(pipeline.scanned.shared.cached.tolist(),
                      pipeline.scanned.shared.dispatched.tolist()))
    return rows, shared, pipeline.scanned.incidents()


def deliveries(rows, watcher=None):
    return [r for r in rows if watcher is None or r[0] == watcher]


# --- per-resource watch caches ----------------------------------------------------------------

def test_writes_of_an_unwatched_resource_do_not_delay_pod_deliveries():
    """A flood of lease writes, each taking 1 ms in its watch cache, next to pod writes: the pods'
    watch cache is another queue, so their deliveries are as without the leases."""
    costs = config(storage_to_cache__service=Constant(0.05), network__latency=Constant(0.2),
                   resources={"leases": ResourceSettings(
                       stages={"storage_to_cache": {"service": Constant(1.0)}})})
    pods = [i * 100 for i in range(50)]
    leases = [i * 20 + 7 for i in range(250)]
    commits = sorted([(t, 0) for t in pods] + [(t, 1) for t in leases])
    with_leases = Pipeline(costs, [watcher("s")], ["leases"])
    code = with_leases.resource_code("leases")
    rows, shared, _ = stepped(with_leases, Writes(
        [t for t, _ in commits], [[0] if r == 0 else [] for _, r in commits],
        [with_leases.resource_code("pods") if r == 0 else code for _, r in commits]))
    alone = Pipeline(costs, [watcher("s")], ["leases"])
    rows_alone, _, _ = stepped(alone, Writes(pods, [[0]] * len(pods),
                                             [alone.resource_code("pods")] * len(pods)))
    assert [r[2:] for r in rows] == [r[2:] for r in rows_alone]
    lease_delay = [c - t for (t, r), (c, _) in zip(commits, shared) if r == 1]
    assert max(lease_delay) > 100 * MS  # the leases' own queue is long


# --- bounded buffers -------------------------------------------------------------------------

SLOW = dict(watcher_queue__service=Constant(10.0))  # 10 ms to send each event


def blocking_pipeline(budget_ms=1000.0, capacity=1000, refill=50.0, queue=ClientQueue.FIFO):
    server = ServerSettings(buffer=1, capacity=capacity, timeout_budget_ms=budget_ms,
                            budget_refill_ms_per_s=refill)
    return Pipeline(config(server=server),
                    [watcher("slow", queue=queue, **SLOW), watcher("fast", queue=queue)])


def test_a_full_buffer_is_one_of_the_stream_s_own_events():
    """Buffer 1 (room for 4 events), writes every 20 ms to a slow watcher (10 ms to send an
    event) and a fast one: neither watch is ever full.  In the scan's order the fast watch's
    first event comes four rows after the slow watch's second, sent at 30 ms, after the fast
    event's dispatch at 0 ms: another stream's event, so no full buffer, and no resource is
    evaluated again event by event."""
    pipeline = blocking_pipeline()
    scanned(pipeline, Writes([t * 20 * MS for t in range(5)], [[0, 1]] * 5))
    assert not pipeline.scanned.fixed


def test_a_full_buffer_blocks_the_other_watchers_of_the_resource():
    """Buffer 1: a watch holds 2 x 1 + 2 = 4 events not yet sent.  Writes at 0..5 ms to a slow
    watcher (10 ms per event) and a fast one (free).  The slow one sends its first four at 10,
    20, 30 and 40 ms; the fifth (dispatched at 4 ms) finds it full and the dispatcher waits for
    room until 10 ms; so the sixth, committed at 5 ms, reaches even the fast watcher only at
    10 ms, and blocks again until 20 ms."""
    pipeline = blocking_pipeline()
    rows, shared, incidents = stepped(pipeline, Writes([t * MS for t in range(6)], [[0, 1]] * 6))
    assert [d for _, d in shared] == [0, 1 * MS, 2 * MS, 3 * MS, 4 * MS, 10 * MS]
    fast = deliveries(rows, 1)
    assert [r[2] for r in fast] == [0, 1 * MS, 2 * MS, 3 * MS, 4 * MS, 10 * MS]
    slow = deliveries(rows, 0)
    assert [r[2] for r in slow] == [10 * MS, 20 * MS, 30 * MS, 40 * MS, 50 * MS, 60 * MS]
    waits = incidents["dispatch_waits"]
    assert waits.select("watcher", "rv", "terminated").rows() == [("slow", 5, False),
                                                                  ("slow", 6, False)]
    assert incidents["watch_terminations"].height == 0
    assert scanned(blocking_pipeline(), Writes([t * MS for t in range(6)], [[0, 1]] * 6))[0] \
        == rows


def test_a_watcher_over_budget_is_terminated_and_watches_again_from_the_window():
    """A 2 ms budget that never refills: the dispatcher waits 2 ms on the fifth event and then
    terminates the slow watch at 6 ms.  Event 1 was being written, event 2 was in its result
    channel: the client gets those (by 20 ms); events 3 and 4 had not reached it and are
    dropped with 5 and 6.  The client watches again from event 2 at 20 ms, which the window still
    holds: 3 to 6 come from the window (re-watch), each exactly once."""
    pipeline = blocking_pipeline(budget_ms=2.0, refill=0.0)
    writes = Writes([t * MS for t in range(6)], [[0, 1]] * 6)
    rows, shared, incidents = stepped(pipeline, writes)
    terminations = incidents["watch_terminations"]
    assert terminations.select("watcher", "rv", "reason", "recovery").rows() == [
        ("slow", 5, "unresponsive", "rewatch")]
    assert terminations["ts"].dt.epoch("us").to_list() == [6 * MS]
    assert [d for _, d in shared][4:] == [4 * MS, 6 * MS]  # released at the deadline
    slow = deliveries(rows, 0)
    assert [(r[1], Source(r[6]).name) for r in slow] == [
        (1, "WATCH"), (2, "WATCH"), (3, "REWATCH"), (4, "REWATCH"), (5, "REWATCH"),
        (6, "REWATCH")]
    assert [r[2] for r in slow] == [10 * MS, 20 * MS, 30 * MS, 40 * MS, 50 * MS, 60 * MS]
    assert terminations["recovered_ts"].dt.epoch("us").to_list() == [60 * MS]
    assert _same(scanned(blocking_pipeline(budget_ms=2.0, refill=0.0), writes),
                 (rows, shared, incidents))


def _same(a, b) -> bool:
    rows_a, shared_a, incidents_a = a
    rows_b, shared_b, incidents_b = b
    return rows_a == rows_b and shared_a == shared_b and all(
        incidents_a[name].equals(incidents_b[name]) for name in incidents_a)


def test_a_watcher_whose_version_left_the_window_relists():
    """The same, with a window of 2 events: at the re-watch (20 ms) the window holds events 5
    and 6 only, and event 2 is older than the oldest less one: "410 Gone".  After the
    reflector's backoff (0 here) the client lists at 20 ms: the watch cache holds objects 1..6,
    served at 0.1 ms each (20.6 ms); the list's Replace hands the handler one delta per object,
    in key order, behind event 2 (handled 20 to 21 ms), and events 3 to 6 arrive as the deltas of
    their objects."""
    server = ServerSettings(buffer=1, capacity=2, timeout_budget_ms=2.0, budget_refill_ms_per_s=0,
                            list_per_object=Constant(0.1))
    base = config(server=server, handler__service=Constant(1.0))
    pipeline = Pipeline(base, [watcher("slow", **SLOW), watcher("fast")])
    writes = Writes([t * MS for t in range(6)], [[0, 1]] * 6)
    rows, _, incidents = stepped(pipeline, writes)
    assert incidents["watch_terminations"]["recovery"].to_list() == ["relist"]
    relists = incidents["relists"]
    assert relists.select("watcher", "objects", "rv").rows() == [("slow", 6, 6)]
    start, end = relists["start_ts"].dt.epoch("us")[0], relists["end_ts"].dt.epoch("us")[0]
    assert start == 20 * MS and end == 27 * MS  # six deltas, 1 ms each, from 21 ms
    slow = deliveries(rows, 0)
    assert [Source(r[6]).name for r in slow] == ["WATCH"] * 2 + ["RELIST"] * 4
    assert [r[2] for r in slow][2:] == [20 * MS + 600] * 4  # sent: the list's
    assert [r[5] for r in slow] == [11 * MS, 21 * MS, 24 * MS, 25 * MS, 26 * MS, 27 * MS]
    rescan = Pipeline(base, [watcher("slow", **SLOW), watcher("fast")])
    assert _same(scanned(rescan, writes), stepped(Pipeline(base, [
        watcher("slow", **SLOW), watcher("fast")]), writes))


def test_a_scheduler_relists_no_pod_that_ended():
    """The relist above, by a scheduler, whose watch selects non-terminal pods, and with event 3
    setting its pod's terminal phase: to the scheduler that pod is deleted then, so its list
    holds the other five, while an observer's would hold all six (the fast watch keeps it)."""
    server = ServerSettings(buffer=1, capacity=2, timeout_budget_ms=2.0, budget_refill_ms_per_s=0,
                            list_per_object=Constant(0.1))
    base = config(server=server, handler__service=Constant(1.0))

    def pipeline(role):
        return Pipeline(base, [watcher("slow", role=role, **SLOW), watcher("fast")])

    writes = Writes([t * MS for t in range(6)], [[0, 1]] * 6, ends=[t == 2 for t in range(6)])
    objects = {}
    for role in ("scheduler", "observer"):
        rows, _, incidents = stepped(pipeline(role), writes)
        objects[role] = incidents["relists"]["objects"].to_list()
        assert _same(scanned(pipeline(role), writes), stepped(pipeline(role), writes))
    assert objects == {"scheduler": [5], "observer": [6]}


def test_a_delta_fifo_takes_a_pods_end_as_its_deletion_in_a_scheduler_only():
    """A DeltaFIFO handling a write in 5 ms holds pod 7's end (rv 2) and then its delete (rv 3)
    while it handles rv 1: to a scheduler's watch of non-terminal pods the end is a deletion
    too, and dedupDeltas keeps the earlier of two deletes (rv 3 coalesced into rv 2), which an
    observer's does not; the scan gives what the step gives for both."""
    base = config(handler__service=Constant(5.0))
    writes = Writes([0, MS, 2 * MS], [[0]] * 3, key=[7, 7, 7], deleted=[False, False, True],
                    ends=[False, True, False])
    coalesced = {}
    for role in ("scheduler", "observer"):
        def pipeline(role=role):
            return Pipeline(base, [watcher("s", queue=ClientQueue.DELTA_FIFO, role=role)])

        rows, _, _ = stepped(pipeline(), writes)
        assert scanned(pipeline(), writes)[0] == rows
        coalesced[role] = [rv for _, rv, *_, flag in rows if flag]
    assert coalesced == {"scheduler": [3], "observer": []}


def test_a_relist_brings_the_view_to_the_listed_state():
    """Many objects written, created and deleted while a slow watcher is closed and re-lists:
    once its list's deltas are handled, the last write it applied of each object is the last
    write of that object by the list's version, and every object it holds exists then."""
    rng = np.random.default_rng(4)
    n = 400
    commit = np.cumsum(rng.integers(100, 600, n)).tolist()
    key = rng.integers(0, 40, n).tolist()
    deleted = (rng.random(n) < 0.15).tolist()
    server = ServerSettings(buffer=1, capacity=5, timeout_budget_ms=1.0,
                            budget_refill_ms_per_s=0, list_per_object=Constant(0.01))
    pipeline = Pipeline(config(server=server, handler__service=Exponential(0.1)),
                        [watcher("slow", watcher_queue__service=Exponential(2.0)),
                         watcher("fast")])
    rows, _, incidents = stepped(pipeline, Writes(commit, [[0, 1]] * n, key=key,
                                                  deleted=deleted))
    relists = incidents["relists"]
    assert relists.height >= 1
    for version, end in zip(relists["rv"], relists["end_ts"].dt.epoch("us")):
        applied_by = {}
        for w, rv, _, _, _, applied, _, _ in sorted(rows, key=lambda r: r[5]):
            if w == 0 and applied <= end and rv <= version:
                applied_by[key[rv - 1]] = max(applied_by.get(key[rv - 1], 0), rv)
        last = {}
        for rv in range(1, version + 1):
            last[key[rv - 1]] = rv
        assert applied_by == last
    counts = Counter((r[0], r[1]) for r in rows)
    assert set(counts.values()) == {1} and len(counts) == 2 * n


# --- the client queues -----------------------------------------------------------------------

def client_run(discipline, arrivals):
    """(key, received) arrivals, 10 ms of handling each: rows (key, dequeued, applied,
    coalesced) in arrival order."""
    queue = QUEUES[discipline]()
    items = [Arrival(t * MS, key, 10 * MS, False, [n]) for n, (key, t) in enumerate(arrivals)]
    for item in items:
        queue.arrive(item)
    queue.flush(1 << 62)
    handled = {a.rows[0]: (d, p, c) for a, d, p, c in queue.take()}
    return [(key, *(v // MS if isinstance(v, int) and not isinstance(v, bool) else v
                    for v in handled[n])) for n, (key, _) in enumerate(arrivals)]


ARRIVALS = [("w", 0), ("x", 1), ("y", 2), ("x", 3), ("z", 4)]


def test_fifo_handles_every_event_in_arrival_order():
    assert client_run(ClientQueue.FIFO, ARRIVALS) == [
        ("w", 0, 10, False), ("x", 10, 20, False), ("y", 20, 30, False), ("x", 30, 40, False),
        ("z", 40, 50, False)]


def test_delta_fifo_pops_a_keys_queued_deltas_together_and_handles_each():
    """x's second event joins its queued entry: both are handled before y, which came between."""
    assert client_run(ClientQueue.DELTA_FIFO, ARRIVALS) == [
        ("w", 0, 10, False), ("x", 10, 20, False), ("y", 30, 40, False), ("x", 20, 30, False),
        ("z", 40, 50, False)]


def test_workqueue_coalesces_a_key_added_while_queued():
    """x's second event is absorbed by its queued item, whose one handling reads the latest
    state: it is coalesced, handled with the first; everything after moves up."""
    assert client_run(ClientQueue.WORKQUEUE, ARRIVALS) == [
        ("w", 0, 10, False), ("x", 10, 20, False), ("y", 20, 30, False), ("x", 10, 20, True),
        ("z", 30, 40, False)]


def test_workqueue_queues_a_key_again_when_added_while_processed():
    """x arrives again while its first handling runs: it is queued again when that is done
    (after y, queued meanwhile), not absorbed."""
    assert client_run(ClientQueue.WORKQUEUE, [("x", 0), ("y", 1), ("x", 2)]) == [
        ("x", 0, 10, False), ("y", 10, 20, False), ("x", 20, 30, False)]


@pytest.mark.parametrize("relisted, kept", [(False, 0), (True, 1)])
def test_delta_fifo_merges_two_queued_deletes(relisted, kept):
    """dedupDeltas keeps the earlier of two queued deletes (isDeletionDup: "the one with the
    most information"), unless the earlier is a re-list's (DeletedFinalStateUnknown); the
    other is coalesced into it, handled when it is."""
    queue = QUEUES[ClientQueue.DELTA_FIFO]()
    first = Arrival(1, 7, 10, True, [0], tag=0 if relisted else -1)
    second = Arrival(2, 7, 10, True, [1])
    busy = Arrival(0, 1, 10, False, ["busy"])
    for item in (busy, first, second):
        queue.arrive(item)
    queue.flush(1 << 62)
    handled = {a.rows[0]: (d, p, c) for a, d, p, c in queue.take()}
    assert handled[kept] == (10, 20, False) and handled[1 - kept] == (10, 20, True)


@pytest.mark.parametrize("discipline", list(ClientQueue))
def test_with_distinct_keys_every_client_queue_is_the_fifo_queue(discipline):
    rng = np.random.default_rng(1)
    commit = np.cumsum(rng.integers(0, 300, 500)).tolist()
    costs = config(handler__service=Exponential(0.5), network__latency=Exponential(0.1))
    writes = Writes(commit, [[0]] * 500)
    fifo, _, _ = stepped(Pipeline(costs, [watcher("a")]), writes)
    other, _, _ = stepped(Pipeline(costs, [watcher("a", queue=discipline)]), writes)
    assert other == fifo


def test_a_slow_handler_alone_terminates_no_watcher():
    """The handler takes 50 ms an event, the buffers are the smallest, the budget is empty: the
    reflector drains the stream into the client queue, so the server never waits."""
    server = ServerSettings(buffer=1, timeout_budget_ms=0.0, budget_refill_ms_per_s=0.0)
    pipeline = Pipeline(config(server=server, handler__service=Constant(50.0)),
                        [watcher("a"), watcher("b", queue=ClientQueue.DELTA_FIFO)])
    writes = Writes([t * 100 for t in range(300)], [[0, 1]] * 300,
                    key=[t % 7 for t in range(300)])
    rows, _, incidents = stepped(pipeline, writes)
    assert all(table.height == 0 for table in incidents.values())
    assert max(r[5] for r in rows) > 10_000 * MS  # handled long after: 300 x 50 ms


# --- the vectorised scan is the definition -------------------------------------------------------

dists = st.one_of(st.builds(Constant, st.floats(0, 3)), st.builds(Exponential, st.floats(0, 3)))
slow = st.one_of(dists, st.builds(Exponential, st.floats(1, 8)))
cases = st.fixed_dictionaries({
    "seed": st.integers(0, 2**31),
    "gaps": st.lists(st.integers(0, 400), min_size=12, max_size=70),
    "watchers": st.integers(1, 3),
    "queues": st.lists(st.sampled_from(list(ClientQueue)), min_size=3, max_size=3),
    "slow": st.lists(slow, min_size=3, max_size=3),
    "network": dists, "handler": dists, "cacher": dists,
    "buffer": st.integers(1, 3), "capacity": st.integers(1, 16),
    "budget": st.floats(0, 6), "refill": st.floats(0, 200),
    "keys": st.integers(1, 12), "nodes": st.booleans(), "data": st.data(),
    "roles": st.lists(st.sampled_from(["observer", "scheduler"]), min_size=3, max_size=3),
})


def costs_of(case: dict) -> RunConfig:
    """The run config of one of ``cases``: its server settings and stage costs."""
    server = ServerSettings(buffer=case["buffer"], capacity=case["capacity"],
                            timeout_budget_ms=case["budget"],
                            budget_refill_ms_per_s=case["refill"],
                            list_per_object=Constant(0.05))
    return config(case["seed"], server, network__latency=case["network"],
                  handler__service=case["handler"], cacher_queue__service=case["cacher"])


@settings(max_examples=budget(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases)
def test_scan_equals_step_under_load(case):
    """Random loads, buffers, budgets, windows and client queues, with a second resource, and
    pod writes setting a terminal phase, a deletion to a scheduler's watch of non-terminal
    pods: the vectorised scan (and where it would block, its fallback) gives exactly
    ``step``'s tables."""
    costs = costs_of(case)
    resources = ("pods", "nodes") if case["nodes"] else ("pods",)
    watchers = [watcher(f"w{i}", resources, case["queues"][i], role=case["roles"][i],
                        watcher_queue__service=case["slow"][i])
                for i in range(case["watchers"])]
    data = case["data"]
    commit = np.cumsum(case["gaps"]).tolist()
    n = len(commit)
    resource = [data.draw(st.integers(0, len(resources) - 1)) for _ in range(n)]
    everyone = list(range(case["watchers"]))
    targets = [everyone if data.draw(st.integers(0, 3)) else
               sorted(data.draw(st.lists(st.sampled_from(everyone), unique=True)))
               for _ in range(n)]
    keys = [data.draw(st.integers(0, case["keys"] - 1)) for _ in range(n)]
    deleted = [data.draw(st.booleans()) for _ in range(n)]
    ends = [resources[r] == "pods" and not gone and data.draw(st.integers(0, 3)) == 0
            for r, gone in zip(resource, deleted)]

    def pipeline():
        return Pipeline(costs, watchers)

    code = {name: pipeline().resource_code(name) for name in resources}
    codes = [code[resources[r]] for r in resource]
    writes = Writes(commit, targets, codes, keys, deleted, ends)
    by_step = stepped(pipeline(), writes)
    scan_pipeline = pipeline()
    by_scan = scanned(scan_pipeline, writes)
    for name, table in by_step[2].items():
        event(f"{name}: {'some' if table.height else 'none'}")
    event(f"streams evaluated again by the scan: {'some' if scan_pipeline.scanned.fixed else 'none'}")
    assert by_scan[0] == by_step[0]
    assert by_scan[1] == by_step[1]
    for name, table in by_step[2].items():
        assert by_scan[2][name].equals(table), name
    # observe scans a part at a time: a full buffer is found across parts too
    if by_step[0]:
        by_parts = scanned(pipeline(), writes, data.draw(st.integers(1, len(by_step[0]))))
        assert by_parts[0] == by_step[0]
        for name, table in by_step[2].items():
            assert by_parts[2][name].equals(table), name
    rows = by_step[0]
    assert sorted(Counter((r[0], r[1]) for r in rows)) == sorted(
        (w, i + 1) for i, t in enumerate(targets) for w in t), "exactly once"
    assert stream_invariants(rows, codes, commit) == []
    assert recovery_invariants(rows, codes, by_step[2], [f"w{i}" for i in everyone],
                               pipeline().streams.resources) == []


def recovery_invariants(rows, resource, incidents, watchers, resources) -> list[str]:
    """What the run tables say of each termination (docs/run-directory.md): it is recovered
    (recovered_ts) after it happened; each write it missed (its ``missed`` count, stream by
    stream the deliveries with source rewatch or relist) is newer than its ``resume_rv`` and
    applied by its ``recovered_ts``; a write a re-list covers is applied during that re-list
    and is not newer than the list.  Returns the broken ones."""
    broken = []
    us = [pl.col(column).dt.epoch("us") for column in ("ts", "recovered_ts")]
    terminations: dict[tuple[int, int], list] = {}
    for w, r, ts, recovered, resume_rv, missed in incidents["watch_terminations"].select(
            "watcher", "resource", *us, "resume_rv", "missed").rows():
        if recovered is None or recovered < ts:
            broken.append(f"{w} {r} terminated at {ts}: recovered at {recovered}")
        terminations.setdefault((watchers.index(w), resources.index(r)), []).append(
            (ts, recovered, resume_rv, missed))
    lists: dict[tuple[int, int], list] = {}
    for w, r, start, end, rv in incidents["relists"].select(
            "watcher", "resource", *(pl.col(c).dt.epoch("us") for c in ("start_ts", "end_ts")),
            "rv").rows():
        lists.setdefault((watchers.index(w), resources.index(r)), []).append((start, end, rv))
    owed: Counter = Counter()
    for w, rv, _, _, _, applied, source, _ in rows:
        if source == Source.WATCH:
            continue
        stream = (w, resource[rv - 1])
        owed[stream] += 1
        if not any(resume_rv < rv and recovered is not None and ts <= applied <= recovered
                   for ts, recovered, resume_rv, _ in terminations.get(stream, ())):
            broken.append(f"{stream} rv {rv}: missed by no termination before its recovery")
        if source == Source.RELIST and not any(
                start <= applied <= end and rv <= listed
                for start, end, listed in lists.get(stream, ())):
            broken.append(f"{stream} rv {rv}: covered by no re-list")
    for stream, recorded in terminations.items():
        if sum(t[3] for t in recorded) != owed[stream]:
            broken.append(f"{stream}: {sum(t[3] for t in recorded)} writes missed, "
                          f"{owed[stream]} re-sent or re-listed")
    return broken


def stream_invariants(rows, resource, commit) -> list[str]:
    """What holds of every (watcher, resource) stream's deliveries, terminations and re-lists
    included (docs/run-directory.md): stage times never run backwards along a delivery; along
    the stream in rv order, sent and received times never decrease; a re-list's deliveries
    share its sent and received times.  Returns the broken ones."""
    broken = []
    streams: dict[tuple[int, int], list] = {}
    for row in rows:
        streams.setdefault((row[0], resource[row[1] - 1]), []).append(row)
    for stream, mine in streams.items():
        mine.sort(key=lambda r: r[1])
        for _, rv, sent, received, dequeued, applied, _, _ in mine:
            if not commit[rv - 1] <= sent <= received <= dequeued <= applied:
                broken.append(f"{stream} rv {rv}: stage times run backwards")
        for before, after in zip(mine, mine[1:]):
            if after[2] < before[2] or after[3] < before[3]:
                broken.append(f"{stream} rv {after[1]}: sent or received before rv {before[1]}'s")
    return broken


# --- the buffers' and the window's sizes ------------------------------------------------------

@given(st.lists(st.integers(0, 100).map(lambda s: s * 1_000_000) | st.integers(0, 10**8),
                max_size=400), st.integers(0, 10**15))
def test_the_window_counts_the_busiest_75_seconds(offsets, start):
    """``capacity_for`` against the rule written out: events counted per whole second since
    the first, the most in any 75 consecutive seconds, then doubled from 100 until they fit."""
    from replay.engine.watchcache import capacity_for
    times = start + np.sort(np.array(offsets, dtype=np.int64))
    per_second = Counter(((times - times[0]) // 1_000_000).tolist()) if len(times) else {}
    busiest = max((sum(per_second.get(s, 0) for s in range(first, first + 75))
                   for first in per_second), default=0)
    capacity = 100
    while capacity < busiest and capacity < 102_400:
        capacity *= 2
    assert capacity_for(times) == capacity


def test_buffers_follow_upstreams_rule():
    from replay.engine.watchcache import capacity_for, channel_size
    assert capacity_for(np.array([])) == 100
    assert capacity_for(np.arange(0, 75_000_000, 75_000_000 // 5000)) == 6400
    assert capacity_for(np.arange(0, 75_000_000, 10)) == 102_400
    # an event at a whole second since the first counts in that second, not the one before
    assert capacity_for(np.array([0] * 101 + [75_000_000] * 100)) == 200
    assert channel_size(102_400, "pods", node_bound=False) == 1000
    assert channel_size(102_400, "pods", node_bound=True) == 10
    assert channel_size(102_400, "nodes", node_bound=False) == 100
    assert channel_size(6400, "pods", node_bound=False) == 86
    assert channel_size(100, "pods", node_bound=False) == 10
    pipeline = Pipeline(config(), [WatcherSpec("s", "scheduler"),
                                   WatcherSpec("k", "kubelet", node="n1")],
                        capacities={"pods": 102_400, "nodes": 100})
    streams = pipeline.streams
    assert {(pipeline.watchers[w].name, streams.resources[r]): b for w, r, b in zip(
        streams.watcher, streams.resource, pipeline.buffer)} == {
        ("s", "nodes"): 10, ("s", "pods"): 1000, ("k", "nodes"): 10, ("k", "pods"): 10}


# --- a what-if control plane under load ---------------------------------------------------------

GODEL_UNDER_LOAD = """
profile = "zero"
[stages.network]
latency = { dist = "exponential", mean_ms = 0.3 }
[stages.handler]
service = { dist = "exponential", mean_ms = 0.05 }
[stages.watcher_queue]
buffer = 2
[dispatch]
timeout_budget_ms = 3.0
budget_refill_ms_per_s = 10.0
[watch_cache]
capacity = 30
[list]
per_object = { dist = "constant", ms = 0.02 }
[[watchers]]
name = "godel-dispatcher"
role = "dispatcher"
resources = ["pods"]
[[watchers]]
name = "godel-scheduler"
role = "scheduler"
replicas = 2
[[watchers]]
name = "godel-scheduler-2"
role = "scheduler"
client_queue = "delta_fifo"
[watchers.stages.watcher_queue]
service = { dist = "exponential", mean_ms = 3.0 }
[[watchers]]
name = "godel-binder"
role = "binder"
client_queue = "workqueue"
"""


def test_a_what_if_control_plane_under_load(tmp_path):
    """Gödel's components on a busy trace while one scheduler's watches drain slowly: its
    watches are terminated and re-watch or re-list while the model keeps scheduling on what its
    views show; every write still reaches every watcher exactly once, in stream order, and the
    same inputs give the same tables."""
    from replay.api import run_replay
    from replay.engine.config import load_config
    from replay.trace.synth import SynthSpec, synthesize

    trace = tmp_path / "busy.parquet"
    synthesize(SynthSpec(nodes=20, pods=400, arrival_rate=400.0, mean_lifetime=2.0, seed=3), trace)
    config = tmp_path / "load.toml"
    config.write_text(GODEL_UNDER_LOAD)
    tables = {}
    for out in ("a", "b"):
        run_replay(trace, load_config(config, model="godel", overrides=["schedulers=3"]),
                   out=tmp_path / out)
        tables[out] = {name: pl.read_parquet(tmp_path / out / f"{name}.parquet") for name in (
            "events", "deliveries", "watch_terminations", "relists", "attempts")}
    run = tables["a"]
    for name, table in run.items():
        assert table.equals(tables["b"][name]), name
    terminations = run["watch_terminations"]
    assert terminations.filter(terminations["watcher"] == "godel-scheduler-2").height > 0
    deliveries = run["deliveries"]
    assert deliveries.select("rv", "watcher").is_duplicated().sum() == 0
    assert set(deliveries["source"]) >= {"watch", "rewatch"}
    events = run["events"]
    resource = dict(zip(events["rv"], events["resource"]))
    commit = {rv: ts for rv, ts in zip(events["rv"], events["commit_ts"].dt.epoch("us"))}
    names = sorted(set(deliveries["watcher"]))
    rows = [(names.index(w), rv, *times, Source[source.upper()], coalesced)
            for w, rv, *times, source, coalesced in deliveries.select(
                "watcher", "rv", *(pl.col(c).dt.epoch("us") for c in (
                    "sent_ts", "received_ts", "dequeued_ts", "applied_ts")),
                "source", "coalesced").rows()]
    codes = {r: i for i, r in enumerate(sorted(set(resource.values())))}
    by_rv = [codes[resource[rv]] for rv in range(1, max(resource) + 1)]
    assert stream_invariants(rows, by_rv, [commit[rv] for rv in range(1, max(resource) + 1)]) \
        == []
    assert recovery_invariants(rows, by_rv, run, names, sorted(codes)) == []
    assert set(run["attempts"]["outcome"]) <= {"bound", "conflict", "unschedulable", "error"}
    assert set(terminations["recovery"]) == {"rewatch", "relist"} and run["relists"].height



def test_no_writes_at_all():
    """A trace with no committed write (every one failed): nothing to scan."""
    pipeline = Pipeline(config(), [])
    times = pipeline.scan(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64),
                          np.zeros(0, dtype=np.int64))
    assert all(len(values) == 0 for values in times.values())
    assert all(table.height == 0 for table in pipeline.scanned.incidents().values())


def test_the_dispatchers_budget_is_taken_whole_refilled_and_returned():
    """time_budget.go: the dispatcher takes the whole budget (at most 100 ms), waits until room
    or the deadline, returns what it did not use; the budget refills at 50 ms a second."""
    from replay.engine.pipeline import _Resource

    resource = _Resource(0, "pods", 100, (), max_budget_us=100 * MS, refill_us_per_s=50 * MS)

    class Full:  # a watch whose buffer has room at room_ms
        def __init__(self, room_ms, number):
            self.recent, self.index, self.watcher = [room_ms * MS], number, number

    def full_until(room_ms, number=0):
        return Full(room_ms, number)

    waits = []
    # full budget: room at 30 ms comes in time; 70 ms go back
    assert resource.block(0, [full_until(30)], 1, waits)[0] == 30 * MS
    assert resource.budget == 70 * MS
    # a second later: 70 + 50, at most 100: room at 1,200 ms is too late, terminated at 1,100
    released, entries, deadline = resource.block(1000 * MS, [full_until(1200)], 2, waits)
    assert (released, entries, deadline) == (1100 * MS, {}, 1100 * MS)
    assert resource.budget == 0
    # another second: 50 ms refilled; two blocked watches, waited for in turn
    first, second = full_until(2010, 0), full_until(2040, 1)
    released, entries, _ = resource.block(2000 * MS, [second, first], 3, waits)
    assert released == 2040 * MS and entries == {first: 2010 * MS, second: 2040 * MS}
    assert resource.budget == 10 * MS
    assert [(w[2], w[4] // MS, w[5]) for w in waits] == [
        (1, 30, False), (2, 1100, True), (3, 2010, False), (3, 2040, False)]
