"""What a recorded trace says about each pod: its incarnations, bindings, deletes and attempts.

A pod is a name (``namespace/name``); a committed create starts a new *incarnation* of that name
(StatefulSets re-create pods under the same name), and writes to a pod created before the trace
began form an incarnation with no create.  Everything here is computed with one sort of the pod
rows by name and numpy segment operations, because grouping a million pod names with dataframe
window functions costs seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from replay.engine.pipeline import segmented_cummax
from replay.trace.schema import WRITE_VERBS

OK = pl.col("code").is_between(200, 299) & pl.col("verb").is_in(WRITE_VERBS)
IS_POD = pl.col("resource") == "pods"
IS_BINDING = IS_POD & pl.col("subresource").eq_missing("binding") & (pl.col("verb") == "create")
IS_POD_CREATE = IS_POD & (pl.col("verb") == "create") & pl.col("subresource").is_null()
IS_POD_DELETE = IS_POD & (pl.col("verb") == "delete") & pl.col("subresource").is_null()


def mask(trace: pl.DataFrame, condition: pl.Expr) -> np.ndarray:
    """``condition`` per trace row as a numpy boolean array (null counts as false)."""
    return trace.select(condition.fill_null(False)).to_series().to_numpy()


def pod_name() -> pl.Expr:
    """``namespace/name``, or just the name for a pod with no namespace."""
    return (pl.when(pl.col("namespace").is_null()).then(pl.col("name"))
            .otherwise(pl.format("{}/{}", "namespace", "name")))


@dataclass
class PodHistory:
    """Per trace row (all rows, -1 / null for rows that are not pod writes): the pod incarnation
    it belongs to and the node that incarnation was bound to as of that row."""

    incarnation: np.ndarray  # int64 per trace row
    bound_node: pl.Series  # per trace row
    incarnations: int

    @classmethod
    def of(cls, trace: pl.DataFrame) -> "PodHistory":
        pod_rows = np.flatnonzero(mask(trace, IS_POD & pl.col("name").ne("")))
        key = (trace.select(pl.concat_str("namespace", "name", separator="/", ignore_nulls=True)
                            .hash(seed=0)).to_series().to_numpy()[pod_rows])
        order = np.argsort(key, kind="stable")  # by name, each name's rows in trace order
        rows = pod_rows[order]
        sorted_key = key[order]
        new_name = np.r_[True, sorted_key[1:] != sorted_key[:-1]] if len(rows) else np.zeros(0, bool)
        incarnation = np.cumsum(new_name | mask(trace, OK & IS_POD_CREATE)[rows]) - 1
        binding_at = np.where(mask(trace, OK & IS_BINDING)[rows], rows, -1)
        last_binding = segmented_cummax(binding_at, incarnation)

        per_row = np.full(trace.height, -1, dtype=np.int64)
        per_row[rows] = incarnation
        source = np.full(trace.height, -1, dtype=np.int64)
        source[rows] = last_binding
        bound = trace["node"].gather(pl.Series(source).replace(-1, None))
        count = int(incarnation[-1]) + 1 if len(incarnation) else 0
        return cls(per_row, bound.alias("bound_node"), count)

    def first(self, where: np.ndarray) -> np.ndarray:
        """Per incarnation, the first trace row where ``where`` holds (-1 if none)."""
        rows = np.flatnonzero(where & (self.incarnation >= 0))
        out = np.full(self.incarnations, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(out, self.incarnation[rows], rows)
        return np.where(out == np.iinfo(np.int64).max, -1, out)

    def last(self, where: np.ndarray) -> np.ndarray:
        """Per incarnation, the last trace row where ``where`` holds (-1 if none)."""
        rows = np.flatnonzero(where & (self.incarnation >= 0))
        out = np.full(self.incarnations, -1, dtype=np.int64)
        np.maximum.at(out, self.incarnation[rows], rows)
        return out
