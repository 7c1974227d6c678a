"""The shape of an audit event (audit.k8s.io ``Event``, v1 and v1beta1), as msgspec structs.

The structs name only the fields ingest uses: unknown keys are skipped without being built into
Python objects, and object bodies stay raw bytes (``msgspec.Raw``) until ``body.py`` reads the few
fields it needs from them, so a body's other contents are never even decoded.

A block of lines is decoded in one call (``decode_block``), the fastest way: into a union tagged
by ``stage``, so that only a ``ResponseComplete`` line is decoded into a whole ``Event`` and the
other stages into a struct of three fields.  When that fails (a blank line, a line that is not an
event, a field of the wrong type), the block is read line by line instead: each line into a small
``Head`` (kind, apiVersion, stage, verb), which says whether it is an event and whether it can
become a row, and only those that can into an ``Event``.  Fields of events that make no row are
therefore not checked, whichever way a block is read.

Timestamps stay strings here; ``row.py`` converts them exactly (RFC 3339 with ``Z`` or an offset,
any number of fractional digits, rounded to the nearest microsecond).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal, Union, cast, get_args

import msgspec

ZonedTime = Annotated[datetime, msgspec.Meta(tz=True)]
NO_BODY = msgspec.Raw()

ApiVersion = Literal["audit.k8s.io/v1", "audit.k8s.io/v1beta1"]
API_VERSIONS: tuple[str, ...] = get_args(ApiVersion)
STAGES = ("RequestReceived", "ResponseStarted", "ResponseComplete", "Panic")
COMPLETE = "ResponseComplete"
TOO_DEEP = "JSON nested too deeply to decode (no audit event is)"


class BadEvent(ValueError):
    """A line that cannot be read as an audit event; the message says why, without a location."""


class Head(msgspec.Struct, gc=False):
    """What every line is decoded into: enough to tell whether it can become a row."""

    kind: str | None = None
    api_version: str | None = msgspec.field(default=None, name="apiVersion")
    stage: str | None = None
    verb: str | None = None
    items: msgspec.Raw = NO_BODY  # only in an EventList


class User(msgspec.Struct, gc=False):
    username: str | None = None


class ObjectRef(msgspec.Struct, gc=False):
    resource: str | None = None
    api_group: str | None = msgspec.field(default=None, name="apiGroup")
    namespace: str | None = None
    name: str | None = None
    uid: str | None = None
    subresource: str | None = None


class Status(msgspec.Struct, gc=False):
    code: int | None = None


class Stage(msgspec.Struct, gc=False, tag_field="stage"):
    """An audit event of one stage; its fields accept exactly what ``is_plain`` accepts."""

    verb: str
    kind: Literal["Event"] | None = None
    api_version: ApiVersion | None = msgspec.field(default=None, name="apiVersion")


class Received(Stage, tag="RequestReceived"):
    pass


class Started(Stage, tag="ResponseStarted"):
    pass


class Panicked(Stage, tag="Panic"):
    pass


class Event(Stage, tag=COMPLETE):
    """The fields of a completed audit event that trace columns are made from."""

    audit_id: str | None = msgspec.field(default=None, name="auditID")
    request_uri: str | None = msgspec.field(default=None, name="requestURI")
    user: User | None = None
    user_agent: str | None = msgspec.field(default=None, name="userAgent")
    object_ref: ObjectRef | None = msgspec.field(default=None, name="objectRef")
    response_status: Status | None = msgspec.field(default=None, name="responseStatus")
    request_object: msgspec.Raw = msgspec.field(default=NO_BODY, name="requestObject")
    response_object: msgspec.Raw = msgspec.field(default=NO_BODY, name="responseObject")
    received: str | None = msgspec.field(default=None, name="requestReceivedTimestamp")
    stage_time: str | None = msgspec.field(default=None, name="stageTimestamp")
    legacy_time: str | None = msgspec.field(default=None, name="timestamp")  # before v1beta1


TIME_KEYS = ("requestReceivedTimestamp", "stageTimestamp", "timestamp")
# the stage of each event class (its msgspec tag, a str as each class declares it)
STAGE_TYPES: dict[type, str] = {cls: cast(str, cls.__struct_config__.tag)
                                for cls in (Received, Started, Panicked, Event)}
_head = msgspec.json.Decoder(Head)
_event = msgspec.json.Decoder(Event)
_stages = msgspec.json.Decoder(Union[tuple(STAGE_TYPES)])
_time = msgspec.json.Decoder(ZonedTime)
_items = msgspec.json.Decoder(list[msgspec.Raw])
_any = msgspec.json.Decoder()


def decode_head(line: bytes) -> Head:
    """The head of one JSON line; ``BadEvent`` when it is not JSON or not an audit event."""
    try:
        head = _head.decode(line)
    except msgspec.ValidationError as err:
        raise BadEvent(_not_an_event(line, err)) from None
    except msgspec.DecodeError as err:
        raise BadEvent(f"not valid JSON ({_reason(err)})") from None
    except RecursionError:
        raise BadEvent(TOO_DEEP) from None
    return head if is_plain(head) else _odd_head(head, line)


_STAGES = frozenset(STAGES)
_KINDS = frozenset({None, "Event"})
_VERSIONS = frozenset({None, *API_VERSIONS})


def decode_block(text: bytes, lines: int) -> list[Stage] | None:
    """The events of all ``lines`` lines of ``text`` in one call, each a ``Stage`` subclass.

    None when any line is blank or is not an audit event as ``decode_head`` accepts it: the
    caller then goes line by line, to skip blank lines and to find a bad line and its number.
    """
    try:
        events = _stages.decode_lines(text)
    except (msgspec.MsgspecError, RecursionError):
        return None
    return events if len(events) == lines else None


def decode_time(text: str, key: str) -> datetime:
    """The time in ``text`` (an event's ``key``), as msgspec parses RFC 3339."""
    try:
        return _time.decode(msgspec.json.encode(text))
    except msgspec.ValidationError:
        raise BadEvent(f"key {key}: not an RFC 3339 time with a time zone") from None


def is_plain(head: Head) -> bool:
    """Whether a head is an audit event as ``decode_head`` would accept it (not an EventList)."""
    return (head.stage in _STAGES and head.verb is not None and head.kind in _KINDS
            and head.api_version in _VERSIONS)


def _odd_head(head: Head, line: bytes) -> Head:
    """An ``EventList``'s head, or ``BadEvent`` saying how the line departs from an event."""
    if head.stage is None or head.verb is None:
        if head.kind == "EventList":
            return head
        raise BadEvent(_not_an_event(line))
    if head.kind not in _KINDS:
        raise BadEvent(f"not an audit event: its kind is {head.kind!r}, not 'Event'")
    if head.api_version not in _VERSIONS:
        raise BadEvent(f"unsupported apiVersion {head.api_version!r} (expected "
                       f"{' or '.join(API_VERSIONS)})")
    raise BadEvent(f"unknown stage {head.stage!r} (expected one of {', '.join(STAGES)})")


def decode_event(line: bytes) -> Event:
    """The full event of a line whose head was already accepted."""
    try:
        return _event.decode(line)
    except msgspec.ValidationError as err:
        raise BadEvent(_field_problem(err)) from None
    except msgspec.DecodeError as err:  # invalid UTF-8 in a string the head did not read
        raise BadEvent(f"not valid JSON ({_reason(err)})") from None
    except RecursionError:
        raise BadEvent(TOO_DEEP) from None


def decode_items(items: msgspec.Raw) -> list[bytes]:
    """The events of an ``EventList`` (the webhook backend's batch), each still undecoded."""
    try:
        return [bytes(item) for item in _items.decode(items)]
    except msgspec.ValidationError:
        raise BadEvent("an EventList whose items are not a list") from None
    except RecursionError:
        raise BadEvent(TOO_DEEP) from None


def decode_document(text: bytes) -> list[bytes]:
    """The events of a file holding one JSON document: an event, an array or an ``EventList``."""
    try:
        value = _any.decode(text)
    except msgspec.DecodeError as err:
        raise BadEvent(f"not valid JSON ({_reason(err)})") from None
    except RecursionError:
        raise BadEvent(TOO_DEEP) from None
    if isinstance(value, list):
        return [bytes(item) for item in _items.decode(text)]
    return [text]


def _field_problem(err: msgspec.ValidationError) -> str:
    """msgspec's "Expected `int`, got `str` - at `$.responseStatus.code`" in this project's words."""
    message, _, where = str(err).partition(" - at `$")
    key = where.rstrip("`").lstrip(".")
    if key in TIME_KEYS:
        return f"key {key}: not an RFC 3339 time with a time zone"
    return f"key {key}: {lowered(message)}" if key else message


def _not_an_event(line: bytes, err: msgspec.ValidationError | None = None) -> str:
    """Why a JSON line is not an audit event, naming the log pipelines that wrap events."""
    try:
        value = _any.decode(line)
    except RecursionError:
        return TOO_DEEP
    if not isinstance(value, dict):
        return f"not an audit event: a JSON {type(value).__name__}, not an object"
    if "protoPayload" in value:
        return ("not an audit event: a Google Cloud Logging entry (GKE); the event is rewritten "
                "in protoPayload, which is not the API server's format")
    properties = value.get("properties")
    if isinstance(properties, dict) and isinstance(properties.get("log"), (dict, str)):
        return ("not an audit event: an Azure diagnostic log record (AKS); the audit event is "
                "wrapped in properties.log")
    if err is not None:
        return f"not an audit event: {_field_problem(err)}"
    keys = ", ".join(list(value)[:6]) or "none"
    return f"not an audit event: no stage and verb (keys: {keys})"


def _reason(err: msgspec.DecodeError) -> str:
    return lowered(str(err)) or "malformed"


def lowered(message: str) -> str:
    """msgspec's message ("Expected `int`", "JSON is malformed") to follow a colon in ours: its
    first letter lowered, unless it begins an acronym."""
    if message[:2].isalpha() and message[:2].isupper():
        return message
    return message[:1].lower() + message[1:]
