"""Which metric measures which stage or model parameter: the mapping table of ``replay calibrate``.

Each row names an upstream histogram, the series it takes (``--resource`` chooses the resource's),
and what it becomes:

- ``LATENCY``: the stage's ``latency``, its ``service`` set to zero.  The metric measures a stage
  from its start to its end, queueing included; as a service time the model would queue on top
  of it and count the queueing twice.
- ``SERVICE``: the stage's ``service``.  Only for a metric that times the work alone, without the
  wait in front of it: the model then queues it as the real component does.
- ``MEAN``: a model parameter that is one number today (``commit_ms``, ``per_attempt_ms``) gets
  the histogram's mean.
- ``CHECK``: reported, not written: a measured wait that the model computes itself from its
  costs (a queue's wait depends on the load, and is the model's output, not its input), or an
  end-to-end figure to compare a run with.

docs/calibration.md gives the same table with the upstream sources.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

DISPATCH = "apiserver_watch_events_dispatch_duration_seconds"
REQUEST = "apiserver_request_duration_seconds"
ETCD = "etcd_request_duration_seconds"
READ_WAIT = "apiserver_watch_cache_read_wait_seconds"
HANDLING = "scheduler_event_handling_duration_seconds"
ALGORITHM = "scheduler_scheduling_algorithm_duration_seconds"
ATTEMPT = "scheduler_scheduling_attempt_duration_seconds"
SLI = "scheduler_pod_scheduling_sli_duration_seconds"
QUEUE = "workqueue_queue_duration_seconds"
WORK = "workqueue_work_duration_seconds"
# The controllers whose reactions queries/reaction_lag.sql measures, by their workqueue's name
CONTROLLER_QUEUES = ("deployment", "replicaset", "statefulset", "daemonset", "job")


class Use(Enum):
    LATENCY = "latency"
    SERVICE = "service"
    MEAN = "mean"
    CHECK = "check"


Select = Callable[[dict[str, str], str], bool]  # (a series' labels, the resource) -> taken


@dataclass(frozen=True)
class Mapping:
    metric: str
    selection: str  # the series taken, as PromQL matchers (none: all); {resource} is --resource
    select: Select
    use: Use
    target: str  # the stage, the model parameter, or (checks) what to compare it with
    why: str
    split: str | None = None  # a check reports each value of this label on its own
    also: tuple[tuple[str, float], ...] = ()  # model parameters set with it

    def selector(self, resource: str) -> str:
        """The metric and the series it takes, as a PromQL selector."""
        selection = self.selection.format(resource=resource)
        return f"{self.metric}{{{selection}}}" if selection else self.metric


def event_resource(event: str) -> str:
    """The resource of a kube-scheduler event label: ``AssignedPodAdd`` -> pods,
    ``NodeUpdateNodeTaint`` -> nodes, ``storage.k8s.io/CSINodeAdd`` -> csinodes (the labels of
    ``framework.ClusterEvent.Label()``: the kind, then Add, Update or Delete and details)."""
    kind = re.match(r"(?:[\w.-]+/)?([A-Za-z]+?)(?:Add|Update|Delete)", event)
    if kind is None:
        return ""
    name = re.sub(r"^(Assigned|Unschedulable)", "", kind.group(1)).lower()
    return name + ("es" if name.endswith("s") else "s")


def _dispatch_stage(*stages: str) -> Select:
    return lambda labels, resource: (labels.get("stage") in stages
                                     and labels.get("resource") == resource)


def _of_resource(labels: dict[str, str], resource: str) -> bool:
    return labels.get("resource") == resource


QUEUE_WHY = "compare with the model's {stage} delay (replay query RUN per_component_delay)"

MAPPINGS: tuple[Mapping, ...] = (
    Mapping(DISPATCH, 'stage="storage_to_cache", resource="{resource}"',
            _dispatch_stage("storage_to_cache"), Use.LATENCY, "storage_to_cache",
            "from an event's decoding out of etcd's watch to the watch cache receiving it"),
    Mapping(DISPATCH, 'stage="cacher_queue_latency", resource="{resource}"',
            _dispatch_stage("cacher_queue_latency"), Use.CHECK, "cacher_queue",
            "the wait in the watch cache's incoming queue before its dispatch loop takes the "
            "event; the model computes this wait from the dispatch costs: "
            + QUEUE_WHY.format(stage="cacher_queue")),
    Mapping(DISPATCH, 'stage="watcher_queue_latency", resource="{resource}"',
            _dispatch_stage("watcher_queue_latency"), Use.CHECK, "watcher_queue",
            "the wait in one watcher's input buffer; the model computes it from the watcher's "
            "costs: " + QUEUE_WHY.format(stage="watcher_queue")),
    Mapping(DISPATCH, 'stage=~"watcher_to_client_handler|cache_to_watcher", '
            'resource="{resource}"',
            _dispatch_stage("watcher_to_client_handler", "cache_to_watcher"), Use.CHECK,
            "watcher_queue",
            "handing the encoded event to the connection's writer, blocked while the client "
            "reads slowly: " + QUEUE_WHY.format(stage="watcher_queue")),
    Mapping(DISPATCH, 'stage="total", resource="{resource}"', _dispatch_stage("total"),
            Use.CHECK, "storage_to_cache + cacher_queue + watcher_queue",
            "the API server's whole part of the watch delay: compare with the sum of the model's "
            "server-side stages (replay query RUN per_component_delay)"),
    Mapping(HANDLING, 'event=~"<events of {resource}>"',
            lambda labels, resource: event_resource(labels.get("event", "")) == resource,
            Use.SERVICE, "handler",
            "kube-scheduler's informer handlers timed inside the handler "
            "(pkg/scheduler/eventhandlers.go), without the wait in the informer's queue: the "
            "handler's service, which the model queues in client_queue as client-go does"),
    Mapping(REQUEST, 'verb="POST", resource="pods", subresource="binding"',
            lambda labels, resource: (labels.get("verb"), labels.get("resource"),
                                      labels.get("subresource")) == ("POST", "pods", "binding"),
            Use.MEAN, "commit_ms",
            "a binding request, received to answered: the write latency of the models' "
            "bindings and patches (request to commit)"),
    Mapping(ALGORITHM, "", lambda labels, resource: True, Use.MEAN,
            "per_attempt_ms",
            "kube-scheduler's decision for one pod (filtering and scoring every node it "
            "evaluates), without the binding; per_node_ms is set to 0 because the measured "
            "time already includes the node walk at this cluster's size",
            also=(("per_node_ms", 0.0),)),
    Mapping(READ_WAIT, 'resource="{resource}"', _of_resource, Use.CHECK, "storage_to_cache",
            "how long consistent reads waited for the watch cache to catch up with etcd: long "
            "waits mean storage_to_cache is slow"),
    Mapping(ETCD, 'operation=~"create|update", resource="{resource}"',
            lambda labels, resource: (labels.get("operation") in ("create", "update")
                                      and labels.get("resource") == resource),
            Use.CHECK, "commit_ms", "the etcd part of a write: at most commit_ms",
            split="operation"),
    Mapping(ATTEMPT, 'result="scheduled"', lambda labels, resource:
            labels.get("result") == "scheduled", Use.CHECK, "per_attempt_ms + commit_ms",
            "one successful scheduling attempt, its binding included"),
    Mapping(SLI, "", lambda labels, resource: True, Use.CHECK,
            "reaction_lag: kube-scheduler, create to binding request",
            "from a pod entering the scheduling queue to its binding, queueing and retries "
            "included (replay query RUN reaction_lag)"),
    Mapping(QUEUE, f'name=~"{"|".join(CONTROLLER_QUEUES)}"',
            lambda labels, resource: labels.get("name") in CONTROLLER_QUEUES, Use.CHECK,
            "reaction_lag: controller-manager",
            "a controller's key waiting in its workqueue (the model has no controllers)",
            split="name"),
    Mapping(WORK, f'name=~"{"|".join(CONTROLLER_QUEUES)}"',
            lambda labels, resource: labels.get("name") in CONTROLLER_QUEUES, Use.CHECK,
            "reaction_lag: controller-manager", "a controller's work on one key", split="name"),
)

# Stages no metric measures: they keep the profile's costs.
UNMEASURED = {"network": "no component measures the network between the API server and a client",
              "cacher_queue": "its wait is measured (a check), its dispatch costs are not",
              "watcher_queue": "its wait is measured (a check), its per-event cost is not"}
