"""Hypothesis strategies the whole suite shares: traces, pipeline configurations, model parameters.

Every value is drawn from a few readable choices (node names n0, n1...; pods p0, p1...;
millisecond times; requests of whole quarter-cores, GiB and half-GPUs), so that a failure shrinks
to a trace one can read row by row.  ``rows_to_trace`` writes a list of rows as a trace file.

- ``workloads()``: nodes whose allocatable changes (their pods too: a limit of 1, 2 or 110
  pods, or none said), that go away and come back, heartbeats;
  pods requesting cpu, memory and gpu, arriving, deleted, created again under the same name, in
  gangs; recorded bindings (when asked) that fail with 409 or 500 before one succeeds, or pods
  created on their node (mirror pods), and terminal status writes; writes to other resources;
  pods and a node made before the trace (``running_before()``).
- ``observed_traces()``: the recorded traces the query references are compared on (a few pods,
  all within 60 ms, bound on the first try or after a 409, or created on their node; some run
  to their end; some made before the trace, ``running_before()``).
- ``synth_specs()``: small synthesized workloads.
- ``distributions()``: every delay distribution of docs/config.md, in small milliseconds.
- ``pipelines()``: a seed, a profile, stage costs overridden (zero included) and per-watcher
  overrides; ``PipelineChoice.config`` makes the run configuration for a model and a trace.
- ``model_params(model)``: values for a model's declared parameters.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
from pathlib import Path

import polars as pl
from hypothesis import strategies as st

from replay.engine.config import PROFILES, SHARED_STAGES, STAGES, RunConfig, WatcherSpec
from replay.engine.distributions import Constant, Empirical, Exponential, LogNormal, Uniform
from replay.models.base import Model
from replay.trace.io import write_trace
from replay.trace.synth import Shape, SynthSpec

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
GIB = 1 << 30
SCHEDULERS = ("kube-scheduler", "second-scheduler")


# --- trace rows ----------------------------------------------------------------------------------

def node(ms, name, cpu, memory=8 * GIB, gpu=None, max_pods=None, verb="create",
         subresource=None):
    return {"ms": ms, "verb": verb, "resource": "nodes", "subresource": subresource, "name": name,
            "node": name, "cpu": cpu, "memory": memory, "gpu": gpu, "max_pods": max_pods,
            "component": "kubelet"}


def pod(ms, name, cpu, memory=0, gpu=None, group=None, node_name=None):
    """A pod create; with ``node_name``, one created on its node (a static pod's mirror pod)."""
    row = {"ms": ms, "verb": "create", "resource": "pods", "name": name, "cpu": cpu,
           "memory": memory, "gpu": gpu, "node": node_name}
    return row | ({"group": group} if group is not None else {})


def bind(ms, name, node_name, code=201, decided_ms=None, scheduler="kube-scheduler"):
    return {"ms": ms, "received_ms": ms if decided_ms is None else decided_ms, "verb": "create",
            "resource": "pods", "subresource": "binding", "name": name, "node": node_name,
            "code": code, "component": scheduler}


def status(ms, name, phase, **stored):
    """The kubelet's status write setting a pod's ``phase`` (terminal: Succeeded, Failed); with
    ``stored`` (``node``, ``cpu``, ``memory``), what a RequestResponse log's stored pod says."""
    return {"ms": ms, "verb": "patch", "resource": "pods", "subresource": "status", "name": name,
            "phase": phase, "code": 200, "component": "kubelet", **stored}


def delete(ms, name, **stored):
    """A pod's delete; with ``stored`` (``phase``, ``node``, ``cpu``, ``memory``), what a
    RequestResponse log's stored pod says."""
    return {"ms": ms, "verb": "delete", "resource": "pods", "name": name, "code": 200, **stored}


def rows_to_trace(path, rows: list[dict]) -> Path:
    """A trace from rows of dicts with ``ms`` (milliseconds after T0); other columns as named."""
    write_trace(trace_frame(rows), path, source="test", source_args={})
    return Path(path)


def trace_frame(rows: list[dict]) -> pl.DataFrame:
    """``rows_to_trace``'s trace as a data frame, in time order."""
    return pl.DataFrame([
        {"ts": T0 + dt.timedelta(milliseconds=r["ms"]),
         "received_ts": T0 + dt.timedelta(milliseconds=r.get("received_ms", r["ms"])),
         "verb": r["verb"], "resource": r["resource"], "subresource": r.get("subresource"),
         "namespace": "ns" if r["resource"] == "pods" else None, "name": r["name"],
         "node": r.get("node"), "cpu_milli": r.get("cpu"), "memory_bytes": r.get("memory"),
         "gpu_milli": r.get("gpu"), "code": r.get("code", 201),
         "component": r.get("component", "workload"), "group": r.get("group"),
         "phase": r.get("phase"), "max_pods": r.get("max_pods")}
        for r in sorted(rows, key=lambda r: r["ms"])],
        schema_overrides={"cpu_milli": pl.Int64, "memory_bytes": pl.Int64, "gpu_milli": pl.Int64,
                          "subresource": pl.String, "node": pl.String, "namespace": pl.String,
                          "group": pl.String, "phase": pl.String, "max_pods": pl.Int64})


# --- a pipeline under load ---------------------------------------------------------------------

UNDER_LOAD = """profile = "zero"
[stages.network]
latency = {{ dist = "constant", ms = 1 }}
[stages.watcher_queue]
buffer = 1
[dispatch]
timeout_budget_ms = 1.0
budget_refill_ms_per_s = 0.0
[list]
per_object = {{ dist = "constant", ms = 0.5 }}
[[watchers]]
name = "kube-scheduler"
role = "scheduler"
client_queue = "{first}"
[watchers.stages.handler]
service = {{ dist = "constant", ms = 2 }}
[[watchers]]
name = "second-scheduler"
role = "scheduler"
client_queue = "{second}"
[watchers.stages.watcher_queue]
service = {{ dist = "constant", ms = 5 }}
[[watchers]]
name = "kubelet/n0"
role = "kubelet"
node = "n0"
[watch_cache]
capacity = {capacity}
"""


def under_load(capacity: int, client_queue: str, second_queue: str | None = None) -> str:
    """A run config under load: no delay but a 1 ms network; second-scheduler's watches drain
    slowly (5 ms an event) into buffers of 1 (4 events), the dispatcher's budget is 1 ms and
    never refills, the watch cache holds ``capacity`` events: its watches are terminated and
    re-list (or re-watch, with a larger window), and views are frozen meanwhile.  The two
    schedulers' client queues are ``client_queue`` (and ``second_queue``, if given)."""
    return UNDER_LOAD.format(first=client_queue, second=second_queue or client_queue,
                             capacity=capacity)


# --- workloads ------------------------------------------------------------------------------------

NODE_CPU, NODE_MEMORY, NODE_GPU = (1000, 2000, 4000), (2 * GIB, 8 * GIB), (None, 0, 1000)
NODE_PODS = (None, 1, 2, 110)  # its allocatable pods (None: the write does not say)
POD_CPU, POD_MEMORY, POD_GPU = (0, 250, 1000, 3000), (0, GIB, 4 * GIB), (None, 0, 500, 1000)


@st.composite
def allocatable(draw) -> tuple:
    return (draw(st.sampled_from(NODE_CPU)), draw(st.sampled_from(NODE_MEMORY)),
            draw(st.sampled_from(NODE_GPU)), draw(st.sampled_from(NODE_PODS)))


@st.composite
def requests(draw) -> tuple:
    return (draw(st.sampled_from(POD_CPU)), draw(st.sampled_from(POD_MEMORY)),
            draw(st.sampled_from(POD_GPU)))


@st.composite
def node_rows(draw, name: str) -> list[dict]:
    """A node created early, or made before the trace (its first write a status patch that
    says its allocatable, or a heartbeat that does not and such a patch later: every replay
    lists it); then maybe allocatable changes, heartbeats, a delete and a return."""
    rows = [node(draw(st.integers(0, 3)), name, *draw(allocatable()))]
    if draw(st.integers(0, 3)) == 0:
        said = {**rows[0], "verb": "patch", "subresource": "status"}
        rows = [said] if draw(st.booleans()) else [
            node(said["ms"], name, None, None, None, verb="patch", subresource="status"),
            {**said, "ms": said["ms"] + draw(st.integers(0, 30))}]
    for _ in range(draw(st.integers(0, 2))):
        rows.append(node(draw(st.integers(1, 80)), name, *draw(allocatable()), verb="patch",
                         subresource="status"))
    if draw(st.booleans()):
        rows.append(node(draw(st.integers(1, 80)), name, None, None, None, verb="patch",
                         subresource="status"))
    if draw(st.integers(0, 4)) == 0:
        gone = draw(st.integers(10, 80))
        rows.append({**node(gone, name, None, None, None, verb="delete"), "code": 200})
        if draw(st.booleans()):
            rows.append(node(gone + draw(st.integers(0, 20)), name, *draw(allocatable())))
    return rows


@st.composite
def pod_rows(draw, name: str, nodes: list[str], recorded: bool, group: str | None) -> list[dict]:
    """One pod name: one incarnation, or two (created again after its delete); each maybe
    bound (after failed bindings), or created on its node (a mirror pod), and deleted, when the
    trace is ``recorded``."""
    rows, at = [], draw(st.integers(0, 60))
    lives = draw(st.integers(1, 2)) if group is None else 1
    for life in range(lives):
        mirror = recorded and group is None and draw(st.integers(0, 4)) == 0
        rows.append(pod(at, name, *draw(requests()), group=group,
                        node_name=draw(st.sampled_from(nodes)) if mirror else None))
        if recorded and not mirror and draw(st.booleans()):
            scheduler = draw(st.sampled_from(SCHEDULERS))
            for code in draw(st.lists(st.sampled_from([409, 500]), max_size=2)):
                at += draw(st.integers(0, 3))
                rows.append(bind(at, name, draw(st.sampled_from(nodes)), code=code,
                                 scheduler=scheduler))
            at += draw(st.integers(0, 4))
            rows.append(bind(at, name, draw(st.sampled_from(nodes)),
                             decided_ms=max(at - draw(st.integers(0, 2)), 0), scheduler=scheduler))
        if recorded and draw(st.integers(0, 3)) == 0:  # it ran to its end (a Job's pod)
            at += draw(st.integers(1, 20))
            rows.append(status(at, name, draw(st.sampled_from(["Succeeded", "Failed"]))))
        if life + 1 < lives or draw(st.booleans()):
            at += draw(st.integers(1, 40))
            rows.append(delete(at, name))
            at += draw(st.integers(0, 5))
    return rows


@st.composite
def workloads(draw, max_nodes: int = 3, max_pods: int = 6, recorded: bool = True) -> list[dict]:
    """Rows of a small trace (see the module's docstring); ``recorded``: with bindings."""
    nodes = [f"n{i}" for i in range(draw(st.integers(1, max_nodes)))]
    rows = [row for name in nodes for row in draw(node_rows(name))]
    gangs = draw(st.sampled_from([(), ("g0",), ("g0", "g1")]))
    for i in range(draw(st.integers(1, max_pods))):
        group = draw(st.sampled_from((None, *gangs))) if gangs else None
        rows += draw(pod_rows(f"p{i}", nodes, recorded, group))
    if draw(st.integers(0, 3)) == 0:
        rows.append({"ms": draw(st.integers(0, 80)), "verb": "update", "resource": "configmaps",
                     "name": "settings", "code": 200, "component": "user"})
    return rows + draw(running_before(nodes, gangs))


@st.composite
def observed_traces(draw) -> list[dict]:
    """A few nodes and pods, all within 60 ms, so that deliveries overlap and writes tie.  A
    name created again is created after its previous incarnation's writes: recorded otherwise,
    one incarnation could hold two successful bindings, which no API server commits (the second
    gets 409), and whose views cannot agree with the truth."""
    rows = []
    names = [f"n{i}" for i in range(draw(st.integers(1, 3)))]
    for name in names:
        rows.append(node(0, name, draw(st.sampled_from([1000, 2000, 4000])),
                         draw(st.sampled_from([2 * GIB, 8 * GIB])),
                         draw(st.sampled_from([None, 0, 1000]))))
    if draw(st.booleans()):
        rows.append(node(draw(st.integers(1, 60)), draw(st.sampled_from(names)),
                         draw(st.sampled_from([None, 500, 3000])), None, None,
                         verb="patch", subresource="status"))
    if draw(st.integers(0, 4)) == 0:
        rows.append({**node(draw(st.integers(1, 60)), names[-1], None), "verb": "delete",
                     "memory": None, "code": 200})
    pods = draw(st.integers(1, 6))
    last: dict[str, int] = {}  # a name's latest row: it is created again after it
    for i in range(pods):
        name, at = f"p{draw(st.integers(0, pods - 1))}", draw(st.integers(0, 50))
        at = max(at, last.get(name, 0))
        mirror = i > 0 and draw(st.integers(0, 4)) == 0  # created on its node
        rows.append(pod(at, name, draw(st.sampled_from([0, 500, 1000, 1500])),
                        draw(st.sampled_from([0, GIB])), draw(st.sampled_from([None, 0, 500])),
                        node_name=draw(st.sampled_from(names)) if mirror else None))
        if mirror:
            if draw(st.booleans()):
                at += draw(st.integers(0, 20))
                rows.append(delete(at, name))
        elif i == 0 or draw(st.booleans()):
            at += draw(st.integers(0, 4))
            scheduler = draw(st.sampled_from(SCHEDULERS))
            target = draw(st.sampled_from(names))
            if draw(st.integers(0, 3)) == 0:
                rows.append(bind(at, name, target, code=409, scheduler=scheduler))
                at += draw(st.integers(0, 3))
            rows.append(bind(at, name, target, decided_ms=at - draw(st.integers(0, 2)),
                             scheduler=scheduler))
            if draw(st.integers(0, 3)) == 0:  # it ran to its end
                at += draw(st.integers(0, 10))
                rows.append(status(at, name, draw(st.sampled_from(["Succeeded", "Failed"]))))
            if draw(st.booleans()):
                at += draw(st.integers(0, 20))
                rows += [delete(at, name)] * draw(st.integers(1, 2))
        last[name] = at
    return rows + draw(running_before(names))


@st.composite
def running_before(draw, nodes: list[str], gangs: tuple[str, ...] = ()) -> list[dict]:
    """Pods and a node made before the trace began (a log of a running cluster): their writes
    say their node and requests (a RequestResponse log) or not (Metadata level); one may be
    pending, then bound; one may have ended before the trace (its delete finds it Succeeded)
    or end during it; one may be a member of one of ``gangs``."""
    rows = []
    if draw(st.integers(0, 3)) == 0:  # a node: its first write a status patch
        rows.append(node(draw(st.integers(0, 30)), "n-old", draw(st.sampled_from([1000, 2000])),
                         GIB, None, verb="patch", subresource="status"))
    for i in range(draw(st.integers(0, 2))):
        name, at = f"old{i}", draw(st.integers(0, 50))
        said = draw(st.booleans())
        stored = {"cpu": draw(st.sampled_from([500, 1000])), "memory": GIB} if said else {}
        group = draw(st.sampled_from((None, *gangs))) if gangs else None
        stored |= {"group": group} if said and group is not None else {}
        pending = draw(st.integers(0, 3)) == 0
        where = {} if pending or not said else {"node": draw(st.sampled_from(nodes))}
        if draw(st.integers(0, 3)) == 0:  # ran to its end before the trace
            rows.append(delete(at, name, phase="Succeeded" if said else None, **stored, **where))
            continue
        rows.append(status(at, name, "Pending" if pending else "Running", **stored, **where))
        if pending:
            at += draw(st.integers(0, 5))
            rows.append(bind(at, name, draw(st.sampled_from(nodes))))
        if draw(st.integers(0, 3)) == 0:
            at += draw(st.integers(0, 10))
            rows.append(status(at, name, "Succeeded"))
        if draw(st.booleans()):
            at += draw(st.integers(0, 20))
            rows.append(delete(at, name, **stored, **where))
    return rows


def synth_specs() -> st.SearchStrategy[SynthSpec]:
    """Small synthesized workloads (``replay synth``): a few nodes, up to 60 pods."""
    return st.builds(
        SynthSpec,
        nodes=st.integers(1, 6),
        pods=st.integers(1, 60),
        arrival_rate=st.floats(5, 200),
        mean_lifetime=st.floats(0.05, 3),
        node_shapes=st.just((Shape(4000, 8 * GIB, 0, 1.0), Shape(8000, 16 * GIB, 1000, 1.0))),
        pod_shapes=st.just((Shape(500, GIB, 0, 2.0), Shape(2000, 4 * GIB, 0, 1.0),
                            Shape(1000, GIB, 1000, 0.5))),
        max_pods=st.sampled_from([None, 1, 3]),
        seed=st.integers(0, 1000),
    )


# --- the pipeline ---------------------------------------------------------------------------------

def distributions(max_ms: float = 5.0) -> st.SearchStrategy:
    """Every kind of delay distribution, within ``max_ms`` or so, as the config accepts them
    (a lognormal's median is above 0)."""
    ms = st.sampled_from([0.0, 0.01, 0.1, 0.5, 1.0, max_ms])
    return st.one_of(
        st.builds(Constant, ms),
        st.builds(Exponential, ms),
        ms.filter(bool).flatmap(lambda median: st.builds(LogNormal, st.just(median),
                                            st.sampled_from([median, median * 3, median * 10]))),
        ms.flatmap(lambda low: st.builds(Uniform, st.just(low),
                                         st.sampled_from([low, low + 0.5, low + max_ms]))),
        st.lists(st.tuples(ms, st.sampled_from([0.5, 1.0, 3.0])), min_size=1, max_size=3).map(
            lambda pairs: Empirical(tuple(v for v, _ in pairs), tuple(w for _, w in pairs))),
    )


STAGE_PARAMS = [(stage, param) for stage, params in STAGES.items() for param in params]
PER_WATCHER_PARAMS = [(s, p) for s, p in STAGE_PARAMS if s not in SHARED_STAGES]


@dataclasses.dataclass(frozen=True)
class PipelineChoice:
    """A run's pipeline: the base profile, stage costs set over it, and costs of its own for
    some watchers (by position among the run's watchers, modulo their number)."""

    seed: int
    profile: str
    stages: tuple[tuple[str, str, object], ...] = ()
    per_watcher: tuple[tuple[int, str, str, object], ...] = ()

    def config(self, model: type[Model], params: dict, trace: pl.DataFrame) -> RunConfig:
        costs = copy.deepcopy(PROFILES[self.profile])
        for stage, param, dist in self.stages:
            costs[stage][param] = dist
        config = RunConfig(seed=self.seed, profile=self.profile, model=model.name,
                           model_params=dict(params), stages=costs)
        if not self.per_watcher:
            return config
        watchers = list(model(params).default_watchers(trace))
        for index, stage, param, dist in self.per_watcher:
            at = index % len(watchers)
            own = {s: dict(p) for s, p in watchers[at].stages.items()}
            own.setdefault(stage, {})[param] = dist
            watchers[at] = WatcherSpec(watchers[at].name, watchers[at].role,
                                       watchers[at].resources, watchers[at].node, own)
        return dataclasses.replace(config, watchers=tuple(watchers))


@st.composite
def pipelines(draw) -> PipelineChoice:
    stages = draw(st.lists(st.tuples(st.sampled_from(STAGE_PARAMS), distributions()),
                           max_size=3, unique_by=lambda t: t[0]))
    per_watcher = draw(st.lists(st.tuples(st.integers(0, 7), st.sampled_from(PER_WATCHER_PARAMS),
                                          distributions()), max_size=2))
    return PipelineChoice(draw(st.integers(0, 3)), draw(st.sampled_from(["default", "zero"])),
                          tuple((s, p, d) for (s, p), d in stages),
                          tuple((i, s, p, d) for i, (s, p), d in per_watcher))


# --- models ---------------------------------------------------------------------------------------

# Values of their own: a few schedulers; assumptions that live at least 50 ms (an assumption
# forgotten before its binding comes back lets Gödel's binder bind twice what fits once, as the
# real one would: tests/test_consistency.py pins that case)
OPTIONS = {"schedulers": (1, 2, 3), "scheduler_assume_ttl_ms": (900000.0, 50.0),
           "binder_assume_ttl_ms": (300000.0, 50.0)}


@st.composite
def model_params(draw, model: type[Model]) -> dict:
    """A value for each of ``model``'s declared parameters: its choices, or its default and a
    few values around it (times short enough that retries and expiries happen in a short run)."""
    params = {}
    for p in model.params:
        if p.name in OPTIONS:
            options = OPTIONS[p.name]
        elif p.choices is not None:
            options = p.choices
        elif isinstance(p.default, bool):
            options = (False, True)
        elif isinstance(p.default, int):
            options = tuple(sorted({p.default, p.default + 1, 2}))
        elif isinstance(p.default, float):
            options = (p.default, 0.0, round(p.default / 100, 3), min(p.default * 3, 50.0))
        else:
            options = (p.default,)
        options = tuple(v for v in options if p.minimum is None or v >= p.minimum)
        params[p.name] = draw(st.sampled_from(options))
    return params
