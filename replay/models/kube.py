"""``kube``: independent kube-scheduler instances; conflicts surface at the kubelet.

Each instance schedules its share of the pods on its own informer cache and binds.  The API
server accepts a binding without a capacity check, so two instances can fill the same node; the
node's kubelet finds out when it applies the binding and its admitted pods leave no room: the pod
fails admission (Kubernetes' ``OutOfcpu`` / ``OutOfmemory``; outcome ``conflict``, reason
``kubelet_admission``), and after ``replace_delay_ms`` its controller deletes it and creates a
replacement, which is scheduled like any new pod.
"""

from __future__ import annotations

from replay.engine.cluster import POD_BIND, POD_CREATE, POD_DELETE, POD_FAIL, Pod, Write
from replay.engine.config import WatcherSpec
from replay.engine.scheduler import Attempt, Scheduler
from replay.engine.simulation import Simulation
from replay.models.base import Param
from replay.models.whatif import (
    Assigner,
    WhatIfModel,
    react_as_scheduler,
    scheduler_params,
    schedulers_on,
)

COMPONENT = "kube-scheduler"


class KubeModel(WhatIfModel):
    name = "kube"
    description = "Independent kube-scheduler instances; over-commits are caught by kubelet admission."
    params = scheduler_params() + (
        Param("replace_delay_ms", 1000.0, "time from a failed admission to the controller's "
              "delete of the failed pod and create of its replacement", minimum=0),
    )

    def components(self) -> list[WatcherSpec]:
        return [WatcherSpec(f"{COMPONENT}-{i}", "scheduler", ("pods", "nodes"))
                for i in range(self.settings["schedulers"])]

    def start(self, sim: Simulation) -> None:
        self.sim = sim
        self.assigner = Assigner(sim, self.settings["schedulers"], self.settings["assign"])
        names = [w.name for w in self.components()]
        self.schedulers = schedulers_on(sim, names, self.settings, self.bind, gangs=False)
        self.attempt_of: dict[Pod, Attempt] = {}
        for i, scheduler in enumerate(self.schedulers):
            react_as_scheduler(sim, scheduler, POD_CREATE, owner=i)
        self.admitted: dict[int, dict[Pod, tuple[int, int, int]]] = {}
        for watcher in sim.watchers:
            if watcher.role == "kubelet" and watcher.node in sim.truth.node_index:
                node = sim.truth.node_index[watcher.node]
                sim.react(watcher.name, {POD_BIND, POD_DELETE},
                          (lambda n: lambda write: self._kubelet(n, write))(node))

    def bind(self, scheduler: Scheduler, attempts: list[Attempt]) -> None:
        """kube-scheduler's binding: a write the API server accepts if the pod still exists."""
        delay = round(self.settings["commit_ms"] * 1000)
        for attempt in attempts:
            self.sim.env.after(delay, self._commit_binding, scheduler, attempt)

    def _commit_binding(self, scheduler: Scheduler, attempt: Attempt) -> None:
        pod = attempt.pod
        if not pod.pending:
            attempt.committed = self.sim.env.now
            scheduler.failed(attempt, "error", "pod_deleted", retry=False)
            return
        self.sim.commit(POD_BIND, pod, COMPONENT, node=attempt.node, attempt=attempt)
        self.sim.settle(attempt, "bound")
        self.attempt_of[pod] = attempt

    def _kubelet(self, node: int, write: Write) -> None:
        """Admission: the pods this kubelet has admitted plus the new one must fit."""
        admitted = self.admitted.setdefault(node, {})
        pod = write.pod
        if write.kind == POD_DELETE:
            admitted.pop(pod, None)
            return
        if pod.deleted >= 0:
            return
        alloc = self.sim.truth.nodes[node].alloc
        used = [sum(r[i] for r in admitted.values()) for i in range(3)]
        short = [name for i, name in enumerate(("cpu", "memory", "nvidia.com/gpu"))
                 if used[i] + pod.request[i] > alloc[i]]
        if not short:
            admitted[pod] = pod.request
            return
        self.sim.commit(POD_FAIL, pod, "kubelet")  # status.reason: OutOf<resource>
        attempt = self.attempt_of.pop(pod, None)
        if attempt is not None:
            self.sim.settle(attempt, "conflict", "kubelet_admission")
        self.sim.env.after(round(self.settings["replace_delay_ms"] * 1000), self._replace, pod)

    def _replace(self, pod: Pod) -> None:
        """The controller deletes the failed pod and creates a replacement."""
        if pod.deleted < 0:
            self.sim.commit(POD_DELETE, pod, "controller-manager")
        self.sim.commit(POD_CREATE, self.sim.replacement(pod, f"r{pod.attempts}"),
                        "controller-manager")

