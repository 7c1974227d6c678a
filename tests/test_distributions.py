"""The ``histogram`` distribution: its config, its sampling rule, and its draws against its source."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.engine.config import load_config
from replay.engine.distributions import Histogram, parse_distribution
from replay.errors import ReplayError
from replay.rng import Stream
from conftest import budget

DRAWS = np.arange(100_000, dtype=np.uint64)


def histogram(**spec) -> Histogram:
    return parse_distribution({"dist": "histogram", **spec}, "h")


def fractions(draws_us: np.ndarray, le_ms, total_buckets: int) -> np.ndarray:
    """The share of draws in each bucket, bounds inclusive as Prometheus counts them."""
    bucket = np.searchsorted(np.asarray(le_ms) * 1000, draws_us, side="left")
    return np.bincount(bucket, minlength=total_buckets) / len(draws_us)


def test_cumulative_per_bucket_and_inf_are_one_histogram():
    as_prometheus = histogram(le_ms=[1, 2, 5, math.inf], counts=[10, 30, 40, 50], max_ms=10)
    per_bucket = histogram(le_ms=[1, 2, 5], counts=[10, 20, 10, 10], cumulative=False,
                           max_ms=10)
    assert as_prometheus == per_bucket == Histogram((1.0, 2.0, 5.0), (10.0, 20.0, 10.0, 10.0),
                                                    10.0)
    assert parse_distribution(per_bucket.describe(), "again") == per_bucket
    # no +Inf bucket: every observation is at or below the last bound
    assert histogram(le_ms=[1, 2], counts=[1, 3]).counts == (1.0, 2.0, 0.0)


def test_the_sampling_rule_by_hand():
    """Bucket by count, then linear interpolation from 0; the +Inf bucket runs to max_ms."""
    h = histogram(le_ms=[1, 2, 5], counts=[10, 30, 40, 50], max_ms=10)
    # 50 observations: q = 0.1 is 5 of them, half of the first bucket's 10
    assert h.quantiles_ms(np.array([0.0, 0.1, 0.2, 0.5, 0.8, 0.9, 1.0])).tolist() == [
        0.0, 0.5, 1.0, 1.75, 5.0, 7.5, 10.0]
    assert h.mean_us == 1000 * (10 * 0.5 + 20 * 1.5 + 10 * 3.5 + 10 * 7.5) / 50
    assert not h.is_zero and histogram(le_ms=[0, 1], counts=[4, 4]).is_zero


@pytest.mark.parametrize("spec", [
    {"le_ms": [0.1, 0.2, 0.4, 0.8, 1.6, math.inf], "counts": [390, 470, 500, 515, 520, 522],
     "max_ms": 3.0},
    {"le_ms": [5, 25, 50, 100], "counts": [13, 2, 0, 0, 1], "cumulative": False, "max_ms": 400},
    {"le_ms": [0, 1e-5, 1e-4, 1e-3, 0.01, 0.1, 1, 10], "counts": [0, 0, 1, 7, 90, 400, 402, 402]},
])
def test_draws_reproduce_the_buckets(spec):
    """100,000 draws fall in each bucket as often as the source's counts say, within one
    percentage point."""
    h = histogram(**spec)
    draws = h.sample_us(Stream.of(7, "stage", "latency"), DRAWS)
    expected = np.asarray(h.counts) / sum(h.counts)
    assert np.abs(fractions(draws, h.le_ms, len(h.counts)) - expected).max() < 0.01
    assert draws.min() >= 0 and draws.max() <= round((h.max_ms or h.le_ms[-1]) * 1000)


def test_a_broken_sampler_fails_the_bucket_test():
    """The comparison can fail: draws that ignore the counts (uniform over the range) do."""
    h = histogram(le_ms=[1, 2, 5], counts=[10, 30, 40, 50], max_ms=10)
    uniform = np.rint(Stream.of(7, "x").uniforms(DRAWS) * 10_000).astype(np.int64)
    expected = np.asarray(h.counts) / sum(h.counts)
    assert np.abs(fractions(uniform, h.le_ms, 4) - expected).max() > 0.01


@settings(max_examples=budget(60), deadline=None)
@given(bounds=st.lists(st.floats(0.001, 1000), min_size=1, max_size=8, unique=True),
       counts=st.lists(st.integers(0, 50), min_size=9, max_size=9),
       seed=st.integers(0, 2**31))
def test_draws_stay_in_nonempty_buckets_and_repeat(bounds, counts, seed):
    bounds = sorted(bounds)
    counts = counts[:len(bounds) + 1]
    if sum(counts) == 0:
        counts[0] = 1
    h = histogram(le_ms=bounds, counts=counts, cumulative=False, max_ms=bounds[-1] * 2 + 1)
    stream = Stream.of(seed, "s")
    draws = h.sample_us(stream, DRAWS[:2000])
    assert np.array_equal(draws, h.sample_us(stream, DRAWS[:2000]))
    lower, upper = np.r_[0.0, h.le_ms], np.r_[h.le_ms, h.max_ms]
    nonempty = np.asarray(h.counts) > 0
    # every draw is within (a microsecond of) some bucket that holds observations
    inside = ((draws[:, None] >= np.rint(lower[nonempty] * 1000) - 1)
              & (draws[:, None] <= np.rint(upper[nonempty] * 1000) + 1)).any(axis=1)
    assert inside.all()
    quantiles = h.quantiles_ms(np.linspace(0, 1, 50))
    assert np.all(np.diff(quantiles) >= 0)


@pytest.mark.parametrize("table, message", [
    ("le_ms = [1, 2], counts = [3, 2]", "counts: counts[1] = 2 is below counts[0] = 3"),
    ("le_ms = [2, 1], counts = [1, 2]", "le_ms: bounds must increase"),
    ("le_ms = [1, inf, 3], counts = [1, 2, 3]", "le_ms: bounds must increase"),
    ("le_ms = [1, 2], counts = [1, 2, 3, 4]", "counts: 4 counts for 2 bounds"),
    ("le_ms = [1], counts = [0]", "counts: no observations"),
    ("le_ms = [1, inf], counts = [1, 2]", "max_ms: required: the +Inf bucket holds 1"),
    ("le_ms = [1], counts = [1], max_ms = 0.5", "max_ms: expected a number above the last"),
    ("le_ms = [1], counts = [1], cumulative = 1", "cumulative: expected true or false"),
    ("le_ms = [], counts = [1]", "le_ms: expected a non-empty list"),
    ("le_ms = [1], counts = [-1]", "counts: expected a list of counts >= 0"),
    ("le_ms = [1], counts = [1], bins = 3", "bins: unknown key for a histogram distribution"),
    ("counts = [1]", "le_ms: required for a histogram"),
])
def test_errors_name_the_key(tmp_path, table, message):
    path = tmp_path / "run.toml"
    path.write_text(f"[stages.handler]\nservice = {{ dist = \"histogram\", {table} }}\n")
    with pytest.raises(ReplayError) as err:
        load_config(path)
    assert f"run.toml: stages.handler.service.{message}" in str(err.value)


def test_the_documented_example_is_a_valid_config(tmp_path):
    docs = (Path(__file__).resolve().parents[1] / "docs" / "config.md").read_text()
    example = next(block for block in docs.split("```toml\n")[1:]
                   if 'dist = "histogram"' in block.split("```")[0]).split("```")[0]
    path = tmp_path / "example.toml"
    path.write_text(example)
    handler = load_config(path).stages["handler"]["service"]
    assert handler == Histogram((0.1, 0.2, 0.4, 0.8), (440.0, 61.0, 17.0, 4.0, 0.0))
