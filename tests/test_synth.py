"""The workload synthesizer and its ideal scheduler."""

from __future__ import annotations

import heapq
import math

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay.trace import ideal
from replay.trace.schema import NO_POD_LIMIT
from replay.trace.synth import Shape, SynthSpec, _Workload, synthesize
from replay.trace.validate import read_trace, validate

from conftest import SAMPLE_TRACE, budget


def test_issue_example_is_deterministic_and_counts_are_exact(cli, tmp_path):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    for out in (a, b):
        assert cli("synth", "--nodes", 50, "--pods", 500, "--seed", 3, "--out", out).code == 0
    assert a.read_bytes() == b.read_bytes()
    trace = read_trace(a)
    creates = trace.filter(pl.col("verb") == "create").group_by("resource").len()
    assert dict(creates.iter_rows()) == {"pods": 500, "nodes": 50}
    assert cli("validate", a).code == 0


def test_another_seed_gives_another_trace(tmp_path):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    synthesize(SynthSpec(nodes=5, pods=50, seed=1), a)
    synthesize(SynthSpec(nodes=5, pods=50, seed=2), b)
    assert a.read_bytes() != b.read_bytes()


specs = st.builds(
    SynthSpec,
    nodes=st.integers(0, 12),
    pods=st.integers(0, 150),
    arrival_rate=st.floats(0.5, 500),
    mean_lifetime=st.floats(0.01, 100),
    lifetime_sigma=st.floats(0, 3),
    max_lifetime_factor=st.floats(1, 50),
    heartbeat_interval=st.sampled_from([0.0, 0.5, 7.0]),
    max_pods=st.sampled_from([None, 1, 2, 5]),
    bind=st.sampled_from([None, *ideal.POLICIES]),
    bind_delay_ms=st.floats(0, 10),
    seed=st.integers(0, 2**32),
)


@settings(max_examples=budget(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=specs)
def test_synthesized_traces_are_well_formed(tmp_path, spec):
    out = tmp_path / "t.parquet"
    result = synthesize(spec, out)
    assert validate(out) == []
    trace = read_trace(out).with_row_index("row")
    kind = trace.select(pl.concat_str("verb", "resource", pl.col("subresource").fill_null(""),
                                      separator="/").alias("kind"))["kind"]
    counts = kind.value_counts().to_dict(as_series=False)
    counts = dict(zip(counts["kind"], counts["count"]))
    bound = counts.get("create/pods/binding", 0)
    assert counts.get("create/nodes/", 0) == spec.nodes
    assert counts.get("create/pods/", 0) == spec.pods
    assert bound == (0 if spec.bind is None else spec.pods - result.pending)
    assert counts.get("delete/pods/", 0) == (spec.pods if spec.bind is None else bound)
    assert result.rows == trace.height
    assert trace["ts"].is_sorted()
    node_creates = (pl.col("resource") == "nodes") & (pl.col("verb") == "create")
    assert trace.filter(node_creates)["max_pods"].to_list() == [spec.max_pods] * spec.nodes
    assert trace.filter(~node_creates)["max_pods"].null_count() == trace.height - spec.nodes

    pods = trace.filter(pl.col("resource") == "pods")
    life = pods.pivot(on="verb", index="name", values="ts", aggregate_function="first")
    order = pods.pivot(on="verb", index="name", values="row", aggregate_function="first")
    if spec.pods and "delete" in life.columns:
        deleted = life.filter(pl.col("delete").is_not_null())
        assert (deleted["delete"] > deleted["create"]).all()
        assert (order.drop_nulls()["delete"] > order.drop_nulls()["create"]).all()
    if bound:
        bindings = pods.filter(pl.col("subresource") == "binding").join(
            life.select("name", "create", "delete"), on="name")
        assert (bindings["ts"] >= bindings["create"]).all()
        assert (bindings["delete"].is_null() | (bindings["delete"] > bindings["ts"])).all()
        assert_no_overcommit(trace)

    again = tmp_path / "again.parquet"
    synthesize(spec, again)
    assert again.read_bytes() == out.read_bytes()


def assert_no_overcommit(trace: pl.DataFrame) -> None:
    """Replay bindings and deletes in trace order: no node's requests ever exceed its
    allocatable, nor its pods its ``max_pods``."""
    requests = trace.filter((pl.col("verb") == "create") & (pl.col("resource") == "pods")
                            & pl.col("subresource").is_null()).select("name", "cpu_milli",
                                                                      "memory_bytes", "gpu_milli")
    alloc = trace.filter(pl.col("resource") == "nodes", pl.col("verb") == "create").select(
        "node", cpu_alloc="cpu_milli", memory_alloc="memory_bytes", gpu_alloc="gpu_milli",
        pods_alloc=pl.col("max_pods").fill_null(NO_POD_LIMIT))
    placed = trace.filter(pl.col("subresource") == "binding").select("name", "node")
    moves = (trace.filter(pl.col("resource") == "pods",
                          (pl.col("subresource") == "binding") | (pl.col("verb") == "delete"))
             .select("row", "name", sign=pl.when(pl.col("verb") == "delete").then(-1).otherwise(1))
             .join(placed, on="name").join(requests, on="name").sort("row"))
    used = moves.with_columns(
        [(pl.col(r) * pl.col("sign")).cum_sum().over("node").alias(f"used_{r}")
         for r in ("cpu_milli", "memory_bytes", "gpu_milli")],
        used_pods=pl.col("sign").cum_sum().over("node")).join(alloc, on="node")
    assert used.filter((pl.col("used_cpu_milli") > pl.col("cpu_alloc"))
                       | (pl.col("used_memory_bytes") > pl.col("memory_alloc"))
                       | (pl.col("used_gpu_milli") > pl.col("gpu_alloc"))
                       | (pl.col("used_pods") > pl.col("pods_alloc"))).height == 0


def test_sample_trace_never_overcommits():
    assert_no_overcommit(read_trace(SAMPLE_TRACE).with_row_index("row"))


def reference_place(policy, alloc, requests, pod_shape, ready, lifetime, delay):
    """The ideal scheduler's specification, written the slow and obvious way."""
    free = [list(map(int, a)) for a in alloc]
    need = [list(map(int, r)) for r in requests]
    decided, chosen = [-1] * len(pod_shape), [-1] * len(pod_shape)
    waiting, leaving = [], []

    def fits(n, s):
        return all(f >= q for f, q in zip(free[n], need[s]))

    def share(n):
        f, a = free[n], alloc[n]
        return (f[0] / a[0] if a[0] else 0.0) + (f[1] / a[1] if a[1] else 0.0)

    def best(s):
        candidates = [n for n in range(len(free)) if fits(n, s)]
        if not candidates:
            return -1
        if policy == "first-fit":
            return candidates[0]
        return max(candidates, key=lambda n: (share(n), -n))

    def bind(p, n, now):
        free[n] = [f - q for f, q in zip(free[n], need[pod_shape[p]])]
        decided[p], chosen[p] = now, n
        heapq.heappush(leaving, (now + delay + lifetime[p], p))

    def leave_until(now):
        while leaving and leaving[0][0] <= now:
            t, p = heapq.heappop(leaving)
            free[chosen[p]] = [f + q for f, q in zip(free[chosen[p]], need[pod_shape[p]])]
            for w in list(waiting):
                n = best(pod_shape[w])
                if n >= 0:
                    waiting.remove(w)
                    bind(w, n, t)

    for p in range(len(pod_shape)):
        leave_until(ready[p])
        n = best(pod_shape[p])
        if n < 0:
            waiting.append(p)
        else:
            bind(p, n, ready[p])
    leave_until(math.inf)
    return decided, chosen


triple = st.tuples(st.integers(0, 8), st.integers(0, 8), st.integers(0, 2))
pod_limit = st.sampled_from([0, 1, 2, 3, NO_POD_LIMIT])  # a node's allocatable pods


@settings(max_examples=budget(300), deadline=None)
@given(policy=st.sampled_from(ideal.POLICIES),
       alloc=st.lists(st.tuples(st.integers(0, 8), st.integers(0, 8), st.integers(0, 2),
                                pod_limit), min_size=1, max_size=6),
       requests=st.lists(triple.map(lambda request: (*request, 1)), min_size=1, max_size=4),
       pods=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4), st.integers(1, 25)),
                     max_size=40),
       delay=st.integers(0, 3))
def test_ideal_scheduler_matches_its_specification(policy, alloc, requests, pods, delay):
    shape = np.array([s % len(requests) for s, _, _ in pods], dtype=np.int64)
    ready = np.cumsum([gap for _, gap, _ in pods]).astype(np.int64)
    lifetime = np.array([life for _, _, life in pods], dtype=np.int64)
    got = ideal.place(policy, np.array(alloc), np.array(requests), shape, ready, lifetime, delay)
    decided, chosen = reference_place(policy, alloc, requests, shape.tolist(), ready.tolist(),
                                      lifetime.tolist(), delay)
    assert got.node.tolist() == chosen
    assert got.decided_us.tolist() == decided


def test_lifetimes_and_arrivals_follow_their_distributions():
    spec = SynthSpec(nodes=1, pods=200_000, arrival_rate=50.0, mean_lifetime=30.0,
                     max_lifetime_factor=1e6, seed=11)
    w = _Workload.draw(spec)
    # lognormal sigma 1.5 has sd ~2.9x its mean: the standard error over 200k draws is ~0.7%
    assert w.lifetime_us.mean() / 1e6 == pytest.approx(30.0, rel=0.04)
    assert np.median(w.lifetime_us) / 1e6 == pytest.approx(30.0 * math.exp(-1.5**2 / 2), rel=0.02)
    gaps = np.diff(w.created_us)
    assert gaps.mean() == pytest.approx(1e6 / 50.0, rel=0.01)
    assert gaps.std() == pytest.approx(gaps.mean(), rel=0.02)  # exponential: sd = mean


def test_lifetimes_are_capped():
    spec = SynthSpec(nodes=1, pods=50_000, mean_lifetime=1.0, max_lifetime_factor=3.0, seed=2)
    assert _Workload.draw(spec).lifetime_us.max() == 3_000_000


@pytest.mark.parametrize("text, shape", [
    ("16/64Gi=5", Shape(16_000, 64 * 2**30, 0, 5.0)),
    ("500m/512Mi", Shape(500, 512 * 2**20, 0, 1.0)),
    ("8/64Gi/500m=0.5", Shape(8_000, 64 * 2**30, 500, 0.5)),
])
def test_shape_syntax(text, shape):
    assert Shape.parse(text) == shape


@pytest.mark.parametrize("args, message", [
    (["--node-shape", "16"], "is not CPU/MEMORY"),
    (["--pod-shape", "1/2Gi=-1"], "weight > 0"),
    (["--pod-shape", "x/2Gi"], "not a quantity"),
    (["--arrival-rate", "0"], "--arrival-rate must be > 0"),
    (["--bind", "best"], "invalid choice"),
    (["--start", "yesterday"], "not an ISO 8601 time"),
    (["--nodes", "2", "--node-shape", f"{2**61}m/1Gi=1", "--pods", "4",
      "--pod-shape", f"{2**60}m/1Gi=1"],
     "cpu_milli too large: the sum over 2 nodes and 4 pods could overflow a 64-bit integer"),
])
def test_bad_arguments_get_one_clear_line(cli, tmp_path, args, message):
    out = tmp_path / "t.parquet"
    result = cli("synth", "--out", out, *args)
    assert result.code != 0
    assert message in result.err and "Traceback" not in result.err
    assert not out.exists()


@pytest.mark.parametrize("args, out, err", [
    (["--nodes", "0"], "4000 rows (2000 pod creates, 2000 pod deletes)",
     "offered cpu load: no cpu in the cluster to offer it to"),
    (["--nodes", "0", "--pods", "0"], "0 rows\n", "no cpu in the cluster"),
    (["--pods", "0"], "100 rows (100 node creates)", "offered cpu load 0% of the cluster"),
])
def test_an_empty_side_is_said_plainly(cli, tmp_path, args, out, err):
    result = cli("synth", "--out", tmp_path / "t.parquet", *args)
    assert result.code == 0
    assert out in result.out and err in result.err and "inf" not in result.err
