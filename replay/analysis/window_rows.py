"""The final query of ``queries/derived/capacity_windows.sql`` in numpy: the windows of the
sweep (``replay.analysis.windows``) with their names, units, ``wasted`` and ``conflicts``, in
the query's order, as the Arrow tables DuckDB would hand out for it.

Why: DuckDB spent a third of the derivation there at 1M pods (15 s of CPU for observe's 16.6M
windows), joining the names and sorting every row by them beside its memory cap.  The sweep's
parts already come in the order of the watcher-node pairs, which the query orders by first, so
each part (cut at its pairs into pieces of ``PIECE_ROWS`` windows) is sorted alone, by one
integer per window: its pair's rank in the piece, its resource (in the order of the resources'
names) and its start.  ``wasted`` and ``conflicted`` stay SQL
(small joins of the stale segments and the attempts): their rows are found among the sorted
windows by that integer.  The numbers are DuckDB's: a window's integral is a 128-bit integer
converted to the nearest double, as DuckDB 2's cast does, then divided as the query divides.

The tables come ``BATCH_ROWS`` rows at a time, each one chunk, as DuckDB hands out a sorted
result: each becomes a row group of the file, which stays byte for byte what the SQL writes.
The names stay numbers until a batch is cut, then become its Arrow dictionaries, numbered in
the order of first appearance as ``replay.analysis.derive`` hands the SQL's strings over.
``rows`` returns None (the SQL's final query runs) where the names are not numbered 1, 2, ...
or the sort's integer would not fit in 64 bits.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import duckdb
import numpy as np
import pyarrow as pa

from replay import interrupts
from replay.analysis.windows import RESOURCES, Part, Sweep, mul_add128, pairs_of, resource_code
from replay.arrays import search_left, stable_sort
from replay.jit import njit

BATCH_ROWS = 122_880  # DuckDB's row group: the batches its reader hands out for a sorted result
# windows made into rows at a time, about: each part of the sweep (``windows.SWEEP_ROWS`` lags,
# about 1.6 windows a lag in the 1M-pod observe run) is cut at its pairs into pieces of this size
# (``_pieces``), so that the rows' footprint does not follow the sweep's parts.  The arrays of
# the piece being made, of the one being cut into batches and of those the file's writer still
# holds are the final rows' footprint, and pages the process takes new: made a part of 2**21
# lags (3.4M windows) at a time, the 1M-pod observe run's rows faulted in 234k pages (0.9 GB),
# a piece at a time 54k, and its whole ``replay run`` took a median 0.86 s less (4 of 4 pairs),
# 0.86 CPU s and 181k faults fewer (benchmarks/ROUNDS.md, thirty-fifth round).  Pieces of 2**18
# faulted 34k but took more CPU; of 2**20, 87k.
PIECE_ROWS = 1 << 19
UNITS = np.array([{"cpu": 1000.0, "memory": 1073741824.0, "gpu": 1000.0}[r] for r in RESOURCES])
# each resource's place in the order of their names ('cpu' < 'gpu' < 'memory'), by its code
NAME_RANK = np.argsort(np.argsort(np.array(RESOURCES)))
KINDS = pa.array(["phantom", "stale"])  # a window's kind by its ``stale`` flag
NAMES = ("watcher", "node", "resource", "kind")
# the rows as made, each name as a number: its place in the watchers', nodes', RESOURCES' or
# KINDS' names
NUMBERED = pa.schema([("watcher", pa.int64()), ("node", pa.int64()), ("resource", pa.int8()),
                      ("kind", pa.int8()), ("start_ts", pa.timestamp("us", tz="UTC")),
                      ("end_ts", pa.timestamp("us", tz="UTC")), ("open_at_end", pa.bool_()),
                      ("gap_max", pa.float64()), ("gap_seconds", pa.float64()),
                      ("wasted", pa.bool_()), ("conflicts", pa.int64())])
# and as handed out
SCHEMA = pa.schema([pa.field(f.name, pa.dictionary(pa.int32(), pa.string()))
                    if f.name in NAMES else f for f in NUMBERED])
_KEY_BITS = 63  # the sort's integer: non-negative int64


class Marks:
    """Rows of ``wasted`` or ``conflicted`` (a window's key and a count), sorted by pair."""

    def __init__(self, con: duckdb.DuckDBPyConnection, sql: str, nodes: int):
        table = con.sql(f"""
            SELECT viewer_id * {nodes} + node_id AS pair,
                   {resource_code("resource")} AS code, epoch_us(start_ts) AS start_us, count
            FROM ({sql})
            ORDER BY pair""").fetchnumpy()
        self.pair, self.code = table["pair"], table["code"]
        self.start, self.count = table["start_us"], table["count"]

    def within(self, pairs: np.ndarray) -> slice:
        """The rows of the pairs from ``pairs[0]`` to ``pairs[-1]``."""
        if not len(pairs):
            return slice(0, 0)
        return slice(int(np.searchsorted(self.pair, pairs[0], side="left")),
                     int(np.searchsorted(self.pair, pairs[-1], side="right")))


def rows(con: duckdb.DuckDBPyConnection, sweep: Sweep) -> Iterator[pa.Table] | None:
    """The final query's result from ``sweep`` and the connection's ``viewers``, ``nodes``,
    ``wasted`` and ``conflicted``; None if the SQL must compute it (see the module's doc)."""
    watchers = _names(con, "SELECT viewer_id AS id, watcher AS name FROM viewers")
    nodes = _names(con, "SELECT node_id AS id, node AS name FROM nodes")
    if watchers is None or nodes is None:
        return None
    starts = [_column(t, "start_ts") for p in sweep.parts
              for t in (p.lone_windows, p.merged_windows) if t.num_rows]
    first = min((int(s.min()) for s in starts), default=0)
    shift = max((int(s.max()) - first for s in starts), default=0).bit_length()
    most_pairs = max(len(p.pairs) for p in sweep.parts)
    if (most_pairs * len(RESOURCES)).bit_length() + shift > _KEY_BITS:
        return None
    wasted = Marks(con, "SELECT *, 1 AS count FROM wasted", sweep.nodes)
    conflicted = Marks(con, """SELECT viewer_id, node_id, resource, start_ts, conflicts AS count
                               FROM conflicted""", sweep.nodes)
    names = (watchers, nodes, pa.array(RESOURCES), KINDS)
    return (_named(batch, names) for batch in _batches(_one_ahead(
        functools.partial(_part_rows, nodes=sweep.nodes, first=first, shift=shift,
                          wasted=wasted, conflicted=conflicted),
        (piece for part in sweep.parts for piece in _pieces(part, sweep.nodes)))))


def _pieces(part: Part, nodes: int) -> Iterator[Part]:
    """``part`` cut at its pairs into pieces of about ``PIECE_ROWS`` windows, in the pairs'
    order; ``part`` whole where it has one pair, or where its lone windows' runs (one per
    resource) or its merged windows are not each in the pairs' order.  A piece's windows sort
    alone as the part's do, so the rows come in the same order."""
    count = part.lone_windows.num_rows + part.merged_windows.num_rows
    if count <= PIECE_ROWS or len(part.pairs) < 2:
        yield part
        return
    runs = {name: getattr(part, name).to_batches() for name in ("lone_windows", "merged_windows")}
    pairs = {name: [pairs_of(run, nodes) for run in table] for name, table in runs.items()}
    if not all(_ascending(p) for table in pairs.values() for p in table):
        yield part
        return
    cuts = np.linspace(0, len(part.pairs), -(-count // PIECE_ROWS) + 1).astype(np.int64)
    for lo, hi in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        if lo < hi:
            yield Part(part.pairs[lo:hi], *(_within(part, name, runs[name], pairs[name], lo, hi)
                                             for name in runs))


def _within(part: Part, name: str, runs: list[pa.RecordBatch], pairs: list[np.ndarray],
            lo: int, hi: int) -> pa.Table:
    """The rows of ``part``'s table ``name`` (as ``runs``, whose pairs are ``pairs``) of the
    part's pairs ``lo`` to ``hi`` (not included); the first and last pieces take any rows
    before or after the part's pairs too, so that each row is in one piece."""
    def bounds(run: np.ndarray) -> tuple[int, int]:
        start = 0 if lo == 0 else int(np.searchsorted(run, part.pairs[lo], side="left"))
        end = (len(run) if hi == len(part.pairs)
               else int(np.searchsorted(run, part.pairs[hi], side="left")))
        return start, end - start
    schema = getattr(part, name).schema
    return pa.Table.from_batches([run.slice(*bounds(pair)) for run, pair in zip(runs, pairs)],
                                 schema=schema)


def _ascending(values: np.ndarray) -> bool:
    return bool(np.all(values[1:] >= values[:-1]))


def _one_ahead(make: Callable[[Part], pa.Table], parts: Iterable[Part]) -> Iterator[pa.Table]:
    """``make(part)`` for each part (or piece) in order, the next one made on a thread of its
    own while the caller takes the current one.

    A part of the sweep holds millions of windows, a few dozen ``BATCH_ROWS`` batches, and the
    file's writer takes at most ``WRITER_AHEAD`` of them ahead (replay.analysis.derive).  Made
    in turn, the writer had nothing to do while the next part was made: on the 1M-pod observe
    run it was idle for 3.3 of the final rows' 9 s, about as long as they took to make.  numpy
    and Arrow release the GIL while they work, so the two overlap; one part ahead costs the
    memory of one part's rows (one piece's: ``_pieces``)."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="replay-window-rows") as pool:
        made: list[Future[pa.Table]] = []
        for part in parts:
            made.append(_submit(pool, make, part))
            if len(made) == 2:
                yield made.pop(0).result()
        for current in made:
            yield current.result()


def _submit(pool: ThreadPoolExecutor, make: Callable[[Part], pa.Table],
            part: Part) -> Future[pa.Table]:
    with interrupts.deferred():  # not inside the executor's locks
        return pool.submit(make, part)


def _names(con: duckdb.DuckDBPyConnection, sql: str) -> pa.Array | None:
    """The names numbered by ``sql``'s ids, in their order; None unless the ids are 1, 2, ..."""
    table = con.sql(f"{sql} ORDER BY id").arrow()
    table = table.read_all() if hasattr(table, "read_all") else table
    ids = table.column("id").to_numpy()
    if not np.array_equal(ids, np.arange(1, len(ids) + 1)):
        return None
    return table.column("name").combine_chunks()


def _column(table: pa.Table, name: str) -> np.ndarray:
    """A column as numpy: times as integer microseconds, resources as their codes."""
    column = table.column(name).combine_chunks()
    if pa.types.is_dictionary(column.type):
        return column.indices.to_numpy()
    if pa.types.is_timestamp(column.type):
        return column.to_numpy().view(np.int64)
    return column.to_numpy(zero_copy_only=False)


def _part_rows(part: Part, nodes: int, first: int, shift: int, wasted: Marks,
               conflicted: Marks) -> pa.Table:
    """A part's windows, lone and merged, sorted, with their marks (``NUMBERED``)."""
    lone, merged = part.lone_windows, part.merged_windows
    cols = {name: np.concatenate([_column(lone, name), _column(merged, name)])
            for name in ("viewer_id", "node_id", "resource", "start_ts", "end_ts",
                         "open_at_end", "stale", "gap_max")}
    hi = np.concatenate([np.zeros(lone.num_rows, np.int64), _column(merged, "gap_hi")])
    lo = np.concatenate([np.zeros(lone.num_rows, np.uint64), _column(merged, "gap_lo")])
    lone_rows = slice(0, lone.num_rows)
    mul_add128(cols["gap_max"][lone_rows],
                cols["end_ts"][lone_rows] - cols["start_ts"][lone_rows],
                hi[lone_rows], lo[lone_rows])
    keys = _keys(part.pairs, cols["viewer_id"] * nodes + cols["node_id"], cols["resource"],
                 cols["start_ts"], first, shift)
    order, keys = stable_sort(keys)
    cols = {name: column[order] for name, column in cols.items()}
    hi, lo = hi[order], lo[order]
    is_wasted = _marked(keys, part, wasted, first, shift, np.zeros(len(keys), bool))
    conflicts = _marked(keys, part, conflicted, first, shift, np.zeros(len(keys), np.int64))
    code, stale = cols["resource"], cols["stale"]
    gap_max, gap_seconds = _per_unit(cols["gap_max"], hi, lo, code, UNITS)
    return pa.table([
        cols["viewer_id"] - 1, cols["node_id"] - 1, code.astype(np.int8, copy=False),
        stale.view(np.int8), pa.array(cols["start_ts"], type=NUMBERED.field("start_ts").type),
        pa.array(cols["end_ts"], type=NUMBERED.field("end_ts").type),
        pa.array(cols["open_at_end"]), pa.array(gap_max), pa.array(gap_seconds),
        pa.array(is_wasted, mask=~stale), pa.array(conflicts, mask=stale)], schema=NUMBERED)


def _keys(pairs: np.ndarray, pair: np.ndarray, code: np.ndarray, start: np.ndarray,
          first: int, shift: int) -> np.ndarray:
    """The integer that sorts windows as the query does within a part: the pair's rank among
    the part's, the resource's name, the start (``rows`` checked that it fits)."""
    return _ranked_keys(pairs, pair, code, start, NAME_RANK, first, shift)


def _marked(keys: np.ndarray, part: Part, marks: Marks, first: int, shift: int,
            counts: np.ndarray) -> np.ndarray:
    """``counts`` with the marks' counts at the rows of their windows (a left join); a bool
    ``counts`` is whether a window is marked."""
    rows = marks.within(part.pairs)
    pair = marks.pair[rows]
    wanted = _keys(part.pairs, pair, marks.code[rows], marks.start[rows], first, shift)
    if not len(keys) or not len(wanted):
        return counts
    rank = np.minimum(np.searchsorted(part.pairs, pair), len(part.pairs) - 1)
    at = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    hit = (part.pairs[rank] == pair) & (keys[at] == wanted)
    counts[at[hit]] = marks.count[rows][hit]
    return counts


def _batches(tables: Iterator[pa.Table]) -> Iterator[pa.Table]:
    """``tables`` cut and joined into tables of ``BATCH_ROWS`` rows (the last may be shorter),
    each one chunk; one empty table if there are no rows."""
    held: list[pa.Table] = []
    count, cut = 0, False
    for table in tables:
        held.append(table)
        count += table.num_rows
        while count >= BATCH_ROWS:
            whole = pa.concat_tables(held)
            yield _one_chunk(whole.slice(0, BATCH_ROWS))
            held, count, cut = [whole.slice(BATCH_ROWS)], count - BATCH_ROWS, True
    if count or not cut:
        yield pa.concat_tables([NUMBERED.empty_table(), *held]).combine_chunks()


def _named(batch: pa.Table, names: tuple[pa.Array, ...]) -> pa.Table:
    """A batch of ``NUMBERED`` rows with its names (``names``: the watchers', the nodes', the
    resources' and the kinds') as Arrow dictionaries, each numbered in the order of its
    names' first appearance in the batch."""
    columns = list(batch.columns)
    for at, (name, values) in enumerate(zip(NAMES, names)):
        number = batch.column(name).chunks[0].to_numpy() if batch.num_rows else np.zeros(0, int)
        codes, seen = _first_seen(number, len(values))
        columns[at] = pa.DictionaryArray.from_arrays(codes, values.take(seen))
    return pa.Table.from_arrays(columns, schema=SCHEMA)


def _one_chunk(table: pa.Table) -> pa.Table:
    """``table`` with one chunk per column: a slice within one part is one already (no copy)."""
    if all(column.num_chunks == 1 for column in table.columns):
        return table
    return table.combine_chunks()


@njit(cache=True, nogil=True)
def _ranked_keys(pairs, pair, code, start, name_rank, first, shift):  # pragma: no cover
    """``_keys`` in one pass: ``np.searchsorted(pairs, pair)`` (``pairs`` sorted) for ``pair``
    in a few sorted runs (a part's lone windows, one run per resource, then its merged
    windows), a walk on from the previous one's place, restarted by a binary search where
    ``pair`` goes back, several times faster than its binary searches; and each rank made the
    key at once.  The 1M-pod observe run's 16.6M windows' keys, made in numpy's passes after
    the ranks, took 0.32-0.47 s in all; this takes 0.10-0.15 s."""
    keys = np.empty(len(pair), np.int64)
    at = 0
    for i in range(len(pair)):
        if i > 0 and pair[i] < pair[i - 1]:
            at = search_left(pairs, 0, at, pair[i])
        while at < len(pairs) and pairs[at] < pair[i]:
            at += 1
        keys[i] = ((at * len(name_rank) + name_rank[code[i]]) << shift) + (start[i] - first)
    return keys


@njit(cache=True, nogil=True)
def _first_seen(values, bound):  # pragma: no cover - compiled
    """``values`` (each in ``[0, bound)``) numbered in the order of their first appearance:
    each one's number (int32, as Arrow's ``dictionary_encode``), and the values so numbered."""
    number_of = np.full(bound, -1, np.int32)
    numbers = np.empty(len(values), np.int32)
    seen = np.empty(min(len(values), bound), np.int64)
    count = 0
    for i in range(len(values)):
        value = values[i]
        if number_of[value] < 0:
            number_of[value] = count
            seen[count] = value
            count += 1
        numbers[i] = number_of[value]
    return numbers, seen[:count]


@njit(cache=True, nogil=True)
def _per_unit(gap_max, hi, lo, code, units):  # pragma: no cover - compiled
    """Each window's ``gap_max`` and its integral (``hi * 2**64 + lo`` microseconds, as
    ``_to_double`` rounds it, then in seconds) in its resource's unit (``units`` by code), as
    the query divides them, in one pass: numpy's passes (the units gathered, the integrals
    converted, then divided twice) took 0.27 s of the 1M-pod observe run's 16.6M windows, this
    0.10 s."""
    per_unit = np.empty(len(gap_max), np.float64)
    seconds = np.empty(len(gap_max), np.float64)
    for i in range(len(gap_max)):
        unit = units[code[i]]
        per_unit[i] = np.float64(gap_max[i]) / unit
        seconds[i] = _to_double(hi[i], lo[i]) / 1e6 / unit
    return per_unit, seconds


@njit(cache=True, nogil=True, inline="always")
def _to_double(hi, lo):  # pragma: no cover - compiled
    """``hi * 2**64 + lo`` (non-negative) rounded to the nearest double, ties to even, as
    DuckDB 2 casts a HUGEINT: the top 64 bits with every lower bit folded into the last, so
    that one rounding of them is the rounding of the whole."""
    if hi == 0:
        return np.float64(lo)
    high = np.uint64(hi)
    bits = 0
    while (high >> np.uint64(bits)) != np.uint64(0):
        bits += 1
    dropped = lo & ((np.uint64(1) << np.uint64(bits)) - np.uint64(1))
    top = ((high << np.uint64(64 - bits)) | (lo >> np.uint64(bits))
           | np.uint64(dropped != np.uint64(0)))
    return np.float64(top) * 2.0 ** bits
