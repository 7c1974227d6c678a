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
from dataclasses import dataclass
from functools import cache
from types import ModuleType

import numpy as np
import numpy.typing as npt

from replay.splitmix import GOLDEN, mix

UInts = npt.NDArray[np.uint64]
Keys = UInts | np.uint64  # per-watcher stream keys: one per draw, or one for all


def name_hash(name: str) -> int:
    """A stable 64-bit integer for a name (Python's own ``hash`` is salted per process)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little")


def stream(seed: int, *names: str) -> np.random.Generator:
    """The generator for ``names`` under ``seed``; the same arguments always give the same draws."""
    key = tuple(name_hash(n) for n in names)
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=key)))


@cache
def kernels() -> ModuleType:
    """``replay.rngkernel``, the draws' compiled loops, imported at the first draw (each loaded
    from numba's cache at its first call)."""
    from replay import rngkernel

    return rngkernel


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
            return mix(np.uint64(self.key) ^ mix(np.asarray(watchers, dtype=np.uint64)))

    @staticmethod
    def shifted_keys(keys: UInts, by: npt.NDArray[np.int64]) -> UInts:
        """Keys that draw at counter ``c`` what ``keys`` draw at ``c - by`` (``by``: one count
        per key): a scan that numbers a watcher's deliveries from its first one's place in a
        larger array draws with the array's positions as counters, without subtracting."""
        with np.errstate(over="ignore"):
            shifted: UInts = keys - by.astype(np.uint64) * GOLDEN
        return shifted

    def bits(self, counters: UInts, keys: Keys | None = None) -> UInts:
        """64 random bits per counter, from ``keys`` (per-watcher keys, one or one per counter;
        by default the shared stream's own key)."""
        counters, keys = _counters_and_keys(counters, keys, self)
        out = np.empty(len(counters), dtype=np.uint64)
        kernels().splitmix(counters, keys, out)
        return out

    def uniforms(self, counters: UInts, keys: Keys | None = None) -> npt.NDArray[np.float64]:
        """One draw in (0, 1) per counter, with 53 bits of resolution: ``((bits >> 11) + 0.5) *
        2**-53``."""
        counters, keys = _counters_and_keys(counters, keys, self)
        out = np.empty(len(counters), dtype=np.float64)
        kernels().uniforms(counters, keys, out)
        return out

    def normals(self, counters: UInts, keys: Keys | None = None, scale: float = 1.0,
                shift: float = 0.0) -> npt.NDArray[np.float64]:
        """``shift + scale * z`` per counter, ``z`` a standard normal draw by Box-Muller over two
        24-bit uniforms from one draw, ``sqrt(-2 log u1) cos(2 pi u2)``.

        ``z`` is in single precision, five times faster here and ample for a delay: |z| stays
        below 5.9, far beyond any percentile a study asks for, and the result is rounded to
        microseconds.  The scaling is in double precision (a lognormal's logarithm of
        microseconds)."""
        counters, keys = _counters_and_keys(counters, keys, self)
        n = len(counters)
        u1, u2 = np.empty(n, dtype=np.float32), np.empty(n, dtype=np.float32)
        compiled = kernels()
        compiled.box_muller_inputs(counters, keys, u1, u2)
        np.log(u1, out=u1)
        np.cos(u2, out=u2)
        out = np.empty(n, dtype=np.float64)
        compiled.box_muller(u1, u2, scale, shift, out)
        return out


def _counters_and_keys(counters: UInts, keys: Keys | None,
                       stream: Stream) -> tuple[UInts, UInts]:
    """The counters as ``uint64``, and a key for each (by default the stream's own key)."""
    if keys is None:
        keys = stream.watcher_keys(np.uint64(0))
    counters = np.asarray(counters, dtype=np.uint64)
    return counters, np.broadcast_to(np.asarray(keys, dtype=np.uint64), counters.shape)
