"""Scans and sorts over whole numpy arrays, the building blocks of every vectorised pass.

A FIFO queue's departures are a running maximum (``lindley``); one queue per watcher is the same
recursion restarting at each watcher's first delivery (``Segments``, compiled); and the sorts
that group millions of deliveries by watcher or rows by pod are radix sorts (``stable_order``,
``stable_sort``, ``lex_order``) several times faster than numpy's comparison sort.  Nothing
here knows about traces or watchers: the trace readers, the engine and the analysis build on it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from replay.jit import njit

# ``stable_sort`` leaves keys to numpy's timsort when at most one in this many is below the one
# before it (``mostly_sorted``)
MOSTLY_SORTED = 4
# ``ranked``'s buckets: values counted by this many of their top bits
RANK_BITS = 16
# ``hash_sort``'s buckets: how many keys a bucket holds on average, and at most
KEYS_A_BUCKET = 8
MOST_IN_BUCKET = 256


def lindley(arrival: np.ndarray, service: np.ndarray) -> np.ndarray:
    """Departures of a FIFO queue: ``d_i = max(a_i, d_{i-1}) + s_i``, in one compiled pass
    (``S_i + max_{j<=i}(a_j - S_{j-1})``, with ``S_i`` the running sum of service, is the same
    in numpy's whole-array steps, five passes over the arrays)."""
    out = np.empty(len(arrival), dtype=np.int64)
    _lindley_by_segment(arrival, service, None, 0, False, out)
    return out

def segment_starts(segment: np.ndarray) -> np.ndarray:
    """Positions where a new run of equal ``segment`` ids begins."""
    if len(segment) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.r_[True, segment[1:] != segment[:-1]])

def stable_order(ids: np.ndarray, bound: int) -> np.ndarray:
    """``np.argsort(ids, kind="stable")`` for integers in ``[0, bound)``, in linear time: numpy
    radix-sorts 16-bit integers itself (several times faster than a comparison sort on millions
    of watcher or pod indices); wider ones are ``stable_sort``'s."""
    if bound <= 1 << 16:
        return np.argsort(ids.astype(np.uint16), kind="stable")
    return stable_sort(ids)[0]

def segmented_cummax(values: np.ndarray, segment: np.ndarray) -> np.ndarray:
    """Running maximum restarting at each new ``segment`` id (ids sorted ascending)."""
    out = np.array(values, dtype=np.int64)
    Segments(segment).cummax(out)
    return out

def segmented_lindley(arrival: np.ndarray, service: np.ndarray, segment: np.ndarray) -> np.ndarray:
    """``lindley`` run separately on each segment (one queue per watcher)."""
    return Segments(segment).lindley(arrival, service)

def previous_in_group(group: np.ndarray, values: np.ndarray, groups: int) -> np.ndarray:
    """For each element, the value of the element before it in its group (``group``: one id in
    ``[0, groups)`` per element, -1 for none), -1 if it is its group's first; one compiled pass
    (a pod's previous attempt: grouping the attempts by pod to compare neighbours took gathers
    and scatters of every pod write)."""
    return _previous_in_group(group, values, groups)


def previous_in_segment(segment: np.ndarray, key: np.ndarray, keys: int) -> np.ndarray:
    """For each element, the position of the element before it in its segment (``segment``:
    sorted ids, such as each delivery's watcher) with the same ``key`` (in ``[0, keys)``), -1 if
    there is none or its key is negative (it is in no group); one compiled pass over positions,
    with one slot per key.  Grouping by (segment, key) first took a sort of every element: 1.4 s
    of the 15M deliveries of a 1M-pod observe run's check, where this takes 0.3 s."""
    return _previous_in_segment(segment, key, keys)


class Segments:
    """Sorted segment ids (per delivery, its watcher) and the scans that restart at each new id.

    The scans are compiled loops, one pass over the arrays: their numpy forms (the running
    maximum of ``lindley``'s formula, per slice of a few segments, or over all of them at once
    with each segment lifted above the ones before it) made five passes over each of the 1M-pod
    observe replay's 15M deliveries, twice, and a sixth of its main thread's time.
    """

    def __init__(self, ids: np.ndarray, done: int = 0):
        """``done``: how many deliveries of the first segment came before these."""
        self.ids, self.done = ids, done
        self._begin: np.ndarray | None = None

    def cummax(self, values: np.ndarray) -> None:
        """Running maximum per segment, in place (int64 values)."""
        _cummax_by_segment(values, self.ids)

    def lindley(self, arrival: np.ndarray, service: np.ndarray,
                last: int | None = None) -> np.ndarray:
        """``lindley`` on each segment (one queue per watcher); ``last``: the departure before
        the first, if the first segment continues."""
        out = np.empty(len(arrival), dtype=np.int64)
        _lindley_by_segment(arrival, service, self.ids, 0 if last is None else last,
                            last is not None, out)
        return out

    def first_positions(self) -> np.ndarray:
        """Per id from the first to the last, where its segment begins (the first segment's
        less ``done``): a position less this is its place in its segment, 0, 1, 2, ..."""
        if self._begin is None:  # the ids are sorted: a binary search per id, not a count
            self._begin = np.searchsorted(  # (of the ids' own type: else numpy converts them)
                self.ids, np.arange(self.ids[0], self.ids[-1] + 1, dtype=self.ids.dtype))
            self._begin[0] -= self.done
        return self._begin


@njit(cache=True, nogil=True)
def _cummax_by_segment(values, ids):  # pragma: no cover - compiled
    """``values[i] = max(values[i - 1], values[i])`` where ``ids[i]`` is ``ids[i - 1]``, in
    order."""
    for i in range(1, len(values)):
        if ids[i] == ids[i - 1] and values[i - 1] > values[i]:
            values[i] = values[i - 1]


@njit(cache=True, nogil=True, inline="always")
def fifo_departure(previous, arrival, service, queued):  # pragma: no cover - compiled
    """A FIFO queue's next departure: it starts at its ``arrival``, or at the ``previous``
    departure if later and it ``queued`` behind it; the step of ``lindley``'s recursion, for
    the compiled passes that fuse it with more work."""
    start = arrival
    if queued and previous > start:
        start = previous
    return start + service


@njit(cache=True, nogil=True, inline="always")
def search_left(values, lo, hi, x):  # pragma: no cover - compiled
    """``lo + np.searchsorted(values[lo:hi], x, side="left")`` for the compiled passes:
    numba's ``searchsorted`` (which compiles for every type of key, complex ones too) and the
    slice took a kernel seconds more to compile than this bisection."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if values[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True, inline="always")
def search_right(values, lo, hi, x):  # pragma: no cover - compiled
    """``lo + np.searchsorted(values[lo:hi], x, side="right")``, as ``search_left``."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if values[mid] <= x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True)
def _lindley_by_segment(arrival, service, ids, last, continues, out):  # pragma: no cover
    """``out[i] = max(arrival[i], out[i - 1]) + service[i]``, restarting (without the max)
    where ``ids`` changes (never if ``ids`` is None), and at the first unless it ``continues``
    after ``last``."""
    departure = last
    for i in range(len(arrival)):
        if i == 0:
            queued = continues
        elif ids is None:  # one queue (numba compiles this branch alone for None)
            queued = True
        else:
            queued = ids[i] == ids[i - 1]
        departure = fifo_departure(departure, arrival[i], service[i], queued)
        out[i] = departure


@njit(cache=True, nogil=True)
def _previous_in_group(group, values, groups):  # pragma: no cover - compiled
    last = np.full(groups, -1, np.int64)
    out = np.full(len(group), -1, np.int64)
    for i in range(len(group)):
        if group[i] >= 0:
            out[i] = last[group[i]]
            last[group[i]] = values[i]
    return out


@njit(cache=True, nogil=True)
def _previous_in_segment(segment, key, keys):  # pragma: no cover - compiled
    last = np.full(keys, -1, np.int64)  # each key's latest position (in any segment)
    out = np.full(len(key), -1, np.int64)
    begin = 0  # the position where the current segment begins
    for i in range(len(key)):
        if i and segment[i] != segment[i - 1]:
            begin = i
        k = key[i]
        if k >= 0:
            if last[k] >= begin:
                out[i] = last[k]
            last[k] = i
    return out


def stable_sort(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.argsort(keys, kind="stable")`` for integer keys, and the sorted keys, faster.

    Keys mostly in order already (``mostly_sorted``) are numpy's own stable sort, a timsort,
    which merges runs already in order instead of sorting them again.  Otherwise each key less
    the smallest is radix-sorted, a byte at a time from the least significant (``_radix_sort``):
    stable by construction, linear in the keys, and for any width of key.  It took the place of
    numpy's sort of packed integers (each key's high bits above its index, with a stable
    comparison sort as the fallback where the high bits alone could not order the keys), at
    0.12 against 0.22 s on 3M hashes of pod names, 0.09 against 0.25 s on 4M keys half of them
    below the one before, 0.33 against 0.75 s on 10M random 31-bit keys (the best of three).
    Keys within 16 bits of each other are numpy's radix sort of 16-bit integers, one pass
    (15M keys below 5: 0.17 against the kernel's 0.37 s).
    """
    if len(keys) == 0:
        return np.zeros(0, dtype=np.int64), keys
    if mostly_sorted(keys):
        order = np.argsort(keys, kind="stable")
        return order, keys[order]
    low = keys.min()
    shifted = (keys - low).astype(np.uint64)  # wraps around into the right value
    bits = int(shifted.max()).bit_length()
    if bits <= 16:  # numpy's own radix sort of 16-bit integers is the faster there
        order = np.argsort(shifted.astype(np.uint16), kind="stable")
        return order, keys[order]
    order, ordered = _radix_sort(shifted, bits)
    return order, (ordered + np.uint64(low)).astype(keys.dtype)


def hash_sort(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``stable_sort`` of ``uint64`` keys spread evenly over their 64 bits (hashes of names),
    faster: one counting pass on the keys' top bits puts them in buckets of about
    ``KEYS_A_BUCKET``, each then sorted by insertion (``_bucket_sort``; both passes are stable).
    The radix sort takes a pass for each of the eight bytes: 3M hashes of pod names 0.063-0.076
    against 0.098-0.33 s.  Keys not spread so (a bucket of more than ``MOST_IN_BUCKET``, which an
    insertion sort would take quadratic time over) are ``stable_sort``'s."""
    bits = max(len(keys) // KEYS_A_BUCKET, 1).bit_length() - 1  # the buckets' (log2, rounded down)
    if bits < 8:  # (a few thousand keys: the radix sort's passes are as quick)
        return stable_sort(keys)
    order, ordered = _bucket_sort(keys, np.uint64(64 - bits), 1 << bits, MOST_IN_BUCKET)
    if len(order) < len(keys):
        return stable_sort(keys)
    return order, ordered


def ranked(parts: Sequence[np.ndarray], ranks: Sequence[int]) -> list[int]:
    """The values at ``ranks`` (0-based) of the int64 values of ``parts`` (one at least), as if
    the parts were joined and sorted, without joining or sorting them: a compiled pass counts
    the values by bucket (their difference from the least value without its low bits, so that
    the buckets number at most ``2**RANK_BITS``), the counts give each rank's bucket, and only
    that bucket's values are gathered and partitioned.  The delay summary of a 1M-pod observe
    run joined a role's 9M delays into one array (72 MB of new pages) and partitioned it."""
    filled = [part for part in parts if len(part)]
    low = min(int(part.min()) for part in filled)
    span = max(int(part.max()) for part in filled) - low  # (below 2**64)
    shift, offset = max(span.bit_length() - RANK_BITS, 0), np.uint64(low % 2**64)
    counts = np.zeros((span >> shift) + 1, dtype=np.int64)
    for part in filled:
        _count_buckets(part, offset, shift, counts)
    ends = np.cumsum(counts)
    values = []
    for rank in ranks:
        bucket = int(np.searchsorted(ends, rank, side="right"))
        inside = np.empty(int(counts[bucket]), dtype=np.int64)
        at = 0
        for part in filled:
            at = _gather_bucket(part, offset, shift, np.uint64(bucket), inside, at)
        nth = rank - (int(ends[bucket - 1]) if bucket else 0)
        values.append(int(np.partition(inside, nth)[nth]))
    return values


def mostly_sorted(keys: np.ndarray) -> bool:
    """Whether at most one key in ``MOSTLY_SORTED`` is below the one before it.

    numpy's timsort is the faster stable sort for such keys, which it merges in runs: on the
    1M-pod runs' derivations, the capacity windows' sweep points (1.9M, in order but for a few)
    0.010 against 0.18 s for the packed sort ``stable_sort`` had before its radix sort, a part
    of the final rows' keys (3.4-4.3M, one in seven below the one before or none) 0.025-0.029
    against 0.24-0.50 s; 3M sorted keys with 1-19 % of neighbours swapped 0.008-0.012 against
    the radix sort's 0.08-0.10 s.  For keys in little order the radix sort is the faster (the
    capacity changes: 2-4M, 43-50 % below the one before)."""
    return int(np.count_nonzero(keys[1:] < keys[:-1])) * MOSTLY_SORTED <= len(keys)


def lex_order(keys: Sequence[np.ndarray]) -> np.ndarray:
    """``np.lexsort(keys)`` (the last key the primary one) for integer keys, up to ten times
    faster: each key less its smallest value takes the bits its range needs in one integer,
    which ``stable_sort`` orders; ``np.lexsort`` itself where the keys need more than 63 bits
    together."""
    if not len(keys[-1]):
        return np.zeros(0, dtype=np.int64)
    lows = [int(key.min()) for key in keys]
    widths = [(int(key.max()) - low).bit_length() for key, low in zip(keys, lows)]
    if sum(widths) > 63:
        return np.lexsort(keys)
    packed = np.zeros(len(keys[-1]), dtype=np.int64)
    for key, low, width in zip(reversed(keys), reversed(lows), reversed(widths)):
        packed <<= width
        packed += key
        packed -= low
    return stable_sort(packed)[0]


@njit(cache=True, nogil=True)
def _radix_sort(keys, bits):  # pragma: no cover - compiled
    """The stable order of ``keys`` (uint64 below ``2**bits``) and the keys in it: a counting
    sort per byte, the least significant first, each keeping the order the one before left
    (so keys equal in a byte stay as the lower bytes put them, and equal keys as they came).
    One pass counts every byte's values; a byte all keys share moves nothing and is skipped.
    ``keys`` is used as scratch."""
    n = len(keys)
    passes = max(1, (bits + 7) // 8)
    ends = np.zeros((passes, 257), np.int64)  # per byte: how many keys take each value
    for i in range(n):
        for byte in range(passes):
            ends[byte, ((keys[i] >> np.uint64(8 * byte)) & np.uint64(255)) + 1] += 1
    order = np.arange(n)
    spare_order, spare_keys = np.empty(n, np.int64), np.empty(n, np.uint64)
    for byte in range(passes):
        place = ends[byte]
        if _one_value(place, n):  # every key has the same value in this byte
            continue
        for value in range(256):  # where the keys of each value begin
            place[value + 1] += place[value]
        shift = np.uint64(8 * byte)
        for i in range(n):
            value = (keys[i] >> shift) & np.uint64(255)
            spare_order[place[value]], spare_keys[place[value]] = order[i], keys[i]
            place[value] += 1
        order, spare_order = spare_order, order
        keys, spare_keys = spare_keys, keys
    return order, keys


@njit(cache=True, nogil=True, inline="always")
def _one_value(counts, n):  # pragma: no cover - compiled
    """Whether one value has all ``n`` keys (``counts.max() == n``, which took numba most of a
    second more to compile)."""
    for count in counts:
        if count == n:
            return True
    return False


@njit(cache=True, nogil=True)
def _bucket_sort(keys, shift, buckets, most):  # pragma: no cover - compiled
    """The stable order of ``keys`` (uint64) and the keys in it, by bucket (the keys' bits from
    ``shift`` up), then within each bucket by insertion; nothing (two empty arrays) if a bucket
    holds more than ``most`` keys."""
    n = len(keys)
    starts = np.zeros(buckets + 1, np.int64)  # (counts first, shifted up by one)
    for i in range(n):
        starts[(keys[i] >> shift) + np.uint64(1)] += 1
    place = np.empty(buckets, np.int64)  # (a loop: ``max`` and a slice's copy compiled slowly)
    for bucket in range(buckets):
        if starts[bucket + 1] > most:
            return np.empty(0, np.int64), np.empty(0, np.uint64)
        place[bucket] = starts[bucket]
        starts[bucket + 1] += starts[bucket]
    order, ordered = np.empty(n, np.int64), np.empty(n, np.uint64)
    for i in range(n):  # into buckets, each keeping the keys' order
        bucket = keys[i] >> shift
        order[place[bucket]], ordered[place[bucket]] = i, keys[i]
        place[bucket] += 1
    for bucket in range(buckets):  # each by insertion: past greater keys only (stable)
        first = starts[bucket]
        for j in range(first + 1, starts[bucket + 1]):
            key, index = ordered[j], order[j]
            k = j - 1
            while k >= first and ordered[k] > key:
                ordered[k + 1], order[k + 1] = ordered[k], order[k]
                k -= 1
            ordered[k + 1], order[k + 1] = key, index
    return order, ordered


@njit(cache=True, nogil=True)
def _count_buckets(values, low, shift, counts):  # pragma: no cover - compiled
    """Add ``values`` to ``counts`` by bucket: ``(value - low) >> shift`` (in uint64, which
    holds any difference of two int64)."""
    for i in range(len(values)):
        counts[(np.uint64(values[i]) - low) >> np.uint64(shift)] += 1


@njit(cache=True, nogil=True)
def _gather_bucket(values, low, shift, bucket, out, at):  # pragma: no cover - compiled
    """The ``values`` in ``bucket`` (``_count_buckets``' numbering) into ``out`` from ``at``;
    where they end."""
    for i in range(len(values)):
        if (np.uint64(values[i]) - low) >> np.uint64(shift) == bucket:
            out[at] = values[i]
            at += 1
    return at
