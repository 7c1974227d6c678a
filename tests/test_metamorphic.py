"""Metamorphic properties: changes to a replay's input whose effect on the output is known.

- shifting every trace time by a constant shifts every output time by it, and changes nothing
  else (so no metric);
- renaming nodes and pods without changing their order changes nothing but the names;
- a watcher that matches nothing changes no other table;
- with unbounded watcher buffers (as today), making every stage costlier never lowers a
  delivery's delay in observe mode (every queue is monotone in its arrivals and its costs).

Each compares two in-memory replays of one random workload (tests/strategies.py) through every
built-in model; the capacity windows are SQL over these tables, so equal tables give equal
windows (one test shifts a whole run directory to show it).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import tempfile
from pathlib import Path

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay import models
from replay.api import run_replay
from replay.engine.config import PROFILES, RunConfig, WatcherSpec
from replay.engine.distributions import Constant, Empirical, Exponential, LogNormal, Uniform
from replay.engine.rundir import TABLES, conform_table
from replay.trace.validate import read_trace

from conftest import budget
from strategies import model_params, pipelines, rows_to_trace, workloads

BUILT_IN = sorted(models.registered())
SETTINGS = settings(max_examples=budget(6), deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


@st.composite
def runs(draw, model_names=BUILT_IN):
    model = draw(st.sampled_from(model_names))
    return model, draw(model_params(models.load(model)))


def replay(tmp_path: Path, rows: list[dict], model: str, params: dict,
           config: RunConfig | None = None, extra: tuple[WatcherSpec, ...] = ()):
    """The run's tables (polars), computed in memory, and the config used."""
    trace = read_trace(rows_to_trace(Path(tempfile.mkdtemp(dir=tmp_path)) / "t.parquet", rows))
    model_class = models.load(model)
    config = config or RunConfig(model=model, model_params=params)
    instance = model_class(params)
    watchers = list(config.watchers) if config.watchers else instance.default_watchers(trace)
    tables = instance.replay(trace, config, [*extra, *watchers])
    return {name: pl.from_arrow(conform_table(name, table)).with_columns(
        pl.col(pl.Categorical).cast(pl.String)) for name, table in tables.items()}


def shifted(rows: list[dict], ms: float) -> list[dict]:
    return [{**row, "ms": row["ms"] + ms,
             **({"received_ms": row["received_ms"] + ms} if "received_ms" in row else {})}
            for row in rows]


@SETTINGS
@given(rows=workloads(), run=runs(), pipeline=pipelines(),
       shift_ms=st.sampled_from([0.001, 37.5, 86_400_000.0]))
def test_shifting_every_time_shifts_every_output_time(tmp_path, rows, run, pipeline, shift_ms):
    model, params = run
    # stage costs of the run's own (a watcher's own need the trace's watchers)
    config = dataclasses.replace(pipeline, per_watcher=()).config(models.load(model), params, None)
    before = replay(tmp_path, rows, model, params, config)
    after = replay(tmp_path, shifted(rows, shift_ms), model, params, config)
    delta = dt.timedelta(microseconds=round(shift_ms * 1000))
    for name in TABLES:
        times = [c for c, kind in before[name].schema.items() if isinstance(kind, pl.Datetime)]
        assert after[name].equals(before[name].with_columns(pl.col(times) + delta)), name


def test_a_shifted_run_directory_has_shifted_windows(tmp_path):
    """The same through ``replay run``: the derived capacity windows shift too."""
    rows = [{"ms": 0, "verb": "create", "resource": "nodes", "name": "n0", "node": "n0",
             "cpu": 2000, "memory": 1 << 30, "component": "kubelet"},
            {"ms": 1, "verb": "create", "resource": "pods", "name": "p0", "cpu": 500},
            {"ms": 9, "verb": "delete", "resource": "pods", "name": "p0", "code": 200},
            {"ms": 4, "verb": "create", "resource": "pods", "name": "p1", "cpu": 1500}]
    windows = []
    for ms in (0, 5000):
        trace = rows_to_trace(tmp_path / f"t{ms}.parquet", shifted(rows, ms))
        out = run_replay(trace, RunConfig(model="kube"), out=tmp_path / f"run{ms}").out
        windows.append(pl.read_parquet(out / "capacity_windows.parquet"))
    assert windows[0].height > 0
    shift = dt.timedelta(seconds=5)
    assert windows[1].equals(windows[0].with_columns(pl.col("start_ts", "end_ts") + shift))


def renamed(rows: list[dict]) -> list[dict]:
    """n3 -> node-003, p3 -> pod-003: the same order, other names."""
    def name(value):
        if isinstance(value, str) and value[:1] in "np" and value[1:].isdigit():
            return ("node-" if value[0] == "n" else "pod-") + value[1:].zfill(3)
        return value
    return [{k: name(v) if k in ("name", "node") else v for k, v in row.items()} for row in rows]


def named_back(tables: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    back = {"node-": "n", "pod-": "p"}

    def restore(column: pl.Expr) -> pl.Expr:
        for new, old in back.items():
            column = column.str.replace_all(f"{new}0*([0-9])", f"{old}$1")
        return column

    return {name: table.with_columns(restore(pl.col(c)).alias(c)
                                     for c, kind in table.schema.items() if kind == pl.String)
            for name, table in tables.items()}


CONSTANT = RunConfig(stages={stage: {param: Constant(0.25 * (i + 1)) for param in params}
                             for i, (stage, params) in enumerate(PROFILES["zero"].items())})


@SETTINGS
@given(rows=workloads(), run=runs())
def test_renaming_nodes_and_pods_in_order_changes_nothing_else(tmp_path, rows, run):
    """With constant stage costs (random draws are keyed by watcher names, and a kubelet is
    named after its node)."""
    model, params = run
    config = dataclasses.replace(CONSTANT, model=model, model_params=params)
    before = replay(tmp_path, rows, model, params, config)
    after = named_back(replay(tmp_path, renamed(rows), model, params, config))
    for name in TABLES:
        assert after[name].equals(before[name]), name


@SETTINGS
@given(rows=workloads(), run=runs(), pipeline=pipelines())
def test_a_watcher_that_matches_nothing_changes_no_other_table(tmp_path, rows, run, pipeline):
    model, params = run
    config = pipeline.config(models.load(model), params, read_trace(
        rows_to_trace(Path(tempfile.mkdtemp(dir=tmp_path)) / "t.parquet", rows)))
    idle = WatcherSpec("idle", "observer", ("secrets",))
    before = replay(tmp_path, rows, model, params, config)
    after = replay(tmp_path, rows, model, params, config, extra=(idle,))
    assert after["watchers"].equals(pl.concat([
        pl.DataFrame({"watcher": ["idle"], "role": ["observer"], "resources": ["secrets"],
                      "node": [None], "client_queue": [idle.client_queue.value],
                      "terminal_pods": [True]},
                     schema=before["watchers"].schema), before["watchers"]]))
    for name in TABLES:
        if name != "watchers":
            assert after[name].equals(before[name]), name


def scaled(dist, k: float):
    if isinstance(dist, Constant):
        return Constant(dist.ms * k)
    if isinstance(dist, Exponential):
        return Exponential(dist.mean_ms * k)
    if isinstance(dist, LogNormal):
        return LogNormal(dist.median_ms * k, dist.p99_ms * k)
    if isinstance(dist, Uniform):
        return Uniform(dist.low_ms * k, dist.high_ms * k)
    assert isinstance(dist, Empirical)
    return Empirical(tuple(v * k for v in dist.ms), dist.weights)


@SETTINGS
@given(rows=workloads(), pipeline=pipelines(), k=st.sampled_from([1.0, 1.5, 4.0]))
def test_costlier_stages_never_lower_a_delay_in_observe(tmp_path, rows, pipeline, k):
    model = models.load("observe")
    config = pipeline.config(model, {}, read_trace(
        rows_to_trace(Path(tempfile.mkdtemp(dir=tmp_path)) / "t.parquet", rows)))
    costlier = dataclasses.replace(
        config,
        stages={s: {p: scaled(d, k) for p, d in ps.items()} for s, ps in config.stages.items()},
        watchers=None if config.watchers is None else tuple(
            dataclasses.replace(w, stages={s: {p: scaled(d, k) for p, d in ps.items()}
                                           for s, ps in w.stages.items()})
            for w in config.watchers))
    delays = [replay(tmp_path, rows, "observe", {}, c)["deliveries"].select(
        "rv", "watcher", delay=pl.col("applied_ts") - pl.col("commit_ts"))
        for c in (config, costlier)]
    assert delays[1].select("rv", "watcher").equals(delays[0].select("rv", "watcher"))
    assert (delays[1]["delay"] >= delays[0]["delay"]).all()
