"""``reaction_lag``: reaction lags measured in recorded traces, next to the model's watch delay.

A hand-worked trace pins every kind of reaction; generated audit logs (with bodies and
Metadata-level) are checked against lags computed here from the trace itself; the real audit-log
samples answer too (none of them holds a trigger and its answer).
"""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import polars as pl
import pytest

from replay.analysis.catalog import load_query
from replay.analysis.runs import open_runs, run_query
from replay.api import run_replay
from replay.cli.main import main
from replay.engine.config import load_config
from replay.trace.io import write_trace

from conftest import REPO, shared_data

sys.path.insert(0, str(REPO / "benchmarks"))
from make_audit_log import write_log  # noqa: E402

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
CONSTANT_2MS = """profile = "zero"
[stages.network]
latency = { dist = "constant", ms = 2.0 }
"""


def write(ms: float, verb: str, resource: str, name: str, component: str = "workload",
          subresource: str | None = None, node: str | None = None, received: float | None = None,
          code: int = 201, namespace: str | None = "ns") -> dict:
    return {"ts": T0 + dt.timedelta(milliseconds=ms),
            "received_ts": T0 + dt.timedelta(milliseconds=ms if received is None else received),
            "verb": verb, "resource": resource, "subresource": subresource,
            "namespace": namespace, "name": name, "node": node, "code": code,
            "component": component}


def status(ms, pod):
    return write(ms, "patch", "pods", pod, "kubelet", subresource="status")


def binding(ms, pod, received, component="kube-scheduler", code=201):
    return write(ms, "create", "pods", pod, component, subresource="binding", node="n1",
                 received=received, code=code)


HAND_WORKED = [
    write(0, "create", "nodes", "n1", "kubelet", node="n1", namespace=None),
    write(10, "create", "pods", "a"),
    binding(15, "a", received=14),                       # scheduler: 14 - 10 = 4
    status(22, "a"),                                     # kubelet: 22 - 15 = 7
    status(30, "a"),                                     # not the first: not counted
    write(40, "create", "pods", "b"),
    binding(42, "b", received=41, code=409),             # the first request counts: 41 - 40 = 1
    binding(48, "b", received=47),
    status(60, "b"),                                     # kubelet: 60 - 48 = 12
    write(100, "create", "pods", "c"),
    write(103, "patch", "pods", "c", "godel-dispatcher"),  # dispatcher: 103 - 100 = 3
    write(110, "patch", "pods", "c", "godel-scheduler"),   # scheduler: 110 - 103 = 7
    binding(120, "c", received=118, component="godel-binder"),  # binder: 118 - 110 = 8
    status(125, "c"),                                    # kubelet: 125 - 120 = 5
    write(200, "create", "deployments", "web", "user"),
    write(204, "create", "replicasets", "web-5d8f", "controller-manager"),  # 204 - 200 = 4
    write(209, "create", "pods", "web-5d8f-abcde", "controller-manager"),   # 209 - 204 = 5
    write(300, "create", "statefulsets", "db", "user"),
    write(303, "create", "pods", "db-0", "controller-manager"),            # 303 - 300 = 3
    write(310, "create", "pods", "db-1", "controller-manager"),            # a second answer
    write(400, "delete", "pods", "a", code=200),
    write(410, "create", "pods", "a"),                   # a new incarnation of a
    binding(431, "a", received=430),                     # scheduler: 430 - 410 = 20
    write(500, "create", "pods", "d"),
    binding(505, "d", received=504),                     # scheduler: 504 - 500 = 4
    write(510, "delete", "pods", "d", code=200),
    write(520, "create", "pods", "d"),                   # its binding is not in the log:
    status(530, "d"),                                    # no reaction to the old incarnation's
]


def reaction_lag(run_dir: Path) -> pl.DataFrame:
    con = open_runs([str(run_dir)])
    return run_query(con, load_query("reaction_lag"), {}).pl()


def observe(tmp_path: Path, rows: list[dict], config: str = "") -> Path:
    trace = tmp_path / "trace.parquet"
    frame = pl.DataFrame(rows, schema_overrides={"subresource": pl.String, "node": pl.String,
                                                 "namespace": pl.String, "code": pl.Int32})
    write_trace(frame.sort("ts", maintain_order=True), trace, source="test", source_args={})
    toml = tmp_path / "run.toml"
    toml.write_text(config)
    run_replay(trace, load_config(toml, model="observe"), out=tmp_path / "run")
    return tmp_path / "run"


def test_a_hand_worked_trace(tmp_path):
    """Every kind of reaction, lags worked out by hand above; every write reaches its watcher
    2 ms after its commit, so the model's delay is 2 ms wherever the same writes were
    delivered; no watcher is a controller-manager, so controllers have no model figures."""
    rows = reaction_lag(observe(tmp_path, HAND_WORKED, CONSTANT_2MS))
    got = {(r["component"], r["reaction"]): r for r in rows.iter_rows(named=True)}
    expected = {
        ("kube-scheduler", "pod create -> binding request"): (4, 4.0, 20.0),
        ("kubelet", "binding -> first pod status write"): (3, 7.0, 12.0),
        ("godel-dispatcher", "pod create -> dispatch patch"): (1, 3.0, 3.0),
        ("godel-scheduler", "dispatch patch -> assume patch"): (1, 7.0, 7.0),
        ("godel-binder", "assume patch -> binding request"): (1, 8.0, 8.0),
        ("controller-manager", "deployment write -> replicaset write"): (1, 4.0, 4.0),
        ("controller-manager", "replicaset write -> pod create"): (1, 5.0, 5.0),
        ("controller-manager", "statefulset write -> pod create"): (1, 3.0, 3.0),
    }
    assert {k: (r["reactions"], r["p50_ms"], r["max_ms"]) for k, r in got.items()} == expected
    scheduler = got[("kube-scheduler", "pod create -> binding request")]
    # [1, 4, 4, 20] interpolated linearly: p90 = 4 + 0.7 x 16, p99 = 4 + 0.97 x 16
    assert (scheduler["p90_ms"], scheduler["p99_ms"]) == pytest.approx((15.2, 19.52))
    for (component, _), row in got.items():
        if component == "controller-manager":
            assert row["model_basis"] is None and row["model_deliveries"] == 0
        else:
            assert row["model_basis"] == "same writes"
            assert row["model_p50_ms"] == row["model_max_ms"] == 2.0
    assert got[("kubelet", "binding -> first pod status write")]["model_deliveries"] == 3
    assert list(rows["component"]) == sorted(rows["component"])


def test_a_node_the_log_does_not_name_falls_back_to_the_role(tmp_path):
    """Without binding targets (a Metadata-level log), no kubelet watcher receives the pods:
    the model's figures are the kubelets' deliveries of everything else."""
    rows = [dict(r, node=None) if r["subresource"] == "binding" else r for r in HAND_WORKED]
    got = reaction_lag(observe(tmp_path, rows, CONSTANT_2MS)).filter(
        pl.col("component") == "kubelet").row(0, named=True)
    assert (got["reactions"], got["p50_ms"], got["model_basis"]) == (3, 7.0, "role")
    assert got["model_deliveries"] == 1  # the kubelet of n1 received its node's create


def lags_from_the_trace(trace: pl.DataFrame) -> dict[str, pl.Series]:
    """The scheduler's and the kubelets' lags computed from the trace alone: each pod's create,
    its first binding request's arrival, its first committed binding, its first kubelet status
    write after that (every generated pod is created once)."""
    pods = trace.filter(pl.col("resource") == "pods")
    created = pods.filter((pl.col("verb") == "create") & pl.col("subresource").is_null()
                          ).group_by("name").agg(created=pl.col("ts").min())
    requested = pods.filter(pl.col("subresource") == "binding").group_by("name").agg(
        requested=pl.col("received_ts").min())
    bound = pods.filter((pl.col("subresource") == "binding") & (pl.col("code") == 201)
                        ).group_by("name").agg(bound=pl.col("ts").min())
    statuses = pods.filter((pl.col("subresource") == "status")
                           & (pl.col("component") == "kubelet")).select("name", "ts")
    first_status = (bound.join(statuses, on="name").filter(pl.col("ts") >= pl.col("bound"))
                    .group_by("name").agg(status=pl.col("ts").min(), bound=pl.col("bound").first()))
    scheduler = created.join(requested, on="name").select(
        (pl.col("requested") - pl.col("created")).dt.total_microseconds() / 1000)
    kubelet = first_status.select((pl.col("status") - pl.col("bound"))
                                  .dt.total_microseconds() / 1000)
    return {"kube-scheduler": scheduler.to_series(), "kubelet": kubelet.to_series()}


@pytest.mark.parametrize("metadata", [False, True], ids=["request-level", "metadata-level"])
def test_generated_logs_agree_with_the_trace(tmp_path, metadata):
    """make_audit_log's pods are created, bound, given a status by their node's kubelet and
    deleted: the query's lags are the ones computed from the trace directly."""
    log, trace = tmp_path / "audit.log", tmp_path / "trace.parquet"
    write_log(log, 3 << 20, seed=5, metadata=metadata)
    assert main(["ingest", str(log), "--out", str(trace)]) == 0
    run_replay(trace, load_config(model="observe"), out=tmp_path / "run")
    rows = reaction_lag(tmp_path / "run")
    expected = lags_from_the_trace(pl.read_parquet(trace))
    assert set(rows["component"]) == {"kube-scheduler", "kubelet"}
    for row in rows.iter_rows(named=True):
        lags = expected[row["component"]]
        assert row["reactions"] == len(lags) > 100
        assert row["p50_ms"] == pytest.approx(lags.quantile(0.5, "linear"))
        assert row["max_ms"] == pytest.approx(lags.max())
        assert row["p50_ms"] > 0 and row["model_deliveries"] > 0
        # with bodies the binding names its node, so the node's kubelet receives it
        assert row["model_basis"] == ("role" if metadata and row["component"] == "kubelet"
                                      else "same writes")


@pytest.mark.parametrize("sample", ["audit2rbac-demo.log", "elastic-test-audit.log", "falco"])
def test_the_real_samples_answer(tmp_path, sample):
    """Each audit-log sample replays in observe mode and the query answers.  None holds a
    trigger and its answer (no bindings, no kubelet status writes; falco's pods were created by
    a replicaset that the log never writes), so each answer is empty."""
    folder = shared_data("audit-samples")
    logs = sorted((folder / "falco").glob("*.json")) if sample == "falco" else [folder / sample]
    trace = tmp_path / "trace.parquet"
    assert main(["ingest", *map(str, logs), "--skip-bad-lines", "--out", str(trace)]) == 0
    run_replay(trace, load_config(model="observe"), out=tmp_path / "run")
    rows = reaction_lag(tmp_path / "run")
    recorded = pl.read_parquet(trace)
    has_pairs = recorded.filter(pl.col("subresource") == "binding").height > 0
    assert rows.height == 0 and not has_pairs
