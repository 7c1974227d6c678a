"""A counting sort, compiled: the stable order of small integer codes in linear time.

The derivation groups millions of rows by codes with a small bound (a pod's code among the
run's pods, a watcher-node pair's number among the viewers' pairs); counting them is several
times faster than any comparison sort, and stable, as the SQL's order needs.
"""

from __future__ import annotations

import numpy as np

from replay.jit import njit


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
