"""The truth of a what-if replay: the API server's objects, and the writes that change them.

``Node`` and ``Pod`` hold what etcd holds (allocatable, requests, where a pod is bound); ``Write``
is one committed write, with a ``kind`` saying what it does to a cache.  The what-if engine
(``simulation``) commits every write through ``Truth.apply`` and the watch pipeline; watchers'
caches (``view``) apply the same writes later.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# What a write does (Write.kind).  A cache handles each kind the same way, whoever wrote it.
NODE_SET = 0  # a node is created or its allocatable changes
NODE_DELETE = 1
NODE_OTHER = 2  # a node write that does not change capacity (heartbeat, label, ...)
POD_CREATE = 3
POD_BIND = 4  # create pods/binding: spec.nodeName set
POD_ASSUME = 5  # a scheduler's patch naming the node it assumed (Gödel's "assumed" state)
POD_DISPATCH = 6  # the dispatcher's patch naming the scheduler (Gödel's "dispatched" state)
POD_REJECT = 7  # the binder's patch sending an assumed pod back (Gödel's reject)
POD_FAIL = 8  # the kubelet's status patch failing a pod at admission
POD_DELETE = 9
OTHER = 10  # any other resource

# verb, resource, subresource of each kind when a model writes it
SHAPE = {
    NODE_SET: ("create", "nodes", None),
    NODE_DELETE: ("delete", "nodes", None),
    NODE_OTHER: ("patch", "nodes", "status"),
    POD_CREATE: ("create", "pods", None),
    POD_BIND: ("create", "pods", "binding"),
    POD_ASSUME: ("patch", "pods", None),
    POD_DISPATCH: ("patch", "pods", None),
    POD_REJECT: ("patch", "pods", None),
    POD_FAIL: ("patch", "pods", "status"),
    POD_DELETE: ("delete", "pods", None),
    OTHER: (None, None, None),
}


@dataclass(eq=False)
class Node:
    index: int
    name: str
    alloc: list[int] = field(default_factory=lambda: [0, 0, 0])  # cpu_milli, memory, gpu_milli
    used: list[int] = field(default_factory=lambda: [0, 0, 0])  # by pods bound in the truth
    present: bool = False
    changes: int = 0  # placements, removals and allocatable changes (Omega's sequence number)

    def fits(self, request: tuple[int, int, int]) -> bool:
        a, u = self.alloc, self.used
        return (self.present and u[0] + request[0] <= a[0] and u[1] + request[1] <= a[1]
                and u[2] + request[2] <= a[2])


@dataclass(eq=False)
class Pod:
    index: int
    namespace: str | None
    name: str
    request: tuple[int, int, int]
    created: int = -1  # µs
    run_us: int | None = None  # how long it runs once bound; None: until its recorded delete
    delete_at: int | None = None  # recorded delete time, for pods that never started
    scheduler_name: str | None = None
    group: str | None = None
    priority: int = 0
    node: int = -1  # where the truth has it bound
    bound: int = -1  # µs of the binding's commit
    bound_rv: int = -1  # the binding's resource version
    deleted: int = -1
    deleted_rv: int = -1
    failed: bool = False
    attempts: int = 0
    first_attempt: int = -1
    owner: int = -1  # the scheduler that holds it (model-specific)
    origin: str = "trace"

    @property
    def key(self) -> str:
        return self.name if self.namespace is None else f"{self.namespace}/{self.name}"

    @property
    def pending(self) -> bool:
        return self.node < 0 and self.deleted < 0


@dataclass(eq=False, slots=True)
class Write:
    """One committed write; ``row`` is its trace row when it is replayed from the trace."""

    rv: int
    commit: int
    kind: int
    pod: Pod | None
    node: int  # the node it concerns (-1 if none)
    component: str
    attempt: int = 0  # the attempt that wrote it (0: none)
    row: int = -1
    code: int = 200
    seq: int = 0  # the node's change count once this write applied (Omega's sequence number)


@dataclass(eq=False)
class Attempt:
    """One scheduling attempt; its outcome may be settled later (binder, kubelet)."""

    id: int
    pod: Pod
    scheduler: str
    enqueued: int
    started: int
    decided: int = -1
    committed: int = -1
    node: int = -1
    outcome: str | None = None
    reason: str | None = None
    view_lag_us: int = 0
    forgotten: int = -1
    version: int = 0  # the chosen node's change count in the view the decision was made on


class Truth:
    """The objects as etcd has them, changed by committed writes in commit order.

    ``apply`` also stamps a write that changes a node's capacity with the node's new change count,
    so that a cache knows which version of the node it has seen."""

    def __init__(self, node_names: list[str]):
        self.nodes = [Node(i, name) for i, name in enumerate(node_names)]
        self.node_index = {name: i for i, name in enumerate(node_names)}
        self.pods: list[Pod] = []

    def apply(self, write: Write, alloc: tuple[int, int, int] | None = None) -> None:
        kind, pod = write.kind, write.pod
        node = None
        if kind == NODE_SET:
            node = self.nodes[write.node]
            node.alloc = list(alloc)
            node.present = True
        elif kind == NODE_DELETE:
            node = self.nodes[write.node]
            node.present = False
        elif kind == POD_BIND:
            node = self.nodes[write.node]
            pod.node, pod.bound, pod.bound_rv = write.node, write.commit, write.rv
            _add(node.used, pod.request, 1)
        elif kind == POD_FAIL:
            pod.failed = True
        elif kind == POD_DELETE:
            pod.deleted, pod.deleted_rv = write.commit, write.rv
            if pod.node >= 0:
                node = self.nodes[pod.node]
                _add(node.used, pod.request, -1)
        if node is not None:
            node.changes += 1
            write.seq = node.changes


def _add(total: list[int], amount: tuple[int, int, int], sign: int) -> None:
    total[0] += sign * amount[0]
    total[1] += sign * amount[1]
    total[2] += sign * amount[2]
