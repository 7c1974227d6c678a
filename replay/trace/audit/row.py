"""Audit events -> trace rows, built column by column (``rows_of``).

Where each column comes from is documented in ``traces/README.md`` ("Recorded traces").  The
columns are read from the events' fields at once and completed with Arrow; Python works per
event only where a column needs it: ``_irregular`` reads an event whose ``objectRef`` does not
name the object, that lacks a status code or stage time, or whose times are not in the API
server's own format (they are then parsed by msgspec, like every time used to be), and
``_extract`` reads the body of a pod, binding or node write.  Only names, ids, users, user
agents, quantities and the scheduler and group names are copied; object bodies are read through
``body.py``'s narrow structs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from replay.limits import TRACE_END, TRACE_TIMES
from replay.times import epoch_us
from replay.trace import schema
from replay.trace.audit.body import (
    NONE,
    Amounts,
    BadBody,
    Body,
    allocatable,
    decode_body,
    group_of,
    phase_of,
    pod_columns,
)
from replay.trace.audit.component import component
from replay.trace.audit.event import (
    TIME_KEYS,
    BadEvent,
    Event,
    ObjectRef,
    Status,
    User,
    decode_time,
)
from replay.trace.audit.uri import BUILT_IN_GROUPS, Target, parse_request_uri, qualified

# The columns of a row, plus ``seq`` (the event's position in the input), which orders rows with
# equal ``ts`` and picks the first of duplicate events.
ROW_COLUMNS = ("seq", "ts", "received_ts", "verb", "resource", "subresource", "namespace", "name",
               "uid", "node", "cpu_milli", "memory_bytes", "gpu_milli", "code", "user",
               "user_agent", "audit_id", "scheduler_name", "group", "priority", "component",
               "phase", "max_pods")
ROW_TYPES = {"seq": pa.int64(), **{c.name: c.type for c in schema.COLUMNS}}
TARGET = ("resource", "namespace", "name", "subresource")  # ``Target``'s fields
FULL_OBJECT_VERBS = ("create", "update")  # their request body is the whole object
# The API server's own time format, which Arrow parses exactly as msgspec does (and year 0000,
# which msgspec rejects, is left to it too); other spellings go through ``_irregular``.
API_SERVER_TIME = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$"
TIMESTAMP = pa.timestamp("us", tz="UTC")
NO_REF, NO_STATUS, NO_USER = ObjectRef(), Status(), User()
BUILT_IN = pa.array(sorted(BUILT_IN_GROUPS), pa.string())  # (for ``pc.is_in``)


class Skip(Exception):
    """An event that is valid but makes no row; the message is the summary's reason."""


class Extract(NamedTuple):
    """What the body of a pod, binding or node write adds to its row."""

    amounts: Amounts = NONE
    node: str | None = None
    scheduler_name: str | None = None
    group: str | None = None
    priority: int | None = None
    uid: str | None = None
    name: str | None = None
    phase: str | None = None


NOTHING = Extract()
BODY_COLUMNS = {"cpu_milli": pa.int64(), "memory_bytes": pa.int64(), "gpu_milli": pa.int64(),
                "max_pods": pa.int64(), "node": pa.string(), "scheduler_name": pa.string(),
                "group": pa.string(), "priority": pa.int32(), "uid": pa.string(),
                "name": pa.string(), "phase": pa.string()}  # an ``Extract``


@dataclass
class Rows:
    """The rows made from a list of events, and what became of the events that made none."""

    tables: list[pa.Table] = field(default_factory=list)
    dropped: Counter = field(default_factory=Counter)  # valid events that make no row, by reason
    lacking_bodies: Counter = field(default_factory=Counter)  # by (verb, resource[/subresource])
    errors: list[tuple[int, Exception]] = field(default_factory=list)  # (position, error)


def rows_of(events: list[Event], seqs: list[int], keep_going: bool) -> Rows:
    """The rows of ``events`` (whose sequence numbers are ``seqs``), in no particular order.

    Stops at the first broken event unless ``keep_going``.
    """
    rows = Rows()
    columns, positions = _in_range(*_targeted(events, seqs, rows, keep_going), rows)
    wants_body = _per_distinct(_wants_body, pa.bool_(), columns["resource"],
                               columns["subresource"], columns["verb"])
    bodies = _bodies(columns, events, positions, wants_body, rows, keep_going)
    if bodies is not None and len(positions):
        rows.tables.append(_completed(columns, *bodies))
    return rows


def _targeted(events: list[Event], seqs: list[int], rows: Rows, keep_going: bool
              ) -> tuple[dict[str, pa.Array], list[int]]:
    """The columns of the events that make rows, as far as the event says (no body), and the
    events' positions.

    An event is regular when its ``objectRef`` names the resource and the object, it has a
    ``responseStatus.code`` and a stage time, and its times are in the API server's format; the
    others are read by ``_irregular``.
    """
    columns = _columns(events, seqs)
    ts, received, api_times = _times(columns.pop("stage_time"), columns.pop("received"),
                                     columns.pop("legacy_time"))
    columns.update(ts=ts, received_ts=received)
    regular = pc.and_(pc.not_equal(columns["resource"], ""), pc.is_valid(columns["name"]))
    for condition in (pc.is_valid(columns["code"]), pc.is_valid(ts), api_times):
        regular = pc.and_(regular, condition)
    regular = pc.fill_null(regular, False)
    positions = pc.indices_nonzero(regular).to_pylist()
    read = []
    for position in pc.indices_nonzero(pc.invert(regular)).to_pylist():
        try:
            read.append((position, *_irregular(events[position])))
        except Skip as why:
            rows.dropped[str(why)] += 1
        except (BadEvent, BadBody) as err:
            rows.errors.append((position, err))
            if not keep_going:
                break
    if not read:
        return {name: column.filter(regular) for name, column in columns.items()}, positions
    at, ts, received, targets = zip(*read)
    fixed = {"ts": pa.array(ts, TIMESTAMP), "received_ts": pa.array(received, TIMESTAMP),
             **{name: pa.array(values, pa.string()) for name, values in zip(TARGET, zip(*targets))}}
    both = {name: pa.concat_arrays([column.filter(regular),
                                    fixed.get(name, column.take(pa.array(at)))])
            for name, column in columns.items()}
    return both, positions + list(at)


def _in_range(columns: dict[str, pa.Array], positions: list[int], rows: Rows
              ) -> tuple[dict[str, pa.Array], list[int]]:
    """``columns`` and ``positions`` less the events whose values no trace may hold, which
    join ``rows.errors``: a status code outside 100..599, a request received after the stage
    that completed it, a time outside a trace's (``replay.limits``).  Such an event is broken,
    and a trace that held it would fail ``replay validate``."""
    code, ts, received = columns["code"], columns["ts"], columns["received_ts"]
    bad_code = pc.invert(pc.fill_null(pc.and_(pc.greater_equal(code, 100),
                                              pc.less_equal(code, 599)), True))
    late = pc.fill_null(pc.greater(received, ts), False)
    bad_ts, bad_received = _outside_a_trace(ts), _outside_a_trace(received)
    bad = pc.or_(pc.or_(bad_code, late), pc.or_(bad_ts, bad_received))
    columns["code"] = pc.if_else(bad_code, pa.scalar(0, pa.int64()), code).cast(pa.int32())
    if not pc.any(bad).as_py():
        return columns, positions
    for row in pc.indices_nonzero(bad).to_pylist():
        if bad_code[row].as_py():
            problem = f"key responseStatus.code: {code[row]} is not an HTTP status (100-599)"
        elif bad_ts[row].as_py() or bad_received[row].as_py():
            key = "stageTimestamp" if bad_ts[row].as_py() else "requestReceivedTimestamp"
            problem = f"key {key}: outside the times a trace may hold ({TRACE_TIMES})"
        else:
            problem = ("key requestReceivedTimestamp: later than the stageTimestamp (a request "
                       "completed before it was received)")
        rows.errors.append((positions[row], BadEvent(problem)))
    keep = pc.invert(bad)
    return ({name: column.filter(keep) for name, column in columns.items()},
            [position for position, kept in zip(positions, keep.to_pylist()) if kept])


def _outside_a_trace(times: pa.Array) -> pa.Array:
    """Where ``times`` are not before ``TRACE_END`` (null: False).  None is before the year 1
    (``FIRST_TIME``): the year 0000 is no time to Python, nor to ``_api_server_time``."""
    return pc.fill_null(pc.greater_equal(times, pa.scalar(TRACE_END, TIMESTAMP)), False)


def _columns(events: list[Event], seqs: list[int]) -> dict[str, pa.Array]:
    """The columns an event's fields fill directly (its ``objectRef`` as the target), times
    still strings."""
    refs = [e.object_ref or NO_REF for e in events]
    strings = {
        "verb": [e.verb for e in events],
        "resource": [r.resource for r in refs],
        "group": [r.api_group for r in refs],
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
    columns["resource"] = _qualified(columns["resource"], columns.pop("group"))
    codes = [(e.response_status or NO_STATUS).code for e in events]
    columns.update(seq=pa.array(seqs, pa.int64()), code=_int64s(codes))
    return columns


def _qualified(resources: pa.Array, groups: pa.Array) -> pa.Array:
    """``uri.qualified`` of each row: ``RESOURCE.GROUP`` where the group is not built in."""
    other = pc.invert(pc.is_in(pc.fill_null(groups, ""), BUILT_IN))  # (null: the core group)
    if not pc.any(other).as_py():
        return resources
    return pc.if_else(other, pc.binary_join_element_wise(resources, groups, "."), resources)


def _int64s(values: list[int | None]) -> pa.Array:
    """``values`` as int64, those beyond its range (no status code is) as -1."""
    try:
        return pa.array(values, pa.int64())
    except (OverflowError, pa.ArrowInvalid):
        return pa.array([v if v is None or -2**63 <= v < 2**63 else -1 for v in values],
                        pa.int64())


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


def _irregular(event: Event) -> tuple[int, int | None, Target]:
    """``ts``, ``received_ts`` and the target of an event that is not regular (see
    ``_targeted``); ``Skip`` when it makes no row, ``BadEvent`` when it is broken."""
    received, stage_time, legacy_time = (
        None if text is None else epoch_us(decode_time(text, key))
        for text, key in zip((event.received, event.stage_time, event.legacy_time), TIME_KEYS))
    status = event.response_status
    if status is None or status.code is None:
        raise Skip("no responseStatus.code")
    ts = stage_time if stage_time is not None else legacy_time
    if ts is None:
        raise BadEvent("no stageTimestamp (nor the older timestamp)")
    return ts, received if received is not None else legacy_time, target_of(event)


def _bodies(columns: dict[str, pa.Array], events: list[Event], positions: list[int],
            wants_body: pa.Array, rows: Rows, keep_going: bool
            ) -> tuple[dict[str, pa.Array], list[int]] | None:
    """What the bodies of the rows that take columns from their body give (``BODY_COLUMNS``,
    null in the other rows), and the rows whose body is broken; None when one is broken and
    not ``keep_going``."""
    at = pc.indices_nonzero(wants_body)
    nulls = {name: pa.nulls(len(positions), kind) for name, kind in BODY_COLUMNS.items()}
    if not len(at):
        return nulls, []
    extracts, broken = [], []
    for row, verb, resource, subresource in zip(
            at.to_pylist(), columns["verb"].take(at).to_pylist(),
            columns["resource"].take(at).to_pylist(), columns["subresource"].take(at).to_pylist()):
        try:
            extract = _extract(events[positions[row]], resource, subresource)
        except (BadEvent, BadBody) as err:
            rows.errors.append((positions[row], err))
            if not keep_going:
                return None
            broken.append(row)
            extract = NOTHING
        else:
            if extract is NOTHING and _needs_body(verb):
                kind = f"{resource}/{subresource}" if subresource else resource
                rows.lacking_bodies[verb, kind] += 1
        extracts.append(extract)
    amounts, *given = zip(*extracts)
    return {name: pc.replace_with_mask(nulls[name], wants_body, pa.array(values, kind))
            for (name, kind), values in zip(BODY_COLUMNS.items(), (*zip(*amounts), *given))}, broken


def _completed(columns: dict[str, pa.Array], body: dict[str, pa.Array], broken: list[int]
               ) -> pa.Table:
    """The rows: ``columns`` completed by what the bodies gave, as ``traces/README.md`` says,
    less the rows whose body is ``broken``."""
    if broken:
        keep = pc.invert(pc.is_in(pa.array(range(len(columns["seq"]))), pa.array(broken)))
        columns, body = ({name: a.filter(keep) for name, a in part.items()} for part in (columns, body))
    none = pa.scalar(None, pa.string())
    name = columns["name"]
    columns.update(
        {key: body[key] for key in ("cpu_milli", "memory_bytes", "gpu_milli", "max_pods",
                                    "scheduler_name", "group", "priority", "phase")},
        node=pc.coalesce(_none_if_empty(body["node"]), pc.if_else(
            pc.equal(columns["resource"], "nodes"), name, none)),
        uid=pc.coalesce(columns["uid"], body["uid"]),
        name=pc.if_else(pc.not_equal(name, ""), name,
                        pc.coalesce(_none_if_empty(body["name"]), pa.scalar(""))),
        component=_per_distinct(component, pa.string(), columns["user"], columns["user_agent"]))
    return pa.table({key: columns[key] for key in ROW_COLUMNS})


def _none_if_empty(strings: pa.Array) -> pa.Array:
    return pc.if_else(pc.equal(strings, ""), pa.scalar(None, pa.string()), strings)


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


def target_of(event: Event) -> Target:
    """What the request wrote: ``objectRef``, with the request URI filling its gaps."""
    ref = event.object_ref
    if ref is not None and ref.resource:
        resource = qualified(ref.resource, ref.api_group)
        if ref.name is not None:
            return Target(resource, ref.namespace or None, ref.name, ref.subresource or None)
        parsed = parse_request_uri(event.request_uri) if event.request_uri else None
        return Target(resource, ref.namespace or None, parsed.name if parsed else "",
                      ref.subresource or None)
    parsed = parse_request_uri(event.request_uri or "")
    if parsed is None:
        raise Skip("non-resource request")
    return parsed


def _wants_body(resource: str, subresource: str | None, verb: str) -> bool:
    """Whether a row of this kind takes columns from the body (pods, their bindings, status
    writes and deletes, nodes)."""
    if resource == "pods":
        if subresource == "binding":
            return verb == "create"
        if subresource == "status":
            return verb in ("update", "patch")
        return subresource is None and verb in ("create", "update", "patch", "delete")
    return resource == "nodes" and verb in ("create", "update", "patch")


def _needs_body(verb: str) -> bool:
    """Whether a row that takes columns from its body lacks something without it: all but a
    pod's delete, whose stored pod (RequestResponse level) serves only a pod the log did not
    see created (traces/README.md: a log of a running cluster)."""
    return verb != "delete"


def _extract(event: Event, resource: str, subresource: str | None) -> Extract:
    """The body's contribution; ``NOTHING`` when the log level left the needed body out."""
    body, key, partial = _pick_body(event)
    if body is None:
        return NOTHING
    meta = body.metadata
    if (meta is None or not meta.name) and key == "requestObject" and event.response_object:
        stored = decode_body(event.response_object, "responseObject")  # generateName: the
        meta = stored.metadata if stored is not None else meta       # server chose the name
    uid, name = (meta.uid, meta.name) if meta is not None else (None, None)
    if subresource == "binding":
        node = body.target.name if body.target is not None else None
        return Extract(NONE, node, None, None, None, uid, name) if node else NOTHING
    if resource == "nodes":
        if body.object_status is None:
            return NOTHING
        amounts = allocatable(body.object_status.allocatable, key, partial)
        return Extract(amounts, None, None, None, None, uid, name) if amounts != NONE else NOTHING
    # a pod's status write: the phase it sets (a patch names it only if it changes it); its
    # delete: the phase it found (a pod that ran to its end before the log began)
    phase = (phase_of(body.object_status, key) if subresource == "status" or event.verb == "delete"
             else None)
    pod = pod_columns(body.spec, key) if body.spec and not partial else None
    if pod is None:
        return Extract(uid=uid, name=name, phase=phase) if subresource == "status" else NOTHING
    return Extract(pod.amounts, pod.node_name, pod.scheduler_name, group_of(meta), pod.priority,
                   uid, name, phase)


def _pick_body(event: Event) -> tuple[Body | None, str, bool]:
    """The body to read, its key, and whether it is partial (a patch rather than an object).

    Creates and updates send the whole object; a patch sends only changes, so its stored result
    (``responseObject``, RequestResponse level) is preferred when the log has it.
    """
    request, response = event.request_object, event.response_object
    if request and event.verb in FULL_OBJECT_VERBS:
        return decode_body(request, "requestObject"), "requestObject", False
    stored = decode_body(response, "responseObject") if response else None
    if stored is not None:
        return stored, "responseObject", False
    if request:
        return decode_body(request, "requestObject"), "requestObject", True
    return None, "", False
