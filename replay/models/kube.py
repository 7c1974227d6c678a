"""``kube``: independent kube-scheduler instances; conflicts surface at the kubelet.

Each instance schedules its share of the pods on its own informer cache and binds, through its
own client (50 QPS, burst 100 by default, as kube-scheduler's ``clientConnection``).  The API
server accepts a binding without a capacity check, so two instances can fill the same node; the
node's kubelet finds out when it applies the binding and its admitted pods leave no room: the pod
fails admission (Kubernetes' ``OutOfcpu`` / ``OutOfmemory``; outcome ``conflict``, reason
``kubelet_admission``).  The kubelet's status write sets the pod's phase to Failed: the pod frees
its capacity in the truth, and every scheduler's informer drops it when it applies that write (it
watches non-terminal pods only).  After ``replace_delay_ms`` its controller deletes it and creates
a replacement, which is scheduled like any new pod.
"""

from __future__ import annotations

from replay.engine.api import (Attempt, Outcome, Pod, Reason, Request, Scheduler, Simulation,
                               WatcherSpec, Write, WriteKind)
from replay.models.base import Param
from replay.models.whatif import (WhatIfModel, independent_schedulers, scheduler_params,
                                  with_defaults)

COMPONENT = "kube-scheduler"


class KubeModel(WhatIfModel):
    name = "kube"
    description = "Independent kube-scheduler instances; over-commits are caught by kubelet admission."
    params = with_defaults(scheduler_params(), client_qps=50.0, client_burst=100) + (
        Param("replace_delay_ms", 1000.0, "time from a failed admission to the controller's "
              "delete of the failed pod and create of its replacement", minimum=0),
    )

    def components(self) -> list[WatcherSpec]:
        return self.scheduler_components(COMPONENT)

    def start(self, sim: Simulation) -> None:
        self.sim = sim
        names = [w.name for w in self.components()]
        self.schedulers = independent_schedulers(sim, names, self.settings, self.bind, gangs=False)
        self.clients = {s: self.client(sim) for s in self.schedulers}
        self.attempt_of: dict[Pod, Attempt] = {}  # bound, not yet admitted by the kubelet
        self.admitted: dict[int, dict[Pod, Request]] = {}
        for kubelet, node in sim.kubelets():
            sim.react(kubelet, {WriteKind.POD_CREATE, WriteKind.POD_BIND, WriteKind.POD_DELETE},
                      (lambda n: lambda write: self._kubelet(n, write))(node))

    def bind(self, scheduler: Scheduler, attempts: list[Attempt]) -> None:
        """kube-scheduler's binding: a write the API server accepts if the pod still exists."""
        for attempt in attempts:
            self.clients[scheduler].send(self._commit_binding, scheduler, attempt,
                                         for_attempts=(attempt,))

    def _commit_binding(self, scheduler: Scheduler, attempt: Attempt) -> None:
        if not scheduler.drop_deleted([attempt]):
            return
        self.sim.commit(WriteKind.POD_BIND, attempt.pod, COMPONENT, node=attempt.node,
                        attempt=attempt)
        self.sim.settle(attempt, Outcome.BOUND)
        self.attempt_of[attempt.pod] = attempt

    def _kubelet(self, node: int, write: Write) -> None:
        """Admission: the pods this kubelet has admitted plus the new one must fit, in their
        requests and in their number (the node's allocatable ``pods``).  A pod created on its
        node is admitted as it is: listed running there when the trace began (admitted before
        it), or a static pod's mirror pod, which the kubelet itself created for a pod it runs."""
        admitted = self.admitted.setdefault(node, {})
        pod = write.pod
        assert pod is not None
        if write.kind == WriteKind.POD_DELETE:
            admitted.pop(pod, None)
            return
        if write.kind == WriteKind.POD_CREATE:
            admitted[pod] = pod.request
            return
        if pod.deleted >= 0:
            return
        alloc = self.sim.allocatable(node)
        used = [sum(r[i] for r in admitted.values()) for i in range(3)]
        if (all(used[i] + pod.request[i] <= alloc[i] for i in range(3))
                and len(admitted) < alloc[3]):  # (else OutOfpods)
            admitted[pod] = pod.request
            self.attempt_of.pop(pod, None)  # admitted: its attempt is settled for good
            return
        self.sim.commit(WriteKind.POD_FAIL, pod, "kubelet")  # status.reason: OutOf<resource>
        attempt = self.attempt_of.pop(pod, None)
        if attempt is not None:
            self.sim.settle(attempt, Outcome.CONFLICT, Reason.KUBELET_ADMISSION)
        self.sim.after(round(self.settings["replace_delay_ms"] * 1000), self._replace, pod)

    def _replace(self, pod: Pod) -> None:
        """The controller deletes the failed pod and creates a replacement."""
        if pod.deleted < 0:
            self.sim.commit(WriteKind.POD_DELETE, pod, "controller-manager")
        self.sim.commit(WriteKind.POD_CREATE, self.sim.replacement(pod, f"r{pod.attempts}"),
                        "controller-manager")
