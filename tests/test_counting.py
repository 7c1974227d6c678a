"""The counting sorts of ``replay.analysis.counting`` against numpy's sorts."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.analysis.counting import key_order, two_key_order
from conftest import budget


@settings(max_examples=budget(300), deadline=None)
@given(data=st.data(), count=st.integers(0, 40), spread=st.sampled_from([1, 3, 10**9]))
def test_two_keys_are_ordered_as_lexsort_orders_them(data, count, spread):
    """``two_key_order`` (two counting sorts where both keys are dense, ``lex_order`` where one
    is not) against ``np.lexsort``: repeated values in both keys, negative ones, and minor keys
    a few apart or billions (the truths' rvs, ordered within each node and class)."""
    def column(values):
        return np.array(data.draw(st.lists(values, min_size=count, max_size=count)),
                        dtype=np.int64)

    minor = column(st.integers(-3, 12)) * spread
    major = column(st.integers(-1, 5))
    assert np.array_equal(two_key_order(minor, major), np.lexsort((minor, major)))


@settings(max_examples=budget(300), deadline=None)
@given(data=st.data(), count=st.integers(0, 40), spread=st.sampled_from([1, 3, 10**9]))
def test_the_moves_are_ordered_as_a_stable_sort_orders_them(data, count, spread):
    """``key_order`` (a counting sort where the rvs are dense, ``lex_order`` where they are
    not) against numpy's stable sort, with repeated rvs (a write's several moves), and rvs a
    few apart or billions."""
    rv = np.array(data.draw(st.lists(st.integers(0, 12), min_size=count, max_size=count)),
                  dtype=np.int64) * spread + 7
    assert np.array_equal(key_order(rv), np.argsort(rv, kind="stable"))
