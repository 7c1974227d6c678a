"""One audit event -> one trace row (a tuple in ``ROW_COLUMNS`` order).

Where each column comes from is documented in ``traces/README.md`` ("Recorded traces"); the code
below follows it line by line.  Only names, ids, users, user agents, quantities and the scheduler
and group names are copied; object bodies are read through ``body.py``'s narrow structs.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import NamedTuple, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from replay.trace import schema

from replay.trace.audit.body import (NONE, Amounts, Body, allocatable, decode_body, group_of,
                                     pod_requests)
from replay.trace.audit.component import component
from replay.trace.audit.event import BadEvent, Event
from replay.trace.audit.uri import Target, parse_request_uri

# The trace columns a row tuple holds, plus ``seq`` (the event's position in the input), which
# orders rows with equal ``ts`` and picks the first of duplicate events.  ``component`` is added
# per batch by ``table_of``, from the distinct (user, user agent) pairs.
ROW_COLUMNS = ("seq", "ts", "received_ts", "verb", "resource", "subresource", "namespace", "name",
               "uid", "node", "cpu_milli", "memory_bytes", "gpu_milli", "code", "user",
               "user_agent", "audit_id", "scheduler_name", "group", "priority")
ROW_TYPES = {"seq": pa.int64(), **{c.name: c.type for c in schema.COLUMNS}}
FULL_OBJECT_VERBS = ("create", "update")  # their request body is the whole object
BODY_RESOURCES = ("pods", "nodes")
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
MICROSECOND = timedelta(microseconds=1)


class Skip(Exception):
    """An event that is valid but makes no row; the message is the summary's reason."""


class Extract(NamedTuple):
    """What the body of a pod, binding or node write adds to its row."""

    amounts: Amounts = NONE
    node: Optional[str] = None
    scheduler_name: Optional[str] = None
    group: Optional[str] = None
    priority: Optional[int] = None
    uid: Optional[str] = None
    name: Optional[str] = None


NOTHING = Extract()


def to_row(event: Event, seq: int) -> tuple[tuple, bool]:
    """The row of a ``ResponseComplete`` event, and whether it lacks a body it would need.

    Raises ``Skip`` for events that make no row and ``BadEvent``/``BadBody`` for broken ones.
    This runs for every row, so the common case (an ``objectRef`` naming the object, no body
    needed) takes no detour.
    """
    status = event.response_status
    if status is None or status.code is None:
        raise Skip("no responseStatus.code")
    ts = event.stage_time or event.legacy_time
    if ts is None:
        raise BadEvent("no stageTimestamp (nor the older timestamp)")
    ref = event.object_ref
    if ref is not None and ref.resource and ref.name is not None:
        target = Target(ref.resource, ref.namespace or None, ref.name, ref.subresource or None)
    else:
        target = _target(event)
    extract, lacks_body = NOTHING, False
    if target.resource in BODY_RESOURCES and _wants_body(target, event.verb):
        extract = _extract(event, target)
        lacks_body = extract is NOTHING
    node = extract.node or (target.name if target.resource == "nodes" else None)
    cpu, memory, gpu = extract.amounts
    user = event.user.username if event.user is not None else None
    uid = ref.uid if ref is not None and ref.uid else extract.uid
    row = (seq, ts, event.received or event.legacy_time, event.verb, target.resource,
           target.subresource, target.namespace, target.name or extract.name or "", uid, node,
           cpu, memory, gpu, status.code, user, event.user_agent, event.audit_id,
           extract.scheduler_name, extract.group, extract.priority)
    return row, lacks_body


def table_of(rows: list[tuple]) -> pa.Table:
    """Row tuples -> an Arrow table of ``ROW_COLUMNS`` and ``component``."""
    columns = dict(zip(ROW_COLUMNS, zip(*rows)))
    for name in ("ts", "received_ts"):
        columns[name] = [None if t is None else (t - EPOCH) // MICROSECOND for t in columns[name]]
    arrays = {name: pa.array(values, pa.int64() if name.endswith("ts") else ROW_TYPES[name])
              for name, values in columns.items()}
    for name in ("ts", "received_ts"):
        arrays[name] = arrays[name].cast(ROW_TYPES[name])
    arrays["component"] = _components(arrays["user"], arrays["user_agent"])
    return pa.table(arrays)


def _components(users: pa.Array, agents: pa.Array) -> pa.Array:
    """``component`` for each row, computed once per distinct (user, user agent) pair."""
    users, agents = users.dictionary_encode(), agents.dictionary_encode()
    user_names = users.dictionary.to_pylist() + [None]
    agent_names = agents.dictionary.to_pylist() + [None]
    user_codes = pc.fill_null(users.indices, len(user_names) - 1).to_numpy()
    agent_codes = pc.fill_null(agents.indices, len(agent_names) - 1).to_numpy()
    pairs, row_pair = np.unique(user_codes.astype(np.int64) * len(agent_names) + agent_codes,
                                return_inverse=True)
    names = [component(user_names[p // len(agent_names)], agent_names[p % len(agent_names)])
             for p in pairs.tolist()]
    return pa.array(names, pa.string()).take(pa.array(row_pair.ravel()))


def _target(event: Event) -> Target:
    """What the request wrote: ``objectRef``, with the request URI filling its gaps."""
    ref = event.object_ref
    if ref is not None and ref.resource:
        parsed = parse_request_uri(event.request_uri) if event.request_uri else None
        return Target(ref.resource, ref.namespace or None, parsed.name if parsed else "",
                      ref.subresource or None)
    parsed = parse_request_uri(event.request_uri or "")
    if parsed is None:
        raise Skip("non-resource request")
    return parsed


def _wants_body(target: Target, verb: str) -> bool:
    """Whether a row of this kind takes columns from the body (pods, bindings, nodes)."""
    if target.resource == "pods":
        if target.subresource == "binding":
            return verb == "create"
        return target.subresource is None and verb in ("create", "update", "patch")
    return target.resource == "nodes" and verb in ("create", "update", "patch")


def _extract(event: Event, target: Target) -> Extract:
    """The body's contribution; ``NOTHING`` when the log level left the needed body out."""
    body, key, partial = _pick_body(event)
    if body is None:
        return NOTHING
    meta = body.metadata
    if (meta is None or not meta.name) and key == "requestObject" and event.response_object:
        stored = decode_body(event.response_object, "responseObject")  # generateName: the
        meta = stored.metadata if stored is not None else meta       # server chose the name
    ids = {"uid": meta.uid, "name": meta.name} if meta is not None else {}
    if target.subresource == "binding":
        node = body.target.name if body.target is not None else None
        return Extract(node=node, **ids) if node else NOTHING
    if target.resource == "nodes":
        if body.status is None:
            return NOTHING
        amounts = allocatable(body.status, key, partial)
        return Extract(amounts=amounts, **ids) if amounts != NONE else NOTHING
    spec = body.spec
    if partial or spec is None or spec.containers is None:
        return NOTHING
    return Extract(pod_requests(spec, key), spec.node_name, spec.scheduler_name,
                   group_of(meta), spec.priority, **ids)


def _pick_body(event: Event) -> tuple[Optional[Body], str, bool]:
    """The body to read, its key, and whether it is partial (a patch rather than an object).

    Creates and updates send the whole object; a patch sends only changes, so its stored result
    (``responseObject``, RequestResponse level) is preferred when the log has it.
    """
    request, response = event.request_object, event.response_object
    if request and event.verb in FULL_OBJECT_VERBS:
        return decode_body(request, "requestObject"), "requestObject", False
    if response:
        return decode_body(response, "responseObject"), "responseObject", False
    if request:
        return decode_body(request, "requestObject"), "requestObject", True
    return None, "", False
