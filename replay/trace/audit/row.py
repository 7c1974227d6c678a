"""Audit events -> trace rows: most column by column, the rest one by one (``rows_of``).

Where each column comes from is documented in ``traces/README.md`` ("Recorded traces");
``to_row`` follows it line by line for any event.  Most writes (leases, events, status patches,
deletes) need nothing but ``objectRef`` and the event's own fields, so ``rows_of`` builds their
columns with Arrow, with no Python loop per row, and leaves the others to ``to_row``; for such a
plain event both give the same row.  Only names, ids, users, user agents,
quantities and the scheduler and group names are copied; object bodies are read through
``body.py``'s narrow structs.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Callable, NamedTuple, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from replay.trace import schema

from replay.trace.audit.body import (NONE, Amounts, BadBody, Body, allocatable, decode_body,
                                     group_of, pod_columns)
from replay.trace.audit.component import component
from replay.trace.audit.event import (TIME_KEYS, BadEvent, Event, ObjectRef, Status, User,
                                      decode_time)
from replay.trace.audit.uri import Target, parse_request_uri

# The trace columns a row tuple holds, plus ``seq`` (the event's position in the input), which
# orders rows with equal ``ts`` and picks the first of duplicate events.  ``component`` is added
# per batch, from the distinct (user, user agent) pairs.
ROW_COLUMNS = ("seq", "ts", "received_ts", "verb", "resource", "subresource", "namespace", "name",
               "uid", "node", "cpu_milli", "memory_bytes", "gpu_milli", "code", "user",
               "user_agent", "audit_id", "scheduler_name", "group", "priority")
ROW_TYPES = {"seq": pa.int64(), **{c.name: c.type for c in schema.COLUMNS}}
FULL_OBJECT_VERBS = ("create", "update")  # their request body is the whole object
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
MICROSECOND = timedelta(microseconds=1)
# The API server's own time format, which Arrow parses exactly as msgspec does (and year 0000,
# which msgspec rejects, is left to it too); other spellings go through ``to_row``.
API_SERVER_TIME = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$"
TIMESTAMP = pa.timestamp("us", tz="UTC")
NO_REF, NO_STATUS, NO_USER = ObjectRef(), Status(), User()


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


@dataclass
class Rows:
    """The rows made from a list of events, and what became of the events that made none."""

    tables: list[pa.Table] = field(default_factory=list)
    dropped: Counter = field(default_factory=Counter)  # valid events that make no row, by reason
    lacking_bodies: int = 0
    errors: list[tuple[int, Exception]] = field(default_factory=list)  # (position, error)


def rows_of(events: list[Event], seqs: list[int], keep_going: bool) -> Rows:
    """The rows of ``events`` (whose sequence numbers are ``seqs``), in no particular order.

    Plain events become rows column by column; the others go through ``to_row`` one by one,
    which stops at the first broken event unless ``keep_going``.  An event is plain when its
    ``objectRef`` names the resource and the object, it has a ``responseStatus.code`` and a stage
    time, its times are in the API server's format, and its row takes no column from a body.
    """
    columns = _columns(events, seqs)
    ts, received, api_times = _times(columns.pop("stage_time"), columns.pop("received"),
                                     columns.pop("legacy_time"))
    named = pc.and_(pc.not_equal(columns["resource"], ""), pc.is_valid(columns["name"]))
    no_body = pc.invert(_per_distinct(_wants_body_of, pa.bool_(), columns["resource"],
                                      columns["subresource"], columns["verb"]))
    plain = named
    for condition in (pc.is_valid(columns["code"]), pc.is_valid(ts), api_times, no_body):
        plain = pc.and_(plain, condition)
    plain = pc.fill_null(plain, False)
    rows = Rows()
    if plain.true_count:
        columns.update(ts=ts, received_ts=received)
        rows.tables.append(_plain_table({name: a.filter(plain) for name, a in columns.items()}))
    if plain.true_count < len(events):
        _add_other_rows(rows, events, seqs, pc.indices_nonzero(pc.invert(plain)),
                        (ts, received, api_times), keep_going)
    return rows


def _columns(events: list[Event], seqs: list[int]) -> dict[str, pa.Array]:
    """The columns a plain event's fields fill directly, times still strings."""
    refs = [e.object_ref or NO_REF for e in events]
    strings = {
        "verb": [e.verb for e in events],
        "resource": [r.resource for r in refs],
        "subresource": [r.subresource or None for r in refs],
        "namespace": [r.namespace or None for r in refs],
        "name": [r.name for r in refs],
        "uid": [r.uid or None for r in refs],
        "user": [(e.user or NO_USER).username for e in events],
        "user_agent": [e.user_agent for e in events],
        "audit_id": [e.audit_id for e in events],
        "stage_time": [e.stage_time for e in events],
        "received": [e.received for e in events],
        "legacy_time": [e.legacy_time for e in events],
    }
    columns = {name: pa.array(values, pa.string()) for name, values in strings.items()}
    codes = [(e.response_status or NO_STATUS).code for e in events]
    columns.update(seq=pa.array(seqs, pa.int64()), code=pa.array(codes, pa.int32()))
    return columns


def _times(stage_time: pa.Array, received: pa.Array, legacy_time: pa.Array
           ) -> tuple[pa.Array, pa.Array, pa.Array]:
    """``ts`` and ``received_ts`` where all of an event's times are in the API server's format,
    and where they are.  The older ``timestamp`` stands in for either."""
    parsed = [_api_server_time(times) for times in (stage_time, received, legacy_time)]
    api_times = parsed[0][1]
    for _, fits in parsed[1:]:
        api_times = pc.and_(api_times, fits)
    (stage_us, _), (received_us, _), (legacy_us, _) = parsed
    return pc.coalesce(stage_us, legacy_us), pc.coalesce(received_us, legacy_us), api_times


def _api_server_time(strings: pa.Array) -> tuple[pa.Array, pa.Array]:
    """The times in ``API_SERVER_TIME`` (after year 0000) as timestamps, and where a time is
    absent or in it; on a time Arrow cannot parse (Feb 30), none is taken."""
    fits = pc.fill_null(pc.and_(pc.match_substring_regex(strings, API_SERVER_TIME),
                                pc.invert(pc.starts_with(strings, "0000"))), False)
    try:
        times = pc.if_else(fits, strings, pa.scalar(None, pa.string())).cast(TIMESTAMP)
    except pa.ArrowInvalid:
        return pa.nulls(len(strings), TIMESTAMP), pa.array([False] * len(strings))
    return times, pc.or_(pc.is_null(strings), fits)


def _plain_table(columns: dict[str, pa.Array]) -> pa.Table:
    """The rows of plain events from their ``_columns``."""
    rows = len(columns["seq"])
    columns["node"] = pc.if_else(pc.equal(columns["resource"], "nodes"), columns["name"],
                                 pa.scalar(None, pa.string()))
    return _with_components({name: columns[name] if name in columns
                             else pa.nulls(rows, ROW_TYPES[name]) for name in ROW_COLUMNS})


def _add_other_rows(rows: Rows, events: list[Event], seqs: list[int], positions: pa.Array,
                    times: tuple[pa.Array, pa.Array, pa.Array], keep_going: bool) -> None:
    """Add the rows of the events at ``positions`` by ``to_row``, with the times ``_times``
    already read."""
    ts, received, api_times = times
    known = (ts.cast(pa.int64()), received.cast(pa.int64()), api_times)
    tuples = []
    for position, *known in zip(positions.to_pylist(),
                                *(column.take(positions).to_pylist() for column in known)):
        try:
            row, lacks_body = to_row(events[position], seqs[position],
                                     tuple(known[:2]) if known[2] else None)
        except Skip as why:
            rows.dropped[str(why)] += 1
            continue
        except (BadEvent, BadBody) as err:
            rows.errors.append((position, err))
            if not keep_going:
                break
            continue
        rows.lacking_bodies += lacks_body
        tuples.append(row)
    if tuples:
        rows.tables.append(table_of(tuples))


def to_row(event: Event, seq: int, times: Optional[tuple[int, Optional[int]]] = None
           ) -> tuple[tuple, bool]:
    """The row of a ``ResponseComplete`` event, and whether it lacks a body it would need.

    ``times`` are its ``ts`` and ``received_ts`` when already read.  Raises ``Skip`` for events
    that make no row and ``BadEvent``/``BadBody`` for broken ones.
    """
    ts, received = times or _row_times(event)
    status = event.response_status
    if status is None or status.code is None:
        raise Skip("no responseStatus.code")
    if ts is None:
        raise BadEvent("no stageTimestamp (nor the older timestamp)")
    ref = event.object_ref
    if ref is not None and ref.resource and ref.name is not None:
        target = Target(ref.resource, ref.namespace or None, ref.name, ref.subresource or None)
    else:
        target = _target(event)
    extract, lacks_body = NOTHING, False
    if _wants_body(target, event.verb):
        extract = _extract(event, target)
        lacks_body = extract is NOTHING
    node = extract.node or (target.name if target.resource == "nodes" else None)
    cpu, memory, gpu = extract.amounts
    user = event.user.username if event.user is not None else None
    uid = ref.uid if ref is not None and ref.uid else extract.uid
    row = (seq, ts, received, event.verb,
           target.resource, target.subresource, target.namespace,
           target.name or extract.name or "", uid, node, cpu, memory, gpu, status.code, user,
           event.user_agent, event.audit_id, extract.scheduler_name, extract.group,
           extract.priority)
    return row, lacks_body


def table_of(rows: list[tuple]) -> pa.Table:
    """Row tuples -> an Arrow table of ``ROW_COLUMNS`` and ``component``."""
    columns = dict(zip(ROW_COLUMNS, zip(*rows)))
    return _with_components({name: pa.array(values, ROW_TYPES[name])
                             for name, values in columns.items()})


def _with_components(arrays: dict[str, pa.Array]) -> pa.Table:
    arrays["component"] = _per_distinct(component, pa.string(), arrays["user"],
                                        arrays["user_agent"])
    return pa.table(arrays)


def _row_times(event: Event) -> tuple[Optional[int], Optional[int]]:
    """``ts`` and ``received_ts`` in microseconds; every time the event has must be valid."""
    received, stage_time, legacy_time = (
        None if text is None else (decode_time(text, key) - EPOCH) // MICROSECOND
        for text, key in zip((event.received, event.stage_time, event.legacy_time), TIME_KEYS))
    return (stage_time if stage_time is not None else legacy_time,
            received if received is not None else legacy_time)


def _per_distinct(function: Callable, type_: pa.DataType, *arrays: pa.Array) -> pa.Array:
    """``function`` of each row's values, called once per distinct combination of them.

    Rows repeat a few combinations (users and user agents, verbs and resources), so this keeps
    Python's work per combination rather than per row.
    """
    key, keys = np.zeros(len(arrays[0]), np.int64), 1
    for array in arrays:
        encoded = array.dictionary_encode()
        codes = pc.fill_null(encoded.indices, len(encoded.dictionary)).to_numpy()
        if keys * (len(encoded.dictionary) + 1) >= 2**62:  # renumber the keys before they overflow
            key, keys = np.unique(key, return_inverse=True)[1].ravel(), len(key)
        key, keys = key * (len(encoded.dictionary) + 1) + codes, keys * (len(encoded.dictionary) + 1)
    _, first, row_key = np.unique(key, return_index=True, return_inverse=True)
    values = [array.take(first).to_pylist() for array in arrays]
    return pa.array([function(*args) for args in zip(*values)], type_).take(row_key.ravel())


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
    return _wants_body_of(target.resource, target.subresource, verb)


def _wants_body_of(resource: Optional[str], subresource: Optional[str], verb: str) -> bool:
    if resource == "pods":
        if subresource == "binding":
            return verb == "create"
        return subresource is None and verb in ("create", "update", "patch")
    return resource == "nodes" and verb in ("create", "update", "patch")


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
        amounts = allocatable(body.status.allocatable, key, partial)
        return Extract(amounts=amounts, **ids) if amounts != NONE else NOTHING
    pod = pod_columns(body.spec, key) if body.spec and not partial else None
    if pod is None:
        return NOTHING
    return Extract(pod.amounts, pod.node_name, pod.scheduler_name, group_of(meta), pod.priority,
                   **ids)


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
