"""Which watcher receives which write: the informers' filters, for whole arrays of writes.

A watcher receives a write when the write's resource is one it watches and, for a watcher bound
to a node (a kubelet), when the write concerns that node: the node object itself, or a pod bound to
it (from its binding up to and including its delete, as a ``spec.nodeName`` field selector sees
it).  ``WatcherSpec.receives`` states the same rule for one write.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from replay.engine.config import WatcherSpec


def receives(watcher: WatcherSpec, resource: str, node: str | None) -> bool:
    """Whether ``watcher`` receives a write of ``resource`` concerning ``node``."""
    if resource not in watcher.resources:
        return False
    return watcher.node is None or watcher.node == node


def match(watchers: list[WatcherSpec], resource: pl.Series,
          node: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """All (write index, watcher index) deliveries, sorted by watcher and then by write.

    ``resource`` and ``node`` give, per write in commit order, its resource and the node it
    concerns (null when none).
    """
    writes, owners = [], []
    for index, watcher in enumerate(watchers):
        if watcher.node is None:
            hit = np.flatnonzero(resource.is_in(list(watcher.resources)).to_numpy())
            writes.append(hit)
            owners.append(np.full(len(hit), index, dtype=np.int64))
    node_bound = [(i, w) for i, w in enumerate(watchers) if w.node is not None]
    if node_bound:
        targets = pl.DataFrame(
            [(i, w.node, r) for i, w in node_bound for r in w.resources],
            schema={"watcher": pl.Int64, "node": pl.String, "resource": pl.String}, orient="row")
        hits = (pl.DataFrame({"node": node, "resource": resource})
                .with_row_index("write")
                .join(targets, on=["node", "resource"], how="inner", maintain_order="left"))
        owner = hits["watcher"].to_numpy()
        order = np.argsort(owner, kind="stable")  # by watcher; writes stay in commit order
        writes.append(hits["write"].to_numpy().astype(np.int64)[order])
        owners.append(owner[order])
    if not writes:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    write, owner = np.concatenate(writes), np.concatenate(owners)
    if len(owner) and np.any(np.diff(owner) < 0):
        order = np.lexsort((write, owner))
        write, owner = write[order], owner[order]
    return write, owner


def watchers_table(watchers: list[WatcherSpec]) -> pl.DataFrame:
    """The run's ``watchers`` table: every watcher, including those that received nothing."""
    return pl.DataFrame({
        "watcher": [w.name for w in watchers],
        "role": [w.role for w in watchers],
        "resources": [",".join(w.resources) for w in watchers],
        "node": [w.node for w in watchers],
    }, schema={"watcher": pl.String, "role": pl.String, "resources": pl.String,
               "node": pl.String})
