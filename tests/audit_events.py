"""Builders of audit events for the ingest tests: one dict per event, JSON lines on disk."""

from __future__ import annotations

import json
from pathlib import Path

BASE_TIME = "2026-03-01T10:00:00"


def event(verb: str = "create", resource: str = "pods", *, name: str = "web-1",
          namespace: str | None = "default", subresource: str | None = None,
          stage: str = "ResponseComplete", audit_id: str = "id-1", code: int | None = 201,
          second: float = 0.0, user: str = "system:serviceaccount:kube-system:replicaset-controller",
          user_agent: str | None = None, level: str = "Metadata", request: dict | None = None,
          response: dict | None = None) -> dict:
    """An audit.k8s.io/v1 event with the given essentials; ``second`` offsets its times."""
    ref = {"resource": resource, "namespace": namespace, "name": name,
           "subresource": subresource, "apiVersion": "v1"}
    e = {"kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": level, "auditID": audit_id,
         "stage": stage, "requestURI": f"/api/v1/namespaces/{namespace}/{resource}/{name}",
         "verb": verb, "user": {"username": user, "groups": ["system:authenticated"]},
         "objectRef": {k: v for k, v in ref.items() if v is not None},
         "requestReceivedTimestamp": stamp(second - 0.001), "stageTimestamp": stamp(second)}
    if user_agent:
        e["userAgent"] = user_agent
    if code is not None:
        e["responseStatus"] = {"metadata": {}, "code": code}
    if request is not None:
        e["requestObject"] = request
    if response is not None:
        e["responseObject"] = response
    return e


def stamp(second: float) -> str:
    """BASE_TIME plus ``second`` (0 <= second < 60 after the millisecond shift), 6 digits, Z."""
    whole = int(second // 1)
    micros = round((second - whole) * 1e6)
    return f"2026-03-01T10:00:{whole + 10:02d}.{micros:06d}Z"


def pod(containers: list[dict], *, init: list[dict] | None = None, overhead: dict | None = None,
        scheduler: str = "default-scheduler", **spec) -> dict:
    """A pod body whose containers have the given ``resources``."""
    body = {"containers": [{"name": f"c{i}", "image": "x", "resources": r}
                           for i, r in enumerate(containers)],
            "schedulerName": scheduler, **spec}
    if init is not None:
        body["initContainers"] = [{"name": f"i{i}", "image": "x", **r} for i, r in enumerate(init)]
    if overhead is not None:
        body["overhead"] = overhead
    return {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "web-1"}, "spec": body}


def write_log(path: Path, events: list[dict]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path
