"""The limits every command enforces, in one place (``docs/reliability.md`` lists them).

Each limit is far beyond any real cluster or study, and exists only so that a mistake (a typo of
three zeros, a unit confused) is refused at once with the limit in the message, instead of
running for hours, filling the memory, or wrapping a number around silently.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone

INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

# Time: every time is integer microseconds in an int64, and must also be a date that the tools
# reading traces and runs can show (Python's datetime holds the years 1 to 9999).  A trace's
# times end a year before that, since a run's come after its trace's by the modelled delays: a
# trace ending on 9999-12-31 replayed, and then its report failed on deliveries in the year
# 10000.
FIRST_TIME = datetime(1, 1, 1, tzinfo=timezone.utc)
TRACE_END = datetime(9999, 1, 1, tzinfo=timezone.utc)  # a trace's times are before it
TRACE_TIMES = f"from {FIRST_TIME.date().isoformat()} up to {TRACE_END.date().isoformat()}"
YEAR_MS = 365.25 * 24 * 3600 * 1000
MAX_DURATION_MS = 100 * YEAR_MS  # any duration in a configuration or a model parameter

# Work: refused before it starts.
MAX_WATCHERS = 1_000_000  # watchers of one run (a kubelet per node of the largest clusters, 65k)
MAX_SCHEDULERS = 1_000  # scheduler instances of a model (studies use up to a few dozen)
MAX_DELIVERIES = 1_000_000_000  # writes x cluster-wide watchers (the 1M-pod benchmark: 28M)
MAX_SYNTH_ROWS = 250_000_000  # rows of a synthesized trace, held in memory (~330 bytes a row)

# Input: an audit log's line (the API server rejects requests over 3 MiB; events of a huge list
# response logged at RequestResponse level are the longest)
MAX_LINE_BYTES = 64 << 20


def is_finite_number(value: object) -> bool:
    """An int or a finite float (not a bool, not NaN, not an infinity)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return not isinstance(value, float) or math.isfinite(value)
