"""The few fields of an object body that become trace columns, and nothing else.

A body is decoded into structs that name only pod requests, node allocatable, a pod's phase, a
binding's target and identifying metadata; every other key (Secret data, environment values,
annotations, tokens) is skipped by the decoder and never becomes a Python object, let alone a
trace value.

A pod's effective request is computed as Kubernetes computes it
(``k8s.io/component-helpers/resource.PodRequests``), per resource:

- a container that sets a limit but no request for a resource requests its limit (API defaulting);
- the app containers' requests are summed, together with restartable init containers (sidecars,
  ``restartPolicy: Always``);
- each ordinary init container needs its request plus the sidecars started before it; the pod
  needs the larger of the app sum and the largest such init need;
- ``spec.overhead`` (RuntimeClass overhead) is added.

Quantities are summed exactly, as integer counts of 10^-9 (the API server's own precision: it
rounds finer quantities up to 1n), and rounded up once at the end, as ``MilliValue()`` and
``Value()`` do.  ``nvidia.com/gpu`` and ``amd.com/gpu`` count as GPUs (a pod asking for both gets the sum).
"""

from __future__ import annotations

import functools
import hashlib
import math
from typing import NamedTuple, Optional

import msgspec

from replay.quantity import QuantityError, parse_quantity
from replay.trace.audit.event import lowered
from replay.trace.schema import PHASES

Quantities = Optional[dict[str, str | int | float]]
NO_PART = msgspec.Raw()
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
NANO = 10**9
INT64_MAX = 2**63 - 1
# Labels naming the gang (pod group) a pod belongs to: scheduler-plugins' coscheduling, and its
# older spelling.  Annotations are never read: their values may be secrets.
GROUP_LABELS = ("scheduling.x-k8s.io/pod-group", "pod-group.scheduling.sigs.k8s.io")


class Resources(msgspec.Struct, gc=False):
    requests: Quantities = None
    limits: Quantities = None


class Container(msgspec.Struct, gc=False):
    resources: Resources | None = None
    restart_policy: str | None = msgspec.field(default=None, name="restartPolicy")


class Spec(msgspec.Struct, gc=False):
    containers: list[Container] | None = None
    init_containers: list[Container] | None = msgspec.field(default=None, name="initContainers")
    overhead: Quantities = None
    scheduler_name: str | None = msgspec.field(default=None, name="schedulerName")
    priority: int | None = None
    node_name: str | None = msgspec.field(default=None, name="nodeName")


class Metadata(msgspec.Struct, gc=False):
    name: str | None = None
    uid: str | None = None
    labels: dict[str, str] | None = None


class Status(msgspec.Struct, gc=False):
    """A node's status (its allocatable) or a pod's (its phase)."""

    allocatable: msgspec.Raw = NO_PART  # read by ``allocatable``
    phase: str | None = None


class Target(msgspec.Struct, gc=False):
    name: str | None = None


class Body(msgspec.Struct, gc=False):
    """A pod, a node or a binding, as far as the trace is concerned."""

    kind: str | None = None
    metadata: Metadata | None = None
    spec: msgspec.Raw = NO_PART  # a pod's, read by ``pod_columns``
    status: Status | str | None = None  # a string only in a ``Status`` reply (``decode_body``)
    target: Target | None = None

    @property
    def object_status(self) -> Status | None:
        """The object's status (``decode_body`` returns no body whose status is a string)."""
        return self.status if isinstance(self.status, Status) else None


class Amounts(NamedTuple):
    """cpu_milli, memory_bytes, gpu_milli, and a node's allocatable pods (``max_pods``); None
    where the body did not say (and ``pods`` for a pod's requests)."""

    cpu: int | None
    memory: int | None
    gpu: int | None
    pods: int | None = None


class PodColumns(NamedTuple):
    """What a pod's spec gives its row."""

    amounts: Amounts
    node_name: str | None
    scheduler_name: str | None
    priority: int | None


NONE = Amounts(None, None, None)
MEMO_SIZE = 4096
_body, _spec = msgspec.json.Decoder(Body), msgspec.json.Decoder(Optional[Spec])
_quantities = msgspec.json.Decoder(Quantities)
_memo: dict[tuple, object] = {}


class BadBody(ValueError):
    """A body field that is not what Kubernetes would have stored; the message names the key."""


def decode_body(raw: msgspec.Raw, key: str) -> Body | None:
    """The body in ``raw`` (under the event key ``key``); None when absent, a JSON patch list or
    a ``Status``: the API server's reply to a failed write, or to a delete that returns no
    object, which says nothing of the object (its ``status`` is ``Success`` or ``Failure``)."""
    if not raw or memoryview(raw)[:1] != b"{":
        return None
    body = _decode(raw, _body, key)
    if body.kind == "Status":
        return None
    if isinstance(body.status, str):
        raise BadBody(f"key {key}.status: expected an object, got a string")
    return body


def pod_columns(spec: msgspec.Raw, key: str) -> PodColumns | None:
    """What a pod's ``spec`` (of the body under ``key``) gives its row; None without containers."""
    return _remembered(_pod_columns, spec, key)


def allocatable(given: msgspec.Raw, key: str, partial: bool) -> Amounts:
    """A node's allocatable; with ``partial`` (a patch) resources the body omits stay None."""
    return _remembered(_allocatable, given, key, partial) if given else NONE


def _remembered(function, raw: msgspec.Raw, *args):
    """``function(raw, *args)``, remembered by a digest of ``raw``.

    Pods of one template repeat their spec, and nodes of one shape their allocatable, so most are
    read once.  The digest keeps no body value in memory.
    """
    key = (function, hashlib.blake2b(raw, digest_size=16).digest(), *args)
    if key not in _memo:
        if len(_memo) >= MEMO_SIZE:
            _memo.clear()
        _memo[key] = function(raw, *args)
    return _memo[key]


def _pod_columns(raw: msgspec.Raw, key: str) -> PodColumns | None:
    spec = _decode(raw, _spec, f"{key}.spec")
    if spec is None or spec.containers is None:
        return None
    if spec.priority is not None and not -2**31 <= spec.priority < 2**31:
        raise BadBody(f"key {key}.spec.priority: {spec.priority} is not a 32-bit integer, as "
                      f"Kubernetes stores it")
    return PodColumns(pod_requests(spec, key), spec.node_name, spec.scheduler_name, spec.priority)


def _decode(raw: msgspec.Raw, decoder: msgspec.json.Decoder, key: str):
    """``raw`` decoded, or ``BadBody`` naming the key (``key`` is where ``raw`` is)."""
    try:
        return decoder.decode(raw)
    except msgspec.ValidationError as err:
        message, _, where = str(err).partition(" - at `$")
        raise BadBody(f"key {key}{where.rstrip('`')}: {lowered(message)}") from None
    except msgspec.DecodeError as err:
        raise BadBody(f"key {key}: not valid JSON ({lowered(str(err))})") from None
    except RecursionError:
        raise BadBody(f"key {key}: nested too deeply to decode") from None


def pod_requests(spec: Spec, key: str) -> Amounts:
    """The pod's effective request (see the module docstring); ``key`` locates errors.  ``spec``
    has containers (a pod without them has no row: ``_pod_columns``)."""
    assert spec.containers is not None
    apps = _zero()
    for i, container in enumerate(spec.containers):
        apps = _plus(apps, _requests(container, f"{key}.spec.containers[{i}]"))
    if spec.init_containers:
        apps = _with_init_containers(apps, spec.init_containers, key)
    if spec.overhead:
        apps = _plus(apps, _amounts(spec.overhead, f"{key}.spec.overhead"))
    cpu, memory, gpu = apps
    return _in_range(Amounts(_milli(cpu), _units(memory), _milli(gpu)), f"{key}.spec")


def _with_init_containers(apps: tuple, init_containers: list[Container], key: str) -> tuple:
    """The larger of the app containers (plus sidecars) and the neediest init container."""
    sidecars, init_need = _zero(), _zero()
    for i, container in enumerate(init_containers):
        need = _requests(container, f"{key}.spec.initContainers[{i}]")
        if container.restart_policy == "Always":
            apps = _plus(apps, need)
            sidecars = _plus(sidecars, need)
            need = sidecars
        else:
            need = _plus(need, sidecars)
        init_need = tuple(map(max, init_need, need))
    return tuple(map(max, apps, init_need))


def _allocatable(raw: msgspec.Raw, key: str, partial: bool) -> Amounts:
    given = _decode(raw, _quantities, f"{key}.status.allocatable")
    if given is None:
        return NONE
    cpu, memory, gpu = _amounts(given, f"{key}.status.allocatable")
    has_gpu = any(name in given for name in GPU_RESOURCES)
    return _in_range(Amounts(_milli(cpu) if "cpu" in given or not partial else None,
                             _units(memory) if "memory" in given or not partial else None,
                             _milli(gpu) if has_gpu or not partial else None,
                             _units(_quantity(given, "pods", f"{key}.status.allocatable"))
                             if "pods" in given else None),
                     f"{key}.status.allocatable")


def phase_of(status: Status | None, key: str) -> str | None:
    """A pod's ``status.phase`` (of the body under ``key``), None if the body does not say."""
    phase = status.phase if status is not None else None
    if phase is not None and phase not in PHASES:
        raise BadBody(f"key {key}.status.phase: {phase!r} is not a pod phase "
                      f"({', '.join(PHASES)})")
    return phase


def group_of(metadata: Metadata | None) -> str | None:
    """The pod group named by one of ``GROUP_LABELS``, if any."""
    labels = metadata.labels if metadata is not None else None
    if labels:
        for label in GROUP_LABELS:
            if label in labels:
                return labels[label]
    return None


def _requests(container: Container, key: str) -> tuple:
    """A container's requests, where a resource with only a limit requests its limit."""
    resources = container.resources
    if resources is None:
        return _zero()
    requests = resources.requests or {}
    if resources.limits:
        requests = {**resources.limits, **requests}
    return _amounts(requests, f"{key}.resources")


def _amounts(quantities: Quantities, key: str) -> tuple:
    """(cpu, memory, gpu) of a resource list in units of 10^-9; resources not named are zero."""
    if not quantities:
        return _zero()
    gpu = 0
    for name in GPU_RESOURCES:
        gpu += _quantity(quantities, name, key)
    return (_quantity(quantities, "cpu", key), _quantity(quantities, "memory", key), gpu)


def _quantity(quantities: dict, name: str, key: str) -> int:
    text = quantities.get(name)
    if text is None:
        return 0
    try:
        return _nano(text)
    except QuantityError as err:
        raise BadBody(f"key {key} ({name}): {err}") from None


@functools.lru_cache(maxsize=4096)
def _nano(text: str | int | float) -> int:
    """A quantity in units of 10^-9, rounded up; a request cannot be negative."""
    value = parse_quantity(text)
    if value < 0:
        raise QuantityError(f"negative quantity {text!r}")
    return math.ceil(value * NANO)


def _in_range(amounts: Amounts, key: str) -> Amounts:
    """``amounts``, unless one does not fit the trace's 64-bit columns."""
    if any(a is not None and a > INT64_MAX for a in amounts):
        raise BadBody(f"key {key}: a quantity too large for a 64-bit integer")
    return amounts


def _milli(nano: int) -> int:
    return -(-nano // (NANO // 1000))


def _units(nano: int) -> int:
    return -(-nano // NANO)


def _plus(a: tuple, b: tuple) -> tuple:
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2])


def _zero() -> tuple:
    return (0, 0, 0)
