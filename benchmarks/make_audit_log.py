"""Write a large, realistic Kubernetes audit log (JSON lines) for the ingest benchmark.

    python benchmarks/make_audit_log.py --size 2G --out /tmp/audit.log [--gzip] [--seed 1]

The mix is what a busy cluster's API server logs with a common policy (Metadata for most requests,
Request level for pods, bindings and nodes; ``--metadata`` writes every event at Metadata level,
with no bodies): reads (get, list, watch), kubelet lease updates and node status patches, pod
creates with container requests, scheduler bindings, pod status patches, event creates and pod
deletes.  Pods live as in a cluster: the scheduler binds the oldest pod created and not yet bound
(a 409 leaves it for the next binding), the kubelet of its node writes its status first after the
binding and again later, and a controller deletes a running pod; a write whose pod is not there
yet (no pod to bind, none bound) is a pod create instead, so the mix shifts a little towards
creates.  Each request logs a ``RequestReceived`` and a ``ResponseComplete`` event; stage
timestamps are nearly sorted (a few milliseconds of jitter, as when many request goroutines write
to one log), a write to a pod is received only after the write it reacts to completed, and one
line in a thousand is written twice (a log shipper's retry).  The same arguments give the same
bytes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
NODES = 5_000
USER_AGENTS = {
    "kubelet": "kubelet/v1.32.2 (linux/amd64) kubernetes/67a30c0",
    "scheduler": "kube-scheduler/v1.32.2 (linux/amd64) kubernetes/67a30c0/scheduler",
    "controller": "kube-controller-manager/v1.32.2 (linux/amd64) kubernetes/67a30c0/replicaset-controller",
    "kubectl": "kubectl/v1.32.2 (linux/amd64) kubernetes/67a30c0",
}
# (weight, verb, resource, subresource, who, level) of one request.
MIX = (
    (30, "get", "pods", None, "kubelet", "Metadata"),
    (8, "list", "pods", None, "controller", "Metadata"),
    (4, "watch", "pods", None, "scheduler", "Metadata"),
    (20, "update", "leases", None, "kubelet", "Metadata"),
    (8, "patch", "nodes", "status", "kubelet", "Request"),
    (6, "create", "pods", None, "controller", "Request"),
    (6, "create", "pods", "binding", "scheduler", "Request"),
    (8, "patch", "pods", "status", "kubelet", "Metadata"),
    (5, "create", "events", None, "controller", "Metadata"),
    (5, "delete", "pods", None, "controller", "Metadata"),
)


@dataclass
class Pods:
    """The pods of the generated cluster by stage of life, each with the time its last write
    completed (a reaction to it is received after that)."""

    unbound: deque = field(default_factory=deque)  # (pod, created)
    starting: deque = field(default_factory=deque)  # (pod, node, bound): no status yet
    running: list = field(default_factory=list)  # (pod, node, status written)
    created: int = 0

    def new(self) -> str:
        self.created += 1
        return f"web-{self.created:07d}"


def requests(seed: int, metadata: bool = False) -> Iterator[dict]:
    """Audit events of an endless stream of requests, in the order the log would hold them."""
    rng = random.Random(seed)
    weights = [m[0] for m in MIX]
    now = START
    pods = Pods()
    for serial in range(1 << 62):
        now += timedelta(microseconds=rng.randrange(1, 400))
        _, verb, resource, sub, who, level = rng.choices(MIX, weights)[0]
        node = f"node-{rng.randrange(NODES):05d}"
        pod = f"web-{serial % 100_000:05d}"
        completed = now - timedelta(microseconds=rng.randrange(0, 3_000))
        received = completed - timedelta(microseconds=rng.randrange(200, 5_000))
        if resource == "pods" and verb in ("create", "patch", "delete"):
            verb, sub, who, level, pod, node = _pod_write(pods, verb, sub, received, rng)
            if verb == "create" and sub is None:
                pods.unbound.append((pod, completed))
        name = {"leases": node, "nodes": node, "events": f"{pod}.{serial:x}"}.get(resource, pod)
        namespace = None if resource == "nodes" else ("kube-node-lease" if resource == "leases"
                                                      else "default")
        level = "Metadata" if metadata else level
        event = _event(serial, verb, resource, sub, who, level, namespace, name, node)
        event["requestReceivedTimestamp"] = _time(received)
        yield {**event, "stage": "RequestReceived", "stageTimestamp": _time(received)}
        event["stage"] = "ResponseComplete"
        event["stageTimestamp"] = _time(completed)
        event["responseStatus"] = {"metadata": {}, "code": _code(verb, sub, rng)}
        _record(pods, verb, sub, pod, node, completed, event["responseStatus"]["code"])
        if level == "Request":
            event["requestObject"] = _body(resource, sub, name, node, rng)
        yield event


def _pod_write(pods: Pods, verb: str, sub: str | None, received: datetime,
               rng: random.Random) -> tuple:
    """(verb, subresource, who, level, pod, node) of a pod write received at ``received``: a
    binding of the oldest unbound pod, a status write by the node of a bound pod, a delete of a
    running pod; a create when there is no such pod whose last write completed before."""
    if sub == "binding" and pods.unbound and pods.unbound[0][1] < received:
        pod, _ = pods.unbound.popleft()
        return verb, sub, "scheduler", "Request", pod, f"node-{rng.randrange(NODES):05d}"
    if sub == "status" and pods.starting and pods.starting[0][2] < received:
        pod, node, _ = pods.starting.popleft()
        pods.running.append((pod, node, received))
        return verb, sub, "kubelet", "Metadata", pod, node
    if sub == "status" and pods.running:
        at = rng.randrange(len(pods.running))
        pod, node, written = pods.running[at]
        if written < received:
            return verb, sub, "kubelet", "Metadata", pod, node
    if verb == "delete" and pods.running:
        at = rng.randrange(len(pods.running))
        pod, node, written = pods.running[at]
        if written < received:
            pods.running[at] = pods.running[-1]
            pods.running.pop()
            return verb, sub, "controller", "Metadata", pod, node
    return "create", None, "controller", "Request", pods.new(), None


def _record(pods: Pods, verb: str, sub: str | None, pod: str, node: str,
            completed: datetime, code: int) -> None:
    """A binding's outcome: the pod waits for its kubelet, or (409) for the next binding."""
    if sub == "binding":
        if code == 201:
            pods.starting.append((pod, node, completed))
        else:
            pods.unbound.appendleft((pod, completed))


def _event(serial: int, verb: str, resource: str, sub: str | None, who: str, level: str,
           namespace: str | None, name: str, node: str) -> dict:
    user = {"kubelet": f"system:node:{node}", "scheduler": "system:kube-scheduler",
            "controller": "system:serviceaccount:kube-system:replicaset-controller",
            "kubectl": "admin"}[who]
    path = f"/api/v1/namespaces/{namespace}/{resource}" if namespace else f"/api/v1/{resource}"
    if verb not in ("list", "watch", "create") or sub:
        path += f"/{name}"
    path += f"/{sub}" if sub else ""
    ref = {"resource": resource, "namespace": namespace, "name": name, "apiVersion": "v1"}
    if sub:
        ref["subresource"] = sub
    return {
        "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": level,
        "auditID": f"{serial:08x}-4f1e-4d2a-9c3b-{serial * 7919 % 16**12:012x}",
        "stage": None, "requestURI": path, "verb": verb,
        "user": {"username": user, "groups": ["system:authenticated"]},
        "sourceIPs": ["10.0.0.1"], "userAgent": USER_AGENTS[who],
        "objectRef": {k: v for k, v in ref.items() if v is not None},
        "annotations": {"authorization.k8s.io/decision": "allow",
                        "authorization.k8s.io/reason": "RBAC: allowed by ClusterRoleBinding"},
    }


def _body(resource: str, sub: str | None, name: str, node: str, rng: random.Random) -> dict:
    if sub == "binding":
        return {"kind": "Binding", "apiVersion": "v1", "metadata": {"name": name},
                "target": {"kind": "Node", "name": node}}
    if resource == "nodes":
        return {"status": {"conditions": [{"type": "Ready", "status": "True"}],
                           "allocatable": {"cpu": "31850m", "memory": "127Gi", "pods": "110"}}}
    cpu, memory = rng.choice((("100m", "128Mi"), ("500m", "512Mi"), ("1", "2Gi"), ("4", "8Gi")))
    return {"kind": "Pod", "apiVersion": "v1",
            "metadata": {"generateName": "web-", "labels": {"app": "web"}},
            "spec": {"containers": [
                {"name": "app", "image": "registry.example/web:1.0",
                 "env": [{"name": "MODE", "value": "production"}],
                 "resources": {"requests": {"cpu": cpu, "memory": memory},
                               "limits": {"memory": memory}}},
                {"name": "sidecar", "image": "registry.example/proxy:2.1",
                 "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}}}],
                "schedulerName": "default-scheduler", "priority": 0}}


def _code(verb: str, sub: str | None, rng: random.Random) -> int:
    if sub == "binding" and rng.random() < 0.02:
        return 409
    return 201 if verb == "create" else 200


def _time(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def write_log(path: Path, size: int, seed: int = 1, metadata: bool = False) -> int:
    """Write about ``size`` bytes of audit events to ``path`` (gzip if it ends in .gz); with
    ``metadata``, every event at Metadata level."""
    rng = random.Random(seed + 1)
    opener = gzip.open if path.suffix == ".gz" else open
    written = lines = 0
    with opener(path, "wb") as out:
        for event in requests(seed, metadata):
            line = (json.dumps(event, separators=(",", ":")) + "\n").encode()
            copies = 2 if rng.random() < 0.001 else 1
            out.write(line * copies)
            written += len(line) * copies
            lines += copies
            if written >= size:
                return lines
    return lines


def parse_size(text: str) -> int:
    """``2G``, ``500M``, ``10k`` or a plain number of bytes."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kMG]?)", text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}")
    return int(float(match[1]) * {"": 1, "k": 2**10, "M": 2**20, "G": 2**30}[match[2]])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=parse_size, default=parse_size("2G"),
                        help="approximate size of the (uncompressed) log, e.g. 2G or 500M")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True, help="log file (.gz to compress)")
    parser.add_argument("--metadata", action="store_true",
                        help="every event at Metadata level (no request bodies)")
    args = parser.parse_args()
    lines = write_log(args.out, args.size, args.seed, args.metadata)
    print(f"wrote {args.out}: {lines:,} events")


if __name__ == "__main__":
    main()
