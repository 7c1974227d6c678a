"""Named random streams: every consumer of randomness draws from its own stream.

Two kinds, both keyed by the run's seed and names, never by global state:

- ``stream(seed, *names)``: a sequential numpy ``Generator`` (``SeedSequence`` + PCG64), for
  producers that draw whole arrays at once, such as the workload synthesizer;
- ``Stream``: counter-based draws for the replay pipeline.  A draw is a pure function of (seed,
  stage, parameter, watcher, counter), the counter being the write's resource version, so the
  vectorised observe pipeline and the step-by-step what-if engine draw the same delay for the same
  delivery in whatever order they compute it, and adding a watcher or a write never changes
  another's draws.  The (seed, stage, parameter) key comes from ``SeedSequence``; the watcher and
  the counter are mixed in with SplitMix64, the generator behind counter-based streams such as
  Java's ``SplittableRandom`` (a ``SeedSequence`` per watcher would cost 30 µs each, too much for
  20,000 kubelets).

Adding a stream, or drawing more from one, never shifts another, so results cannot depend on
iteration order, thread count or which features are on.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import numpy as np
import numpy.typing as npt

UInts = npt.NDArray[np.uint64]
Keys = UInts | np.uint64  # per-watcher stream keys: one per draw, or one for all
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def name_hash(name: str) -> int:
    """A stable 64-bit integer for a name (Python's own ``hash`` is salted per process)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little")


def stream(seed: int, *names: str) -> np.random.Generator:
    """The generator for ``names`` under ``seed``; the same arguments always give the same draws."""
    key = tuple(name_hash(n) for n in names)
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=key)))


def _mix(z: UInts) -> UInts:
    """SplitMix64's finaliser: a bijection of uint64 that scrambles every bit."""
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def _splitmix(counters, keys, out):  # pragma: no cover - compiled
    """``_mix(counters * golden + keys)`` into ``out``, one element at a time: the draws of a
    replay are tens of millions, and numpy's whole-array steps made eight passes over each
    part of them (every shift a temporary of its own)."""
    for i in range(len(counters)):
        z = counters[i] * _GOLDEN + keys[i]
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        out[i] = z ^ (z >> np.uint64(31))


@cache
def _compiled_splitmix() -> Callable[..., None]:
    """``_splitmix`` compiled (loaded from numba's cache), at the first draw: importing numba
    cost each command that draws nothing (``replay synth --help``, ``replay query``, whose
    parsers import this module) a fifth of a second."""
    from replay.jit import njit

    compiled: Callable[..., None] = njit(cache=True, nogil=True)(_splitmix)
    return compiled


@dataclass(frozen=True)
class Stream:
    """Counter-based uniform draws for one (seed, stage, parameter), per watcher."""

    key: int

    @classmethod
    def of(cls, seed: int, *names: str) -> Stream:
        sequence = np.random.SeedSequence(seed, spawn_key=tuple(name_hash(n) for n in names))
        return cls(int(sequence.generate_state(1, np.uint64)[0]))

    def watcher_keys(self, watchers: Keys) -> UInts:
        """The per-watcher stream keys for watcher name hashes (compute once, index per draw)."""
        with np.errstate(over="ignore"):
            return _mix(np.uint64(self.key) ^ _mix(np.asarray(watchers, dtype=np.uint64)))

    @staticmethod
    def shifted_keys(keys: UInts, by: npt.NDArray[np.int64]) -> UInts:
        """Keys that draw at counter ``c`` what ``keys`` draw at ``c - by`` (``by``: one count
        per key): a scan that numbers a watcher's deliveries from its first one's place in a
        larger array draws with the array's positions as counters, without subtracting."""
        with np.errstate(over="ignore"):
            shifted: UInts = keys - by.astype(np.uint64) * _GOLDEN
        return shifted

    def bits(self, counters: UInts, keys: Keys | None = None) -> UInts:
        """64 random bits per counter, from ``keys`` (per-watcher keys, one or one per counter;
        by default the shared stream's own key)."""
        if keys is None:
            keys = self.watcher_keys(np.uint64(0))
        counters = np.asarray(counters, dtype=np.uint64)
        out = np.empty(len(counters), dtype=np.uint64)
        _compiled_splitmix()(counters, np.broadcast_to(np.asarray(keys, dtype=np.uint64),
                                                       counters.shape), out)
        return out

    def uniforms(self, counters: UInts, keys: Keys | None = None) -> npt.NDArray[np.float64]:
        """One draw in (0, 1) per counter, with 53 bits of resolution."""
        bits = self.bits(counters, keys)
        bits >>= np.uint64(11)
        out = bits.astype(np.float64)
        out += 0.5
        out *= 2.0**-53
        return out

    def normals(self, counters: UInts, keys: Keys | None = None) -> npt.NDArray[np.float32]:
        """Standard normal draws by Box-Muller over two 24-bit uniforms from one draw.

        Single precision is five times faster here and ample for a delay: |z| stays below 5.9,
        far beyond any percentile a study asks for, and the result is rounded to microseconds.
        """
        bits = self.bits(counters, keys)
        f32 = np.float32
        u1 = (bits >> np.uint64(40)).astype(f32)
        bits &= np.uint64(0xFFFFFF)
        u2 = bits.astype(f32)
        for u in (u1, u2):  # (k + 0.5) / 2**24, in place
            u += f32(0.5)
            u *= f32(2.0**-24)
        np.log(u1, out=u1)  # sqrt(-2 log u1) cos(2 pi u2), the same operations in place
        u1 *= f32(-2.0)
        np.sqrt(u1, out=u1)
        u2 *= f32(2.0 * np.pi)
        np.cos(u2, out=u2)
        u1 *= u2
        return u1
