"""How much memory a point needs, before it runs, and how much it took.

The estimate sizes the local executor's concurrency and each Ray task's memory requirement.  It
grows with the trace's rows and with the watchers that see every write (each delivery is a row
of the deliveries table, and the capacity windows grow with them).  Measured on this project's
development machine (peak resident memory of ``replay run``, replay and derivation together):

    sample trace, 66,522 rows: 364 MB (observe), 411-416 MB (kube, Gödel with 1 scheduler),
        514 MB (Gödel, 8 schedulers); estimated 0.7-1.1 GB
    1M pods on 20k nodes, 3.02M rows, Gödel with 5 such watchers: replay 8.3 GB, derivation
        13.0-16.2 GB (DuckDB may take three quarters of what is free); estimated 18.3 GB

so it errs on the safe side: a point that needs more than estimated could push a machine into
swap or the kernel's OOM killer, one that needs less only leaves cores idle.
"""

from __future__ import annotations

import resource
import sys

from replay.analysis.derive import available_mib

BASE_BYTES = 512 << 20  # an interpreter with numpy, polars, pyarrow and DuckDB loaded
ROW_BYTES = 2 << 10  # per trace row: the trace, the events, the model's state
ROW_WATCHER_BYTES = 768  # per trace row and watcher that sees every write: deliveries, windows
BUDGET_SHARE = 0.9  # of the memory available when a sweep starts, the share its points may take


def estimate_bytes(rows: int, watchers: int) -> int:
    """Peak memory of replaying a trace of ``rows`` rows to ``watchers`` watchers that see every
    write, and deriving its tables."""
    return BASE_BYTES + rows * (ROW_BYTES + ROW_WATCHER_BYTES * watchers)


def budget_bytes() -> int | None:
    """How much memory this machine's points may take together: most of what is available now
    (None where that is unknown)."""
    available = available_mib()
    return None if available is None else int(available * BUDGET_SHARE) << 20


def peak_bytes() -> int:
    """This process's peak resident memory so far."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak << 10  # Linux counts KiB
