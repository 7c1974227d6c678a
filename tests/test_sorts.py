"""The fast stable sorts the replay uses give exactly numpy's stable argsort."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import replay.arrays as arrays
from replay.arrays import (hash_sort, lex_order, mostly_sorted, ranked, stable_order,
                           stable_sort)

int64s = st.integers(-2**63, 2**63 - 1)


@given(st.lists(st.one_of(st.integers(-3, 3), int64s), max_size=300),
       st.sampled_from([np.int64, np.uint64]))
def test_stable_sort_is_numpys(keys, dtype):
    keys = np.array(keys, dtype=np.int64).astype(dtype)
    order, ordered = stable_sort(keys)
    expected = np.argsort(keys, kind="stable")
    assert order.tolist() == expected.tolist()
    assert ordered.tolist() == keys[expected].tolist() and ordered.dtype == keys.dtype


def test_stable_sort_of_hashes_that_share_their_high_bits():
    """Keys that need all 64 bits, many alike in their high bytes and some in all of them."""
    keys = np.array([5, 3, 2**63 + 9, 2**63 + 1, 4, 2**63 + 9], dtype=np.uint64)
    keys = np.tile(keys, 50)
    assert stable_sort(keys)[0].tolist() == np.argsort(keys, kind="stable").tolist()


@given(st.integers(0, 2**32), st.integers(1, 20_000), st.integers(1, 5), st.integers(0, 200))
def test_hash_sort_is_numpys(seed, names, rows, crowd):
    """Hashes of ``names`` names, each ``rows`` times in a random order, ``crowd`` of them
    sharing their top 32 bits (one bucket sorted by insertion), in buckets or, below 2048 keys,
    by the radix sort."""
    rng = np.random.default_rng(seed)
    hashes = rng.integers(0, 2**64, names, dtype=np.uint64)
    hashes[:crowd] = (hashes[:crowd] & np.uint64(0xFFFFFFFF)) | np.uint64(0xABCD1234 << 32)
    keys = np.repeat(hashes, rows)[rng.permutation(names * rows)]
    order, ordered = hash_sort(keys)
    expected = np.argsort(keys, kind="stable")
    assert order.tolist() == expected.tolist()
    assert ordered.tolist() == keys[expected].tolist() and ordered.dtype == np.uint64


def test_hash_sort_buckets_hashes_and_leaves_other_keys_to_the_radix_sort(monkeypatch):
    """Spread keys are sorted in buckets, without the radix sort; keys that would crowd a bucket
    (small ones: all in the first) are the radix sort's, not insertion-sorted."""
    sorted_by = []
    monkeypatch.setattr(arrays, "stable_sort", lambda keys: sorted_by.append(len(keys)) or
                        (np.argsort(keys, kind="stable"), np.sort(keys, kind="stable")))
    rng = np.random.default_rng(7)
    spread = rng.integers(0, 2**64, 50_000, dtype=np.uint64)
    assert hash_sort(spread)[0].tolist() == np.argsort(spread, kind="stable").tolist()
    assert sorted_by == []
    small = rng.integers(0, 2**20, 50_000).astype(np.uint64)
    assert hash_sort(small)[0].tolist() == np.argsort(small, kind="stable").tolist()
    assert sorted_by == [50_000]


@given(st.lists(st.lists(st.one_of(st.integers(-3, 3), st.integers(0, 10**6), int64s),
                         max_size=60), min_size=1, max_size=4).filter(lambda parts: any(parts)),
       st.data())
def test_ranked_is_the_joined_parts_sorted(parts, data):
    """Whatever the values' span (a few, a million, the whole int64 range, wrapped in uint64),
    however they fall into parts, empty ones too."""
    values = [np.array(part, dtype=np.int64) for part in parts]
    joined = np.sort(np.concatenate(values))
    ranks = data.draw(st.lists(st.integers(0, len(joined) - 1), min_size=1, max_size=3))
    assert ranked(values, ranks) == joined[ranks].tolist()


@given(st.lists(st.tuples(st.integers(0, 255), st.integers(0, 3)), min_size=2, max_size=300),
       st.integers(8, 55))
def test_stable_sort_of_keys_some_of_whose_bytes_are_all_alike(parts, gap):
    """The radix sort skips a byte that every key shares: here the bytes between a key's low
    byte and its high bits, and, where the draw makes them so, the low byte or the high bits."""
    keys = np.array([low + (high << gap) for low, high in parts], dtype=np.int64)
    order, ordered = stable_sort(keys)
    assert order.tolist() == np.argsort(keys, kind="stable").tolist()
    assert ordered.tolist() == sorted(keys.tolist())


@pytest.mark.parametrize("span", [2**16 - 1, 2**16, 2**17, 2**24, 2**32])
def test_the_sorts_of_keys_about_16_bits_wide(span):
    """Keys within 16 bits of each other take numpy's 16-bit radix sort, wider ones the kernel:
    keys just past the line must not lose their high bits."""
    keys = np.random.default_rng(span).integers(0, span, 1000)
    keys[:2] = 0, span - 1
    assert stable_sort(keys)[0].tolist() == np.argsort(keys, kind="stable").tolist()
    assert stable_order(keys, span).tolist() == np.argsort(keys, kind="stable").tolist()


@given(st.lists(st.integers(0, 2**20), max_size=300))
def test_stable_order_is_numpys(ids):
    ids = np.array(ids, dtype=np.int64)
    bound = int(ids.max()) + 1 if len(ids) else 1
    assert stable_order(ids, bound).tolist() == np.argsort(ids, kind="stable").tolist()


@given(st.lists(st.tuples(st.integers(-3, 3), st.booleans(), int64s), max_size=200),
       st.integers(0, 62))
def test_lex_order_is_numpys_lexsort(rows, bits):
    """Keys that fit in 63 bits together (packed), and keys that do not (numpy's lexsort)."""
    first = np.array([r[0] for r in rows], dtype=np.int64)
    second = np.array([r[1] for r in rows], dtype=bool)
    third = np.array([r[2] for r in rows], dtype=np.int64) >> bits  # 64 - bits wide
    for keys in ((first, second), (third, first, second), (second, third), (first, third)):
        assert lex_order(keys).tolist() == np.lexsort(keys).tolist()


def test_lex_order_of_keys_one_bit_too_wide_to_pack():
    """63 bits of range and a flag: 64 bits, which would overflow the packed integer."""
    wide = np.array([2**62 - 1, -2**62, 0, 2**62 - 1, -2**62], dtype=np.int64)
    flag = np.array([True, False, True, False, True])
    for keys in ((flag, wide), (wide, flag), (flag, wide >> 1)):
        assert lex_order(keys).tolist() == np.lexsort(keys).tolist()


@given(st.lists(st.lists(st.integers(-5, 5), max_size=80), max_size=6),
       st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), max_size=3))
def test_stable_sort_of_keys_mostly_in_order_is_numpys(runs, swaps):
    """Sorted runs of keys with many ties, a few swapped: numpy's timsort's side of
    ``stable_sort``, which must be stable too."""
    keys = np.concatenate([np.sort(np.array(run, dtype=np.int64)) for run in runs] or
                          [np.zeros(0, dtype=np.int64)])
    for i, j in swaps:
        if len(keys):
            i, j = i % len(keys), j % len(keys)
            keys[[i, j]] = keys[[j, i]]
    order, ordered = stable_sort(keys)
    expected = np.argsort(keys, kind="stable")
    assert order.tolist() == expected.tolist()
    assert ordered.tolist() == keys[expected].tolist()


def test_keys_in_runs_are_mostly_sorted_and_random_keys_are_not():
    rng = np.random.default_rng(0)
    random = rng.integers(0, 2**40, 10_000)
    assert not mostly_sorted(random)
    assert mostly_sorted(np.concatenate([np.sort(part) for part in np.array_split(random, 50)]))
