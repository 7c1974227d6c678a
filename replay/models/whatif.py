"""The base of the what-if models: the trace's workload replayed, the model's schedulers placing it.

A what-if model declares its watchers (its components' informers; every node's kubelet is added),
and in ``start`` builds its components on the ``Simulation``: views for the watchers whose cache it
reads, reactions to the writes it acts on, timers, and the commit protocol of its placements.  The
engine owns time, ordering, randomness and the watch pipeline.  docs/models.md walks through a
complete minimal model.
"""

from __future__ import annotations

from collections import deque
from typing import ClassVar

import polars as pl

from replay.engine.cluster import POD_CREATE, Pod, Truth, Write
from replay.engine.config import RunConfig, WatcherSpec
from replay.engine.rundir import RunTables
from replay.engine.scheduler import GIVES_BACK, POLICIES, Attempt, Scheduler
from replay.engine.simulation import Simulation
from replay.engine.workload import node_names
from replay.limits import MAX_SCHEDULERS
from replay.models.base import Model, Param

ASSIGNMENTS = ("round-robin", "scheduler-name")
# What every model built on the engine's Scheduler reads (replay.engine.scheduler)
SCHEDULER_PARAMS = (
    Param("per_attempt_ms", 1.0, "fixed cost of one scheduling attempt (Omega's t_job)",
          minimum=0),
    Param("per_node_ms", 0.002, "cost per node evaluated (Omega's t_task)", minimum=0),
    Param("percentage_of_nodes_to_score", 0,
          "percent of nodes to find feasible before scoring; 0 = adaptive as in Kubernetes "
          "(50 - nodes/125, at least 5%, at least 100 nodes)", minimum=0, maximum=100),
    Param("policy", "least-allocated", "node scoring", choices=POLICIES),
    Param("backoff_initial_ms", 1000.0, "first retry delay after a failed attempt", minimum=0),
    Param("backoff_max_ms", 10000.0, "longest retry delay", minimum=0),
    Param("unschedulable_timeout_ms", 300000.0,
          "an unschedulable pod is retried after this long even if nothing changed", minimum=0),
    Param("commit_ms", 1.0, "API write latency of the model's writes: request to commit",
          minimum=0),
)


class WhatIfModel(Model):
    """A model whose own components make the placements; subclasses implement ``start``."""

    params: ClassVar[tuple[Param, ...]] = SCHEDULER_PARAMS
    # Watchers that see every write at its commit instead of through the pipeline (the oracle's)
    instant: ClassVar[frozenset[str]] = frozenset()

    def components(self) -> list[WatcherSpec]:
        """The model's own informers (schedulers, binder, dispatcher...)."""
        raise NotImplementedError

    def start(self, sim: Simulation) -> None:
        """Build the model's components on ``sim`` before it runs."""
        raise NotImplementedError

    def default_watchers(self, trace: pl.DataFrame) -> list[WatcherSpec]:
        kubelets = [WatcherSpec(f"kubelet/{n}", "kubelet", ("pods", "nodes"), node=n)
                    for n in node_names(trace)]
        return self.components() + kubelets

    def replay(self, trace: pl.DataFrame, config: RunConfig,
               watchers: list[WatcherSpec]) -> RunTables:
        sim = Simulation(trace, config, watchers, instant=self.instant)
        self.start(sim)
        return sim.run()


def scheduler_params() -> tuple[Param, ...]:
    """The shared scheduler parameters plus ``schedulers`` and ``assign``, for models whose
    schedulers share the workload directly."""
    return SCHEDULER_PARAMS + (
        Param("schedulers", 1, "number of scheduler instances", minimum=1,
              maximum=MAX_SCHEDULERS),
        Param("assign", "round-robin", "how pods are shared among the schedulers: in turn, or "
              "by spec.schedulerName (each distinct name to one instance, in sorted order)",
              choices=ASSIGNMENTS),
    )


class Assigner:
    """Gives each new pod to one of ``count`` schedulers, as it is created (as if its
    ``spec.schedulerName`` named that instance)."""

    def __init__(self, sim: Simulation, count: int, how: str):
        self.count, self.how = count, how
        self.turn = 0
        names = sorted({n for n in sim.workload.scheduler_name if n is not None})
        self.by_name = {n: i % count for i, n in enumerate(names)}
        self.by_group: dict[str, int] = {}
        sim.on_commit(self.assign)

    def assign(self, write: Write) -> None:
        if write.kind == POD_CREATE:
            write.pod.owner = self.owner_of(write.pod)

    def owner_of(self, pod: Pod) -> int:
        if pod.group is not None and pod.group in self.by_group:  # a gang stays together
            return self.by_group[pod.group]
        if self.how == "scheduler-name" and pod.scheduler_name in self.by_name:
            owner = self.by_name[pod.scheduler_name]
        else:
            owner = self.turn % self.count
            self.turn += 1
        if pod.group is not None:
            self.by_group[pod.group] = owner
        return owner


def schedulers_on(sim: Simulation, names: list[str], settings: dict, commit, gangs: bool,
                  preferred: list | None = None) -> list[Scheduler]:
    """One ``Scheduler`` per watcher name, each with its view."""
    return [Scheduler(sim, name, sim.view(name), settings, commit, gangs=gangs,
                      preferred=None if preferred is None else preferred[i])
            for i, name in enumerate(names)]


def fits_together(truth: Truth, attempts: list[Attempt]) -> bool:
    """Whether the truth has room for all these placements at once (a gang's all or nothing)."""
    need: dict[int, list[int]] = {}
    for attempt in attempts:
        total = need.setdefault(attempt.node, [0, 0, 0])
        for i in range(3):
            total[i] += attempt.pod.request[i]
    return all(truth.nodes[node].fits(tuple(total)) for node, total in need.items())


def react_as_scheduler(sim: Simulation, scheduler: Scheduler, queue_kind: int,
                       owner: int | None = None, requeue_kind: int | None = None) -> None:
    """Make ``scheduler`` react to the writes of ``queue_kind`` that put a pod in its queue, to
    those of ``requeue_kind`` that send one back after its backoff (both only for pods of
    ``owner``, if given), and, while pods wait unschedulable, to those that give capacity back."""
    def mine(write: Write) -> bool:
        return (write.kind == queue_kind or write.kind == requeue_kind) and (
            owner is None or write.pod.owner == owner)

    def wants(write: Write) -> bool:
        return mine(write) or (write.kind in GIVES_BACK and scheduler.wants_capacity_news())

    def handle(write: Write) -> None:
        if mine(write):
            scheduler.enqueue(write.pod, backoff=write.kind == requeue_kind)
        if write.kind in GIVES_BACK:
            scheduler.capacity_news()

    kinds = {queue_kind, *GIVES_BACK} | ({requeue_kind} if requeue_kind is not None else set())
    sim.react(scheduler.name, kinds, handle, wants)


class Worker:
    """A component that handles items one at a time, ``service_us`` each, first come first
    served (a dispatcher's or a binder's loop)."""

    def __init__(self, sim: Simulation, service_us: int, handle):
        self.env, self.service_us, self.handle = sim.env, service_us, handle
        self.queue: deque = deque()
        self.busy = False

    def submit(self, item) -> None:
        self.queue.append(item)
        if not self.busy:
            self.busy = True
            self.env.after(self.service_us, self._done)

    def _done(self) -> None:
        self.handle(self.queue.popleft())
        if self.queue:
            self.env.after(self.service_us, self._done)
        else:
            self.busy = False
