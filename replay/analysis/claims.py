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

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from replay.arrays import lex_order

STEPS = ("binding", "delete", "assumed", "rejected", "failed")  # a step's change, by its code


def capacity_changes(con: duckdb.DuckDBPyConnection) -> bool:
    """Make the temporary table ``every_change`` from ``capacity_changes``' definition, the
    claims computed here; False (nothing made) where the SQL must compute them."""
    if con.sql("SELECT count(*) FROM manifests").fetchall()[0][0] != 1:
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


def _pod_writes(con: duckdb.DuckDBPyConnection) -> dict[str, np.ndarray] | None:
    """The pod writes that ``claims`` reads (``pod_writes``), sorted by pod and rv, with the
    pods and nodes as codes into ``pods`` and ``nodes``.  None if a namespace or a name holds
    a '/' (Kubernetes allows none): a life is counted per namespace and name, a pod is their
    text, and ``a/b`` of namespace ``x`` and ``b`` of ``x/a`` would make one pod, ``x/a/b``;
    without a '/' the text has one namespace and name."""
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
    pod = pods.indices.to_numpy().astype(np.int64)
    rv = table.column("rv").to_numpy()
    order = np.lexsort((rv, pod))
    nodes = pc.dictionary_encode(table.column("node")).combine_chunks()
    cols = {"pod": pod, "node": nodes.indices.fill_null(-1).to_numpy().astype(np.int64)}
    cols.update({name: table.column(name).to_numpy(zero_copy_only=False)
                 for name in ("rv", "commit_us", "creates", "binds", "deletes", "state")})
    for name in ("attempt_id", "cpu_milli", "memory_bytes", "gpu_milli"):
        column = table.column(name).combine_chunks()
        cols[name] = column.fill_null(0).to_numpy()
        cols[f"{name}_null"] = column.is_null().to_numpy(zero_copy_only=False)
    writes = {name: column[order] for name, column in cols.items()}
    writes["pods"], writes["nodes"] = pods.dictionary, nodes.dictionary
    return writes


def _claims(w: dict) -> pa.Table:
    """``claims``' rows from the sorted pod writes."""
    count = len(w["rv"])
    new_pod = np.ones(count, dtype=bool)
    new_pod[1:] = w["pod"][1:] != w["pod"][:-1]
    # lives: a new one at each create; life 0 (writes before the pod's first create) has none
    life_starts = new_pod | w["creates"]
    life = np.cumsum(life_starts) - 1
    starts = np.flatnonzero(life_starts)
    created = w["creates"][starts]
    requests = {name: np.where(created & ~w[f"{name}_null"][starts], w[name][starts], 0)[life]
                for name in ("cpu_milli", "memory_bytes", "gpu_milli")}
    binding = _is_per_life(np.minimum, w["binds"], w["rv"], starts, life)
    delete = _is_per_life(np.maximum, w["deletes"], w["rv"], starts, life)
    state = w["state"]
    step = binding | delete | (state >= 2)
    change = np.select([binding, delete], [0, 1], default=state)
    holds = np.where(binding | (state == 2), w["node"], -1)
    moves_bound = binding | delete | (state == 4)
    parts = [_moves(np.flatnonzero(step), life, holds, True),
             _moves(np.flatnonzero(step & moves_bound), life, holds, False)]
    rows = np.concatenate([p[0] for p in parts])
    node = np.concatenate([p[1] for p in parts])
    takes = np.concatenate([p[2] for p in parts])
    counts_assumed = np.concatenate([p[3] for p in parts])
    # a move both kinds of cache see is one row, for every cache (the SQL's GROUP BY ALL)
    order = lex_order((counts_assumed, takes, node, w["rv"][rows]))
    rows, node, takes, counts_assumed = (rows[order], node[order], takes[order],
                                         counts_assumed[order])
    same = np.zeros(len(rows), dtype=bool)
    same[1:] = ((w["rv"][rows][1:] == w["rv"][rows][:-1]) & (node[1:] == node[:-1])
                & (takes[1:] == takes[:-1]))
    both = np.zeros(len(rows), dtype=bool)
    both[:-1] = same[1:]
    keep = ~same
    rows, node, takes, both = rows[keep], node[keep], takes[keep], both[keep]
    counts_assumed = counts_assumed[keep]
    sign = np.where(takes, -1, 1)
    amounts = {name: requests[name][rows] for name in requests}
    changes = (amounts["cpu_milli"] != 0) | (amounts["memory_bytes"] != 0) | (
        amounts["gpu_milli"] != 0)
    rows, node, takes, both, counts_assumed, sign = (
        rows[changes], node[changes], takes[changes], both[changes], counts_assumed[changes],
        sign[changes])
    attempt_null = ~takes | w["attempt_id_null"][rows]
    return pa.table({
        "rv": w["rv"][rows],
        "commit_ts": pa.array(w["commit_us"][rows], type=pa.timestamp("us", tz="UTC")),
        "node": w["nodes"].take(pa.array(node)),
        **{name: sign * requests[name][rows] for name in requests},
        "attempt_id": pa.array(w["attempt_id"][rows], mask=attempt_null),
        "pod": w["pods"].take(pa.array(w["pod"][rows])),
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
    held = np.full(len(steps), -1, dtype=holds.dtype)
    same_life = np.zeros(len(steps), dtype=bool)
    same_life[1:] = life[steps][1:] == life[steps][:-1]
    held[1:] = np.where(same_life[1:], holds[steps][:-1], -1)
    now = holds[steps]
    released = (held >= 0) & (now != held)
    taken = (now >= 0) & (now != held)
    rows = np.concatenate([steps[released], steps[taken]])
    node = np.concatenate([held[released], now[taken]])
    takes = np.concatenate([np.zeros(released.sum(), bool), np.ones(taken.sum(), bool)])
    return rows, node, takes, np.full(len(rows), counts_assumed)
