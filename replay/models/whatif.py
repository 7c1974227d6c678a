"""The base of the what-if models: the trace's workload replayed, the model's schedulers placing it.

A what-if model declares its watchers (its components' informers; every node's kubelet is added),
and in ``start`` builds its components on the ``Simulation``: views for the watchers whose cache it
reads, reactions to the writes it acts on, timers, and the commit protocol of its placements.  The
engine owns time, ordering, randomness and the watch pipeline.  docs/models.md walks through a
complete minimal model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import polars as pl
import pyarrow as pa

from replay.engine.api import (POLICIES, Client, OnAssumed, Pod, RunConfig, RunTables, Scheduler,
                               Simulation, WatcherSpec, Write, WriteKind, node_names)
from replay.errors import ReplayError
from replay.limits import MAX_SCHEDULERS
from replay.models.base import Model, Param

ASSIGNMENTS = ("round-robin", "scheduler-name")
# What every model built on the engine's Scheduler reads (replay.engine.scheduler)
SCHEDULER_PARAMS = (
    Param("per_attempt_ms", 1.0, "time to decide one scheduling cycle, whatever it places "
          "(Omega's t_job)", minimum=0),
    Param("per_pod_ms", 0.0, "time per pod a cycle places: a gang's cycle takes it once per "
          "member (Omega's t_task)", minimum=0),
    Param("per_node_ms", 0.002, "time per node filtered and scored (kube-scheduler's cycle grows "
          "with the nodes it evaluates; Omega's think time has no such term)", minimum=0),
    Param("percentage_of_nodes_to_score", 0,
          "percent of nodes to find feasible before scoring; 0 = the scheduler's default "
          "(kube: 50 - nodes/125, at least 5%, at least 100 nodes; Gödel: members + 50)",
          minimum=0, maximum=100),
    Param("policy", "least-allocated", "NodeResourcesFit's scoring strategy (LeastAllocated, "
          "MostAllocated), or Omega's random first fit", choices=POLICIES),
    Param("backoff_initial_ms", 1000.0, "first retry delay after a failed attempt", minimum=0),
    Param("backoff_max_ms", 10000.0, "longest retry delay", minimum=0),
    Param("unschedulable_timeout_ms", 300000.0,
          "an unschedulable pod is retried after this long even if nothing changed", minimum=0),
    Param("commit_ms", 1.0, "API write latency of the model's writes: request to commit",
          minimum=0),
    Param("client_qps", 50.0, "each component's client rate limit, writes per second "
          "(client-go's token bucket; 0: none)", minimum=0),
    Param("client_burst", 100, "the token bucket's size: writes a component may send at once",
          minimum=1),
)


def with_defaults(params: tuple[Param, ...], **defaults: Any) -> tuple[Param, ...]:
    """``params`` with the defaults of some changed (a model whose system defaults differ)."""
    unknown = set(defaults) - {p.name for p in params}
    if unknown:
        raise ValueError(f"no such parameters: {sorted(unknown)}")
    return tuple(dataclasses.replace(p, default=defaults[p.name]) if p.name in defaults else p
                 for p in params)


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

    def check_watchers(self, watchers: list[WatcherSpec], where: str) -> None:
        """Each of the model's components decides on the view of its own watcher, so a
        configured ``[[watchers]]`` list (which replaces the model's) must name every component
        and let it watch at least what the model's own watcher would."""
        configured = {w.name: w for w in watchers}
        for component in self.components():
            watcher = configured.get(component.name)
            if watcher is None:
                names = ", ".join(sorted(c.name for c in self.components()))
                raise ReplayError(
                    f"{where}: the [[watchers]] list has no watcher named {component.name!r}, "
                    f"which the {self.name} model's components need ({names}); name each of them "
                    f"or leave [[watchers]] out to let the model choose")
            missing = [r for r in component.resources if r not in watcher.resources]
            if missing:
                raise ReplayError(
                    f"{where}: watcher {component.name!r} must watch {', '.join(missing)} too "
                    f"(the {self.name} model's {component.role} decides on them)")

    def replay(self, trace: pl.DataFrame, config: RunConfig,
               watchers: list[WatcherSpec]) -> RunTables:
        return self._simulation(trace, config, watchers).replay()

    def tables(self, trace: pl.DataFrame, config: RunConfig,
               watchers: list[WatcherSpec]) -> Iterator[tuple[str, pa.Table | pl.DataFrame]]:
        """The deliveries in parts as the replay goes (each written while the run goes on),
        then the other tables; then the simulation is closed."""
        return _closing(self._simulation(trace, config, watchers))

    def _simulation(self, trace: pl.DataFrame, config: RunConfig,
                    watchers: list[WatcherSpec]) -> Simulation:
        sim = Simulation(trace, config, watchers, instant=self.instant)
        self.notes += sim.workload_notes()
        self.start(sim)
        return sim

    def scheduler_components(self, prefix: str) -> list[WatcherSpec]:
        """``schedulers`` scheduler watchers named ``PREFIX-0``, ``PREFIX-1``, ..."""
        return [WatcherSpec(f"{prefix}-{i}", "scheduler", ("pods", "nodes"))
                for i in range(self.settings["schedulers"])]

    def commit_us(self) -> int:
        """``commit_ms`` in µs: the time from a component's write request to its commit."""
        return int(round(self.settings["commit_ms"] * 1000))

    def client(self, sim: Simulation) -> Client:
        """A component's API client: ``client_qps`` and ``client_burst``, then ``commit_ms``."""
        s = self.settings
        return sim.client(s["client_qps"], s["client_burst"], self.commit_us())


def _closing(simulation: Simulation) -> Iterator[tuple[str, pa.Table | pl.DataFrame]]:
    """``simulation``'s tables, then ``simulation.close()``.  The caller builds the simulation
    before the first table is asked for, so that a model's error in setting it up is raised
    when ``tables`` is called, not when its first table is."""
    yield from simulation.tables()
    simulation.close()


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
    """Gives each new pod to one of ``count`` schedulers as it is created (as if its
    ``spec.schedulerName`` named that instance)."""

    def __init__(self, sim: Simulation, count: int, how: str):
        self.sim, self.count, self.how = sim, count, how
        self.turn = 0
        self.by_name = {n: i % count for i, n in enumerate(sim.scheduler_names())}
        self.by_group: dict[str, int] = {}
        sim.on_commit(self.assign)

    def assign(self, write: Write) -> None:
        """A pod created pending is assigned; one listed on its node is no scheduler's."""
        if write.kind == WriteKind.POD_CREATE and write.pod is not None and write.node < 0:
            self.sim.assign(write.pod, self.instance_of(write.pod))

    def instance_of(self, pod: Pod) -> int:
        if pod.group is not None and pod.group in self.by_group:  # a gang stays together
            return self.by_group[pod.group]
        if self.how == "scheduler-name" and pod.scheduler_name in self.by_name:
            instance = self.by_name[pod.scheduler_name]
        else:
            instance = self.turn % self.count
            self.turn += 1
        if pod.group is not None:
            self.by_group[pod.group] = instance
        return instance


def independent_schedulers(sim: Simulation, names: list[str], settings: Mapping[str, Any],
                           on_assumed: OnAssumed, gangs: bool,
                           partial: bool = False) -> list[Scheduler]:
    """Schedulers that share the workload directly, as independent kube-schedulers or Omega's
    schedulers do: each new pod is assigned to one (``assign``) and enters its queue when that
    scheduler's watch delivers the pod's create."""
    Assigner(sim, len(names), settings["assign"])
    schedulers = [Scheduler(sim, name, settings, on_assumed, gangs=gangs, partial=partial)
                  for name in names]
    for i, scheduler in enumerate(schedulers):
        scheduler.queue_on(WriteKind.POD_CREATE, instance=i)
    return schedulers
