"""The ``truths`` expression of ``queries/derived/capacity_windows.sql`` (the window
functions of its changes) in numpy, for ``replay derive``.

Why: DuckDB computes each change's truth (a running sum), previous rv and next commit with
window functions partitioned by node and class over every change: 2.7 s of CPU for the 1M-pod
observe run, 7 s for the what-if run, whose two classes of cache double the rows and made the
step spill.  Here the changes are sorted once by node, class and rv (``two_key_order``), and the
sums and neighbours are a cumulative sum and shifts that restart at each node and class.  The
SQL's next expression, ``changes`` (each claim's assumption: the attempts and the run's bounds
joined), runs as it is on this table.

The SQL file stays the definition: this makes the temporary table ``truths`` with the SQL's
columns and types (its ``change_id``s number the changes in another order, which is arbitrary
in the SQL too: ``row_number() OVER ()``), and the tests compare the two on runs of every
model.  It is a view of the Arrow table (``con.register``), which the step runner drops after
``changes`` reads it: copied into DuckDB and then copied again by ``changes``, the what-if
run's 4M changes made that step spill.  A connection of several runs, or changes that the
window functions would not order one way only (two of a node and class with one rv, a null
amount), are left to the SQL (``truths`` returns False).
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from replay.analysis.counting import two_key_order
from replay.arrays import segment_starts

CLASS = "CASE {} WHEN true THEN 1 WHEN false THEN 0 ELSE -1 END"  # null, false, true: -1, 0, 1
AMOUNTS = ("cpu_milli", "memory_bytes", "gpu_milli")


def truths(con: duckdb.DuckDBPyConnection) -> bool:
    """Make the temporary view ``truths`` from ``all_changes`` and ``nodes`` as the SQL's
    expression does; False (nothing made) where the SQL must."""
    if con.sql("SELECT count(DISTINCT run) FROM nodes").fetchall()[0][0] > 1:
        return False
    found = con.sql(f"""
        SELECT {CLASS.format("class")} AS class, rv, epoch_us(commit_ts) AS commit_us,
               nodes.node_id, cpu_milli, memory_bytes, gpu_milli, attempt_id,
               cpu_milli IS NULL OR memory_bytes IS NULL OR gpu_milli IS NULL
               OR rv IS NULL OR commit_ts IS NULL AS unknown
        FROM all_changes
        JOIN nodes USING (run, node)""").arrow()
    found = found.read_all() if hasattr(found, "read_all") else found
    if pc.any(found.column("unknown")).as_py():
        return False
    cols = {name: found.column(name).to_numpy()
            for name in ("class", "rv", "commit_us", "node_id", *AMOUNTS)}
    segment = cols["node_id"] * 3 + cols["class"] + 1  # by node, then class
    order = two_key_order(cols["rv"], segment)
    cols = {name: column[order] for name, column in cols.items()}
    cols["attempt_id"] = found.column("attempt_id").take(order)
    segment = segment[order]
    starts = segment_starts(segment)
    same = np.ones(len(segment), dtype=bool)  # the row before is of the same node and class
    same[starts] = False
    if bool((cols["rv"][1:] == cols["rv"][:-1])[same[1:]].any()):
        return False  # two changes of a node and class at one rv: the SQL's order is not one
    names = _names(con)
    if names is None:
        return False
    con.register("truths", _table(cols, same, starts, *names))
    return True


def _names(con: duckdb.DuckDBPyConnection) -> tuple[pa.Array, pa.Array] | None:
    """The run and each node's name, by node id; None unless the ids are 1, 2, ..."""
    nodes = con.sql("SELECT node_id, run, node FROM nodes ORDER BY node_id").arrow()
    nodes = nodes.read_all() if hasattr(nodes, "read_all") else nodes
    if not np.array_equal(nodes.column("node_id").to_numpy(), np.arange(1, nodes.num_rows + 1)):
        return None
    return (nodes.column("run").combine_chunks().unique(),
            nodes.column("node").combine_chunks())


def _table(cols: dict, same: np.ndarray, starts: np.ndarray, run: pa.Array,
           node: pa.Array) -> pa.Table:
    """The numbered changes (sorted by node, class and rv) with their truths and neighbours;
    the run's and the nodes' names as dictionaries (no string is copied)."""
    count = len(same)
    previous = np.zeros(count, dtype=np.int64)
    previous[1:] = cols["rv"][:-1]
    following = np.zeros(count, dtype=np.int64)
    following[:-1] = cols["commit_us"][1:]
    last = np.ones(count, dtype=bool)  # the row after is of another node or class
    last[:-1] = ~same[1:]
    stamp = pa.timestamp("us", tz="UTC")
    return pa.table({
        "change_id": np.arange(1, count + 1, dtype=np.int64),
        "class": pa.array(cols["class"] == 1, mask=cols["class"] < 0),
        "run": pa.DictionaryArray.from_arrays(np.zeros(count, dtype=np.int32), run),
        "rv": cols["rv"], "commit_ts": pa.array(cols["commit_us"], type=stamp),
        "node": pa.DictionaryArray.from_arrays(cols["node_id"] - 1, node),
        "node_id": cols["node_id"],
        **{name: cols[name] for name in AMOUNTS},
        **{f"truth_{name.split('_')[0]}": _running_sum(cols[name], starts) for name in AMOUNTS},
        "previous_rv": pa.array(previous, mask=~same),
        "next_commit_ts": pa.array(following, type=stamp, mask=last),
        "attempt_id": cols["attempt_id"]})


def _running_sum(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The sum of ``values`` up to each row, restarting at ``starts``: one cumulative sum less
    its value before each segment (wrapping around in int64 where the whole sum would not fit
    changes nothing: each segment's own sums are exact wherever they fit, as the SQL's must)."""
    total = np.cumsum(values, dtype=np.int64)
    before = total[starts] - values[starts]
    return total - np.repeat(before, np.diff(np.append(starts, len(values))))
