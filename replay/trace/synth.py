"""A deterministic workload synthesizer that writes trace format v1.

The workload (all documented in ``traces/README.md``):

- ``nodes`` node creates at the trace start, each of a shape drawn from the node mix;
- ``pods`` pod creates, Poisson arrivals at ``arrival_rate`` pods/s, each of a shape drawn from the
  pod mix;
- lifetimes lognormal with mean ``mean_lifetime`` seconds and shape ``lifetime_sigma`` (heavy
  tailed: with the default sigma 1.5, 1% of pods live more than 9x the mean), capped at
  ``max_lifetime_factor`` x the mean so that a trace has an end;
- a pod's delete at its creation + lifetime, or, with ``bind``, at its binding + lifetime;
- with ``bind``, the bindings one ideal scheduler would have written (see ``ideal``): it decides
  ``bind_delay_ms`` after a pod's create (or when a leaving pod frees room for it), the binding's
  ``received_ts`` is the decision and it commits 1 ms later; a pod that never fits stays pending
  and is never deleted;
- optional kubelet heartbeats (``patch nodes/status``) every ``heartbeat_interval`` seconds per
  node, each node at its own phase, until the last pod write.

Every random quantity comes from its own named stream (``replay.rng``), so the same spec gives a
byte-identical file.  The rows are generated as columns, sorted by one permutation and written in
row groups taken from it, so only one copy of the table is ever held.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from replay.limits import (
    FIRST_TIME,
    INT64_MAX,
    MAX_DURATION_MS,
    MAX_SYNTH_ROWS,
    TRACE_END,
    is_finite_number,
)
from replay.outputs import check_output
from replay.quantity import QuantityError, to_milli, to_units
from replay.rng import stream
from replay.times import epoch_us
from replay.trace import ideal
from replay.trace.io import ROW_GROUP_ROWS, conform, trace_writer
from replay.trace.schema import NO_POD_LIMIT

SOURCE = "synth"
API_LATENCY_US = 1_000  # every synthesized write commits 1 ms after the API server receives it
KUBE_SCHEDULER_AGENT = "kube-scheduler/v1.32.2 (linux/amd64) kubernetes/synth"
KUBELET_AGENT = "kubelet/v1.32.2 (linux/amd64) kubernetes/synth"
DEFAULT_START = datetime(2026, 1, 1, tzinfo=timezone.utc)

# Row kinds, in the order that breaks ties between rows with the same ts.
NODE_CREATE, POD_DELETE, POD_CREATE, BINDING, HEARTBEAT = range(5)


@dataclass(frozen=True)
class Shape:
    """A node's allocatable or a pod's requests, with its weight in the mix."""

    cpu_milli: int
    memory_bytes: int
    gpu_milli: int = 0
    weight: float = 1.0

    @classmethod
    def parse(cls, text: str) -> Shape:
        """``CPU/MEMORY[/GPU][=WEIGHT]`` in Kubernetes quantities, e.g. ``16/64Gi=5`` or
        ``8/64Gi/1=0.5`` (a GPU count of ``500m`` is half a GPU)."""
        spec, _, weight = text.partition("=")
        parts = spec.split("/")
        if len(parts) not in (2, 3):
            raise ValueError(f"shape {text!r} is not CPU/MEMORY[/GPU][=WEIGHT]")
        try:
            cpu, memory = to_milli(parts[0]), to_units(parts[1])
            gpu = to_milli(parts[2]) if len(parts) == 3 else 0
            share = float(weight) if weight else 1.0
        except (QuantityError, ValueError) as err:
            raise ValueError(f"shape {text!r}: {err}") from None
        if min(cpu, memory, gpu) < 0 or not share > 0 or not math.isfinite(share):
            raise ValueError(f"shape {text!r}: resources must be >= 0 and the weight > 0")
        if max(cpu, memory, gpu) > INT64_MAX:
            raise ValueError(f"shape {text!r}: a resource too large for a 64-bit integer")
        return cls(cpu, memory, gpu, share)

    def __str__(self) -> str:
        gpu = f"/{self.gpu_milli}m" if self.gpu_milli else ""
        return f"{self.cpu_milli}m/{self.memory_bytes}{gpu}={self.weight:g}"


GiB = 2**30
MiB = 2**20

DEFAULT_NODE_SHAPES = (
    Shape(16_000, 64 * GiB, 0, 0.5),
    Shape(32_000, 128 * GiB, 0, 0.3),
    Shape(64_000, 256 * GiB, 0, 0.1),
    Shape(96_000, 768 * GiB, 8_000, 0.1),
)
DEFAULT_POD_SHAPES = (
    Shape(100, 128 * MiB, 0, 0.30),
    Shape(500, 512 * MiB, 0, 0.30),
    Shape(1_000, 2 * GiB, 0, 0.20),
    Shape(4_000, 8 * GiB, 0, 0.10),
    Shape(8_000, 32 * GiB, 0, 0.05),
    Shape(8_000, 64 * GiB, 1_000, 0.04),
    Shape(4_000, 16 * GiB, 500, 0.01),
)


@dataclass(frozen=True)
class SynthSpec:
    """Everything that determines a synthesized trace; same spec, same bytes."""

    nodes: int = 100
    pods: int = 2_000
    arrival_rate: float = 12.0
    mean_lifetime: float = 120.0
    lifetime_sigma: float = 1.5
    max_lifetime_factor: float = 20.0
    node_shapes: tuple[Shape, ...] = DEFAULT_NODE_SHAPES
    pod_shapes: tuple[Shape, ...] = DEFAULT_POD_SHAPES
    heartbeat_interval: float = 0.0
    max_pods: int | None = None  # every node's allocatable ``pods``; None: the column left out
    bind: str | None = None
    bind_delay_ms: float = 2.0
    namespace: str = "default"
    start: datetime = DEFAULT_START
    seed: int = 0

    def __post_init__(self) -> None:
        checks = [
            (self.nodes >= 0, "--nodes must be >= 0"),
            (self.pods >= 0, "--pods must be >= 0"),
            (self.arrival_rate > 0, "--arrival-rate must be > 0 pods/s"),
            (self.mean_lifetime > 0, "--mean-lifetime must be > 0 s"),
            (self.lifetime_sigma >= 0, "--lifetime-sigma must be >= 0"),
            (self.max_lifetime_factor >= 1, "--max-lifetime-factor must be >= 1"),
            (self.heartbeat_interval >= 0, "--heartbeat-interval must be >= 0 s (0 = off)"),
            (self.max_pods is None or 1 <= self.max_pods <= NO_POD_LIMIT,
             f"--max-pods must be 1 to {NO_POD_LIMIT:,}"),
            (self.bind is None or self.bind in ideal.POLICIES,
             f"--bind must be one of {', '.join(ideal.POLICIES)}"),
            (self.bind_delay_ms >= 0, "--bind-delay-ms must be >= 0"),
            (bool(self.node_shapes) and bool(self.pod_shapes), "shape mixes must not be empty"),
            (self.seed >= 0, "--seed must be >= 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        self._check_bounds()

    def _check_bounds(self) -> None:
        """Refuse what would overflow a trace's 64-bit columns, end after year 9999, or hold
        more than ``MAX_SYNTH_ROWS`` rows (``replay.limits``): a mistake, not a workload."""
        numbers = {"--arrival-rate": self.arrival_rate, "--mean-lifetime": self.mean_lifetime,
                   "--lifetime-sigma": self.lifetime_sigma,
                   "--max-lifetime-factor": self.max_lifetime_factor,
                   "--heartbeat-interval": self.heartbeat_interval,
                   "--bind-delay-ms": self.bind_delay_ms, "--nodes": self.nodes,
                   "--pods": self.pods, "--seed": self.seed}
        for option, value in numbers.items():
            if not is_finite_number(value):
                raise ValueError(f"{option} must be a finite number, got {value!r}")
        if self.seed > INT64_MAX:
            raise ValueError(f"--seed must be at most {INT64_MAX}")
        arrivals_s, longest_s = self.pods / self.arrival_rate, self.longest_lifetime
        limit_s = MAX_DURATION_MS / 1000
        if arrivals_s > limit_s or longest_s > limit_s or self.bind_delay_ms > MAX_DURATION_MS \
                or self.heartbeat_interval > limit_s:
            raise ValueError("the trace would last more than 100 years (--pods / --arrival-rate, "
                             "--mean-lifetime x --max-lifetime-factor, --bind-delay-ms or "
                             "--heartbeat-interval), the limit")
        span_s = 2 * arrivals_s + longest_s + self.bind_delay_ms / 1000 + 1
        if (TRACE_END - self.start).total_seconds() < span_s:
            raise ValueError(f"a trace starting at {self.start.isoformat()} would end after "
                             f"{TRACE_END.date().isoformat()}, the limit of a trace's times")
        if self.start < FIRST_TIME + timedelta(microseconds=API_LATENCY_US):
            raise ValueError(f"a trace starting at {self.start.isoformat()} would begin (its "
                             f"first request received) before {FIRST_TIME.date().isoformat()}, "
                             f"the limit of a trace's times")
        rows: float = self.nodes + 3 * self.pods
        if self.heartbeat_interval > 0:
            rows += self.nodes * (span_s / self.heartbeat_interval + 1)
        if rows > MAX_SYNTH_ROWS:
            raise ValueError(f"this trace would hold about {rows:,.0f} rows, more than the limit "
                             f"of {MAX_SYNTH_ROWS:,} (a synthesized trace is built in memory)")
        for resource in ("cpu_milli", "memory_bytes", "gpu_milli"):
            nodes = max(getattr(s, resource) for s in self.node_shapes) * self.nodes
            pods = max(getattr(s, resource) for s in self.pod_shapes) * self.pods
            if nodes + pods > INT64_MAX:
                raise ValueError(f"--node-shape and --pod-shape: {resource} too large: the "
                                 f"sum over {self.nodes:,} nodes and {self.pods:,} pods could "
                                 f"overflow a 64-bit integer")

    @property
    def longest_lifetime(self) -> float:
        """The longest a pod lives, in seconds: the cap on lifetimes."""
        return self.mean_lifetime * self.max_lifetime_factor

    def describe(self) -> dict:
        """The spec as JSON-able provenance for the trace metadata."""
        out = dataclasses.asdict(self)
        out["node_shapes"] = [str(s) for s in self.node_shapes]
        out["pod_shapes"] = [str(s) for s in self.pod_shapes]
        out["start"] = self.start.isoformat()
        if self.max_pods is None:  # (the traces written before it say nothing of it)
            del out["max_pods"]
        return out


@dataclass
class SynthResult:
    """What a synthesized trace holds: rows written, rows by kind, pods that never got a node."""

    rows: int
    counts: dict[str, int]
    pending: int
    offered_cpu_load: float


KIND_NAMES = ("node creates", "pod deletes", "pod creates", "bindings", "heartbeats")


def synthesize(spec: SynthSpec, out: str | os.PathLike) -> SynthResult:
    """Write the trace ``spec`` describes to ``out`` (atomically) and say what it holds."""
    check_output(out)
    workload = _Workload.draw(spec)
    placement = None
    if spec.bind:
        requests = np.array([[s.cpu_milli, s.memory_bytes, s.gpu_milli, 1]
                             for s in spec.pod_shapes])
        limit = NO_POD_LIMIT if spec.max_pods is None else spec.max_pods
        alloc = np.column_stack([workload.node_alloc,
                                 np.full(len(workload.node_alloc), limit, np.int64)])
        placement = ideal.place(spec.bind, alloc, requests, workload.pod_shape,
                                workload.created_us + round(spec.bind_delay_ms * 1000),
                                workload.lifetime_us, API_LATENCY_US)
    pieces = _rows(spec, workload, placement)
    table = pa.concat_tables([piece for piece, _ in pieces])
    kind = np.concatenate([np.full(piece.num_rows, k, np.int8) for piece, k in pieces])
    seq = np.concatenate([np.arange(piece.num_rows) for piece, _ in pieces])
    if spec.max_pods is not None:
        table = table.append_column("max_pods", _on_node_creates(kind, spec.max_pods))
    order = np.lexsort((seq, kind, table["ts"].to_numpy()))
    del kind, seq
    with trace_writer(out, source=SOURCE, source_args=spec.describe()) as writer:
        for lo in range(0, len(order), ROW_GROUP_ROWS):
            writer.write(table.take(order[lo:lo + ROW_GROUP_ROWS]))
    counts = {KIND_NAMES[k]: piece.num_rows for piece, k in pieces}
    pending = 0 if placement is None else int((placement.node < 0).sum())
    return SynthResult(writer.rows, counts, pending, workload.offered_cpu_load(spec))


@dataclass
class _Workload:
    """The random draws, in integer microseconds from the trace start."""

    node_alloc: np.ndarray  # (nodes, 3): cpu_milli, memory_bytes, gpu_milli
    pod_shape: np.ndarray  # (pods,): index into spec.pod_shapes
    created_us: np.ndarray  # (pods,): sorted arrival times
    lifetime_us: np.ndarray  # (pods,): >= 1
    heartbeat_phase_us: np.ndarray  # (nodes,)

    @classmethod
    def draw(cls, spec: SynthSpec) -> _Workload:
        node_shape = _choose(stream(spec.seed, "node-shapes"), spec.node_shapes, spec.nodes)
        alloc = np.array([[s.cpu_milli, s.memory_bytes, s.gpu_milli] for s in spec.node_shapes],
                         dtype=np.int64)[node_shape]
        gaps = stream(spec.seed, "pod-arrivals").exponential(1e6 / spec.arrival_rate, spec.pods)
        created = np.cumsum(np.rint(gaps).astype(np.int64))
        pod_shape = _choose(stream(spec.seed, "pod-shapes"), spec.pod_shapes, spec.pods)
        sigma = spec.lifetime_sigma
        mu = math.log(spec.mean_lifetime * 1e6) - sigma * sigma / 2
        lifetime = stream(spec.seed, "pod-lifetimes").lognormal(mu, sigma, spec.pods)
        cap = spec.mean_lifetime * spec.max_lifetime_factor * 1e6
        lifetime = np.maximum(np.rint(np.minimum(lifetime, cap)).astype(np.int64), 1)
        interval = spec.heartbeat_interval * 1e6
        phase = stream(spec.seed, "heartbeat-phase").uniform(0, interval, spec.nodes)
        return cls(alloc, pod_shape, created, lifetime, np.rint(phase).astype(np.int64))

    def offered_cpu_load(self, spec: SynthSpec) -> float:
        """Mean cpu the workload asks for (arrival rate x mean lifetime x mean request), as a
        fraction of the cluster's cpu: how busy the cluster will be if every pod fits."""
        capacity = int(self.node_alloc[:, 0].sum())
        weights = np.array([s.weight for s in spec.pod_shapes])
        mean_cpu = float(np.dot(weights / weights.sum(), [s.cpu_milli for s in spec.pod_shapes]))
        busy = spec.arrival_rate * float(self.lifetime_us.mean() if len(self.lifetime_us) else 0)
        return busy / 1e6 * mean_cpu / capacity if capacity else math.inf


def _choose(rng: np.random.Generator, shapes: tuple[Shape, ...], size: int) -> np.ndarray:
    weights = np.array([s.weight for s in shapes], dtype=float)
    return rng.choice(len(shapes), size=size, p=weights / weights.sum())


def _rows(spec: SynthSpec, w: _Workload, placement: ideal.Placement | None) -> list[tuple]:
    """The rows of each kind as (table, kind); ts in absolute epoch microseconds."""
    start_us = epoch_us(spec.start)
    node_names = _names("node-", len(w.node_alloc))
    pod_names = _names("pod-", len(w.pod_shape))
    requests = np.array([[s.cpu_milli, s.memory_bytes, s.gpu_milli] for s in spec.pod_shapes],
                        dtype=np.int64)[w.pod_shape]
    pieces = [(_node_creates(start_us, node_names, w.node_alloc), NODE_CREATE)]
    created = start_us + w.created_us
    pieces.append((_writes("create", None, created, spec.namespace, pod_names, "workload",
                           resources=requests, scheduler_name="default-scheduler"), POD_CREATE))
    if placement is None:
        gone = np.arange(len(created))
        deleted = created + w.lifetime_us
    else:
        bound = np.flatnonzero(placement.node >= 0)
        decided = start_us + placement.decided_us[bound]
        bind_ts = decided + API_LATENCY_US
        pieces.append((_writes("create", "binding", bind_ts, spec.namespace,
                               pod_names.take(bound), "kube-scheduler", received=decided,
                               node=node_names.take(placement.node[bound]),
                               user="system:kube-scheduler", user_agent=KUBE_SCHEDULER_AGENT),
                       BINDING))
        gone, deleted = bound, bind_ts + w.lifetime_us[bound]
    pieces.append((_writes("delete", None, deleted, spec.namespace, pod_names.take(gone),
                           "workload", code=200), POD_DELETE))
    if spec.heartbeat_interval > 0 and len(node_names):
        last = max((int(t.max()) for t in (created, deleted) if len(t)), default=start_us)
        pieces.append((_heartbeats(spec, w, node_names, start_us, last), HEARTBEAT))
    return pieces


def _on_node_creates(kind: np.ndarray, max_pods: int) -> pa.Array:
    """``max_pods`` at the node creates' rows, null at the others (a heartbeat says no
    allocatable)."""
    creates = kind == NODE_CREATE
    return pa.array(np.where(creates, max_pods, 0), pa.int64(), mask=~creates)


def _names(prefix: str, count: int) -> pa.Array:
    width = max(len(str(count - 1)), 1)
    digits = pc.utf8_zfill(pa.array(np.arange(count)).cast(pa.string()), width)
    return pc.binary_join_element_wise(prefix, digits, "")


def _node_creates(start_us: int, names: pa.Array, alloc: np.ndarray) -> pa.Table:
    return _writes("create", None, np.full(len(names), start_us, np.int64), None, names,
                   "kubelet", node=names, resources=alloc,
                   user=pc.binary_join_element_wise("system:node:", names, ""),
                   user_agent=KUBELET_AGENT, resource="nodes")


def _heartbeats(spec: SynthSpec, w: _Workload, names: pa.Array, start_us: int,
                last_us: int) -> pa.Table:
    interval = round(spec.heartbeat_interval * 1e6)
    first = start_us + w.heartbeat_phase_us
    beats = np.maximum((last_us - first) // interval + 1, 0)
    node = np.repeat(np.arange(len(names)), beats)
    offset = np.arange(len(node)) - np.repeat(np.cumsum(beats) - beats, beats)
    ts = first[node] + offset * interval
    node_names = names.take(node)
    return _writes("patch", "status", ts, None, node_names, "kubelet", code=200, node=node_names,
                   user=pc.binary_join_element_wise("system:node:", node_names, ""),
                   user_agent=KUBELET_AGENT, resource="nodes")


def _writes(verb: str, subresource: str | None, ts: np.ndarray, namespace: str | None,
            names: pa.Array, component: str, *, code: int = 201, received: np.ndarray | None = None,
            node: pa.Array | None = None, resources: np.ndarray | None = None,
            user: pa.Array | str | None = None, user_agent: str | None = None,
            scheduler_name: str | None = None, resource: str = "pods") -> pa.Table:
    """A table of ``len(ts)`` writes of one kind; absent columns are filled in by ``conform``."""
    n = len(ts)
    cols = {
        "ts": pa.array(ts, pa.int64()),
        "received_ts": pa.array(ts - API_LATENCY_US if received is None else received, pa.int64()),
        "verb": pa.repeat(verb, n),
        "resource": pa.repeat(resource, n),
        "subresource": pa.repeat(pa.scalar(subresource, pa.string()), n),
        "namespace": pa.repeat(pa.scalar(namespace, pa.string()), n),
        "name": names,
        "code": pa.repeat(pa.scalar(code, pa.int32()), n),
        "component": pa.repeat(component, n),
    }
    if node is not None:
        cols["node"] = node
    if resources is not None:
        for i, name in enumerate(("cpu_milli", "memory_bytes", "gpu_milli")):
            cols[name] = pa.array(resources[:, i], pa.int64())
    if user is not None:
        cols["user"] = user if isinstance(user, pa.Array) else pa.repeat(user, n)
    if user_agent is not None:
        cols["user_agent"] = pa.repeat(user_agent, n)
    if scheduler_name is not None:
        cols["scheduler_name"] = pa.repeat(scheduler_name, n)
    return conform(pa.table(cols))
