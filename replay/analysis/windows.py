"""The sweep of ``queries/derived/capacity_windows.sql``: its expressions from ``received`` to
``windows`` (and ``stale_segments``) computed in numpy and a numba kernel instead of DuckDB.

The SQL file stays the definition of the table: ``replay derive`` runs its other expressions
as they are (``replay.analysis.steps``) and this module computes these ones from the same
inputs (``deliveries``, ``changes``, ``viewers``, ``missed``, ``held``) into temporary views of
the same names and column types, so the SQL's later expressions read them as they would read
DuckDB's.  The tests keep the stored table identical to the query run whole, on runs of every
model.

Why: those expressions are a join of every delivery with its change and a sweep per watcher and
node, which SQL can say only with window functions over millions of tiny partitions, joins of the
lags with themselves, and unions unnested into one row per resource; DuckDB spent about half of
the derivation's CPU there.  Here each delivery's change is found by a binary search in the
changes sorted by rv; the lags are sorted once by watcher, node and rv, so a lag's previous
change is the row before it (found by a binary search where it is not), which lags are alone is
a vectorised comparison, and each of those is a window by itself (most windows); the others go
through one sequential pass per watcher and node in a compiled kernel, with exact integers (the
integral of a window, ``gap_us``, is 128-bit, as DuckDB's HUGEINT).

A run the arrays cannot hold as the SQL does is left to the SQL whole (``_received`` says
which): several runs at once, a change received twice by one watcher or a write that changes
two nodes (the SQL's joins would multiply rows), a delivery never applied, keys too large for
the 64-bit packing.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from replay import interrupts
from replay.analysis.changes import CLASS
from replay.analysis.counting import counting_order
from replay.analysis.runs import one_run, run_dirs_of
from replay.arrays import lex_order
from replay.jit import njit

# the expressions this module computes: from the lags to the windows
SWEPT = ("received", "lags", "inverted", "irregular", "classified", "lone_windows", "points",
         "instants", "stepped", "merged_segments", "windows", "stale_segments")
RESOURCES = ("cpu", "memory", "gpu")  # the order of the SQL's unnested lists
# lags swept at a time (whole watcher-node pairs): about 50 MB of arrays.  A part's arrays are
# pages its thread takes new, freed when the part is done: with 2**21 lags a part, the 1M-pod
# observe run's sweep faulted in 549-576k pages and took 2.4 s, with 2**19 368-402k and 1.5 s,
# its peak RSS 0.3 GB lower (benchmarks/ROUNDS.md, thirty-fifth round)
SWEEP_ROWS = 1 << 19
# The first part is SWEEP_ROWS >> FIRST_PART_SHIFT lags, each next one twice the one before up to
# SWEEP_ROWS: the windows' writer begins once the first part's rows are made
# (replay.analysis.window_rows), and writes rows half as fast as they are made, so that each next
# part's are ready by the time it has written the last's
FIRST_PART_SHIFT = 3
# parts swept at once, on threads of their own (numpy, Arrow and the kernels release the GIL;
# the parts' results are taken in order, so the tables do not depend on which finishes first)
SWEEP_THREADS = 2
# threads that find the lags of the deliveries, a share of them each (``_on_shares``): the step
# ``received`` of the 1M-pod observe run (15.1M deliveries, 10.1M lags) took 1.30-1.35 s instead of
# 1.77-1.95 (derivations alternated), its two kernels half their 1.1 s on one thread
RECEIVE_THREADS = 2
_NEVER = np.iinfo(np.int64).max  # a null timestamp that compares after every other

Columns = dict[str, np.ndarray]


class Lags:
    """The lags: per row, a viewer, the row of its change in ``changes`` and how the viewer
    received it (``applied_us``, ``view_us``, ``missed``, ``own``, ``from_missed``); a change's
    own columns are gathered when asked for, so that the millions of lags do not each hold a copy
    of them (a 1M-pod run has 15M lags of 2M changes)."""

    def __init__(self, changes: Columns, own: Columns):
        self.changes, self.own = changes, own

    def __getitem__(self, name: str) -> np.ndarray:
        return self.own[name] if name in self.own else self.changes[name][self.own["change"]]

    def at(self, name: str, rows: np.ndarray) -> np.ndarray:
        """``self[name][rows]``, gathering only those rows."""
        if name in self.own:
            return self.own[name][rows]
        return self.changes[name][self.own["change"][rows]]

    def __len__(self) -> int:
        return len(self.own["change"])


@dataclass
class Part:
    """The windows of a part of the watcher-node pairs, as Arrow, until a step asks for them."""
    pairs: np.ndarray  # the part's pairs (viewer_id * nodes + node_id), sorted, each once
    lone_windows: pa.Table  # windows of one lag each (their integrals computed when needed)
    merged_windows: pa.Table  # windows of merged segments, integrals in two 64-bit halves


@dataclass
class Sweep:
    """The sweep's tables: the windows a part of the pairs at a time, in the pairs' order, and
    the stale segments of the merged windows (those of lone windows are lone_windows' rows)."""
    parts: list[Part]
    stale_segments: pa.Table
    nodes: int  # the bound of the node ids: pair = viewer_id * nodes + node_id

    @property
    def lone_windows(self) -> pa.Table:
        return pa.concat_tables([part.lone_windows for part in self.parts])

    @property
    def merged_windows(self) -> pa.Table:
        return pa.concat_tables([part.merged_windows for part in self.parts])


@dataclass(frozen=True)
class SweepSteps:
    replace: Callable[[str], bool]  # the step runner's hook (``replay.analysis.steps``)
    swept: Callable[[], Sweep | None]  # once the steps ran: the sweep, None if left to the SQL


def sweep_steps(con: duckdb.DuckDBPyConnection) -> SweepSteps:
    """A step runner's replacement for the expressions in ``SWEPT``: given a step's name, make
    its temporary view and return True, or return False to let its SQL run.

    ``received`` and ``lags`` become views of numpy arrays (the SQL's ``shortfall``, ``missed``
    and ``held`` read them); the sweep runs at ``inverted``, once ``held`` exists, and makes
    ``windows`` and ``stale_segments``, which are all that later expressions read of the
    others.  A run the arrays cannot hold as the SQL does (see ``_received``) is left to the
    SQL whole."""
    state: dict[str, object] = {}
    reading = _EarlyRead(con)

    def replace(name: str) -> bool:
        reading.begin()  # at the first step
        if name not in SWEPT:
            return False
        if name == "received":
            state["sizes"] = _sizes(con)
            state["received"] = _received(con, *state["sizes"],  # type: ignore[misc]
                                          reading=reading)
            if state["received"] is None:
                return False
            state["numpy"] = True
            _view(con, "received", f"FROM {_register(con, 'received', state['received'])}")
            return True
        if not state.get("numpy"):
            return False
        if name == "lags":
            received = state["received"]
            assert isinstance(received, Lags)
            state["lags"] = lags = _with_missed(con, received, *state["sizes"])  # type: ignore[misc]
            _view(con, "lags", "FROM _swept_received" if lags is received
                  else f"FROM {_register(con, 'lags', lags)}")
        elif name == "inverted":  # after held, the last expression the SQL runs on the lags
            # nothing reads them any more: free them (the step runner drops the views)
            con.unregister("_swept_received")
            if "lags" in state and state["lags"] is not state["received"]:
                con.unregister("_swept_lags")
            del state["received"]
            state["sweep"] = sweep(con, state.pop("lags"), *state["sizes"])  # type: ignore[arg-type, misc]
        elif name == "windows":
            done = state["sweep"]
            assert isinstance(done, Sweep)
            _view(con, name, f"""
                SELECT viewer_id, node_id, resource::VARCHAR AS resource, start_ts, end_ts,
                       open_at_end, stale, gap_max,
                       gap_max::HUGEINT * (epoch_us(end_ts) - epoch_us(start_ts)) AS gap_us
                FROM {_register(con, "lone_windows", done.lone_windows)}
                UNION ALL
                SELECT viewer_id, node_id, resource::VARCHAR, start_ts, end_ts, open_at_end,
                       stale, gap_max,
                       gap_hi::HUGEINT * 18446744073709551616::HUGEINT + gap_lo::HUGEINT
                FROM {_register(con, "merged_windows", done.merged_windows)}""")
        elif name == "stale_segments":
            done = state["sweep"]
            assert isinstance(done, Sweep)
            _view(con, name, f"""
                SELECT viewer_id, node_id, resource::VARCHAR AS resource, start_ts, end_ts,
                       window_ts, truth, view
                FROM {_register(con, "stale_segments", done.stale_segments)}
                UNION ALL
                SELECT viewer_id, node_id, resource::VARCHAR, start_ts, end_ts, start_ts, truth,
                       view
                FROM _swept_lone_windows
                WHERE stale""")
        return True

    def swept() -> Sweep | None:
        done = state.get("sweep")
        return done if isinstance(done, Sweep) else None

    return SweepSteps(replace, swept)


def _register(con: duckdb.DuckDBPyConnection, name: str, data: pa.Table | Lags) -> str:
    """Let DuckDB read ``data`` (lags, or an Arrow table) as ``_swept_NAME``; returns that
    name."""
    con.register(f"_swept_{name}", data if isinstance(data, pa.Table) else _lags_table(data))
    return f"_swept_{name}"


def _view(con: duckdb.DuckDBPyConnection, name: str, sql: str) -> None:
    con.execute(f"CREATE TEMPORARY VIEW {name} AS {sql}")


def _arrow(rel: duckdb.DuckDBPyRelation) -> pa.Table:
    table = rel.arrow()
    return table.read_all() if hasattr(table, "read_all") else table


def _numpy(rel: duckdb.DuckDBPyRelation) -> Columns:
    table = _arrow(rel)
    return {name: table.column(name).to_numpy() for name in table.column_names}


class _EarlyRead:
    """The deliveries' read (``_delivered``), begun on a thread of its own at the derivation's
    first step (``begin``), so that it overlaps every step up to ``received``, which takes it.

    The read numbers each delivery's viewer as ``viewers`` does, and ``viewers`` is made only
    after ``every_change``, whose claims keep one core busy while the other idles (1.9-2.6 s of
    the 1M-pod runs).  So the read begins with the numbers ``viewers`` gives a run's viewers
    (``provisional_viewers``), and ``result`` compares them with the numbers it gave: where
    they differ, it reads the deliveries again, with its numbers.  (Begun at ``received``, the
    read overlapped only that step's queries; begun after ``viewers``, the changes and truths
    too, which kept one core busy.)  One run only: with several, ``received`` is the SQL's."""

    def __init__(self, con: duckdb.DuckDBPyConnection):
        self.con, self.begun = con, False
        self.pool: ThreadPoolExecutor | None = None
        self.file: pq.ParquetFile | None = None
        self.viewers: list[tuple[str, int]] = []
        self.reading: Future[Columns | None] | None = None

    def result(self) -> Columns | None:
        """The deliveries (None where ``_delivered`` declines), once read, their viewers
        numbered as ``viewers`` numbers them."""
        self.begin()
        assert self.pool is not None and self.reading is not None and self.file is not None
        try:
            delivered = self.reading.result()
        finally:
            self.pool.shutdown()
        viewers = _viewer_ids(self.con)
        return delivered if viewers == self.viewers else _delivered(self.file, viewers)

    def begin(self) -> None:
        """Begin the read on a thread of its own, unless it has begun (one run only)."""
        if self.begun:
            return
        self.begun = True
        if one_run(self.con):
            self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="replay-deliveries")
            self.file = _deliveries_file(self.con)
            self.viewers = provisional_viewers(self.con)
            with interrupts.deferred():  # not inside the executor's locks
                self.reading = self.pool.submit(_delivered, self.file, self.viewers)


def _received(con: duckdb.DuckDBPyConnection, nodes: int, rvs: int,
              reading: _EarlyRead | None = None) -> Lags | None:
    """The SQL's ``received``: each change as each viewer received it, by looking each
    delivery's rv and its viewer's class up in a table of the changes by rv and class.  None
    (left to the SQL) unless the run is one run whose changes have one row per rv and class
    and whose viewers received each change once: the SQL's joins would multiply rows
    otherwise.  ``reading``: the deliveries' read, if begun earlier (``_EarlyRead``); it
    overlaps the queries of the viewers and changes here in any case."""
    if not one_run(con):
        return None
    reading = reading if reading is not None else _EarlyRead(con)
    reading.begin()  # if it has not begun: beside the queries below
    viewers, changes = _viewers_and_changes(con)
    delivered = reading.result()
    if viewers is None:
        return None
    deliveries = delivered if delivered is not None else _deliveries_by_sql(con)
    if (len(viewers["viewer_id"]) + 1) * nodes * rvs >= 1 << 62 or deliveries["missed"].any():
        return None  # keys too large for int64; or a delivery never applied
    if len(changes["rv"]) and changes["rv"].min() < 0:
        return None  # an rv that cannot index _change_of's table
    change_of = _change_of(changes["rv"] * 3 + changes["class"] + 1, rvs)
    if change_of is None:
        return None  # a write that changes two nodes' capacity (none does so far)
    first_pair, pairs = _pair_numbers(viewers["only_one"], nodes)
    rows, change, key, pair = _receive(
        deliveries["viewer_id"], deliveries["rv"], viewers["class"], viewers["only_one"],
        viewers["only_node_id"], change_of, changes["node_id"], changes["rv"], nodes, rvs,
        first_pair)
    # in the sweep's order, by viewer, node and rv: a change received twice shows as a repeat
    order, key = _in_lag_order(key, pair, pairs)
    repeated, viewer_id, change, applied, view, own = _lags(
        order, key, rows, change, deliveries["viewer_id"], deliveries["applied_us"],
        viewers["watcher_code"], changes["assumed_code"], changes["folds_code"],
        changes["assumed_until_us"], changes["commit_us"])
    if repeated:
        return None
    return Lags(changes, {
        "viewer_id": viewer_id, "change": change, "applied_us": applied,
        "missed": np.zeros(len(change), dtype=bool), "view_us": view, "own": own,
        "from_missed": np.zeros(len(change), dtype=bool)})


def _viewers_and_changes(con: duckdb.DuckDBPyConnection) -> tuple[Columns | None, Columns]:
    """``_received``'s viewers and changes; no viewers (None) unless their ids are 1, 2, ..."""
    viewers = _numpy(con.sql(f"""
        SELECT viewer_id, dense_rank() OVER (ORDER BY watcher) AS watcher_code,
               only_node IS NOT NULL AS only_one, coalesce(nodes.node_id, -1) AS only_node_id,
               {CLASS.format("class")} AS class
        FROM viewers
        LEFT JOIN nodes ON nodes.run = viewers.run AND nodes.node = viewers.only_node
        ORDER BY viewer_id"""))
    if not np.array_equal(viewers["viewer_id"], np.arange(1, len(viewers["viewer_id"]) + 1)):
        return None, {}
    changes = _numpy(con.sql(f"""
        WITH names AS (SELECT DISTINCT watcher, dense_rank() OVER (ORDER BY watcher) AS code
                       FROM viewers)
        SELECT change_id, {CLASS.format("class")} AS class, rv, node_id,
               coalesce(previous_rv, -1) AS previous_rv, epoch_us(commit_ts) AS commit_us,
               coalesce(epoch_us(next_commit_ts), {_NEVER}) AS next_commit_us,
               cpu_milli::BIGINT AS cpu, memory_bytes::BIGINT AS memory,
               gpu_milli::BIGINT AS gpu, truth_cpu::BIGINT AS truth_cpu,
               truth_memory::BIGINT AS truth_memory, truth_gpu::BIGINT AS truth_gpu,
               coalesce(names.code, -1) AS assumed_code,
               CASE WHEN assumed_here AND assumed_from = commit_ts
                    THEN coalesce(names.code, -1) ELSE -1 END AS folds_code,
               coalesce(epoch_us(assumed_until), 0) AS assumed_until_us
        FROM changes
        LEFT JOIN names ON names.watcher = changes.assumed_by"""))
    return viewers, changes


def _pair_numbers(only_one: np.ndarray, nodes: int) -> tuple[np.ndarray, int]:
    """Per viewer (``viewer_id - 1``), the number of its first watcher-node pair, and how many
    pairs there are: a viewer of one node (a kubelet) has one pair, any other one per node.
    Numbered in the order of (viewer, node), but without the pairs no lag can have, so that the
    numbers stay few (a what-if run's 20,000 kubelets of one node each, beside four viewers of
    20,000 nodes: 100,000 pairs instead of 400 million)."""
    spans = np.where(only_one, 1, nodes).astype(np.int64)
    first = np.zeros(len(spans), dtype=np.int64)
    np.cumsum(spans[:-1], out=first[1:])
    return first, int(spans.sum())


def _in_lag_order(key: np.ndarray, pair: np.ndarray, pairs: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The order of the lags' keys ((viewer * nodes + node) * rvs + rv), and the keys in it;
    ``pair``: each lag's number of its viewer and node (``_pair_numbers``, below ``pairs``),
    which sorts as the key less its rv.

    Every model writes each watcher's deliveries in rv order (observe's by watcher, then rv;
    the what-if models' by rv), so a stable sort by viewer and node alone gives the whole key's
    order: a counting sort of the pairs' numbers, in linear time.  Checked, and the whole key
    sorted where the rows were not in rv order.  On the 1M-pod runs' 10.1M lags (observe,
    what-if) 0.26 and 0.36 s, against 1.07-1.68 and 1.26 s for numpy's stable sort of the key
    less its rv, 1.1-2.5 s for the packed sort ``stable_sort`` had then."""
    order = counting_order(pair, pairs)
    ordered = key[order]
    if np.any(ordered[1:] < ordered[:-1]):
        order = np.argsort(key, kind="stable")
        ordered = key[order]
    return order, ordered


def provisional_viewers(con: duckdb.DuckDBPyConnection) -> list[tuple[str, int]]:
    """The viewers of the connection's one run with the numbers the SQL's ``viewers`` gives
    them (``row_number() OVER (ORDER BY run, watcher)``), before it is made: ``_EarlyRead``
    checks them against ``_viewer_ids``."""
    return [(watcher, number) for number, (watcher,) in enumerate(
        con.sql("SELECT watcher FROM capacity_viewers ORDER BY watcher").fetchall(), start=1)]


def _viewer_ids(con: duckdb.DuckDBPyConnection) -> list[tuple[str, int]]:
    """Each viewer's watcher and number, from ``viewers``, in the order of the numbers."""
    return con.sql("SELECT watcher, viewer_id FROM viewers ORDER BY viewer_id").fetchall()


def _deliveries_file(con: duckdb.DuckDBPyConnection) -> pq.ParquetFile:
    """The deliveries' file of the connection's one run, its watchers read as Parquet's
    dictionary codes.

    ``_delivered`` reads it a row group at a time, each dictionary's names looked up among the
    viewers once, rather than DuckDB, which parses each row's run from its file name
    (``views.sql``'s ``run_table``), hashes each row's watcher name for the join and hands the
    result over in buffers of its own before they are copied into the columns."""
    return pq.ParquetFile(run_dirs_of(con)[0] / "deliveries.parquet", read_dictionary=["watcher"])


def _deliveries_by_sql(con: duckdb.DuckDBPyConnection) -> Columns:
    """``_delivered``'s columns by DuckDB, from the ``deliveries`` and ``viewers`` of ``con``."""
    return _numpy(con.sql(f"""
        SELECT viewers.viewer_id, deliveries.rv,
               coalesce(epoch_us(deliveries.applied_ts), {_NEVER}) AS applied_us,
               deliveries.applied_ts IS NULL AS missed
        FROM deliveries
        JOIN viewers USING (watcher)"""))  # one run: its name, parsed per delivery, is the same


def _delivered(file: pq.ParquetFile, viewers: list[tuple[str, int]]) -> Columns | None:
    """Each delivery as ``deliveries JOIN viewers USING (watcher)`` gives it: its viewer, rv,
    applied time (``_NEVER`` where null) and whether it was never applied (``missed``), in no
    particular order (``_received`` sorts the lags).

    Read from the deliveries' ``watcher``, ``rv`` and ``applied_ts``: each row's viewer found
    by its code in a table of its row group's dictionary (made again only where it differs
    from the one before; ``viewers``' ids are positive, as the SQL's ``row_number()``), and the
    rows of watchers that are no viewer's dropped (an inner join) from each row group before
    it is copied into the columns: for the 27M deliveries of the 1M-pod what-if run, 0.85-1.6
    s in all, where masking the whole columns afterwards took 1.0-7.5 s, as its copies' fresh
    pages were or were not faulted in already.  None where the join is not that: a watcher of
    two viewers, a null watcher or rv."""
    ids = dict(viewers)
    if len(ids) < len(viewers):
        return None
    rows = file.metadata.num_rows
    cols = {"viewer_id": np.empty(rows, np.int64), "rv": np.empty(rows, np.int64),
            "applied_us": np.empty(rows, np.int64), "missed": np.empty(rows, dtype=bool)}
    names, lookup, at = None, np.zeros(1, dtype=np.int64), 0
    for group in range(file.metadata.num_row_groups):
        table = file.read_row_group(group, columns=["watcher", "rv", "applied_ts"])
        watcher, rv, applied = (table.column(name).combine_chunks()
                                for name in ("watcher", "rv", "applied_ts"))
        if watcher.null_count or rv.null_count:
            return None
        if names is None or not watcher.dictionary.equals(names):
            names = watcher.dictionary
            lookup = np.array([ids.get(name, 0) for name in names.to_pylist()] or [0],
                              dtype=np.int64)
        viewer_id = lookup[watcher.indices.to_numpy()]
        kept = viewer_id > 0
        group_cols = {"viewer_id": viewer_id, "rv": rv.to_numpy(),
                      "applied_us": applied.fill_null(_NEVER).cast(pa.int64()).to_numpy(),
                      "missed": applied.is_null().to_numpy(zero_copy_only=False)
                      if applied.null_count else np.zeros(len(kept), dtype=bool)}
        count = int(np.count_nonzero(kept))
        for name, column in group_cols.items():  # each row group's kept rows after the last's
            cols[name][at:at + count] = column if count == len(kept) else column[kept]
        at += count
    return {name: column[:at] for name, column in cols.items()}


def _change_of(change_key: np.ndarray, rvs: int) -> np.ndarray | None:
    """Each change's row at its key (rv * 3 + class + 1, below ``3 * rvs``), -1 where no change
    has that key: one read a delivery instead of a binary search (the rvs number the run's
    writes, so the table is three int32 a write).  None if two changes share a key."""
    change_of = np.full(3 * rvs, -1, dtype=np.int32)
    rows = np.arange(len(change_key), dtype=np.int32)
    change_of[change_key] = rows
    return change_of if np.array_equal(change_of[change_key], rows) else None


def _on_shares(kernel: Callable[..., Any], count: int, *args: Any) -> list[Any]:
    """``kernel(start, end, *args)`` for ``RECEIVE_THREADS`` contiguous shares of
    ``range(count)``, each on a thread of its own (the kernels release the GIL); their results
    in the shares' order."""
    with ThreadPoolExecutor(RECEIVE_THREADS, thread_name_prefix="replay-lags") as pool:
        with interrupts.deferred():  # not inside the executor's locks
            done = [pool.submit(kernel, start, end, *args) for start, end in _shares(count)]
        return [future.result() for future in done]


def _shares(count: int) -> list[tuple[int, int]]:
    """``range(count)`` cut into ``RECEIVE_THREADS`` contiguous shares, as (start, end)."""
    ends = [count * (share + 1) // RECEIVE_THREADS for share in range(RECEIVE_THREADS)]
    return list(zip([0, *ends[:-1]], ends))


def _receive(viewer_id: np.ndarray, *args: Any) -> tuple[np.ndarray, ...]:
    """``_receive_kernel`` over the deliveries, a share of them on each thread
    (``_on_shares``): each share's rows are written from its first delivery's place on, then
    moved down to follow the share before."""
    count = len(viewer_id)
    out = (np.empty(count, np.int64), np.empty(count, np.int32), np.empty(count, np.int64),
           np.empty(count, np.int64))
    received = _on_shares(_receive_kernel, count, viewer_id, *args, *out)
    at = 0
    for (start, _), rows in zip(_shares(count), received):
        if at < start:
            for column in out:
                column[at:at + rows] = column[start:start + rows]
        at += rows
    return tuple(column[:at] for column in out)


@njit(cache=True, nogil=True)
def _receive_kernel(start, end, viewer_id, rv, viewer_class, only_one, only_node_id, change_of,
                    change_node, change_rv, nodes, rvs, first_pair, rows, change, key,
                    pair):  # pragma: no cover - compiled
    """Per delivery from ``start`` to ``end``, in one pass: the change its viewer received
    (the change of the delivery's rv in the viewer's class; for a kubelet, only one of its
    node), written from row ``start`` on as the delivery's row (``rows``), the change's row
    (``change``), the lag key (``_lag_key``) and the pair's number (``_pair_numbers``) of each
    delivery that received one, in the deliveries' order; returns how many did."""
    count = start
    for i in range(start, end):
        viewer = viewer_id[i] - 1
        wanted = rv[i] * 3 + viewer_class[viewer] + 1
        if wanted < 0 or wanted >= len(change_of) or change_of[wanted] < 0:
            continue
        c = change_of[wanted]
        if only_one[viewer] and change_node[c] != only_node_id[viewer]:
            continue
        rows[count], change[count] = i, c
        key[count] = (viewer_id[i] * nodes + change_node[c]) * rvs + change_rv[c]
        pair[count] = first_pair[viewer] + (0 if only_one[viewer] else change_node[c])
        count += 1
    return count - start


def _lags(order: np.ndarray, *args: np.ndarray
          ) -> tuple[bool, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``_lag_kernel`` over the lags in ``order``, a share of them on each thread
    (``_on_shares``): whether two lags have one key, then the lags' columns."""
    count = len(order)
    out = (np.empty(count, np.int32), np.empty(count, np.int32), np.empty(count, np.int64),
           np.empty(count, np.int64), np.empty(count, np.bool_))
    return (any(_on_shares(_lag_kernel, count, order, *args, *out)), *out)


@njit(cache=True, nogil=True)
def _lag_kernel(start, end, order, key, rows, change, viewer_id, applied_us, watcher_code,
                assumed_code, folds_code, assumed_until_us, commit_us, lag_viewer, lag_change,
                applied, view, own):  # pragma: no cover - compiled
    """The received lags' own columns in the sweep's order (``order``; ``key``: their keys in
    that order), from ``_receive_kernel``'s delivery and change rows, for the lags from
    ``start`` to ``end``, in one pass instead of a dozen gathers of the 10M-27M lags of a
    1M-pod run: the viewer, the change, when the delivery was applied (every one was:
    ``_received`` checked), when the change entered the view (its commit, where the viewer's
    own assumption had folded it in before), whether the viewer assumed it.  Returns whether
    a lag has the key of the one before (a change received twice: the columns are then
    incomplete)."""
    for i in range(start, end):
        o = order[i]
        if i > 0 and key[i] == key[i - 1]:
            return True
        r, c = rows[o], change[o]
        watcher = watcher_code[viewer_id[r] - 1]
        lag_viewer[i], lag_change[i], applied[i] = viewer_id[r], c, applied_us[r]
        folds = folds_code[c] == watcher and assumed_until_us[c] >= applied[i]
        view[i] = commit_us[c] if folds else applied[i]
        own[i] = assumed_code[c] == watcher
    return False


def _lag_key(viewer: np.ndarray, node: np.ndarray, rv: np.ndarray, nodes: int, rvs: int
             ) -> np.ndarray:
    """Viewer, node and rv packed in one integer that sorts as the three (``_received``
    checked that it fits)."""
    return (_ints(viewer) * nodes + node) * rvs + rv


def _with_missed(con: duckdb.DuckDBPyConnection, received: Lags, nodes: int, rvs: int
                 ) -> Lags:
    """The SQL's ``lags``: the received changes and those of ``missed``."""
    missed = _numpy(con.sql("""
        SELECT viewer_id::INTEGER AS viewer_id, change_id, epoch_us(view_ts) AS view_us, own
        FROM missed"""))
    if not len(missed["viewer_id"]):
        return received
    changes = received.changes
    row_of = np.zeros(int(changes["change_id"].max()) + 1, dtype=np.int32)
    row_of[changes["change_id"]] = np.arange(len(changes["change_id"]), dtype=np.int32)
    count = len(missed["viewer_id"])
    added = {"viewer_id": missed["viewer_id"], "change": row_of[missed["change_id"]],
             "applied_us": np.full(count, _NEVER), "missed": np.ones(count, dtype=bool),
             "view_us": missed["view_us"], "own": missed["own"],
             "from_missed": np.ones(count, dtype=bool)}
    lags = Lags(changes, {name: np.concatenate([column, added[name].astype(column.dtype)])
                          for name, column in received.own.items()})
    order = np.argsort(_lag_key(lags["viewer_id"], lags["node_id"], lags["rv"], nodes, rvs))
    return Lags(changes, {name: column[order] for name, column in lags.own.items()})


def _sizes(con: duckdb.DuckDBPyConnection) -> tuple[int, int]:
    """Bounds of the node ids and rvs, for ``_lag_key`` (while ``nodes`` and ``changes``
    exist)."""
    nodes, rvs = con.sql("""SELECT (SELECT coalesce(max(node_id), 0) + 1 FROM nodes),
                                   (SELECT coalesce(max(rv), 0) + 2 FROM changes)""").fetchall()[0]
    return int(nodes), int(rvs)


def _lags_table(lags: Lags) -> pa.Table:
    """The columns of the SQL's ``received`` and ``lags`` that its later expressions read
    (``shortfall``, ``missed``, ``held``), with its nulls."""
    def ts(values: np.ndarray, null: np.ndarray | None = None) -> pa.Array:
        return pa.array(values, type=pa.timestamp("us", tz="UTC"),
                        mask=null if null is not None and null.any() else None)

    return pa.table({
        "viewer_id": lags["viewer_id"].astype(np.int64), "change_id": lags["change_id"],
        "node_id": lags["node_id"], "rv": lags["rv"], "commit_ts": ts(lags["commit_us"]),
        "applied_ts": ts(lags["applied_us"], lags["missed"]), "view_ts": ts(lags["view_us"]),
        "own": lags["own"]})


def sweep(con: duckdb.DuckDBPyConnection, lags: Lags, nodes: int, rvs: int) -> Sweep:
    """The SQL's ``inverted`` to ``windows`` and ``stale_segments``, from the lags and the
    ``held`` assumptions in ``con``, a part of the watcher-node pairs at a time (pairs do not
    interact), so that the arrays of the sweep's steps stay small beside the lags'."""
    held = _arrow(con.sql("""
        SELECT viewer_id, node_id, epoch_us(start_ts) AS start_us, epoch_us(end_ts) AS end_us,
               at_end, cpu_milli::BIGINT AS cpu, memory_bytes::BIGINT AS memory,
               gpu_milli::BIGINT AS gpu
        FROM held"""))
    held_pair = pairs_of(held, nodes)
    by_pair = np.argsort(held_pair, kind="stable")
    held, held_pair = held.take(by_pair), held_pair[by_pair]
    pair = _ints(lags["viewer_id"]) * nodes + lags["node_id"]

    def swept(bounds: tuple[int, int, int, int]) -> tuple[Part, pa.Table]:
        start, end, first, last = bounds
        part = Lags(lags.changes, {name: column[start:end] for name, column in lags.own.items()})
        lone, merged, segments = _sweep_part(part, pair[start:end],
                                             held.slice(first, last - first),
                                             held_pair[first:last], nodes, rvs)
        return Part(np.union1d(pair[start:end], held_pair[first:last]), lone, merged), segments

    with ThreadPoolExecutor(SWEEP_THREADS) as pool:
        parts, stale = zip(*pool.map(swept, _part_bounds(pair, held_pair)))
    return Sweep(list(parts), pa.concat_tables(stale), nodes)


def _part_bounds(pair: np.ndarray, held_pair: np.ndarray) -> list[tuple[int, int, int, int]]:
    """The sweep's parts of the lags (their pairs, ``pair``, sorted), growing from
    ``SWEEP_ROWS >> FIRST_PART_SHIFT`` lags to at most SWEEP_ROWS unless one pair has more,
    and at least one part: each part's first and end lag, and first and end held assumption
    (those of its pairs, and in the first and last parts those of any pair before or after
    every lag's)."""
    bounds: list[tuple[int, int, int, int]] = []
    start, count = 0, len(pair)
    size = max(SWEEP_ROWS >> FIRST_PART_SHIFT, 1)
    while not bounds or start < count:
        end = min(start + size, count)
        size = min(2 * size, SWEEP_ROWS)
        if end < count:  # end at a pair's first lag, after at least one whole pair
            end = int(np.searchsorted(pair, pair[end], side="left"))
            if end == start:
                end = int(np.searchsorted(pair, pair[start], side="right"))
        first = 0 if start == 0 else int(np.searchsorted(held_pair, pair[start], side="left"))
        last = (len(held_pair) if end >= count
                else int(np.searchsorted(held_pair, pair[end], side="left")))
        bounds.append((start, end, first, last))
        start = end
    return bounds


def _sweep_part(lags: Lags, pair: np.ndarray, held: pa.Table, held_pair: np.ndarray,
                nodes: int, rvs: int) -> tuple[pa.Table, pa.Table, pa.Table]:
    key = pair * rvs + lags["rv"]  # sorted: _received and _with_missed keep the lags so
    irregular = np.concatenate([pair[lags["from_missed"]], held_pair])
    alone = _alone(lags, pair, key, rvs, irregular)
    del key
    lone_windows = _lone(lags, alone)
    merged_windows, stale_segments = _merged(lags, pair, ~alone, held, nodes)
    return lone_windows, merged_windows, stale_segments


def pairs_of(table: pa.Table | pa.RecordBatch, nodes: int) -> np.ndarray:
    """The rows' watcher-node pairs: viewer_id * nodes + node_id."""
    return (_ints(table.column("viewer_id").to_numpy()) * nodes
            + table.column("node_id").to_numpy())


def _alone(cols: Lags, pair: np.ndarray, key: np.ndarray, rvs: int,
           irregular: np.ndarray) -> np.ndarray:
    """``classified.alone``: the pair is regular (``irregular``: it missed a change or held an
    assumption; or ``inverted``, found here), the previous change of the node (as the
    viewer received it) was applied before this one committed, and the next one committed
    after this one entered the view."""
    # the previous change's row: the row before, if it holds it, else wherever it is
    previous_rv = cols["previous_rv"]
    wanted = pair * rvs + previous_rv
    at = np.empty(len(key), dtype=np.int64)
    at[0:1] = -1
    at[1:] = np.arange(len(key) - 1)
    found = np.zeros(len(key), dtype=bool)
    found[1:] = key[:-1] == wanted[1:]
    others = np.flatnonzero(~found & (previous_rv >= 0))
    del previous_rv
    if len(others):
        where = np.searchsorted(key, wanted[others])
        hit = where < len(key)
        hit[hit] = key[where[hit]] == wanted[others[hit]]
        at[others[hit]] = where[hit]
        found[others[hit]] = True
    previous_applied = np.where(found, cols["applied_us"][np.maximum(at, 0)], _NEVER)
    previous_missed = np.where(found, cols["missed"][np.maximum(at, 0)], True)
    # ``inverted``: pairs with a change applied before the change committed before it
    inverted = ~previous_missed & ~cols["missed"] & (previous_applied > cols["applied_us"])
    irregular = np.concatenate([irregular, pair[inverted]])
    return (~np.isin(pair, irregular)
            & (previous_missed | (previous_applied < cols["commit_us"]))
            & (cols["next_commit_us"] > cols["view_us"]))


def _lone(cols: Lags, alone: np.ndarray) -> pa.Table:
    """``lone_windows``: rows of ``windows`` with the truth and the view of their one segment,
    which ``stale_segments`` reads for the stale ones (``view = truth - change``)."""
    lagging = np.flatnonzero(alone & (cols["view_us"] > cols["commit_us"]))
    windows = []
    for number, resource in enumerate(RESOURCES):
        change = cols.at(resource, lagging)
        rows = lagging[change != 0]
        change = change[change != 0]
        truth = cols.at(f"truth_{resource}", rows)
        table = _windows_table(cols.at("viewer_id", rows), cols.at("node_id", rows),
                               np.full(len(rows), number, dtype=np.int8),
                               cols.at("commit_us", rows), cols.at("view_us", rows),
                               np.zeros(len(rows), dtype=bool), change > 0, np.abs(change))
        windows.append(table.append_column("truth", pa.array(truth))
                       .append_column("view", pa.array(truth - change)))
    return pa.concat_tables(windows)


def resource_code(column: str) -> str:
    """SQL for a resource's name in ``column`` as its code (its place in ``RESOURCES``)."""
    cases = " ".join(f"WHEN '{r}' THEN {c}" for c, r in enumerate(RESOURCES))
    return f"CASE {column} {cases} END"


def _timestamps(us: np.ndarray) -> pa.Array:
    return pa.array(_ints(us), type=pa.timestamp("us", tz="UTC"))


def _resources(codes: np.ndarray) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(codes, type=pa.int8()), pa.array(RESOURCES))


def _ints(values: np.ndarray) -> np.ndarray:
    return values.astype(np.int64, copy=False)


def _windows_table(viewer, node, resource, start, end, open_at_end, stale, gap_max,
                   *halves) -> pa.Table:
    """Rows of ``windows``; ``halves``: the integrals' high and low 64 bits, if computed."""
    return pa.table({"viewer_id": _ints(viewer), "node_id": _ints(node),
                     "resource": _resources(resource), "start_ts": _timestamps(start),
                     "end_ts": _timestamps(end), "open_at_end": open_at_end, "stale": stale,
                     "gap_max": _ints(gap_max),
                     **dict(zip(("gap_hi", "gap_lo"), halves))})


def _stale_table(viewer, node, resource, start, end, window, truth, view) -> pa.Table:
    return pa.table({"viewer_id": _ints(viewer), "node_id": _ints(node),
                     "resource": _resources(resource), "start_ts": _timestamps(start),
                     "end_ts": _timestamps(end), "window_ts": _timestamps(window),
                     "truth": _ints(truth), "view": _ints(view)})


def _merged(cols: Lags, pair: np.ndarray, swept: np.ndarray, held: pa.Table,
            nodes: int) -> tuple[pa.Table, pa.Table]:
    """``points`` to ``merged_segments`` and their windows: the lags that are not alone and
    the held assumptions, as steps of the difference (view minus truth) at each instant, swept
    per viewer and node in time order."""
    rows = np.flatnonzero(swept)
    lagging = cols.at("view_us", rows) > cols.at("commit_us", rows)
    entered = rows[lagging]
    held_cols = {name: held.column(name).to_numpy() for name in held.column_names}
    held_pair = pairs_of(held, nodes)
    gaps = np.stack([np.concatenate([np.where(lagging, -cols.at(r, rows), 0),
                                     cols.at(r, entered), held_cols[r], -held_cols[r]])
                     for r in RESOURCES])
    point_pair = np.concatenate([pair[rows], pair[entered], held_pair, held_pair])
    ts = np.concatenate([cols.at("commit_us", rows), cols.at("view_us", entered),
                         held_cols["start_us"], held_cols["end_us"]])
    none = np.full(len(entered) + 2 * len(held_pair), -1, dtype=np.int64)
    rv = np.concatenate([cols.at("rv", rows), none])  # -1: no change commits at this point
    truths = np.stack([np.concatenate([cols.at(f"truth_{r}", rows), none * 0])
                       for r in RESOURCES])
    at_end = np.concatenate([np.zeros(len(rows), dtype=bool), cols.at("missed", entered),
                             np.zeros(len(held_pair), dtype=bool),
                             held_cols["at_end"].astype(bool)])
    out = _sweep_kernel(lex_order((ts, point_pair)), point_pair, ts, rv, gaps, truths, at_end)
    (w_pair, w_res, w_start, w_end, w_open, w_stale, w_max, w_hi, w_lo,
     s_pair, s_res, s_start, s_end, s_window, s_truth, s_view) = out
    windows = _windows_table(w_pair // nodes, w_pair % nodes, w_res, w_start, w_end, w_open,
                             w_stale, w_max, w_hi, w_lo)
    stale = _stale_table(s_pair // nodes, s_pair % nodes, s_res, s_start, s_end, s_window,
                         s_truth, s_view)
    return windows, stale


@njit(cache=True, nogil=True)
def mul_add128(a, b, hi, lo):  # pragma: no cover - compiled
    """``hi * 2**64 + lo += a[i] * b[i]`` for non-negative int64 ``a`` and ``b``, exactly."""
    mask = np.uint64(0xFFFFFFFF)
    for i in range(len(a)):
        x, y = np.uint64(a[i]), np.uint64(b[i])
        x0, x1 = x & mask, x >> np.uint64(32)
        y0, y1 = y & mask, y >> np.uint64(32)
        low = x0 * y0
        mid1 = x1 * y0
        mid2 = x0 * y1
        high = x1 * y1
        mid = (low >> np.uint64(32)) + (mid1 & mask) + (mid2 & mask)
        product_lo = (low & mask) | ((mid & mask) << np.uint64(32))
        product_hi = high + (mid1 >> np.uint64(32)) + (mid2 >> np.uint64(32)) + (mid >> np.uint64(32))
        new_lo = lo[i] + product_lo
        carry = np.uint64(1) if new_lo < lo[i] else np.uint64(0)
        lo[i] = new_lo
        hi[i] += np.int64(product_hi + carry)


@njit(cache=True, nogil=True)
def _sweep_kernel(order, pair, ts, rv, gaps, truths, at_end):  # pragma: no cover - compiled
    """The SQL's ``instants``, ``stepped``, ``merged_segments`` and their windows over points
    taken in ``order`` (by pair and time; read through it rather than gathered by it: nine
    gathers took most of the time of this pass): one pass that sums each instant's points,
    then one over the instants that carries each resource's difference and its open
    window."""
    n = len(order)
    # instants: (pair, ts) groups
    i_pair = np.empty(n, np.int64)
    i_ts = np.empty(n, np.int64)
    i_step = np.empty((3, n), np.int64)
    i_ends = np.empty((3, n), np.bool_)
    i_truth = np.empty((3, n), np.int64)
    i_has_truth = np.empty(n, np.bool_)
    ended = np.zeros(3, np.int64)
    count = 0
    k = 0
    while k < n:
        first = order[k]
        j = k
        best_rv = -1
        ended[:] = 0
        for r in range(3):
            i_step[r, count] = 0
        while j < n and pair[order[j]] == pair[first] and ts[order[j]] == ts[first]:
            p = order[j]
            for r in range(3):
                i_step[r, count] += gaps[r, p]
                if at_end[p]:
                    ended[r] += gaps[r, p]
            if rv[p] >= 0 and rv[p] > best_rv:
                best_rv = rv[p]
                for r in range(3):
                    i_truth[r, count] = truths[r, p]
            j += 1
        i_pair[count] = pair[first]
        i_ts[count] = ts[first]
        i_has_truth[count] = best_rv >= 0
        for r in range(3):
            i_ends[r, count] = ended[r] != 0
        count += 1
        k = j
    # windows (at most one per resource per instant) and stale segments
    w_pair = np.empty(3 * count, np.int64)
    w_res = np.empty(3 * count, np.int8)
    w_start = np.empty(3 * count, np.int64)
    w_end = np.empty(3 * count, np.int64)
    w_open = np.empty(3 * count, np.bool_)
    w_stale = np.empty(3 * count, np.bool_)
    w_max = np.empty(3 * count, np.int64)
    w_hi = np.empty(3 * count, np.int64)
    w_lo = np.empty(3 * count, np.uint64)
    s_pair = np.empty(3 * count, np.int64)
    s_res = np.empty(3 * count, np.int8)
    s_start = np.empty(3 * count, np.int64)
    s_end = np.empty(3 * count, np.int64)
    s_window = np.empty(3 * count, np.int64)
    s_truth = np.empty(3 * count, np.int64)
    s_view = np.empty(3 * count, np.int64)
    windows = 0
    segments = 0
    current = np.full(3, -1, np.int64)  # each resource's open window (its row), -1: none
    gap = np.zeros(3, np.int64)
    truth = np.zeros(3, np.int64)
    one = np.zeros(1, np.int64)
    one_b = np.zeros(1, np.int64)
    one_hi = np.zeros(1, np.int64)
    one_lo = np.zeros(1, np.uint64)
    for i in range(count):
        if i == 0 or i_pair[i] != i_pair[i - 1]:
            for r in range(3):
                gap[r] = 0
                truth[r] = 0
                current[r] = -1
        if i_has_truth[i]:
            for r in range(3):
                truth[r] = i_truth[r, i]
        last = i + 1 == count or i_pair[i + 1] != i_pair[i]
        for r in range(3):
            before = gap[r]
            gap[r] += i_step[r, i]
            if gap[r] == 0:
                continue
            if np.sign(gap[r]) != np.sign(before):
                current[r] = windows
                w_pair[windows] = i_pair[i]
                w_res[windows] = r
                w_start[windows] = i_ts[i]
                w_end[windows] = i_ts[i]
                w_open[windows] = False
                w_stale[windows] = gap[r] < 0
                w_max[windows] = 0
                w_hi[windows] = 0
                w_lo[windows] = 0
                windows += 1
            if last:  # cannot happen: every step is undone within its pair
                raise ValueError("a difference left open at the end of a pair")
            w = current[r]
            end = i_ts[i + 1]
            w_end[w] = max(w_end[w], end)
            if i_ends[r, i + 1]:
                w_open[w] = True
            size = abs(gap[r])
            w_max[w] = max(w_max[w], size)
            one[0] = size
            one_b[0] = end - i_ts[i]
            one_hi[0] = w_hi[w]
            one_lo[0] = w_lo[w]
            mul_add128(one, one_b, one_hi, one_lo)
            w_hi[w] = one_hi[0]
            w_lo[w] = one_lo[0]
            if gap[r] < 0:
                s_pair[segments] = i_pair[i]
                s_res[segments] = r
                s_start[segments] = i_ts[i]
                s_end[segments] = end
                s_window[segments] = w_start[w]
                s_truth[segments] = truth[r]
                s_view[segments] = truth[r] + gap[r]
                segments += 1
    return (w_pair[:windows], w_res[:windows], w_start[:windows], w_end[:windows],
            w_open[:windows], w_stale[:windows], w_max[:windows], w_hi[:windows],
            w_lo[:windows], s_pair[:segments], s_res[:segments], s_start[:segments],
            s_end[:segments], s_window[:segments], s_truth[:segments], s_view[:segments])
