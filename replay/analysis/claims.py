"""The claims of ``queries/views.sql`` (a pod taking and giving back its requests on a node) in
numpy, for ``replay derive``: the capacity windows' ``every_change`` step is ``capacity_changes``,
whose pods' part (``claims``) DuckDB computes with window functions over every pod write
partitioned by the pod's name: a third of the derivation's CPU at 1M pods (19 s of the what-if
run's).  Here the pod writes are sorted once by pod and rv, and each pod life's requests, first
binding and last delete, and each step's previous node, are found by comparing neighbours.

views.sql stays the definition: this makes the temporary table ``every_change`` with the rows
of ``FROM capacity_changes`` (in another order; the SQL's later steps order what they read),
typed as the view types them, and the tests keep the stored table identical to the query run
whole.  A connection of several runs, or a name or namespace with a '/' (``_pod_writes``), is
left to the SQL (``capacity_changes`` returns False).
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from replay.analysis.counting import counting_order, two_key_order
from replay.analysis.runs import one_run

STEPS = ("binding", "delete", "assumed", "rejected", "failed")  # a step's change, by its code


def capacity_changes(con: duckdb.DuckDBPyConnection) -> bool:
    """Make the temporary table ``every_change`` from ``capacity_changes``' definition, the
    claims computed here; False (nothing made) where the SQL must compute them."""
    if not one_run(con):
        return False
    writes = _pod_writes(con)
    if writes is None:
        return False
    con.register("_claims", _claims(writes))
    try:
        con.execute("""
            CREATE TEMPORARY TABLE every_change AS
            SELECT (SELECT run FROM manifests) AS run, rv, commit_ts, node, cpu_milli,
                   memory_bytes, gpu_milli, attempt_id, pod, change, counts_assumed
            FROM _claims
            UNION ALL
            FROM node_capacity_changes""")
    finally:
        con.unregister("_claims")
    return True


@dataclass(frozen=True)
class PodWrites:
    """The pod writes that ``claims`` reads (``pod_writes``), sorted by pod and rv: the columns
    ``_claims`` reads at every write, with the pods and nodes as codes into ``pods`` and
    ``nodes`` (a write without a node has -1)."""

    pod: np.ndarray
    node: np.ndarray
    rv: np.ndarray
    creates: np.ndarray
    binds: np.ndarray
    deletes: np.ndarray
    state: np.ndarray
    pods: pa.Array
    nodes: pa.Array
    few: pa.Table  # the columns read at a few writes only, unsorted (``at``)
    order: np.ndarray  # the sorted writes' rows in ``few``

    def at(self, name: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Column ``name`` of ``few`` at the sorted writes ``rows`` (nulls as 0), and where it
        is null there: the requests are read at each life's first write and the commit and
        attempt at each claim, so they are gathered there, not sorted whole."""
        values = self.few.column(name).take(pa.array(self.order[rows]))
        return (values.fill_null(0).to_numpy(),
                values.is_null().to_numpy(zero_copy_only=False))


def _pod_writes(con: duckdb.DuckDBPyConnection) -> PodWrites | None:
    """The pod writes that ``claims`` reads, sorted.  None if a namespace or a name holds a '/'
    (Kubernetes allows none): a life is counted per namespace and name, a pod is their text,
    and ``a/b`` of namespace ``x`` and ``b`` of ``x/a`` would make one pod, ``x/a/b``; without a
    '/' the text has one namespace and name."""
    table = con.sql("""
        SELECT rv, epoch_us(commit_ts) AS commit_us, concat_ws('/', namespace, name) AS pod,
               coalesce(contains(namespace, '/') OR contains(name, '/'), false) AS slashed,
               coalesce(verb = 'create' AND subresource IS NULL, false) AS creates,
               coalesce(verb = 'create' AND subresource = 'binding', false) AS binds,
               coalesce(verb = 'delete' AND subresource IS NULL, false) AS deletes,
               CASE pod_state WHEN 'assumed' THEN 2 WHEN 'dispatched' THEN 3
                              WHEN 'failed' THEN 4 ELSE -1 END AS state,
               node, attempt_id, cpu_milli, memory_bytes, gpu_milli
        FROM events
        WHERE resource = 'pods' AND name <> ''""").arrow()
    table = table.read_all() if hasattr(table, "read_all") else table
    if pc.any(table.column("slashed")).as_py():
        return None
    pods = pc.dictionary_encode(table.column("pod")).combine_chunks()
    nodes = pc.dictionary_encode(table.column("node")).combine_chunks()
    pod = pods.indices.to_numpy()
    rv = table.column("rv").to_numpy()
    order = pod_order(pod, rv, len(pods.dictionary))

    def sorted_column(name: str) -> np.ndarray:
        return table.column(name).to_numpy()[order]

    return PodWrites(
        pod=pod[order], node=nodes.indices.fill_null(-1).to_numpy()[order], rv=rv[order],
        creates=sorted_column("creates"), binds=sorted_column("binds"),
        deletes=sorted_column("deletes"), state=sorted_column("state"),
        pods=pods.dictionary, nodes=nodes.dictionary,
        few=table.select(["commit_us", "attempt_id", "cpu_milli", "memory_bytes", "gpu_milli"]),
        order=order)


def move_order(rv: np.ndarray, node: np.ndarray, takes: np.ndarray,
               counts_assumed: np.ndarray) -> np.ndarray:
    """``lex_order((counts_assumed, takes, node, rv))``: where the rvs are dense (a run's rvs
    number its writes), two counting sorts (``two_key_order``), by node, takes and
    counts_assumed, then by rv.  In the derivation, alternated on the 1M-pod runs' 4M moves:
    0.53-0.91 s against 0.92-1.42 s (the packed sort's wide keys and buffers are fresh
    memory); 0.25 against 0.35 s alone."""
    return two_key_order((node.astype(np.int64) * 2 + takes) * 2 + counts_assumed, rv)


def pod_order(pod: np.ndarray, rv: np.ndarray, pods: int) -> np.ndarray:
    """``np.lexsort((rv, pod))`` for pod codes in ``[0, pods)``, as two stable sorts, each fast
    on these writes: by rv (DuckDB hands them over in rv order but for a few batches, which
    timsort merges as runs), then by pod, counted (``counting_order``): 0.1 s instead of
    0.25-0.45 for the 5M pod writes of a 1M-pod run."""
    by_rv = np.argsort(rv, kind="stable")
    return by_rv[counting_order(pod[by_rv], pods)]


def _claims(w: PodWrites) -> pa.Table:
    """``claims``' rows from the sorted pod writes."""
    count = len(w.rv)
    new_pod = np.ones(count, dtype=bool)
    new_pod[1:] = w.pod[1:] != w.pod[:-1]
    # lives: a new one at each create; life 0 (writes before the pod's first create) has none
    life_starts = new_pod | w.creates
    life = np.cumsum(life_starts) - 1
    starts = np.flatnonzero(life_starts)
    created = w.creates[starts]
    requests = {}  # per life
    for name in ("cpu_milli", "memory_bytes", "gpu_milli"):
        values, null = w.at(name, starts)
        requests[name] = np.where(created & ~null, values, 0)
    binding = _is_per_life(np.minimum, w.binds, w.rv, starts, life)
    delete = _is_per_life(np.maximum, w.deletes, w.rv, starts, life)
    state = w.state
    step = binding | delete | (state >= 2)
    change = np.select([binding, delete], [0, 1], default=state)
    holds = np.where(binding | (state == 2), w.node, -1)
    moves_bound = binding | delete | (state == 4)
    parts = [_moves(np.flatnonzero(step), life, holds, True),
             _moves(np.flatnonzero(step & moves_bound), life, holds, False)]
    rows = np.concatenate([p[0] for p in parts])
    node = np.concatenate([p[1] for p in parts])
    takes = np.concatenate([p[2] for p in parts])
    counts_assumed = np.concatenate([p[3] for p in parts])
    # a move both kinds of cache see is one row, for every cache (the SQL's GROUP BY ALL)
    rv = w.rv[rows]
    order = move_order(rv, node, takes, counts_assumed)
    rows, node, takes, counts_assumed, rv = (rows[order], node[order], takes[order],
                                             counts_assumed[order], rv[order])
    same = np.zeros(len(rows), dtype=bool)
    same[1:] = (rv[1:] == rv[:-1]) & (node[1:] == node[:-1]) & (takes[1:] == takes[:-1])
    both = np.zeros(len(rows), dtype=bool)
    both[:-1] = same[1:]
    keep = ~same
    rows, node, takes, both, rv = rows[keep], node[keep], takes[keep], both[keep], rv[keep]
    counts_assumed = counts_assumed[keep]
    sign = np.where(takes, -1, 1)
    claim_life = life[rows]
    amounts = {name: requests[name][claim_life] for name in requests}
    changes = (amounts["cpu_milli"] != 0) | (amounts["memory_bytes"] != 0) | (
        amounts["gpu_milli"] != 0)
    rows, node, takes, both, counts_assumed, sign, rv = (
        rows[changes], node[changes], takes[changes], both[changes], counts_assumed[changes],
        sign[changes], rv[changes])
    amounts = {name: amount[changes] for name, amount in amounts.items()}
    attempt_id, attempt_null = w.at("attempt_id", rows)
    commit_us, commit_null = w.at("commit_us", rows)
    return pa.table({
        "rv": rv,
        "commit_ts": pa.array(commit_us, mask=commit_null, type=pa.timestamp("us", tz="UTC")),
        "node": w.nodes.take(pa.array(node)),
        **{name: sign * amount for name, amount in amounts.items()},
        "attempt_id": pa.array(attempt_id, mask=~takes | attempt_null),
        "pod": w.pods.take(pa.array(w.pod[rows])),
        "change": pa.array(STEPS).take(pa.array(change[rows])),
        "counts_assumed": pa.array(counts_assumed, mask=both)})


def _is_per_life(reduce: np.ufunc, which: np.ndarray, rv: np.ndarray, starts: np.ndarray,
                 life: np.ndarray) -> np.ndarray:
    """Whether each write's rv is the least (``np.minimum``) or the greatest (``np.maximum``)
    rv of the writes ``which`` of its life (``starts``: each life's first write), as the SQL's
    ``rv = min(rv) FILTER (which)`` (never where the life has none)."""
    if not len(starts):
        return np.zeros(0, dtype=bool)
    found = np.logical_or.reduceat(which, starts)
    limit = np.iinfo(np.int64).max if reduce is np.minimum else np.iinfo(np.int64).min
    value = reduce.reduceat(np.where(which, rv, limit), starts)
    return found[life] & (rv == value[life])


def _moves(steps: np.ndarray, life: np.ndarray, holds: np.ndarray, counts_assumed: bool
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``counted`` and ``moves`` for one kind of cache: each step's node held before it (the
    previous step's of the same life), a release of it and a take of the new one where they
    differ; returns the rows (writes), nodes, takes and the kind."""
    step_life, now = life[steps], holds[steps]
    held = np.full(len(steps), -1, dtype=holds.dtype)
    held[1:] = np.where(step_life[1:] == step_life[:-1], now[:-1], -1)
    released = (held >= 0) & (now != held)
    taken = (now >= 0) & (now != held)
    rows = np.concatenate([steps[released], steps[taken]])
    node = np.concatenate([held[released], now[taken]])
    takes = np.concatenate([np.zeros(released.sum(), bool), np.ones(taken.sum(), bool)])
    return rows, node, takes, np.full(len(rows), counts_assumed)
