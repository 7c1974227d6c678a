"""The draws of ``replay.rng`` and ``replay.engine.distributions`` as compiled loops (numba).

A replay draws tens of millions of delays (a 1M-pod observe replay: 15M of each per-watch stage),
and as numpy's whole-array steps each draw took a pass over memory per operation: eleven for an
exponential delay (the bits, the shift, the conversion, the two scalings, the logarithm, the
scale, the cap, the rounding, the conversion back), twenty for a lognormal one.  Here the steps
that are exact in any order of evaluation (integer operations, conversions, one IEEE addition
or multiplication at a time, the square root, the cap and the rounding) are one loop each, in
the same precision and the same order as the formula (``tests/test_draws.py``), so the draws
are the same to the bit.  The logarithm, the cosine and the exponential stay numpy's between
the loops: numpy's own (vectorised) implementations do not always round as the C library's,
which a compiled loop would call.

Imported by ``replay.rng`` at the first draw, not with it: importing numba cost each command that
draws nothing (``replay synth --help``, ``replay query``) a fifth of a second.
"""

from __future__ import annotations

import numpy as np

from replay.jit import njit
from replay.limits import MAX_DURATION_MS
from replay.splitmix import GOLDEN, mix

_F32 = np.float32
_HALF, _STEP, _TWO_PI, _MINUS_TWO = _F32(0.5), _F32(2.0**-24), _F32(2.0 * np.pi), _F32(-2.0)
_LOW_24 = np.uint64(0xFFFFFF)
_CAP_US = float(MAX_DURATION_MS * 1000)


# SplitMix64's finaliser, ``replay.splitmix``'s own, compiled for one uint64 at a time
_mix = njit(cache=True, nogil=True, inline="always")(mix)


@njit(cache=True, nogil=True)
def _mixed(counter, key):  # pragma: no cover - compiled
    """SplitMix64's ``mix(counter * GOLDEN + key)`` for one draw."""
    return _mix(counter * GOLDEN + key)


@njit(cache=True, nogil=True)
def splitmix(counters, keys, out):  # pragma: no cover - compiled
    """The 64 random bits of each draw into ``out``."""
    for i in range(len(counters)):
        out[i] = _mixed(counters[i], keys[i])


@njit(cache=True, nogil=True)
def uniforms(counters, keys, out):  # pragma: no cover - compiled
    """``((bits >> 11) + 0.5) * 2**-53`` of each draw into ``out`` (float64)."""
    for i in range(len(counters)):
        out[i] = (np.float64(_mixed(counters[i], keys[i]) >> np.uint64(11)) + 0.5) * 2.0**-53


@njit(cache=True, nogil=True)
def box_muller_inputs(counters, keys, u1, u2):  # pragma: no cover - compiled
    """Box-Muller's two single-precision uniforms of each draw, ``(k + 0.5) * 2**-24`` of its top
    24 bits (``u1``) and of its low 24 bits, the latter times 2 pi (``u2``): the arguments of
    the logarithm and the cosine."""
    for i in range(len(counters)):
        bits = _mixed(counters[i], keys[i])
        u1[i] = (_F32(bits >> np.uint64(40)) + _HALF) * _STEP
        u2[i] = (_F32(bits & _LOW_24) + _HALF) * _STEP * _TWO_PI


@njit(cache=True, nogil=True)
def box_muller(log_u1, cos_u2, scale, shift, out):  # pragma: no cover - compiled
    """``shift + scale * z`` into ``out`` (float64), ``z = sqrt(-2 log u1) cos(2 pi u2)`` the
    standard normal of each draw in single precision."""
    for i in range(len(log_u1)):
        z = np.sqrt(log_u1[i] * _MINUS_TWO) * cos_u2[i]
        out[i] = np.float64(z) * scale + shift


@njit(cache=True, nogil=True)
def rounded_us(values, scale, out):  # pragma: no cover - compiled
    """``values * scale`` in whole microseconds into ``out`` (int64): capped at
    ``MAX_DURATION_MS``, then rounded half to even (``np.rint``)."""
    for i in range(len(values)):
        out[i] = np.int64(np.rint(np.minimum(values[i] * scale, _CAP_US)))
