"""What a recorded trace says about each pod: its incarnations, bindings, deletes and attempts.

A pod is a name (``namespace/name``); a committed create starts a new *incarnation* of that name
(StatefulSets re-create pods under the same name), and writes to a pod created before the trace
began form an incarnation with no create.  Everything here is computed with one sort of the pod
rows by name and numpy segment operations, because grouping a million pod names with dataframe
window functions costs seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import polars as pl

from replay.arrays import segment_starts, segmented_cummax, stable_sort
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
    return pl.concat_str("namespace", "name", separator="/", ignore_nulls=True)


class RowMasks:
    """The row masks of one trace that the models ask for, each computed once, when first
    asked for (numpy booleans; null counts as false)."""

    def __init__(self, trace: pl.DataFrame):
        self.trace = trace

    @cached_property
    def ok(self) -> np.ndarray:
        return mask(self.trace, OK)

    @cached_property
    def binding(self) -> np.ndarray:
        """Every recorded binding, committed or failed."""
        return mask(self.trace, IS_BINDING)

    @cached_property
    def ok_binding(self) -> np.ndarray:
        return self.ok & self.binding

    @cached_property
    def ok_create(self) -> np.ndarray:
        return self.ok & mask(self.trace, IS_POD_CREATE)

    @cached_property
    def ok_delete(self) -> np.ndarray:
        return self.ok & mask(self.trace, IS_POD_DELETE)

    @cached_property
    def node(self) -> np.ndarray:
        """Writes to node objects."""
        return mask(self.trace, pl.col("resource") == "nodes")

    @cached_property
    def named_pod(self) -> np.ndarray:
        return mask(self.trace, IS_POD & pl.col("name").ne(""))


def by_name(names: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """The order that puts ``names`` together by name, each name's rows in their own order, and
    per row of that order whether it begins a name.

    The rows are sorted by a 64-bit hash of the name, two to three times faster than by the
    strings.  Two names can share a hash (with about 2**-65 times the squared number of names as
    probability, 3e-8 for a million pods), and would then be one pod.  A second hash, with
    another seed, checks every name's rows; where it differs within one first hash, the rows
    are sorted again by the first hash and then by the name itself.  What remains is two names
    sharing both hashes: 2**-128 for a pair."""
    key = name_hash(names, seed=0)
    order, sorted_key = stable_sort(key)
    if len(order) == 0:
        return order, np.zeros(0, dtype=bool)
    new_name = np.r_[True, sorted_key[1:] != sorted_key[:-1]]
    check = name_hash(names, seed=1)[order]
    if np.any((check[1:] != check[:-1]) & ~new_name[1:]):
        exact = names.rank("dense").to_numpy()
        order = np.lexsort((exact, key))  # stable: each name's rows stay in their order
        sorted_name = exact[order]  # one rank per name: where it changes, a name begins
        new_name = np.r_[True, sorted_name[1:] != sorted_name[:-1]]
    return order, new_name


def name_hash(names: pl.Series, seed: int) -> np.ndarray:
    """polars' 64-bit hash of each name."""
    return names.hash(seed=seed).to_numpy()


@dataclass
class PodHistory:
    """Per trace row (all rows, -1 for rows that are not pod writes): the pod incarnation it
    belongs to, and the row of that incarnation's latest committed binding as of that row."""

    incarnation: np.ndarray  # int64 per trace row
    last_binding: np.ndarray  # int64 per trace row
    incarnations: int
    rows: np.ndarray  # the pod rows by incarnation, each incarnation's rows in trace order
    starts: np.ndarray  # where each incarnation begins in ``rows``
    pods: pl.Series  # each incarnation's pod (``namespace/name``)

    @classmethod
    def of(cls, trace: pl.DataFrame, masks: RowMasks | None = None) -> PodHistory:
        masks = masks or RowMasks(trace)
        pod_rows = np.flatnonzero(masks.named_pod)
        names = (trace.select("namespace", "name").filter(pl.Series(masks.named_pod))
                 .select(pod_name()).to_series().rechunk())  # one chunk: gathers 15x faster
        order, new_name = by_name(names)
        rows = pod_rows[order]
        incarnation = np.cumsum(new_name | masks.ok_create[rows]) - 1
        binding_at = np.where(masks.ok_binding[rows], rows, -1)

        per_row = np.full(trace.height, -1, dtype=np.int64)
        per_row[rows] = incarnation
        last_binding = np.full(trace.height, -1, dtype=np.int64)
        last_binding[rows] = segmented_cummax(binding_at, incarnation)
        count = int(incarnation[-1]) + 1 if len(incarnation) else 0
        starts = segment_starts(incarnation)
        return cls(per_row, last_binding, count, rows, starts, names.gather(order[starts]))

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
