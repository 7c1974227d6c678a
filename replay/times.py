"""Times as users write them: ISO 8601 text to an aware UTC-based ``datetime``.

One parser for every command and importer, so that ``--start`` and ``--from`` accept the same
text: a trailing ``Z`` (which Python 3.10's ``fromisoformat`` rejects), any offset, and no zone
at all, which means UTC.
"""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta, timezone

from replay.errors import ReplayError
from replay.limits import EPOCH

MICROSECOND = timedelta(microseconds=1)


def epoch_us(at: datetime) -> int:
    """``at`` in microseconds since 1970, exactly: ``datetime.timestamp()`` is a float, whose
    truncation moves a time before 1970 with a fraction of a second, and which rounds to more
    than a microsecond beyond 2255."""
    return (at - EPOCH) // MICROSECOND


def parse_time(text: str) -> datetime:
    """An ISO 8601 time; one without a zone is UTC.  ``ValueError`` if it is not one."""
    value = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def time_argument(text: str) -> datetime:
    """``parse_time`` for argparse: a bad time is a usage error that quotes it."""
    try:
        return parse_time(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None


def check_window(from_ts: datetime | None, to_ts: datetime | None) -> None:
    """``--from`` before ``--to``: a window with nothing in it is a slip to point out, not a
    question whose answer is empty tables."""
    if from_ts is not None and to_ts is not None and from_ts >= to_ts:
        raise ReplayError(f"--from {from_ts.isoformat()} is not before --to "
                          f"{to_ts.isoformat()}: the window holds nothing")
