"""``replay check``: it passes on consistent runs, and fails, naming the invariant, on run
directories corrupted on purpose (one corruption per invariant); its command line."""

from __future__ import annotations

import datetime as dt
import functools
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from replay.analysis.check import (INVARIANTS, Reads, RunTables, Status, check_run,
                                   compare_runs, failed)
from replay.analysis.derive import derive
from replay.api import run_replay
from replay.cli.main import main
from replay.engine.config import load_config
from replay.engine.rundir import record_files
from replay.trace.io import write_trace
from replay.trace.synth import SynthSpec, synthesize

from conftest import REPO, SAMPLE_TRACE, cut_sample, shared_data
from strategies import GIB, bind, delete, node, pod, rows_to_trace, status, under_load

MS = dt.timedelta(milliseconds=1)
US = dt.timedelta(microseconds=1)
TABLES = ("events", "deliveries", "attempts", "pods", "watchers", "watch_terminations",
          "relists")

# Two nodes; pods arriving two at a time, one deleted, one too big for any node (it stays
# pending, unschedulable); recorded bindings (kept by observe, set aside by the what-if models).
ROWS = [
    node(0, "n0", 4000, 8 * GIB, 1000), node(0, "n1", 2000, 8 * GIB),
    pod(1, "a", 1000, GIB), pod(1, "b", 1500, GIB, 500), bind(3, "a", "n0"), bind(3, "b", "n0"),
    pod(5, "c", 500), bind(7, "c", "n1"), delete(30, "c"),
    pod(6, "huge", 9000), node(40, "n1", None, None, None, verb="patch", subresource="status"),
]
# One node with room for one of two pods that two kube-schedulers place at once: the kubelet
# admits the first binding and fails the second
RACE = [node(0, "n0", 1000, 8 * GIB), pod(1, "a", 1000), pod(1, "b", 1000)]


# Under load (observe, strategies.under_load): second-scheduler's watch of pods is terminated,
# re-lists (twice: the first list too leaves the window of 2 events) and re-watches;
# kube-scheduler's workqueue coalesces a pod's writes queued together
LOAD = under_load(2, "workqueue", "fifo")
BUSY = [node(0, "n0", 64000, 64 * GIB), node(0, "n1", 64000, 64 * GIB)] + [
    row for i in range(12) for row in (pod(1 + i, f"p{i}", 100), bind(2 + i, f"p{i}", f"n{i % 2}"))
] + [delete(20 + i, f"p{i}") for i in range(0, 12, 3)]


def replay(root: Path, model: str, config: str = "", rows=ROWS) -> Path:
    folder = Path(tempfile.mkdtemp(dir=root))
    trace = rows_to_trace(folder / "trace.parquet", rows)
    (folder / "run.toml").write_text(config)
    return run_replay(trace, load_config(folder / "run.toml", model=model),
                      out=folder / model).out


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> dict[str, Path]:
    """Consistent runs to corrupt: Gödel (its commits are checked) with the default delays, the
    oracle with every stage free, and two kube-schedulers racing for one node."""
    root = tmp_path_factory.mktemp("check")
    return {"godel": replay(root, "godel"), "oracle": replay(root, "oracle", 'profile = "zero"\n'),
            "kube": replay(root, "kube", "[model]\nschedulers = 2\n", rows=RACE),
            "load": replay(root, "observe", LOAD, rows=BUSY)}


def ids(findings, status=Status.FAILED) -> list[str]:
    return [f.invariant for f in findings if f.status is status]


@pytest.mark.parametrize("model", ["godel", "oracle", "kube", "load"])
def test_the_runs_to_corrupt_keep_every_invariant(base, model):
    findings = check_run(base[model])
    assert failed(findings) == []
    assert [f.invariant for f in findings] == [i.id for i in INVARIANTS]


def test_a_scheduler_of_a_trace_without_pod_writes_is_checked(tmp_path):
    """A scheduler watches pods, of which the trace writes none: exactly_once once failed with a
    KeyError, looking for the pods' column among the resources the events write."""
    trace = rows_to_trace(tmp_path / "t.parquet", [node(0, "n0", 1000), node(5, "n1", 2000)])
    (tmp_path / "run.toml").write_text('[[watchers]]\nname = "s"\nrole = "scheduler"\n')
    run = run_replay(trace, load_config(tmp_path / "run.toml", model="observe"),
                     out=tmp_path / "run").out
    assert failed(check_run(run)) == []


# --- corruptions ----------------------------------------------------------------------------------

def corrupt(run_dir: Path, tmp_path: Path, edit, windows: bool = False,
            record: bool = True) -> Path:
    """A copy of ``run_dir`` whose tables ``edit(tables)`` changed (it returns the changed ones),
    their new checksums recorded in the manifest (as ``replay derive --accept-edits`` does)
    unless not ``record``; the capacity windows derived again if ``windows``."""
    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy)
    tables = {t: pl.read_parquet(copy / f"{t}.parquet") for t in TABLES}
    edited = edit(tables)
    for name, table in edited.items():
        table.write_parquet(copy / f"{name}.parquet")
    if record:
        record_files(copy, edited)
    if windows:
        derive(copy)
    return copy


def at(frame: pl.DataFrame, row: int, **values) -> pl.DataFrame:
    """``frame`` with the columns of row number ``row`` set to ``values``."""
    index = pl.int_range(pl.len()) == row
    return frame.with_columns(**{c: pl.when(index).then(pl.lit(v, dtype=frame[c].dtype))
                                 .otherwise(pl.col(c)) for c, v in values.items()})


def row_of(frame: pl.DataFrame, condition: pl.Expr) -> int:
    return frame.with_row_index().filter(condition)["index"][0]


def earlier_commit(t):
    """The second write committed before the first."""
    e = t["events"]
    return {"events": at(e, 1, commit_ts=e["commit_ts"][0] - MS)}


def received_before_sent(t):
    d = t["deliveries"]
    return {"deliveries": at(d, 0, received_ts=d["sent_ts"][0] - US)}


def commit_not_the_events(t):
    d = t["deliveries"]
    return {"deliveries": at(d, 3, commit_ts=d["commit_ts"][3] - US)}


def drop_a_delivery(t):
    """The kubelet of n0 never receives a's binding."""
    e, d = t["events"], t["deliveries"]
    rv = e.filter((pl.col("subresource") == "binding") & (pl.col("node") == "n0"))["rv"][0]
    return {"deliveries": d.filter(~((pl.col("rv") == rv) & (pl.col("watcher") == "kubelet/n0")))}


def deliver_twice(t):
    d = t["deliveries"]
    return {"deliveries": pl.concat([d, d[5:6]])}


def scheduler_sees_an_ended_pod(t):
    """Both kube-schedulers receive the controller's delete of the pod its kubelet failed,
    which their informers, of non-terminal pods, do not select."""
    e, d = t["events"], t["deliveries"]
    name = e.filter(pl.col("pod_state") == "failed")["name"][0]
    rv = e.filter(pl.col("verb") == "delete", pl.col("name") == name)["rv"][0]
    kubelet = d.filter(pl.col("rv") == rv)
    assert kubelet["role"].to_list() == ["kubelet"]
    schedulers = d.filter(pl.col("role") == "scheduler")["watcher"].unique().sort()
    assert len(schedulers) == 2
    return {"deliveries": pl.concat([d, *(kubelet.with_columns(
        watcher=pl.lit(scheduler), role=pl.lit("scheduler")) for scheduler in schedulers)])}


def swap_applied(t):
    """Two consecutive deliveries to one watcher applied in the opposite order."""
    d = t["deliveries"].sort("watcher", "rv")
    i = row_of(d, (pl.col("watcher") == pl.col("watcher").shift(-1))
               & (pl.col("applied_ts") < pl.col("applied_ts").shift(-1)))
    first, second = d["applied_ts"][i], d["applied_ts"][i + 1]
    return {"deliveries": at(at(d, i, applied_ts=second), i + 1, applied_ts=first)}


def cache_out_of_order(t):
    """A write leaves the watch cache before the write committed just before it (a and b are
    created at the same instant)."""
    d, e = t["deliveries"], t["events"]
    rv = e.filter(pl.col("name") == "b", pl.col("verb") == "create",
                  pl.col("subresource").is_null())["rv"][0]
    mine = pl.col("rv") == rv
    return {"deliveries": d.with_columns(
        cached_ts=pl.when(mine).then(pl.col("commit_ts")).otherwise(pl.col("cached_ts")),
        dispatched_ts=pl.when(mine).then(pl.col("commit_ts")).otherwise(pl.col("dispatched_ts")))}


def over_commit(t):
    """n0 reports a quarter of the cpu its pods request."""
    e = t["events"]
    i = row_of(e, (pl.col("resource") == "nodes") & (pl.col("name") == "n0"))
    return {"events": at(e, i, cpu_milli=500)}


def over_pod_limit(t):
    """Every node says it runs one pod at most, where the run put three on its two at once."""
    e = t["events"]
    return {"events": e.with_columns(max_pods=pl.when(pl.col("resource") == "nodes")
                                     .then(1).otherwise(pl.col("max_pods")))}


def admit_a_failed_pod(t):
    """The kubelet's admission failure is gone: it admitted both pods on a node with room for
    one."""
    e = t["events"]
    failure = (pl.col("subresource") == "status") & (pl.col("component") == "kubelet")
    return {"events": e.filter(~failure.fill_null(False))}


def second_binding(t):
    """a is bound again, to n1, after everything else."""
    e = t["events"]
    first = e.filter(pl.col("subresource") == "binding", pl.col("name") == "a")
    again = first.with_columns(rv=pl.lit(e["rv"].max() + 1, dtype=pl.Int64),
                               commit_ts=e["commit_ts"].max() + MS,
                               node=pl.lit("n1"), attempt_id=pl.lit(None, dtype=pl.Int64))
    return {"events": pl.concat([e, again])}


def decided_before_started(t):
    a = t["attempts"]
    return {"attempts": at(a, 0, decided_ts=a["started_ts"][0] - US)}


def view_lag_understated(t):
    """An attempt's scheduler said its view was a millisecond fresher than its deliveries say."""
    a = t["attempts"]
    return {"attempts": at(a, 0, view_lag_ms=a["view_lag_ms"][0] - 1.0)}


def undocumented_outcome(t):
    return {"attempts": at(t["attempts"], 0, outcome="pending")}


def bound_called_conflict(t):
    a = t["attempts"]
    return {"attempts": at(a, row_of(a, pl.col("outcome") == "bound"), outcome="conflict",
                           reason="node_full")}


def forget_a_pod(t):
    """huge, which fits nowhere, is pending with no attempt at all."""
    return {"attempts": t["attempts"].filter(pl.col("pod") != "ns/huge")}


def scheduler_misses_a_node(t):
    """godel-scheduler-0 never receives n0's create: blind to it until the run ends."""
    d = t["deliveries"]
    return {"deliveries": d.filter(~((pl.col("rv") == 1) & (pl.col("watcher") == "godel-scheduler-0")))}


def late_kubelet(t):
    """With every stage free, a kubelet applies a binding 5 ms late."""
    e, d = t["events"], t["deliveries"]
    rv = e.filter(pl.col("subresource") == "binding")["rv"][0]
    mine = (pl.col("rv") == rv) & (pl.col("watcher").str.starts_with("kubelet/"))
    return {"deliveries": d.with_columns(
        pl.when(mine).then(pl.col(c) + 5 * MS).otherwise(pl.col(c)).alias(c)
        for c in ("sent_ts", "received_ts", "dequeued_ts", "applied_ts"))}


def sent_on_the_closed_watch(t):
    """The write second-scheduler's watch could not take arrives on that watch (it was
    re-listed): a missed write not covered by the re-list."""
    rv = t["watch_terminations"]["rv"][0]
    d = t["deliveries"]
    mine = (pl.col("rv") == rv) & (pl.col("watcher") == "second-scheduler")
    return {"deliveries": d.with_columns(
        source=pl.when(mine).then(pl.lit("watch")).otherwise(pl.col("source").cast(pl.String)))}


def relist_forgotten(t):
    """relists lacks the re-lists whose deltas are in deliveries."""
    return {"relists": t["relists"].clear()}


def coalesced_apart(t):
    """A delivery the workqueue coalesced is applied 1 ms after the handling that absorbed it."""
    d = t["deliveries"]
    i = row_of(d, pl.col("coalesced"))
    return {"deliveries": at(d, i, applied_ts=d["applied_ts"][i] + MS)}


def object_reordered(t):
    """The workqueue applies a pod's later write before its earlier one."""
    d = t["deliveries"].filter(pl.col("watcher") == "kube-scheduler",
                               ~pl.col("coalesced")).sort("rv")
    e = t["events"].select("rv", "name")
    d = d.join(e, on="rv").filter(pl.col("name") == "p0").sort("rv")
    first, second = d["rv"][0], d["rv"][1]
    whole = t["deliveries"]
    mine = (pl.col("watcher") == "kube-scheduler") & pl.col("rv").is_in([first, second])
    late = whole.filter(mine)["applied_ts"].max() + MS
    return {"deliveries": whole.with_columns(applied_ts=pl.when(
        (pl.col("watcher") == "kube-scheduler") & (pl.col("rv") == first)).then(late)
        .otherwise(pl.col("applied_ts")))}


def damage_a_table(t):
    """A delivery's time changed behind the tool's back: the manifest's checksum no longer
    matches (the corruption is not recorded)."""
    return swap_applied(t)


CORRUPTIONS = [
    ("table_integrity", "godel", damage_a_table, False),
    ("rv_in_commit_order", "godel", earlier_commit, False),
    ("stage_times_ordered", "godel", received_before_sent, False),
    ("delivery_matches_event", "godel", commit_not_the_events, False),
    ("exactly_once", "godel", drop_a_delivery, False),
    ("exactly_once", "godel", deliver_twice, False),
    ("exactly_once", "kube", scheduler_sees_an_ended_pod, False),
    ("stream_order", "godel", swap_applied, False),
    ("stream_order", "load", object_reordered, False),
    ("coalesced_shares_handling", "load", coalesced_apart, False),
    ("missed_writes_recovered", "load", sent_on_the_closed_watch, False),
    ("missed_writes_recovered", "load", relist_forgotten, False),
    ("shared_queues_fifo", "godel", cache_out_of_order, False),
    ("truth_within_capacity", "godel", over_commit, False),
    ("truth_within_pod_limit", "godel", over_pod_limit, False),
    ("kubelet_admission", "kube", admit_a_failed_pod, False),
    ("one_binding_per_incarnation", "godel", second_binding, False),
    ("attempt_times_ordered", "godel", decided_before_started, False),
    ("view_lag_matches_deliveries", "godel", view_lag_understated, False),
    ("attempt_outcome_documented", "godel", undocumented_outcome, False),
    ("attempt_writes_match_outcome", "godel", bound_called_conflict, False),
    ("every_pod_accounted", "godel", forget_a_pod, False),
    ("views_converge", "godel", scheduler_misses_a_node, True),
    ("zero_delay_zero_windows", "oracle", late_kubelet, True),
]


@pytest.mark.parametrize("invariant, model, edit, windows", CORRUPTIONS,
                         ids=[f"{c[0]}-{c[2].__name__}" for c in CORRUPTIONS])
def test_a_corrupted_run_fails_naming_the_invariant(base, tmp_path, invariant, model, edit,
                                                    windows):
    broken = corrupt(base[model], tmp_path, edit, windows, record=edit is not damage_a_table)
    findings = {f.invariant: f for f in check_run(broken)}
    assert findings[invariant].status is Status.FAILED
    assert 1 <= len(findings[invariant].examples) <= findings[invariant].count


@pytest.mark.parametrize("key, value, problem", [
    ("seed", "7", "'seed' must be an integer"),
    ("tables", 5, "'tables' must be an object"),
    ("trace", "trace.parquet", "'trace' must be an object"),
])
def test_an_edited_manifest_fails_table_integrity(base, tmp_path, key, value, problem):
    """A manifest edited by hand passed every invariant, and broke `replay derive` later."""
    run = tmp_path / "run"
    shutil.copytree(base["godel"], run)
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, key: value}))
    integrity = {f.invariant: f for f in check_run(run)}["table_integrity"]
    assert integrity.status is Status.FAILED
    assert problem in integrity.examples[0]["problem"]


def test_a_table_linked_from_outside_fails_table_integrity(base, tmp_path):
    """The views may not follow the link (the sandbox): reported, rather than a DuckDB error."""
    run = tmp_path / "run"
    shutil.copytree(base["godel"], run)
    (run / "pods.parquet").rename(tmp_path / "pods.parquet")
    (run / "pods.parquet").symlink_to(tmp_path / "pods.parquet")
    integrity = {f.invariant: f for f in check_run(run)}["table_integrity"]
    assert integrity.status is Status.FAILED
    assert "a symbolic link out of the run directory" in integrity.examples[0]["problem"]


# Gödel's binder checks a's placement on its view at 47 ms and sends the binding, which commits
# commit_ms (20 ms) later; n0 goes away at 55 ms, in between, and the API server accepts the
# binding anyway
IN_FLIGHT = [node(0, "n0", 1000, 8 * GIB), pod(1, "a", 500),
             {**node(55, "n0", None, None, None, verb="delete"), "code": 200}]
REQUEST = 20 * MS  # the binding's commit_ms


@pytest.fixture(scope="module")
def in_flight(tmp_path_factory) -> Path:
    return replay(tmp_path_factory.mktemp("in-flight"), "godel", "[model]\ncommit_ms = 20.0\n",
                  rows=IN_FLIGHT)


def capacity_finding(run_dir: Path):
    return {f.invariant: f for f in check_run(run_dir)}["truth_within_capacity"]


def test_a_binding_sent_before_its_node_went_away_is_reported(in_flight):
    """The node's delete committed while the binding was on its way: the binder could not
    have known, so the over-commitment is reported, not failed."""
    finding = capacity_finding(in_flight)
    assert finding.status is Status.REPORTED
    assert [(e["change"], e["node"], e["free_cpu"]) for e in finding.examples] == [
        ("binding", "n0", -500)]


def test_a_binding_sent_after_its_binder_saw_the_node_go_fails(in_flight, tmp_path):
    """The same binding, had every scheduler and the binder applied the delete before the binder
    checked (a microsecond before the request): the binder should have rejected it."""
    finding = capacity_finding(corrupt(in_flight, tmp_path, node_write_applied(REQUEST + US)))
    assert finding.status is Status.FAILED
    assert finding.examples[0]["change"] == "binding"


def test_a_throttled_binding_is_judged_at_its_request(in_flight, tmp_path):
    """Had the binding waited 10 ms for its client's rate limiter, the binder would have checked
    it 30 ms before its commit, when a delete applied 25 ms before the commit was on its way."""
    def throttled(t):
        return {**node_write_applied(REQUEST + 5 * MS)(t),
                "attempts": t["attempts"].with_columns(throttled_ms=pl.lit(10.0))}

    assert capacity_finding(corrupt(in_flight, tmp_path, throttled)).status is Status.REPORTED


def node_write_applied(before_commit: dt.timedelta):
    """An edit: every watcher applied n0's last write (its delete, its lower pod limit)
    ``before_commit`` before a's binding committed."""
    def edit(t):
        e, d = t["events"], t["deliveries"]
        gone = e.filter(pl.col("resource") == "nodes")["rv"].max()
        binding = e.filter(pl.col("subresource") == "binding")["commit_ts"][0]
        return {"deliveries": d.with_columns(applied_ts=pl.when(pl.col("rv") == gone)
                                             .then(pl.lit(binding - before_commit))
                                             .otherwise(pl.col("applied_ts")))}
    return edit


# The same binding while n0's pod limit goes from one pod to none (its allocatable cpu stays)
LIMIT_IN_FLIGHT = [node(0, "n0", 1000, 8 * GIB, max_pods=1), pod(1, "a", 500),
                   node(55, "n0", 1000, 8 * GIB, max_pods=0, verb="patch", subresource="status")]


@pytest.fixture(scope="module")
def limit_in_flight(tmp_path_factory) -> Path:
    return replay(tmp_path_factory.mktemp("limit-in-flight"), "godel",
                  "[model]\ncommit_ms = 20.0\n", rows=LIMIT_IN_FLIGHT)


def pod_limit_finding(run_dir: Path):
    return {f.invariant: f for f in check_run(run_dir)}["truth_within_pod_limit"]


def test_a_binding_sent_before_its_nodes_pod_limit_was_lowered_is_reported(limit_in_flight):
    finding = pod_limit_finding(limit_in_flight)
    assert finding.status is Status.REPORTED
    assert [(e["change"], e["node"], e["pods"], e["max_pods"]) for e in finding.examples] == [
        ("binding", "n0", 1, 0)]


def test_a_binding_sent_after_its_binder_saw_the_lower_pod_limit_fails(limit_in_flight, tmp_path):
    edited = corrupt(limit_in_flight, tmp_path, node_write_applied(REQUEST + US))
    finding = pod_limit_finding(edited)
    assert finding.status is Status.FAILED
    assert finding.examples[0]["change"] == "binding"


def test_a_recorded_cluster_past_a_nodes_pod_limit_is_reported(tmp_path):
    """observe keeps the recorded placements: two pods bound to n0, which says it runs one
    (its events carry the trace's max_pods), is reported, not failed; without any node saying
    its limit the invariant does not apply."""
    rows = [node(0, "n0", 4000, max_pods=1), node(0, "n1", 4000), pod(1, "a", 100),
            pod(1, "b", 100), bind(3, "a", "n0"), bind(4, "b", "n0"), delete(9, "a")]
    run = replay(tmp_path, "observe", rows=rows)
    events = pl.read_parquet(run / "events.parquet").filter(pl.col("resource") == "nodes")
    assert events.select("name", "max_pods").rows() == [("n0", 1), ("n1", None)]
    finding = {f.invariant: f for f in check_run(run)}["truth_within_pod_limit"]
    assert finding.status is Status.REPORTED and finding.count == 1
    assert {k: finding.examples[0][k] for k in ("node", "pod", "pods", "max_pods")} == \
        {"node": "n0", "pod": "ns/b", "pods": 2, "max_pods": 1}
    unlimited = replay(tmp_path, "observe", rows=[r | {"max_pods": None} for r in rows])
    finding = {f.invariant: f for f in check_run(unlimited)}["truth_within_pod_limit"]
    assert finding.status is Status.NOT_APPLICABLE


@pytest.mark.parametrize("model", ["observe", "oracle"])
def test_the_pods_table_moves_pods_as_the_claims_do(tmp_path, model):
    """A run whose writes set no pod state counts the pods on each node from the pods table
    (``RunTables.pod_moves``), not from the claims: the two give the same moves."""
    rows = [node(0, "n0", 4000, max_pods=2), node(0, "n1", 1000, max_pods=1),
            status(1, "old", "Running", node="n0", cpu=100, memory=GIB),
            *[pod(2 + i, f"p{i}", 100 * (i % 2)) for i in range(5)],
            *[bind(4 + i, f"p{i}", f"n{i % 2}") for i in range(5)],
            delete(9, "p0"), delete(10, "old"), pod(11, "p0", 0), bind(12, "p0", "n0")]
    run = RunTables(replay(tmp_path, model, rows=rows))
    try:
        assert not run.pod_states
        order = "ORDER BY rv, moved"
        from_pods = run.sql(f"{run.pod_moves()} {order}").fetchall()
        run.pod_states = True  # (the cached property, as a run with pod states has it)
        assert run.sql(f"{run.pod_moves()} {order}").fetchall() == from_pods
        assert {move[-1] for move in from_pods} == {1, -1}
    finally:
        run.close()


def test_a_kubelet_that_admits_a_pod_past_its_nodes_pod_limit_fails(tmp_path):
    """Two kube-schedulers place a pod each on n0 at once, which has the cpu for both but room
    for one pod: its kubelet fails the second (OutOfpods), which the truth held meanwhile
    (reported).  With that failure gone, the kubelet admitted both: kubelet_admission fails,
    saying the pod count and the limit."""
    rows = [node(0, "n0", 64000, max_pods=1), pod(1, "a", 100), pod(1, "b", 0)]
    run = replay(tmp_path, "kube", "[model]\nschedulers = 2\n", rows=rows)
    findings = {f.invariant: f for f in check_run(run)}
    assert failed(list(findings.values())) == []
    assert findings["truth_within_pod_limit"].status is Status.REPORTED
    broken = {f.invariant: f for f in check_run(corrupt(run, tmp_path, admit_a_failed_pod))}
    finding = broken["kubelet_admission"]
    assert finding.status is Status.FAILED and finding.count == 1
    assert {k: finding.examples[0][k] for k in ("node", "pods", "max_pods", "free_cpu")} == \
        {"node": "n0", "pods": 2, "max_pods": 1, "free_cpu": None}


def test_every_invariant_has_a_corruption():
    assert {c[0] for c in CORRUPTIONS} | {"deterministic"} == {i.id for i in INVARIANTS}


def test_a_run_that_differs_from_its_replay_is_not_deterministic(base, tmp_path):
    again = corrupt(base["godel"], tmp_path, swap_applied, record=False)
    assert compare_runs(base["godel"], base["godel"]).status is Status.OK
    different = compare_runs(base["godel"], again)
    assert different.status is Status.FAILED and different.examples == (
        {"file": "deliveries.parquet"},)


def test_the_check_reads_its_arrays_without_numpys_huge_pages(base, monkeypatch):
    """numpy asks for no huge pages while the check's two threads read and scan the tables (the
    1M-pod what-if run's check spent about 40% more system time with them), and as before after."""
    import replay.analysis.check as check_module
    from replay import memory

    class Switch:
        on = True

        def __call__(self, on: bool) -> bool:
            previous, self.on = self.on, on
            return previous

    switch, during = Switch(), []
    differ = check_module._writes_whose_recipients_differ

    def watched(run):
        during.append(switch.on)  # (on the second thread)
        return differ(run)

    monkeypatch.setattr(memory, "huge_page_switch", lambda: switch)
    monkeypatch.setattr(check_module, "_writes_whose_recipients_differ", watched)
    assert not failed(check_run(base["godel"]))
    assert during == [False] and switch.on is True


@pytest.mark.parametrize("applied, fails", [((5, 5, 9), False), ((5, 6, 9), True)])
def test_a_coalesced_delivery_may_share_the_handling_of_the_one_after_it(applied, fails):
    """A delete coalesced into the next delete of its object (a ``delta_fifo`` whose earlier
    delta is a re-list's DeletedFinalStateUnknown keeps the later one) is handled with the
    delivery after it: its partner is the next of the same watcher and object, not the one
    before (rvs 1 and 2 of object 7, then rv 3 of object 8)."""
    from replay.analysis.check import coalesced_shares_handling
    from replay.analysis.history import STAGES, Deliveries

    class Run:  # what the invariant reads of a run
        deliveries = Deliveries(
            rv=np.array([1, 2, 3]), watcher=np.zeros(3, dtype=np.int64), names=["w"],
            times={stage: np.array(applied) for stage in STAGES}, nulls={},
            source=np.zeros(3, dtype=np.int8), coalesced=np.array([True, False, False]))
        delivery_objects = np.array([7, 7, 8])
        previous_of_object = property(RunTables.previous_of_object.func)

        def watcher_flags(self, names, test):
            return np.array([test({"client_queue": "delta_fifo"})])

    finding = coalesced_shares_handling(Run())
    assert (finding.status is Status.FAILED) is fails


def swapped_in_a_stream(column: str):
    """Two consecutive pod deliveries to one watcher with ``column`` in the opposite order."""
    def edit(t):
        pods = t["events"].filter(pl.col("resource") == "pods")["rv"].to_list()
        d = pl.concat([t["deliveries"].filter(pl.col("rv").is_in(pods)).sort("watcher", "rv"),
                       t["deliveries"].filter(~pl.col("rv").is_in(pods))])
        i = row_of(d, (pl.col("watcher") == pl.col("watcher").shift(-1))
                   & (pl.col(column) < pl.col(column).shift(-1)))
        first, second = d[column][i], d[column][i + 1]
        return {"deliveries": at(at(d, i, **{column: second}), i + 1, **{column: first})}
    edit.__name__ = f"swapped_{column}"
    return edit


def shared_stage_apart(column: str):
    """One of a pod write's deliveries (of several, through the pipeline) with its shared stage
    ``column`` a microsecond earlier than its partners'."""
    def edit(t):
        d, pods = t["deliveries"], t["events"].filter(pl.col("resource") == "pods")["rv"]
        i = row_of(d, pl.col("rv").is_in(pods.implode()) & (pl.len().over("rv") > 1)
                   & (pl.col("applied_ts") > pl.col("commit_ts")))
        return {"deliveries": at(d, i, **{column: d[column][i] - US})}
    edit.__name__ = f"{column}_apart"
    return edit


def unknown_source(t):
    return {"deliveries": at(t["deliveries"], 2, source="resync")}


def piped_list_row(t):
    """A delivery that went through the pipeline called the watcher's first list."""
    d = t["deliveries"]
    return {"deliveries": at(d, row_of(d, pl.col("applied_ts") > pl.col("commit_ts")),
                             source="list")}


def delivery_of_no_event(where: str, rv):
    """A delivery of an rv that no event has, ``rv(the last event's)``."""
    def edit(t):
        return {"deliveries": at(t["deliveries"], 4, rv=rv(t["events"]["rv"].max()))}
    edit.__name__ = f"delivery_of_no_event_{where}"
    return edit


def pod_edited(pod: str, **change):
    """The pods table with ``pod``'s row changed: ``column=f`` sets the column to ``f(row)``."""
    def edit(t):
        p = t["pods"]
        i = row_of(p, pl.col("pod") == pod)
        return {"pods": at(p, i, **{c: f(p.row(i, named=True)) for c, f in change.items()})}
    edit.__name__ = f"{pod.split('/')[-1]}_{'_'.join(change)}_edited"
    return edit


def a_bound_by_its_create(t):
    """The pods table's bound_rv of a is its create: no binding (and a's binding is in no row)."""
    create = t["events"].filter(pl.col("name") == "a", pl.col("verb") == "create",
                                pl.col("subresource").is_null())["rv"][0]
    return pod_edited("ns/a", bound_rv=lambda row: create)(t)


def a_bound_by_its_second_binding(t):
    """a is bound again (``second_binding``), and the pods table says by that binding."""
    events = second_binding(t)["events"]
    return {"events": events, **pod_edited("ns/a", bound_rv=lambda row: events["rv"].max())(t)}


def huge_bound_after_its_delete(t):
    """huge (pending: it fits no node) is deleted, then bound to n0."""
    e = t["events"]
    huge = e.filter(pl.col("name") == "huge", pl.col("verb") == "create")
    last, at_ts = e["rv"].max(), e["commit_ts"].max()
    gone = huge.with_columns(rv=pl.lit(last + 1, dtype=pl.Int64), commit_ts=at_ts + MS,
                             verb=pl.lit("delete"))
    bound = huge.with_columns(rv=pl.lit(last + 2, dtype=pl.Int64), commit_ts=at_ts + 2 * MS,
                              subresource=pl.lit("binding"), node=pl.lit("n0"))
    return {"events": pl.concat([e, gone, bound])}


def kubelet_sent_another_nodes_write(t):
    """kubelet/n1 also receives kubelet/n0's first delivery, n0's create (a kubelet watches its
    own node and its pods only)."""
    d = t["deliveries"]
    return {"deliveries": pl.concat([d, d[row_of(d, pl.col("watcher") == "kubelet/n0")]
                                     .with_columns(watcher=pl.lit("kubelet/n1"))])}


def delivery_set(watcher: str, rv: int, **values):
    """``watcher``'s delivery of ``rv`` with ``values``: in the ``load`` run, second-scheduler's
    pods watch is terminated at rv 7 (the writes from rv 5 missed), re-lists to rv 23 and 26,
    then re-watches rvs 27 and 28 and watches from 29 on."""
    def edit(t):
        d = t["deliveries"]
        return {"deliveries": at(d, row_of(d, (pl.col("watcher") == watcher)
                                           & (pl.col("rv") == rv)), **values)}
    edit.__name__ = f"{watcher}s_{rv}_{'_'.join(f'{k}_{v}' for k, v in values.items())}"
    return edit


PROBLEMS = [
    ("delivery_matches_event", "godel", shared_stage_apart("cached_ts"),
     "cached_ts differs from the write's first delivery's"),
    ("delivery_matches_event", "godel", shared_stage_apart("dispatched_ts"),
     "dispatched_ts differs from the write's first delivery's"),
    ("delivery_matches_event", "godel", commit_not_the_events, "commit_ts is not the event's"),
    ("delivery_matches_event", "godel", unknown_source,
     "source is not watch, rewatch, relist or list"),
    ("delivery_matches_event", "godel", piped_list_row, "a list row not applied at its commit"),
    ("delivery_matches_event", "godel",
     delivery_of_no_event("past_the_last", lambda last: last + 7), "no such event"),
    ("delivery_matches_event", "godel",  # (rvs start at 1)
     delivery_of_no_event("before_the_first", lambda last: 0), "no such event"),
    ("exactly_once", "godel", drop_a_delivery, "missing"),
    ("exactly_once", "godel", deliver_twice, "delivered 2 times"),
    ("exactly_once", "godel", kubelet_sent_another_nodes_write, "not a recipient"),
    ("missed_writes_recovered", "load", delivery_set("kube-scheduler", 3, source="rewatch"),
     "rewatch without a termination before it"),
    ("missed_writes_recovered", "load", sent_on_the_closed_watch,
     "the write the watch could not take, sent on it"),
    ("missed_writes_recovered", "load", delivery_set("second-scheduler", 10, source="rewatch"),
     "missed while terminated, not covered by the re-list"),
    ("missed_writes_recovered", "load", delivery_set("second-scheduler", 30, source="rewatch"),
     "re-sent after the new watch had sent a later write"),
    ("missed_writes_recovered", "load", relist_forgotten, "outside every re-list of its stream"),
    ("coalesced_shares_handling", "load",  # (re-listed with its object's other write: shared)
     delivery_set("second-scheduler", 6, coalesced=True), "coalesced by a fifo client queue"),
    ("coalesced_shares_handling", "load", coalesced_apart,
     "applied apart from every other delivery of its object"),
    ("stream_order", "godel", deliver_twice, "rv delivered twice"),
    ("stream_order", "godel", swapped_in_a_stream("sent_ts"),
     "sent_ts before the previous delivery's"),
    ("stream_order", "godel", swapped_in_a_stream("received_ts"),
     "received_ts before the previous delivery's"),
    ("stream_order", "godel", swap_applied, "applied_ts before the previous delivery's (fifo)"),
    ("stream_order", "load", object_reordered,
     "applied_ts before the previous delivery's of its object"),
    ("one_binding_per_incarnation", "godel", second_binding, "bound 2 times"),
    ("one_binding_per_incarnation", "godel", huge_bound_after_its_delete,
     "bound after its delete (rv {})"),
    ("one_binding_per_incarnation", "godel", a_bound_by_its_create,
     "pods has no row with this bound_rv"),
    ("one_binding_per_incarnation", "godel", a_bound_by_its_create,
     "bound_rv is not a binding of this pod"),
    ("one_binding_per_incarnation", "godel", a_bound_by_its_second_binding,
     "bound_rv is not the first binding"),
    ("one_binding_per_incarnation", "godel", pod_edited("ns/a", node=lambda row: "n1"),
     "node is not the binding's"),
    ("one_binding_per_incarnation", "godel",
     pod_edited("ns/a", bound_ts=lambda row: row["bound_ts"] + US), "bound_ts is not the binding's"),
    ("one_binding_per_incarnation", "godel",
     pod_edited("ns/c", deleted_rv=lambda row: row["deleted_rv"] - 1),
     "deleted_rv is not the last delete"),
    ("one_binding_per_incarnation", "godel",
     pod_edited("ns/c", deleted_ts=lambda row: row["deleted_ts"] + US),
     "deleted_ts is not the last delete's"),
]


@pytest.mark.parametrize("invariant, model, edit, problem", PROBLEMS,
                         ids=[f"{p[0]}-{p[2].__name__}-{p[3]}" for p in PROBLEMS])
def test_the_finding_names_each_problem(base, tmp_path, invariant, model, edit, problem):
    """Each problem an invariant tells apart is named, in its examples, from a run corrupted
    for it ({} in a problem: the rv it names)."""
    (finding,) = [f for f in check_run(corrupt(base[model], tmp_path, edit))
                  if f.invariant == invariant]
    named = [example["problem"] for example in finding.examples]
    assert any(re.fullmatch(re.escape(problem).replace(r"\{\}", r"\d+"), name)
               for name in named), named


def test_a_check_that_stops_drops_the_steps_its_lanes_have_not_begun(base, monkeypatch):
    """An error (or Ctrl-C) in the main thread while the deliveries are read: the scans queued
    behind the read never run, and the error comes once the read ends (not after every scan:
    27.6 s after a Ctrl-C of the 1M-pod what-if run's check, before)."""
    import replay.analysis.check as check_module

    scanned = []
    reading = check_module.RunTables.deliveries.func

    def slow_read(run):
        time.sleep(1)  # (the main thread fails meanwhile)
        return reading(run)

    def fail(run):
        raise RuntimeError("stop")

    def scan(invariant):
        return lambda run: scanned.append(invariant.id)

    invariants = tuple(
        replace(i, check=fail) if i.id == "truth_within_capacity" else
        replace(i, check=scan(i)) if i.reads is Reads.DELIVERIES else i
        for i in check_module.INVARIANTS)
    monkeypatch.setattr(check_module, "INVARIANTS", invariants)
    deliveries = functools.cached_property(slow_read)
    deliveries.__set_name__(check_module.RunTables, "deliveries")
    monkeypatch.setattr(check_module.RunTables, "deliveries", deliveries)
    with pytest.raises(RuntimeError, match="stop"):
        check_run(base["godel"])
    assert scanned == []


def test_the_examples_are_the_offending_rows(base, tmp_path):
    (finding,) = [f for f in check_run(corrupt(base["godel"], tmp_path, drop_a_delivery))
                  if f.invariant == "exactly_once"]
    assert finding.count == 1
    assert finding.examples[0]["watcher"] == "kubelet/n0"
    assert finding.examples[0]["problem"] == "missing"


def test_at_most_five_examples(base, tmp_path):
    def shift_every_applied(t):
        d = t["deliveries"]
        return {"deliveries": d.with_columns(applied_ts=pl.col("commit_ts") - US)}

    (finding,) = [f for f in check_run(corrupt(base["godel"], tmp_path, shift_every_applied))
                  if f.invariant == "stage_times_ordered"]
    assert finding.count == pl.read_parquet(base["godel"] / "deliveries.parquet").height
    assert len(finding.examples) == 5


# --- the command line -----------------------------------------------------------------------------

def test_cli_prints_one_line_per_invariant(cli, base):
    result = cli("check", base["godel"])
    assert result.code == 0, result.out
    lines = result.out.splitlines()
    assert lines[0] == f"{base['godel']}: every invariant holds ({len(INVARIANTS)} checked)"
    assert [line.split()[1] for line in lines[1:]] == [i.id for i in INVARIANTS]
    assert lines[1].split()[0] == "ok"
    assert "n/a       deterministic (`replay check --rerun`" in result.out


def test_cli_fails_naming_the_invariant(cli, base, tmp_path):
    broken = corrupt(base["godel"], tmp_path, drop_a_delivery)
    result = cli("check", base["oracle"], broken)
    assert result.code == 1
    assert f"{broken}: 1 of {len(INVARIANTS)} invariants FAILED" in result.out
    assert "  FAILED    exactly_once: 1 row\n" in result.out
    assert "watcher=kubelet/n0, problem=missing" in result.out


def test_cli_rerun_replays_and_compares(cli, base):
    result = cli("check", "--rerun", base["oracle"])
    assert result.code == 0, result.out
    assert "  ok        deterministic\n" in result.out


def test_cli_lists_the_invariants_and_errs_in_one_line(cli, tmp_path):
    listed = cli("check", "--list").out.splitlines()
    assert [line.split()[0] for line in listed] == [i.id for i in INVARIANTS]
    missing = cli("check", tmp_path / "nope")
    assert missing.code == 1 and missing.err.count("\n") == 1 and "no such run directory" in missing.err
    nothing = cli("check")  # a usage error, as argparse's own are
    assert nothing.code == 2 and "give one or more RUN_DIR" in nothing.err


# --- real traces ----------------------------------------------------------------------------------

def observed(tmp_path: Path, *logs: Path) -> Path:
    """The observe run of the trace ingested from ``logs``."""
    trace = tmp_path / "trace.parquet"
    assert main(["ingest", *map(str, logs), "--skip-bad-lines", "--out", str(trace)]) == 0
    return run_replay(trace, load_config(model="observe"), out=tmp_path / "run").out


@pytest.mark.parametrize("sample", ["falco", "audit2rbac-demo.log", "elastic-test-audit.log"])
def test_observe_runs_of_the_audit_log_samples_keep_every_invariant(tmp_path, sample):
    """Every audit-log sample in the shared data (falco's events together: one event a file)."""
    path = shared_data("audit-samples", sample)
    run = observed(tmp_path, *(sorted(path.glob("*.json")) if path.is_dir() else [path]))
    assert failed(check_run(run)) == []


def test_observe_run_of_a_generated_audit_log_keeps_every_invariant(tmp_path):
    """benchmarks/make_audit_log.py: pods created and deleted, bindings, node status patches."""
    log = tmp_path / "audit.log"
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "make_audit_log.py"), "--size",
                    "2M", "--out", str(log)], check=True, capture_output=True)
    run = observed(tmp_path, log)
    events = pl.read_parquet(run / "events.parquet")
    assert events.filter(pl.col("subresource") == "binding").height > 50
    assert events.filter(pl.col("resource") == "nodes").height > 50
    assert failed(check_run(run)) == []


# Gödel's binder and dispatcher, after a config's schedulers
BINDER_AND_DISPATCHER = """[[watchers]]
name = "godel-binder"
role = "binder"
[[watchers]]
name = "godel-dispatcher"
role = "dispatcher"
resources = ["pods"]
"""
# buffers of 2 and a dispatcher's budget that hardly refills: a watcher that drains slowly is
# terminated again and again
SMALL_BUFFERS = """[stages.watcher_queue]
buffer = 2
[dispatch]
budget_refill_ms_per_s = 1
"""


def slow_scheduler(name: str, mean_ms: float) -> str:
    """A scheduler watcher whose watch drains a write in ``mean_ms`` on average."""
    return f"""[[watchers]]
name = "{name}"
role = "scheduler"
[watchers.stages.watcher_queue]
service = {{ dist = "exponential", mean_ms = {mean_ms} }}
"""


# Gödel's third scheduler drains slowly: its pods watch is terminated again and again, at times
# while the re-watch is still re-sending what the previous termination missed
STRESS = SMALL_BUFFERS + """[[watchers]]
name = "godel-scheduler-0"
role = "scheduler"
[[watchers]]
name = "godel-scheduler-1"
role = "scheduler"
""" + slow_scheduler("godel-scheduler-2", 5.0) + BINDER_AND_DISPATCHER


def godel_run_of_the_sample(tmp_path: Path, first: dt.timedelta, config: str) -> Path:
    """A Gödel run of the sample trace's ``first`` writes with ``config``."""
    sample = pl.read_parquet(SAMPLE_TRACE)
    head = sample.filter(pl.col("ts") < sample["ts"].min() + first)
    write_trace(head, tmp_path / "trace.parquet", source="test", source_args={})
    (tmp_path / "run.toml").write_text(config)
    return run_replay(tmp_path / "trace.parquet",
                      load_config(tmp_path / "run.toml", model="godel"), out=tmp_path / "godel").out


def test_a_watch_closed_while_it_hands_over_re_sent_writes_keeps_every_invariant(tmp_path):
    """A watch terminated while its result channel still holds writes re-sent for the previous
    termination hands them over after the close (the cacher drains a closed result channel):
    they count to that previous termination, and this one's missed writes start after its
    resume_rv (missed_writes_recovered once took them as this termination's and flagged the
    re-sends after them; the sample's first 17.5 s under this load reach that case)."""
    run = godel_run_of_the_sample(tmp_path, dt.timedelta(seconds=17.5), STRESS)
    terminations = pl.read_parquet(run / "watch_terminations.parquet")
    assert (terminations["watcher"] == "godel-scheduler-2").sum() >= 3
    assert failed(check_run(run)) == []


def test_a_terminated_watch_of_listed_objects_keeps_every_invariant_and_relists_them(tmp_path):
    """Observe of a log of a running cluster (the sample cut at 120 s, its pods' deletes saying
    their node and requests) with a scheduler whose watch is terminated again and again, and a
    watch cache too small to re-watch from: its first list's rows (source 'list') are neither a
    live watch's nor a recovery's, and the recovery's check leaves them out
    (missed_writes_recovered once took them for re-sends without a termination); and a re-list
    lists the listed pods not yet deleted (it once counted only the pods the trace had
    written by then: 29 objects where 1,376 were listed)."""
    cut_sample(tmp_path / "trace.parquet", bodies=True)
    (tmp_path / "run.toml").write_text(SMALL_BUFFERS + "[watch_cache]\ncapacity = 2\n"
                                       + slow_scheduler("kube-scheduler", 20.0))
    run = run_replay(tmp_path / "trace.parquet", load_config(tmp_path / "run.toml",
                                                             model="observe"),
                     out=tmp_path / "observe").out
    events = pl.read_parquet(run / "events.parquet")
    listed = events.filter(origin="list", resource="pods")["name"]
    relist = pl.read_parquet(run / "relists.parquet").filter(resource="pods").row(0, named=True)
    gone = events.filter(pl.col("rv") <= relist["rv"], pl.col("name").is_in(listed.implode()),
                         resource="pods", verb="delete")["name"].n_unique()
    assert listed.len() > 1000 and relist["objects"] >= listed.len() - gone
    assert pl.read_parquet(run / "deliveries.parquet").filter(source="list").height > 1000
    assert failed(check_run(run)) == []


def test_a_what_if_replay_relists_the_nodes_it_listed(tmp_path):
    """Gödel of the sample's first 17.5 s as a log of a running cluster: no node create, each
    node's allocatable said by its last status patch (up to 17 s in), so every node is listed
    at the first write (origin 'list').  The scheduler drains a write in 60 ms on average,
    slower than the nodes' 20 writes a second: its watches are terminated again and again, and
    each re-list of nodes lists all 200 (the listed nodes are in the watches'
    stores from the start, as a first list leaves them), and every invariant holds."""
    sample = pl.read_parquet(SAMPLE_TRACE)
    head = sample.filter(pl.col("ts") < sample["ts"].min() + dt.timedelta(seconds=17.5),
                         ~((pl.col("resource") == "nodes") & (pl.col("verb") == "create")))
    allocatable = sample.filter(resource="nodes", verb="create").select(
        "name", *(pl.col(c).alias(f"{c}_said") for c in ("cpu_milli", "memory_bytes",
                                                          "gpu_milli")))
    last = (pl.col("resource") == "nodes") \
        & (pl.int_range(pl.len()).over("name") == pl.len().over("name") - 1)
    head = head.join(allocatable, on="name", how="left", maintain_order="left").with_columns(
        pl.when(last).then(pl.col(f"{c}_said")).otherwise(c).alias(c)
        for c in ("cpu_milli", "memory_bytes", "gpu_milli")).select(sample.columns)
    write_trace(head, tmp_path / "trace.parquet", source="test", source_args={})
    (tmp_path / "run.toml").write_text(
        SMALL_BUFFERS + "[watch_cache]\ncapacity = 2\n[model]\nschedulers = 1\n"
        + slow_scheduler("godel-scheduler-0", 60.0) + BINDER_AND_DISPATCHER)
    run = run_replay(tmp_path / "trace.parquet", load_config(tmp_path / "run.toml",
                                                             model="godel"), out=tmp_path / "godel").out
    events = pl.read_parquet(run / "events.parquet")
    assert events.filter(origin="list")["name"].n_unique() == 200
    relists = pl.read_parquet(run / "relists.parquet").filter(resource="nodes")
    assert relists.height > 0 and relists["objects"].to_list() == [200] * relists.height
    assert pl.read_parquet(run / "attempts.parquet").filter(outcome="bound").height > 0
    assert failed(check_run(run)) == []


def jobs_sample(path):
    """The sample trace as a cluster of Jobs: each deleted pod first ran to its end, its
    kubelet's status write setting phase Succeeded halfway from its binding to its delete."""
    sample = pl.read_parquet(SAMPLE_TRACE)
    pods = sample.filter(resource="pods")
    bound = pods.filter(subresource="binding").group_by("name").agg(bound=pl.col("ts").min())
    ends = pods.filter(verb="delete").join(bound, on="name").with_columns(
        ts=pl.col("bound") + (pl.col("ts") - pl.col("bound")) / 2, received_ts=None,
        verb=pl.lit("patch"), subresource=pl.lit("status"), component=pl.lit("kubelet"),
        phase=pl.lit("Succeeded")).drop("bound")
    write_trace(pl.concat([sample.with_columns(phase=pl.lit(None, pl.String)), ends])
                .sort("ts", maintain_order=True), path, source="test", source_args={})


# A log begun while "old" ran on n0, listed before n0's create (over-committed by the trace, not
# by a model), and "big" waited, which no node can ever hold; a mirror pod larger than its node
LISTED = [node(0, "n0", 2000, 8 * GIB), node(0, "n1", 1000, 8 * GIB),
          status(1, "old", "Running", node="n0", cpu=1500, memory=GIB),
          status(2, "big", "Pending", cpu=4000, memory=GIB), pod(4, "p", 500),
          pod(5, "static", 1500, node_name="n1")]


@pytest.mark.parametrize("model", ["godel", "kube"])
def test_the_pods_a_what_if_replay_lists_keep_every_invariant(tmp_path, model):
    """A pod listed on its node, or a mirror pod, is the trace's placement, not the model's: its
    over-commitment is reported (truth_within_capacity once failed a Gödel run on it) and its
    kubelet counts it without judging its admission; a pod listed pending that fits nowhere is
    accounted for by its unschedulable attempts (every_pod_accounted once missed them: it has
    no created_ts)."""
    run = replay(tmp_path, model, "[model]\nschedulers = 2\n" if model == "kube" else "",
                 rows=LISTED)
    findings = check_run(run)
    assert failed(findings) == []
    over = next(f for f in findings if f.invariant == "truth_within_capacity")
    assert over.status is Status.REPORTED
    assert {"ns/old", "ns/static"} <= {row["pod"] for row in over.examples}
    pods = pl.read_parquet(run / "pods.parquet")
    assert pods.filter(pod="ns/big").select("created_ts", "bound_ts").rows() == [(None, None)]
    assert pl.read_parquet(run / "attempts.parquet").filter(pod="ns/big")["outcome"].unique() \
        .to_list() == ["unschedulable"]


@pytest.mark.parametrize("model", ["godel", "kube", "oracle"])
def test_pods_listed_past_their_nodes_pod_limit_are_reported(tmp_path, model):
    """Two pods ran on n0 before the log began, where n0 says it runs one: the trace's
    placement, not the model's, so reported, whether n0 too is listed, with its limit, ahead of
    them (the second pod's create on it is past the limit: without the exemption a failed
    binding) or created after them in the trace (its create is past it); the pod that comes
    next goes to n1."""
    for listed, reported in (
            (True, [("binding", "ns/old2"), ("node", None)]),  # (then the trace's own patch)
            (False, [("node", None)])):
        n0 = node(0, "n0", 4000, max_pods=1, **(
            {"verb": "patch", "subresource": "status"} if listed else {}))
        rows = [n0, node(0, "n1", 1000),
                status(1, "old1", "Running", node="n0", cpu=100, memory=GIB),
                status(1, "old2", "Running", node="n0", cpu=100, memory=GIB), pod(4, "p", 100)]
        run = replay(tmp_path, model, rows=rows)
        findings = check_run(run)
        assert failed(findings) == []
        finding = next(f for f in findings if f.invariant == "truth_within_pod_limit")
        assert finding.status is Status.REPORTED
        assert [(row["change"], row["pod"]) for row in finding.examples] == reported
        pods = pl.read_parquet(run / "pods.parquet")
        assert pods.filter(pod="ns/p")["node"].to_list() == ["n1"]


def test_a_terminated_watch_of_non_terminal_pods_relists_no_finished_pod(tmp_path):
    """Observe of a cluster of Jobs with a scheduler whose watch is terminated again and again
    and re-lists: its informer selects non-terminal pods, so it receives no finished pod's
    delete, and each re-list lists the pods created by its version that neither ended nor were
    deleted by then (a write setting a pod's terminal phase deletes it from that watch's
    store); every invariant holds."""
    jobs_sample(tmp_path / "trace.parquet")
    (tmp_path / "run.toml").write_text(SMALL_BUFFERS + "[watch_cache]\ncapacity = 2\n"
                                       + slow_scheduler("kube-scheduler", 20.0))
    run = run_replay(tmp_path / "trace.parquet", load_config(tmp_path / "run.toml",
                                                             model="observe"),
                     out=tmp_path / "observe").out
    events = pl.read_parquet(run / "events.parquet").filter(resource="pods")
    relists = pl.read_parquet(run / "relists.parquet").filter(resource="pods")
    assert relists.height > 0
    for rv, objects in relists.select("rv", "objects").rows():
        before = events.filter(pl.col("rv") <= rv)
        gone = before.filter((pl.col("verb") == "delete") | (pl.col("pod_state") == "succeeded"))
        made = before.filter(pl.col("subresource").is_null(), verb="create")
        alive = set(made["name"]) - set(gone["name"])
        assert objects == len(alive)
    deliveries = pl.read_parquet(run / "deliveries.parquet").filter(watcher="kube-scheduler")
    assert deliveries.join(events.filter(verb="delete"), on="rv").height == 0
    assert failed(check_run(run)) == []


@pytest.mark.parametrize("queue", ["delta_fifo", "workqueue"])
def test_writes_held_in_a_client_queue_count_in_the_view_lag(tmp_path, queue):
    """A scheduler whose client queue (slow handler) holds writes before it handles them: its
    view is behind by them from when they were sent (view_lag_matches_deliveries once found
    the lag 0 at every attempt: the engine told the view of such a write only when it was
    handled)."""
    run = godel_run_of_the_sample(tmp_path, dt.timedelta(seconds=5), f"""[model]
schedulers = 1
[[watchers]]
name = "godel-scheduler-0"
role = "scheduler"
client_queue = "{queue}"
[watchers.stages.handler]
service = {{ dist = "exponential", mean_ms = 2.0 }}
""" + BINDER_AND_DISPATCHER)
    assert pl.read_parquet(run / "attempts.parquet")["view_lag_ms"].max() > 0
    assert failed(check_run(run)) == []


def test_rerun_finds_a_relative_trace_from_the_run_directorys_folders(cli, tmp_path,
                                                                      monkeypatch):
    """`replay run traces/t.parquet --out runs/t` in a project's folder, checked from
    elsewhere: the trace's path is found from the run's folders and replayed from there, so
    that the manifest made again records the same path."""
    project = tmp_path / "project"
    (project / "traces").mkdir(parents=True)
    synthesize(SynthSpec(nodes=4, pods=30, arrival_rate=20, bind="least-allocated", seed=3),
               project / "traces" / "t.parquet")
    monkeypatch.chdir(project)
    assert cli("run", "traces/t.parquet", "--model", "kube", "--out", "runs/t").code == 0
    monkeypatch.chdir(tmp_path)
    result = cli("check", "--rerun", project / "runs" / "t")
    assert "  ok        deterministic\n" in result.out, result.out
    synthesize(SynthSpec(nodes=4, pods=31, arrival_rate=20, bind="least-allocated", seed=3),
               project / "traces" / "t.parquet")
    changed = cli("check", "--rerun", project / "runs" / "t")
    assert f"its trace {project / 'traces' / 't.parquet'} changed since the run" in changed.out
    (project / "traces" / "t.parquet").unlink()
    gone = cli("check", "--rerun", project / "runs" / "t")
    assert "its trace 'traces/t.parquet' is not here to replay again" in gone.out
