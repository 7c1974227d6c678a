"""The ``wasted`` expression of ``queries/derived/capacity_windows.sql`` in numpy and a numba
kernel, for ``replay derive``: the stale windows with a segment during which a pending pod fit
the truth's free capacity but not the view's.

Why: the SQL joins every stale segment (10M at 1M pods) with every request size of its resource
between its view and its truth, then an ASOF join with the pending pods of that size: 2.5-5.5 s
of CPU for a 1M-pod run, the largest DuckDB step left in the derivation.  Here the segments come
from the sweep's arrays (``replay.analysis.windows``), ``pending`` (each size's pods by start,
with the latest end among those started by then, ``reach_ts``) comes sorted by resource, size
and start from ``replay.analysis.pending``, and a kernel takes each segment's sizes in turn: a binary search finds
the last pod of that size started before the segment ends (the ASOF join's row), and the first
size whose ``reach_ts`` is after the segment's start marks its window, so the others are not
looked at.

The SQL file stays the definition: the tests compare this step with the SQL's on runs of every
model.  Where ``pending`` was left to the SQL, its table is read and sorted here.  Left to the
SQL (``wasted`` returns False) where the sweep was (several runs) or where ``pending`` has a
null.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import duckdb
import numpy as np
import pyarrow as pa

from replay import interrupts
from replay.analysis.pending import Sizes, by_size
from replay.analysis.windows import Sweep, _resources, _timestamps, resource_code
from replay.arrays import lex_order, search_left, search_right
from replay.jit import njit

# threads the segments' batches are marked on (the kernel releases the GIL; the batches' marks
# are taken in order, so the table does not depend on which finishes first).  On one, the
# kernel took 0.24 s of the 1M-pod observe derivation's 0.43 s for ``wasted``, with the other
# core free; on two, ``wasted`` takes 0.22-0.26 s (benchmarks/ROUNDS.md, thirty-first round)
THREADS = 2


def wasted(con: duckdb.DuckDBPyConnection, sweep: Sweep | None,
           pending: Sizes | None = None) -> bool:
    """Make the temporary view ``wasted`` from ``sweep``'s stale segments and ``pending`` (as
    ``replay.analysis.pending`` made it; read from the connection's if None) as the SQL's
    expression does; False (nothing made) where the SQL must."""
    if pending is None and sweep is not None:
        pending = _pending(con)
    if sweep is None or pending is None:
        return False
    found = [{name: np.zeros(0, dtype=np.int64) for name in ("viewer", "node", "code", "window")}]
    with ThreadPoolExecutor(THREADS, thread_name_prefix="replay-wasted") as pool:
        with interrupts.deferred():  # not inside the executor's locks
            done = [pool.submit(_marked, segments, pending) for segments in _segments(sweep)]
        found += [future.result() for future in done]
    marks = _distinct({name: np.concatenate([f[name] for f in found]) for name in found[0]})
    con.register("_swept_wasted", pa.table({
        "viewer_id": marks["viewer"], "node_id": marks["node"],
        "resource": _resources(marks["code"].astype(np.int8)),
        "start_ts": _timestamps(marks["window"])}))
    con.execute("""CREATE TEMPORARY VIEW wasted AS
                   SELECT viewer_id, node_id, resource::VARCHAR AS resource, start_ts
                   FROM _swept_wasted""")
    return True


def _pending(con: duckdb.DuckDBPyConnection) -> Sizes | None:
    """The SQL's ``pending`` as the kernel takes it (``replay.analysis.pending.by_size``);
    None if a value is null."""
    pending = con.sql(f"""
        SELECT {resource_code("resource")} AS code, request::BIGINT AS request,
               epoch_us(start_ts) AS start_us, epoch_us(reach_ts) AS reach_us
        FROM pending""").fetchnumpy()
    if any(np.ma.is_masked(column) for column in pending.values()):
        return None
    cols = {name: np.asarray(column, dtype=np.int64) for name, column in pending.items()}
    order = lex_order((cols["start_us"], cols["request"], cols["code"]))
    return by_size(*(cols[name][order] for name in ("code", "request", "start_us", "reach_us")))


def _segments(sweep: Sweep) -> Iterator[dict[str, np.ndarray]]:
    """The SQL's ``stale_segments`` a batch at a time, as numpy views of the sweep's Arrow
    batches (no copy): the merged windows' stale segments, then each part's lone windows
    (each its own segment, named by its start), whose ``stale`` says which count."""
    for batch in sweep.stale_segments.to_batches():
        yield _arrays(batch, "window_ts", np.ones(batch.num_rows, dtype=bool))
    for part in sweep.parts:
        for batch in part.lone_windows.to_batches():
            yield _arrays(batch, "start_ts", batch.column("stale").to_numpy(zero_copy_only=False))


def _arrays(batch: pa.RecordBatch, window: str, stale: np.ndarray) -> dict[str, np.ndarray]:
    def times(name: str) -> np.ndarray:
        return batch.column(name).to_numpy().view(np.int64)

    return {"viewer": batch.column("viewer_id").to_numpy(),
            "node": batch.column("node_id").to_numpy(),
            "code": batch.column("resource").indices.to_numpy(), "stale": stale,
            "start": times("start_ts"), "end": times("end_ts"), "window": times(window),
            "truth": batch.column("truth").to_numpy(), "view": batch.column("view").to_numpy()}


def _marked(segments: dict[str, np.ndarray], pending: Sizes) -> dict[str, np.ndarray]:
    """The windows of a batch's segments that the kernel marks."""
    hit = _wasted_kernel(segments["stale"], segments["code"], segments["start"],
                         segments["end"], segments["truth"], segments["view"], *pending)
    return {name: segments[name][hit] for name in ("viewer", "node", "code", "window")}


def _distinct(marks: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The windows of the marked segments, each once (``SELECT DISTINCT``)."""
    order = lex_order((marks["window"], marks["code"], marks["node"], marks["viewer"]))
    marks = {name: marks[name][order] for name in ("viewer", "node", "code", "window")}
    repeat = np.zeros(len(order), dtype=bool)
    repeat[1:] = np.logical_and.reduce([column[1:] == column[:-1] for column in marks.values()])
    return {name: column[~repeat] for name, column in marks.items()}


@njit(cache=True, nogil=True)
def _wasted_kernel(stale, code, start, end, truth, view, size_request, bounds, by_code,
                   pod_start, reach):  # pragma: no cover - compiled
    """Per stale segment: whether some request size of its resource in (view, truth] has, as its
    last pod started before the segment's end (pods sorted by resource, size and start;
    ``bounds``: each size's first pod, then the end; ``by_code``: each resource's first
    size), a reach after the segment's start."""
    out = np.zeros(len(code), np.bool_)
    for i in range(len(code)):
        if not stale[i]:
            continue
        first, last = by_code[code[i]], by_code[code[i] + 1]
        k = search_right(size_request, first, last, view[i])
        while k < last and size_request[k] <= truth[i]:
            lo, hi = bounds[k], bounds[k + 1]
            j = search_left(pod_start, lo, hi, end[i])
            if j > lo and reach[j - 1] > start[i]:
                out[i] = True
                break
            k += 1
    return out
