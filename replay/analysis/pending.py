"""The ``pending`` expression of ``queries/derived/capacity_windows.sql`` in numpy, for
``replay derive``: each pod waiting to be placed, once per resource it requests, with the
latest end among the pods of the same resource and request that started by its start.

Why: DuckDB unnests every pod into three rows and computes the latest end with a window
function partitioned by resource and request: 0.7-1.1 s of CPU for a 1M-pod run, and
``wasted`` (``replay.analysis.wasted``) then read the result back and sorted it again.  Here
the pods' starts, ends and requests are read once (the ends with the SQL's own expression, so
that ``least`` skips nulls as DuckDB's does), sorted by resource, request and start, and the
reach is a running maximum restarting at each size, taken at the last of each start's peers
(the window's frame ends at the current row's last peer).

The SQL file stays the definition: this makes the temporary view ``pending`` (of an Arrow
table, ``con.register``, which the step runner drops after ``wasted`` reads it) with the SQL's
rows and types (in another order, which is arbitrary in the SQL too), and the tests compare
the two.  It also returns the rows as ``wasted``'s kernel takes them, sorted already.  A
connection of several runs (or none) is left to the SQL (``pending`` returns None).
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa

from replay.analysis.windows import RESOURCES, _resources, _timestamps
from replay.arrays import lex_order, segmented_cummax

Sizes = tuple[np.ndarray, ...]  # as ``by_size`` returns them


def pending(con: duckdb.DuckDBPyConnection) -> Sizes | None:
    """Make the temporary view ``pending`` from ``pods`` and ``bounds`` as the SQL's expression
    does and return its rows as ``by_size`` does; None (nothing made) where the SQL must."""
    runs = con.sql("SELECT run FROM bounds").fetchall()
    if len(runs) != 1:
        return None
    pods = con.sql("""
        SELECT epoch_us(start_ts) AS start_us, epoch_us(end_ts) AS end_us,
               coalesce(cpu_milli, 0) AS cpu, coalesce(memory_bytes, 0) AS memory,
               coalesce(gpu_milli, 0) AS gpu
        FROM (SELECT coalesce(created_ts, bounds.start_ts) AS start_ts,
                     coalesce(least(bound_ts, deleted_ts), bounds.end_ts) AS end_ts,
                     cpu_milli, memory_bytes, gpu_milli
              FROM pods
              JOIN bounds USING (run))
        WHERE end_ts > start_ts""").fetchnumpy()
    rows = _rows({name: np.asarray(column, dtype=np.int64) for name, column in pods.items()})
    con.register("pending", pa.table({
        "run": pa.DictionaryArray.from_arrays(np.zeros(len(rows["code"]), dtype=np.int32),
                                              pa.array([runs[0][0]])),
        "resource": _resources(rows["code"].astype(np.int8)),
        "request": rows["request"], "start_ts": _timestamps(rows["start"]),
        "reach_ts": _timestamps(rows["reach"])}))
    return by_size(rows["code"], rows["request"], rows["start"], rows["reach"])


def _rows(pods: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each pod once per resource it requests (more than 0), sorted by resource, request and
    start, with its reach: the latest end among the pods of its size started by its start."""
    requested = [pods[name] > 0 for name in RESOURCES]

    def each(column: np.ndarray) -> np.ndarray:
        return np.concatenate([column[r] for r in requested])

    rows = {"code": np.concatenate([np.full(int(r.sum()), c, dtype=np.int64)
                                    for c, r in enumerate(requested)]),
            "request": np.concatenate([pods[name][r] for name, r in zip(RESOURCES, requested)]),
            "start": each(pods["start_us"]), "end": each(pods["end_us"])}
    order = lex_order((rows["start"], rows["request"], rows["code"]))
    rows = {name: column[order] for name, column in rows.items()}
    if not len(order):
        return {**rows, "reach": rows["end"]}
    size = np.cumsum(_changes(rows["code"], rows["request"]))
    reach = segmented_cummax(rows["end"], size)
    peers = np.flatnonzero(_changes(rows["code"], rows["request"], rows["start"]))
    last = np.append(peers[1:], len(order)) - 1  # each start's last peer
    rows["reach"] = np.repeat(reach[last], np.diff(np.append(peers, len(order))))
    return rows


def _changes(*keys: np.ndarray) -> np.ndarray:
    """Per row, whether it is the first or differs from the row before in one of ``keys``."""
    changed = np.ones(len(keys[0]), dtype=bool)
    changed[1:] = np.logical_or.reduce([key[1:] != key[:-1] for key in keys])
    return changed


def by_size(code: np.ndarray, request: np.ndarray, start: np.ndarray,
            reach: np.ndarray) -> Sizes:
    """Pending pods sorted by resource, request and start, as ``wasted``'s kernel takes them:
    each size's request, where each size's pods begin (then their end), where each resource's
    sizes begin (then their end), the pods' starts and reaches."""
    sizes = np.flatnonzero(_changes(code, request))  # each size's first pod
    return (request[sizes], np.append(sizes, len(code)),
            np.searchsorted(code[sizes], np.arange(len(RESOURCES) + 1)), start, reach)
