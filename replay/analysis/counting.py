"""A counting sort, compiled: the stable order of small integer codes in linear time.

The derivation groups millions of rows by codes with a small bound (a pod's code among the
run's pods, a watcher-node pair's number among the viewers' pairs); counting them is several
times faster than any comparison sort, and stable, as the SQL's order needs.
"""

from __future__ import annotations

import numpy as np

from replay.arrays import lex_order
from replay.jit import njit

DENSE = 4  # a key is counted if its values span at most this many times the rows


@njit(cache=True, nogil=True)
def counting_order(codes, bound):  # pragma: no cover - compiled
    """``np.argsort(codes, kind="stable")`` for codes in ``[0, bound)``: each code's first
    place from a count of the codes below it, then each index put at its code's next place."""
    place = np.zeros(bound + 1, np.int64)
    for code in codes:
        place[code + 1] += 1
    for code in range(bound):
        place[code + 1] += place[code]
    order = np.empty(len(codes), np.int64)
    for i in range(len(codes)):
        order[place[codes[i]]] = i
        place[codes[i]] += 1
    return order


def key_order(key: np.ndarray) -> np.ndarray:
    """``np.argsort(key, kind="stable")`` for an integer key: counted where its values span at
    most ``DENSE`` times the rows, ``lex_order`` where they span more."""
    if not len(key):
        return np.zeros(0, dtype=np.int64)
    key, span = _from_zero(key)
    return counting_order(key, span) if span <= DENSE * len(key) else lex_order((key,))


def two_key_order(minor: np.ndarray, major: np.ndarray) -> np.ndarray:
    """``np.lexsort((minor, major))`` for integer keys: two counting sorts, by the minor key,
    then stably by the major one, where each key's values span at most ``DENSE`` times the
    rows (a run's rvs number its writes, the codes it groups by are few); ``lex_order`` where
    one spans more (a trace's own rvs may span billions)."""
    if not len(minor):
        return np.zeros(0, dtype=np.int64)
    (minor, minor_span), (major, major_span) = (_from_zero(minor), _from_zero(major))
    if max(minor_span, major_span) > DENSE * len(minor):
        return lex_order((minor, major))
    by_minor = counting_order(minor, minor_span)
    return by_minor[counting_order(major[by_minor], major_span)]


def _from_zero(key: np.ndarray) -> tuple[np.ndarray, int]:
    """``key`` less its smallest value, and how many values it then spans."""
    low = int(key.min())
    return key.astype(np.int64) - low, int(key.max()) - low + 1
