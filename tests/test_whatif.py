"""The what-if models: every one keeps every invariant of ``replay check`` on the sample and on
the Alibaba import, and shows the trends the literature reports (Omega, Gödel).  Random
workloads through every model: tests/test_consistency.py."""

from __future__ import annotations

import contextlib
import gc
import json

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay.analysis.catalog import load_query
from replay.analysis.check import Status, check_run, failed
from replay.analysis.runs import open_runs, run_query
from replay import memory, models
from replay.api import run_replay
from replay.engine import simulation
from replay.engine.config import WatcherSpec, load_config
from replay.engine.pipeline import Source
from replay.trace.synth import SynthSpec, synthesize
from replay.trace.validate import read_trace

from conftest import SAMPLE_TRACE, budget
from strategies import node, pod, rows_to_trace, synth_specs
from test_run import small_trace

WHAT_IF = ("oracle", "kube", "godel", "omega", "peer")
TABLES = ("events", "deliveries", "attempts", "pods", "watchers", "capacity_windows")


def replay(trace, out, model, *params, profile=None, seed=0):
    config_file = None
    if profile:
        config_file = out.parent / f"{out.name}.toml"
        config_file.write_text(f'profile = "{profile}"\n')
    config = load_config(config_file, overrides=list(params), seed=seed, model=model)
    run_replay(trace, config, out=out, force=True)
    return {"dir": out, **{t: pl.read_parquet(out / f"{t}.parquet") for t in TABLES}}


def conflicts(run) -> int:
    return run["attempts"].filter(pl.col("outcome") == "conflict").height


def keeps_every_invariant(run) -> None:
    assert failed(check_run(run["dir"])) == []


def pod_limit_finding(run):
    """``replay check``'s ``truth_within_pod_limit`` of the run, which must keep every
    invariant."""
    findings = check_run(run["dir"])
    assert failed(findings) == []
    return next(f for f in findings if f.invariant == "truth_within_pod_limit")


def node_limits(run) -> list[tuple]:
    """The node writes' (name, origin, max_pods), in rv order."""
    return run["events"].filter(pl.col("resource") == "nodes").select(
        "name", "origin", "max_pods").rows()


@pytest.fixture(scope="module")
def sample_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("whatif")
    return {m: replay(SAMPLE_TRACE, root / m, m) for m in WHAT_IF}


@pytest.mark.parametrize("model", WHAT_IF)
def test_every_model_runs_the_sample_completely(sample_runs, model):
    run = sample_runs[model]
    assert run["events"]["origin"].unique().sort().to_list() == ["model", "trace"]
    assert run["attempts"].height >= run["pods"].height * 0.9
    keeps_every_invariant(run)


def test_models_lists_all_five(cli):
    out = cli("models").out
    for model in ("observe", *WHAT_IF):
        assert f"\n{model}: " in f"\n{out}"
    assert "    schedulers = 3" in out and "conflict = 'fine' (fine | coarse)" in out


def test_unknown_and_mistyped_parameters_name_themselves(cli, tmp_path):
    bad = cli("run", SAMPLE_TRACE, "--model", "kube", "-p", "schedulrs=2", "--out", tmp_path / "a")
    assert bad.code == 1 and "no parameter 'schedulrs'" in bad.err
    typed = cli("run", SAMPLE_TRACE, "--model", "kube", "-p", "schedulers=two", "--out",
                tmp_path / "b")
    assert typed.code == 1 and "parameter 'schedulers': expected int" in typed.err
    choice = cli("run", SAMPLE_TRACE, "--model", "omega", "-p", "conflict=medium", "--out",
                 tmp_path / "c")
    assert choice.code == 1 and "expected one of fine, coarse" in choice.err


def test_trace_without_bindings_defaults_to_kube(cli, tmp_path):
    trace = tmp_path / "t.parquet"
    synthesize(SynthSpec(nodes=5, pods=40, seed=1), trace)
    result = cli("run", trace, "--out", tmp_path / "run")
    assert result.code == 0, result.err
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["model"]["name"] == "kube"


@pytest.mark.parametrize("model", ["kube", "godel"])
def test_pods_without_requests_weigh_in_the_schedulers_scores(tmp_path, model):
    """Ten pods without a cpu request run on n1 and one of 300 millicores on n2 (static pods,
    created on their nodes); then a pod of 500 millicores comes.  kube-scheduler's and Gödel's
    LeastAllocated counts a pod without a request as 100 millicores (``NonZeroRequested``): n1
    holds 1,000 of them and scores (4000 - 1500) x 100 / 4000 = 62, n2 scores 80: the pod goes
    to n2.  Counted as nothing, n1 would have scored 87 and taken it."""
    trace = small_trace(tmp_path / "t.parquet", [
        (0, "create", "nodes", None, "n1", "n1", 201, 4000),
        (0, "create", "nodes", None, "n2", "n2", 201, 4000),
        *[(1, "create", "pods", None, f"best-effort-{i}", "n1", 201, 0) for i in range(10)],
        (1, "create", "pods", None, "agent", "n2", 201, 300),
        (2, "create", "pods", None, "web", None, 201, 500)])
    run = replay(trace, tmp_path / "run", model, "policy=least-allocated")
    bound = run["attempts"].filter(pl.col("outcome") == "bound")
    assert bound.select("pod", "node").rows() == [("ns/web", "n2")]


def test_least_allocated_spreads_pods_without_requests_evenly(tmp_path):
    """Forty pods without requests, one every 10 ms, onto five like nodes, by one
    kube-scheduler: each counts as 100 millicores in LeastAllocated's score, so each goes to a
    node that holds the fewest of them (the scheduler's own assumptions count at once), and no
    node ends with more than one more than another.  Counted as nothing, every node would have
    scored alike and the draw among them would have piled them up unevenly."""
    trace = small_trace(tmp_path / "t.parquet", [
        *[(0, "create", "nodes", None, f"n{i}", f"n{i}", 201, 4000) for i in range(5)],
        *[(1 + i / 100, "create", "pods", None, f"best-effort-{i}", None, 201, 0)
          for i in range(40)]])
    run = replay(trace, tmp_path / "run", "kube", "schedulers=1", "policy=least-allocated")
    bound = run["attempts"].filter(pl.col("outcome") == "bound")
    per_node = bound.group_by("node").len()["len"]
    assert bound.height == 40 and per_node.len() == 5 and per_node.max() - per_node.min() <= 1


@pytest.mark.parametrize("model", ["kube", "godel", "omega", "oracle", "peer"])
def test_a_node_runs_no_more_pods_at_once_than_its_max_pods(tmp_path, model):
    """n1 has four times n2's cpu but room for three pods (``max_pods``, its allocatable
    ``pods``; a later status patch that says its cpu and not its pods keeps the limit), n2 no
    limit; eight pods without requests come: the scores prefer n1, and every model fills it to
    three and puts the other five on n2 (NodeResourcesFit's "Too many pods"; the kubelet's
    OutOfpods, the binder's and Omega's commit checks where a placement raced another).
    Without the limit n1, scored emptier, would take most of them."""
    trace = rows_to_trace(tmp_path / "t.parquet", [
        node(0, "n1", 4000, max_pods=3), node(0, "n2", 1000),
        node(500, "n1", 4000, verb="patch", subresource="status"),
        *[pod(1000 + 10 * i, f"p{i}", 0) for i in range(8)]])
    run = replay(trace, tmp_path / "run", model)
    pods = run["pods"]
    assert pods["node"].null_count() == 0 and pods.height == 8
    assert pods.group_by("node").len().sort("node").rows() == [("n1", 3), ("n2", 5)]
    assert node_limits(run) == [("n1", "trace", 3), ("n2", "trace", None), ("n1", "trace", None)]
    # a binding past the limit would fail the check (the kube model's would be reported)
    assert pod_limit_finding(run).status is Status.OK


@pytest.mark.parametrize("model", ["kube", "godel"])
def test_a_node_listed_at_the_start_keeps_the_pod_limit_its_first_write_says(tmp_path, model):
    """n1, made before the trace (its first write, at 500 ms, a status patch that says its
    allocatable and a limit of one pod), is listed with that limit at the trace's first commit:
    of three pods that come before that write and prefer n1 (it has the more cpu), one runs
    there and two on n2."""
    trace = rows_to_trace(tmp_path / "t.parquet", [
        node(0, "n2", 1000), *[pod(10 + 10 * i, f"p{i}", 100) for i in range(3)],
        node(500, "n1", 4000, max_pods=1, verb="patch", subresource="status")])
    run = replay(trace, tmp_path / "run", model)
    assert run["pods"].group_by("node").len().sort("node").rows() == [("n1", 1), ("n2", 2)]
    assert node_limits(run) == [("n1", "list", 1), ("n2", "trace", None), ("n1", "trace", 1)]
    assert pod_limit_finding(run).status is Status.OK


def test_a_kubelet_rejects_a_pod_beyond_its_nodes_max_pods(tmp_path):
    """Two kube-schedulers each place one of two pods at once on n1, which has room for one
    pod (and the more cpu), each not yet seeing the other's binding: the API server takes both
    bindings, and n1's kubelet admits the first and fails the second (``OutOfpods``), which is
    created again and placed on n2."""
    trace = rows_to_trace(tmp_path / "t.parquet", [
        node(0, "n1", 4000, max_pods=1), node(0, "n2", 1000),
        pod(1000, "p0", 100), pod(1000, "p1", 100)])
    run = replay(trace, tmp_path / "run", "kube", "schedulers=2")
    attempts = run["attempts"]
    assert attempts.filter(pl.col("reason") == "kubelet_admission").height == 1
    live = run["pods"].filter(pl.col("deleted_ts").is_null())
    assert sorted(live["node"].to_list()) == ["n1", "n2"]
    # the truth held both on n1 until the kubelet failed the second: the kube model's API
    # server accepts any binding, so the check reports it
    finding = pod_limit_finding(run)
    assert finding.status is Status.REPORTED and finding.count == 1
    assert finding.examples[0]["pods"] == 2 and finding.examples[0]["max_pods"] == 1


@settings(max_examples=budget(6), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=synth_specs(), model=st.sampled_from(["oracle", "kube", "godel"]))
def test_one_scheduler_without_watch_delay_never_conflicts(tmp_path, spec, model):
    """Nodes that keep their allocatable and one scheduler that sees every write at once: no
    placement can collide with another (the oracle's one scheduler is outside the pipeline)."""
    trace = tmp_path / "t.parquet"
    synthesize(spec, trace)
    params = [] if model == "oracle" else ["schedulers=1", "policy=most-allocated"]
    run = replay(trace, tmp_path / "run", model, *params, profile="zero")
    assert conflicts(run) == 0


@pytest.fixture(scope="module")
def busy_trace(tmp_path_factory):
    """A small, busy cluster: most placements race for the same few nodes."""
    path = tmp_path_factory.mktemp("busy") / "busy.parquet"
    synthesize(SynthSpec(nodes=12, pods=1500, arrival_rate=60, mean_lifetime=8, seed=4), path)
    return path


def conflict_fraction(run) -> float:
    outcomes = run["attempts"]["outcome"]
    bound = (outcomes == "bound").sum()
    return (outcomes == "conflict").sum() / max(bound, 1)


def test_conflicts_grow_with_schedulers(busy_trace, tmp_path):
    fractions = [conflict_fraction(replay(busy_trace, tmp_path / f"s{k}", "omega",
                                          f"schedulers={k}", "policy=most-allocated"))
                 for k in (1, 2, 4)]
    assert fractions[0] < fractions[1] < fractions[2], fractions


def test_conflicts_grow_with_decision_time(busy_trace, tmp_path):
    fractions = [conflict_fraction(replay(busy_trace, tmp_path / f"d{ms}", "omega",
                                          "schedulers=3", f"per_attempt_ms={ms}",
                                          "policy=most-allocated"))
                 for ms in (0.5, 5.0, 20.0)]
    assert fractions[0] < fractions[1] < fractions[2], fractions


def test_coarse_conflicts_at_least_as_often_as_fine(busy_trace, tmp_path):
    fine, coarse = (conflicts(replay(busy_trace, tmp_path / c, "omega", "schedulers=3",
                                     f"conflict={c}")) for c in ("fine", "coarse"))
    assert coarse >= fine and coarse > 0


def blind_core_seconds(run_dir) -> float:
    """The run's stale capacity, by the shipped query: core-seconds every watcher was blind to."""
    summary = run_query(open_runs([str(run_dir)]), load_query("stale_capacity_summary"), {})
    return summary.pl()["blind_core_seconds"].sum()


def test_watch_delay_raises_conflicts_and_stale_capacity(busy_trace, tmp_path):
    """The same workload through kube with the network as the only watch delay: more delay,
    more conflicts and more capacity the schedulers and kubelets are blind to (none at 0)."""
    counts, blind = [], []
    for ms in (0, 10, 50):
        config = tmp_path / f"network-{ms}.toml"
        config.write_text(f'profile = "zero"\n[stages.network]\n'
                          f'latency = {{ dist = "constant", ms = {ms} }}\n')
        out = tmp_path / config.stem
        run_replay(busy_trace, load_config(config, overrides=["schedulers=3"], model="kube"),
                   out=out, force=True)
        counts.append(conflicts({"attempts": pl.read_parquet(out / "attempts.parquet")}))
        blind.append(blind_core_seconds(out))
    assert counts[0] < counts[1] < counts[2], counts
    assert blind[0] == 0 < blind[1] < blind[2], blind


def test_peer_conflicts_no_more_than_godel(busy_trace, tmp_path):
    godel, peer = (conflicts(replay(busy_trace, tmp_path / m, m, "policy=most-allocated"))
                   for m in ("godel", "peer"))
    assert peer <= godel and godel > 0, (peer, godel)


@pytest.fixture(scope="module")
def alibaba_trace(tmp_path_factory):
    from replay.cli.main import main

    from conftest import shared_data

    folder = shared_data("alibaba-gpu-v2023")
    path = tmp_path_factory.mktemp("alibaba") / "alibaba.parquet"
    assert main(["import", "alibaba-gpu-2023", "--pods", str(folder / "openb_pod_list_default.csv"),
                 "--nodes", str(folder / "openb_node_list_all_node.csv"), "--out", str(path)]) == 0
    return path


@pytest.mark.parametrize("model", WHAT_IF)
def test_every_model_runs_the_alibaba_import(alibaba_trace, tmp_path, model):
    run = replay(alibaba_trace, tmp_path / model, model)
    assert run["pods"].height >= 8152
    assert run["attempts"].filter(pl.col("outcome") == "bound").height > 7000
    assert run["watchers"].filter(pl.col("role") == "kubelet").height == 1523
    keeps_every_invariant(run)


def test_deliveries_made_in_parts_are_the_whole_table_cut(tmp_path, monkeypatch):
    """The engine makes the deliveries table DELIVERY_PART rows at a time as the run goes (a
    write's deliveries may complete more than one part at once): every part but the last has
    exactly that many rows, and the parts are the table of a run made in one part."""
    path = tmp_path / "trace.parquet"
    synthesize(SynthSpec(nodes=4, pods=40, arrival_rate=5.0, seed=3), path)
    config = load_config(model="godel")
    trace = read_trace(path)

    def deliveries() -> list[pa.Table]:
        model = models.load("godel")(config.model_params)
        return [t for name, t in model.tables(trace, config, model.default_watchers(trace))
                if name == "deliveries"]

    whole = pa.concat_tables(deliveries())
    monkeypatch.setattr(simulation, "DELIVERY_PART", 2)  # fewer than a write's deliveries
    parts = deliveries()
    assert [p.num_rows for p in parts[:-1]] == [2] * (len(parts) - 1)
    assert 0 < parts[-1].num_rows <= 2
    assert pa.concat_tables(parts).equals(whole)


def test_freed_memory_goes_back_once_the_loop_has_ended(tmp_path, monkeypatch):
    """What a what-if replay's loop frees lies in holes between its live objects, which glibc
    never trims by itself: it goes back to the system once, after the loop's last deliveries
    part and before the tables made from the loop's records, and not as the parts pass while
    the loop runs (those pages were faulted in again within seconds)."""
    path = tmp_path / "trace.parquet"
    synthesize(SynthSpec(nodes=20, pods=1000, arrival_rate=50.0, seed=3), path)
    config = load_config(model="godel")
    trace = read_trace(path)
    given_back: list[None] = []
    monkeypatch.setattr(memory, "give_back", lambda: given_back.append(None))
    monkeypatch.setattr(simulation, "DELIVERY_PART", 50)  # parts while the loop runs
    ended: list[None] = []  # the loop's end: the delivery log's
    end = simulation._Log.end
    monkeypatch.setattr(simulation._Log, "end", lambda log: (ended.append(None), end(log))[1])
    model = models.load("godel")(config.model_params)
    seen = []  # per table or part: its name, the give-backs before it, whether the loop had ended
    for name, _ in model.tables(trace, config, model.default_watchers(trace)):
        seen.append((name, len(given_back), bool(ended)))
    assert len([name for name, _, after in seen if not after]) > 3
    assert {(given, after) for name, given, after in seen if name == "deliveries"} == {
        (0, False), (0, True)}
    assert {(given, after) for name, given, after in seen if name != "deliveries"} == {(1, True)}


def test_the_delivery_log_gives_back_each_delivery_as_logged(monkeypatch):
    """The log keeps deliveries in blocks: one a delivery handed over as a tuple (any source,
    coalesced or not), one a write the compiled fan-out delivered to all its targets (its answer
    copied whole).  The parts give every delivery back in the order logged, with its fields,
    across a part's cut inside a block."""
    monkeypatch.setattr(simulation, "DELIVERY_PART", 3)
    names = ["a", "b", "c"]
    log = simulation._Log([WatcherSpec(n, "scheduler") for n in names], [False] * 3)
    for rv in (1, 2, 3):
        for times, offset in ((log.commit, 0), (log.cached, 1), (log.dispatched, 2)):
            times.append(10 * rv + offset)
    log.delivered([(2, 1, None, 100, 101, 102, 103, Source.RELIST, True),
                   (0, 1, None, 110, 111, 112, 113, Source.REWATCH, False)])
    fanned = np.array([[200, 210], [201, 211], [202, 212], [203, 213], [1, 1], [2, 2]])
    log.fanned(memoryview(fanned.reshape(-1)).cast("B"),
               np.array([1, 2], dtype=np.int32).tobytes(), 2)
    log.delivered([(1, 3, None, 300, 301, 302, 303, Source.WATCH, True),
                   (0, 3, None, 310, 311, 312, 313, Source.RELIST, False)])
    log.end()
    parts = [part for _, part in log.take_parts()]
    assert [part.num_rows for part in parts] == [3, 3]
    rows = pa.concat_tables(parts).to_pylist()
    epoch = [[t.timestamp() * 1e6 for t in (r["commit_ts"], r["cached_ts"], r["dispatched_ts"],
                                             r["sent_ts"], r["applied_ts"])] for r in rows]
    assert [(r["rv"], r["watcher"], r["source"], r["coalesced"]) for r in rows] == [
        (1, "c", "relist", True), (1, "a", "rewatch", False), (2, "b", "watch", False),
        (2, "c", "watch", False), (3, "b", "watch", True), (3, "a", "relist", False)]
    assert epoch == [[10, 11, 12, 100, 103], [10, 11, 12, 110, 113], [20, 21, 22, 200, 203],
                     [20, 21, 22, 210, 213], [30, 31, 32, 300, 303], [30, 31, 32, 310, 313]]


@pytest.mark.parametrize("model", WHAT_IF)
def test_a_spent_replay_leaves_its_pods_to_reference_counting(busy_trace, model):
    """Once its tables are taken a what-if model closes its simulation, so that the run's pods,
    attempts and timers go by reference counting: the collector, which would traverse millions
    of them before the derivation (2.1 s at 300k pods), finds only the components' own cycles
    (50-200 objects here, against 800-1,200 while the pipeline's watches and engine were left
    to it, 5,000-6,000 without the simulation's close, 4,000 for kube while it kept every bound
    pod's attempt)."""
    config = load_config(model=model)
    trace = read_trace(busy_trace)
    gc.collect()
    gc.disable()
    try:
        instance = models.load(model)(config.model_params)
        for _ in instance.tables(trace, config, instance.default_watchers(trace)):
            pass
        del instance, _
        found = gc.collect()
    finally:
        gc.enable()
    assert found < 400


@pytest.mark.parametrize("model", WHAT_IF)
def test_a_replay_makes_no_garbage_cycles_as_it_runs(busy_trace, monkeypatch, model):
    """``REPLAY_GC_THRESHOLDS`` leaves a replay's cyclic garbage to rare collections, which
    costs no memory only while the engine and the models make none per event.  With the
    collector stopped for the whole replay and what it finds at the end counted, a replay of the
    busy trace (1,500 pods) leaves no more than a few objects made once (ctypes' types)."""
    found: list[int] = []

    @contextlib.contextmanager
    def stopped():
        gc.collect()
        gc.disable()
        try:
            yield
        finally:
            found.append(gc.collect())  # the simulation is alive: only what it dropped counts
            gc.enable()

    monkeypatch.setattr(simulation, "_fewer_collections", stopped)
    config = load_config(model=model)
    trace = read_trace(busy_trace)
    instance = models.load(model)(config.model_params)
    for _ in instance.tables(trace, config, instance.default_watchers(trace)):
        pass
    assert found and found[0] <= 10
