"""Draws: the counter-based streams and each distribution's rule, to the bit and the microsecond.

The draws are computed in place, a cache-sized part at a time, and a scan draws at array
positions from shifted keys; these pin that every one of those is the plain formula (the run
tables' bytes depend on it), written out here the obvious way.
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from replay.engine.distributions import Exponential, LogNormal, Uniform
from replay.limits import MAX_DURATION_MS
from replay.rng import Stream

STREAM = Stream.of(11, "network", "latency")
COUNTERS = np.arange(50_000, dtype=np.uint64)
KEYS = STREAM.watcher_keys(np.arange(50_000, dtype=np.uint64) % 7)
MASK = (1 << 64) - 1


def splitmix(key: int, counter: int) -> int:
    """SplitMix64 of ``key + counter * golden``, in Python integers."""
    z = (key + counter * 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def test_bits_are_splitmix_of_key_and_counter():
    bits = STREAM.bits(COUNTERS[:500], KEYS[:500])
    assert bits.tolist() == [splitmix(int(k), int(c)) for k, c in zip(KEYS[:500], COUNTERS[:500])]


@given(st.lists(st.tuples(st.integers(0, 2**40), st.integers(0, 2**40)), min_size=1, max_size=50),
       st.integers(0, 2**63))
def test_shifted_keys_draw_at_counter_c_what_the_keys_draw_at_c_minus_the_shift(pairs, key):
    counter = np.array([c + s for c, s in pairs], dtype=np.uint64)
    shift = np.array([s for _, s in pairs], dtype=np.int64)
    keys = np.full(len(pairs), key, dtype=np.uint64)
    assert STREAM.bits(counter, Stream.shifted_keys(keys, shift)).tolist() == \
        STREAM.bits(counter - shift.astype(np.uint64), keys).tolist()


def test_uniforms_and_normals_are_their_formulas():
    bits = STREAM.bits(COUNTERS, KEYS)
    uniform = ((bits >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53
    f32 = np.float32
    u1 = ((bits >> np.uint64(40)).astype(f32) + f32(0.5)) * f32(2.0**-24)
    u2 = ((bits & np.uint64(0xFFFFFF)).astype(f32) + f32(0.5)) * f32(2.0**-24)
    normal = np.sqrt(f32(-2.0) * np.log(u1)) * np.cos(f32(2.0 * np.pi) * u2)
    assert np.array_equal(STREAM.uniforms(COUNTERS, KEYS), uniform)
    assert np.array_equal(STREAM.normals(COUNTERS, KEYS), normal)


def rint_us(ms_times_1000: np.ndarray) -> np.ndarray:
    return np.rint(np.minimum(ms_times_1000, MAX_DURATION_MS * 1000)).astype(np.int64)


def test_each_distribution_draws_its_formula_to_the_microsecond():
    u = STREAM.uniforms(COUNTERS, KEYS)
    z = STREAM.normals(COUNTERS, KEYS).astype(np.float64)
    lognormal, exponential, uniform = LogNormal(0.5, 5.0), Exponential(0.1), Uniform(0.2, 3.0)
    expected = {
        lognormal: rint_us(np.exp(math.log(500.0) + lognormal.sigma * z)),
        exponential: rint_us(-0.1 * 1000 * np.log(u)),
        uniform: rint_us((0.2 + (3.0 - 0.2) * u) * 1000),
    }
    for dist, want in expected.items():
        assert np.array_equal(dist.sample_us(STREAM, COUNTERS, KEYS), want), dist


def test_a_draw_from_the_far_tail_is_capped_not_wrapped():
    huge = LogNormal(MAX_DURATION_MS / 2, MAX_DURATION_MS)
    draws = huge.sample_us(STREAM, COUNTERS, KEYS)
    assert draws.min() > 0 and draws.max() == MAX_DURATION_MS * 1000


def test_the_draws_compiled_loops_are_imported_at_the_first_draw():
    """Importing the streams and the distributions imports no numba (a fifth of a second of
    each command that draws nothing, whose parsers import them); the first draw does."""
    script = """
import sys
import numpy as np
from replay.engine.distributions import Exponential
from replay.rng import Stream
assert "numba" not in sys.modules and "replay.rngkernel" not in sys.modules
Exponential(1.0).sample_us(Stream.of(1, "x"), np.arange(3, dtype=np.uint64))
assert "replay.rngkernel" in sys.modules
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
