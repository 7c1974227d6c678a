"""The truth of a what-if replay: the API server's objects, the writes that change them, and the
scheduling attempts that make those writes.

``Node`` and ``Pod`` hold what etcd holds (allocatable, requests, where a pod is bound); ``Write``
is one committed write, whose ``kind`` says what it does to a cache; ``Attempt`` is one scheduling
attempt.  The what-if engine (``simulation``) commits every write through ``Truth.apply`` and the
watch pipeline; watchers' caches (``view``) apply the same writes later.  Models read these
records (they are the handles of the model API, ``replay.engine.api``) and never assign to them:
the engine is the only writer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, IntEnum

NEVER = -1  # a time (µs) or resource version that has not happened: null in the tables
NO_NODE = -1  # a node index that names no node

Request = tuple[int, int, int]  # cpu_milli, memory_bytes, gpu_milli
# A node's allocatable: cpu_milli, memory_bytes, gpu_milli, and how many pods it runs at once
# (``status.allocatable.pods``: each pod counts one against it, whatever its requests)
Allocatable = tuple[int, int, int, int]


class WriteKind(IntEnum):
    """What a write does to a cache; a cache handles each kind the same way, whoever wrote it."""

    NODE_SET = 0  # a node is created or its allocatable changes
    NODE_DELETE = 1
    NODE_OTHER = 2  # a node write that does not change capacity (heartbeat, label, ...)
    POD_CREATE = 3  # its ``node``, if any: created on it (a pod listed on its node, a mirror pod)
    POD_BIND = 4  # create pods/binding: spec.nodeName set
    POD_ASSUME = 5  # a scheduler's patch naming the node it assumed (Gödel's "assumed" state)
    POD_DISPATCH = 6  # the dispatcher's patch naming the scheduler (Gödel's "dispatched" state)
    POD_REJECT = 7  # the binder's patch sending an assumed pod back (Gödel's reject)
    POD_FAIL = 8  # the kubelet's status patch failing a pod at admission
    POD_DELETE = 9
    OTHER = 10  # any other resource

    @property
    def api_call(self) -> tuple[str | None, str | None, str | None]:
        """The verb, resource and subresource of this kind of write when a model makes it."""
        return _API_CALL[self]

    @property
    def pod_state(self) -> str | None:
        """The pod state this kind of write sets (the events table's ``pod_state``): Gödel's
        pod-state annotation (``dispatched``, ``assumed``; a rejection sets ``dispatched`` back),
        or ``failed`` for the kubelet's status.phase Failed; None for the others."""
        return _POD_STATE.get(self)


_API_CALL: dict[WriteKind, tuple[str | None, str | None, str | None]] = {
    WriteKind.NODE_SET: ("create", "nodes", None),
    WriteKind.NODE_DELETE: ("delete", "nodes", None),
    WriteKind.NODE_OTHER: ("patch", "nodes", "status"),
    WriteKind.POD_CREATE: ("create", "pods", None),
    WriteKind.POD_BIND: ("create", "pods", "binding"),
    WriteKind.POD_ASSUME: ("patch", "pods", None),
    WriteKind.POD_DISPATCH: ("patch", "pods", None),
    WriteKind.POD_REJECT: ("patch", "pods", None),
    WriteKind.POD_FAIL: ("patch", "pods", "status"),
    WriteKind.POD_DELETE: ("delete", "pods", None),
    WriteKind.OTHER: (None, None, None),
}
_POD_STATE = {WriteKind.POD_DISPATCH: "dispatched", WriteKind.POD_ASSUME: "assumed",
              WriteKind.POD_REJECT: "dispatched", WriteKind.POD_FAIL: "failed"}
NODE_KINDS = frozenset({WriteKind.NODE_SET, WriteKind.NODE_DELETE, WriteKind.NODE_OTHER})
# The kinds ``Truth.apply`` tells apart, as module globals (quicker than an enum's members, and
# it runs once per write)
_NODE_SET, _NODE_DELETE, _CREATE, _BIND, _ASSUME, _DELETE = (
    WriteKind.NODE_SET, WriteKind.NODE_DELETE, WriteKind.POD_CREATE, WriteKind.POD_BIND,
    WriteKind.POD_ASSUME, WriteKind.POD_DELETE)
_RELEASES = frozenset({WriteKind.POD_REJECT, WriteKind.POD_FAIL})


class Outcome(str, Enum):
    """How an attempt ended (the attempts table's ``outcome``)."""

    BOUND = "bound"
    CONFLICT = "conflict"  # the placement was refused: another component took the room first
    UNSCHEDULABLE = "unschedulable"  # no node fitted in the scheduler's view
    ERROR = "error"  # it could not complete for another reason (the pod was deleted)


class Reason(str, Enum):
    """Why an attempt did not end ``bound`` (the attempts table's ``reason``)."""

    NO_FIT = "no_fit"  # unschedulable: no node has room in the view
    GANG_INCOMPLETE = "gang_incomplete"  # unschedulable: another member of its gang did not fit
    POD_DELETED = "pod_deleted"  # error: the pod was deleted before the write
    BINDER_REJECT = "binder_reject"  # conflict: Gödel's binder found no room in its view
    KUBELET_ADMISSION = "kubelet_admission"  # conflict: the kubelet refused it (OutOfcpu, ...)
    NODE_FULL = "node_full"  # conflict: Omega, fine-grained: the node has no room any more
    NODE_CHANGED = "node_changed"  # conflict: Omega, coarse-grained: the node changed
    NO_ROOM = "no_room"  # conflict: the truth had no room at the commit (the oracle's check)


@dataclass(eq=False)
class Node:
    index: int
    name: str
    alloc: list[int] = field(default_factory=lambda: [0, 0, 0, 0])  # ``Allocatable``
    used: list[int] = field(default_factory=lambda: [0, 0, 0, 0])  # by the pods it holds
    present: bool = False
    # Omega's sequence number: bumped by every claim on the node (a placement committed there,
    # ``ClaimDelta.apply``), not by a pod leaving it; and by a change of its allocatable or its
    # removal, which the simulator's machines never have
    changes: int = 0

    def fits(self, need: Allocatable) -> bool:
        """Whether the node has room for ``need`` more (requests summed, and pods)."""
        a, u = self.alloc, self.used
        return (self.present and u[0] + need[0] <= a[0] and u[1] + need[1] <= a[1]
                and u[2] + need[2] <= a[2] and u[3] + need[3] <= a[3])


def object_key(namespace: str | None, name: str) -> str:
    """``namespace/name``, as the API server keys an object (its name alone without a
    namespace): a pod's ``key``, and what the engine looks a name up by before its pod exists."""
    return name if namespace is None else f"{namespace}/{name}"


@dataclass(eq=False, slots=True)
class Pod:
    """One pod incarnation (a name created again after its delete is a new pod)."""

    index: int
    namespace: str | None
    name: str
    request: Request
    created: int  # µs
    run_us: int  # how long it runs once bound; NEVER: until its recorded delete
    scheduler_name: str | None  # spec.schedulerName
    group: str | None  # its gang, if any
    priority: int
    node: int = NO_NODE  # where the truth has it bound
    bound: int = NEVER  # µs of the binding's commit
    bound_rv: int = NEVER  # the binding's resource version
    deleted: int = NEVER
    deleted_rv: int = NEVER
    attempts: int = 0
    first_attempt: int = NEVER
    instance: int = -1  # the scheduler instance it is assigned to (model-specific), -1: none
    # the node whose capacity it holds in the truth: from its assume patch or binding until it is
    # rejected back to dispatched, fails or is deleted (NO_NODE: none)
    claim: int = NO_NODE
    # namespace/name, as the API server keys it: made once, as the engine reads it at the pod's
    # first write and at its deletion, and the tables once a pod and once an attempt
    key: str = field(init=False)
    # the number of its namespace/name among the objects whose writes the watch pipeline's
    # client queues key (the incarnations of a name share it); -1 until the engine first sends
    # one of its writes
    queue_key: int = -1
    # its phase is terminal (the kubelet failed it): a watch of non-terminal pods, a
    # scheduler's, received that write as its deletion and receives none of its writes after
    ended: bool = False

    def __post_init__(self) -> None:
        self.key = object_key(self.namespace, self.name)

    @property
    def pending(self) -> bool:
        return self.node < 0 and self.deleted < 0


@dataclass(eq=False, slots=True)
class Write:
    """One committed write; ``row`` is its trace row when it is replayed from the trace."""

    rv: int
    commit: int
    kind: WriteKind
    pod: Pod | None
    node: int  # the node it concerns (NO_NODE if none)
    component: str
    attempt: int  # the attempt that wrote it (0: none)
    row: int  # its trace row, -1 if a model wrote it
    code: int
    alloc: Allocatable | None = None  # a NODE_SET's new allocatable
    # the node's sequence number once this write applied, for a write that bumped it (a claim,
    # an allocatable change); 0 for the others
    node_version: int = 0


@dataclass(eq=False, slots=True)
class Attempt:
    """One scheduling attempt; its outcome may be settled later (binder, kubelet)."""

    id: int
    pod: Pod
    scheduler: str
    enqueued: int
    started: int
    node: int
    view_lag_us: int
    seen_version: int  # the chosen node's sequence number in the view the decision was made on
    cycle: int  # the first attempt of the scheduling cycle it was decided in (its own id if alone)
    decided: int = NEVER
    committed: int = NEVER
    outcome: Outcome | None = None
    reason: Reason | None = None
    forgotten: int = NEVER
    throttled_us: int = 0  # how long its writes waited for their clients' rate limiters


class Truth:
    """The objects as etcd has them, changed by committed writes in commit order.

    A pod holds capacity on a node from its first claim there (a Gödel scheduler's assume patch,
    or a binding) until it is rejected back to dispatched, fails or is deleted: every consumer of
    the API server's state that counts it (Gödel's scheduler caches count assumed pods, every
    cache and kubelet counts bound ones) sees that capacity taken.  ``apply`` also stamps a write
    that bumps a node's sequence number with the new number, so that a cache knows which version
    of the node it has seen."""

    def __init__(self, node_names: list[str]):
        self.nodes = [Node(i, name) for i, name in enumerate(node_names)]
        self.node_index = {name: i for i, name in enumerate(node_names)}

    def apply(self, write: Write) -> None:
        kind, pod = write.kind, write.pod
        if kind == _NODE_SET:
            assert write.alloc is not None
            node = self.nodes[write.node]
            changed = not node.present or node.alloc != list(write.alloc)
            node.alloc = list(write.alloc)
            node.present = True
            if changed:
                self._bump(node, write)
        elif kind == _NODE_DELETE:
            node = self.nodes[write.node]
            node.present = False
            self._bump(node, write)
        elif kind == _BIND or (kind == _CREATE and write.node >= 0):  # (created on its node)
            assert pod is not None
            pod.node, pod.bound, pod.bound_rv = write.node, write.commit, write.rv
            self._claim(pod, write)
        elif kind == _ASSUME:
            assert pod is not None
            self._claim(pod, write)
        elif kind in _RELEASES:
            assert pod is not None
            self._release(pod)
        elif kind == _DELETE:
            assert pod is not None
            pod.deleted, pod.deleted_rv = write.commit, write.rv
            self._release(pod)

    def _claim(self, pod: Pod, write: Write) -> None:
        """``pod`` holds ``write.node`` from now on (nothing changes if it held it already: a
        binding after its assume patch)."""
        if pod.claim == write.node:
            return
        self._release(pod)
        node = self.nodes[write.node]
        _add(node.used, pod.request, 1)
        pod.claim = write.node
        self._bump(node, write)

    def _release(self, pod: Pod) -> None:
        if pod.claim >= 0:
            _add(self.nodes[pod.claim].used, pod.request, -1)
            pod.claim = NO_NODE

    @staticmethod
    def _bump(node: Node, write: Write) -> None:
        node.changes += 1
        write.node_version = node.changes

    def fits(self, placements: list[tuple[Pod, int]]) -> bool:
        """Whether the truth has room for all these (pod, node) placements at once."""
        need: dict[int, list[int]] = {}
        for pod, node in placements:
            _add(need.setdefault(node, [0, 0, 0, 0]), pod.request, 1)
        return all(self.nodes[node].fits((t[0], t[1], t[2], t[3])) for node, t in need.items())


def _add(total: list[int], request: Request, sign: int) -> None:
    """A pod's ``request`` added to (1) or taken from (-1) ``total`` (an ``Allocatable``'s
    order: the pod counts one in the last place)."""
    total[0] += sign * request[0]
    total[1] += sign * request[1]
    total[2] += sign * request[2]
    total[3] += sign
