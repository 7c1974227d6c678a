"""Delay distributions, given in milliseconds in the config, sampled in integer microseconds.

Samples come from counter-based ``replay.rng.Stream`` draws, one per (stage, parameter, watcher,
write), so the vectorised and the step-by-step pipelines draw the same delay for the same delivery.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from replay.limits import MAX_DURATION_MS
from replay.rng import Stream

Z99 = 2.3263478740408408  # the standard normal's 99th percentile


class Distribution:
    """A delay distribution given in milliseconds that samples integer microseconds."""

    kind: ClassVar[str]
    keys: ClassVar[tuple[str, ...]]

    def sample_us(self, stream: Stream, counters: np.ndarray,
                  keys: np.ndarray | None = None) -> np.ndarray:
        """One sample per counter; ``keys`` are per-watcher stream keys (``Stream.watcher_keys``)."""
        raise NotImplementedError

    @property
    def mean_us(self) -> float:
        raise NotImplementedError

    @property
    def is_zero(self) -> bool:
        return False

    def describe(self) -> dict:
        return {"dist": self.kind, **{k: getattr(self, k) for k in self.keys}}


def _rint(values: np.ndarray) -> np.ndarray:
    """Microseconds as integers; a draw from the far tail of a distribution is capped at
    ``MAX_DURATION_MS`` rather than wrapped around to a negative delay."""
    return np.rint(np.minimum(values, MAX_DURATION_MS * 1000)).astype(np.int64)


@dataclass(frozen=True)
class Constant(Distribution):
    ms: float
    kind: ClassVar[str] = "constant"
    keys: ClassVar[tuple[str, ...]] = ("ms",)

    def sample_us(self, stream, counters, keys=None):
        return np.full(len(counters), round(self.ms * 1000), dtype=np.int64)

    @property
    def mean_us(self) -> float:
        return float(round(self.ms * 1000))

    @property
    def is_zero(self) -> bool:
        return round(self.ms * 1000) == 0


@dataclass(frozen=True)
class Exponential(Distribution):
    mean_ms: float
    kind: ClassVar[str] = "exponential"
    keys: ClassVar[tuple[str, ...]] = ("mean_ms",)

    def sample_us(self, stream, counters, keys=None):
        return _rint(-self.mean_ms * 1000 * np.log(stream.uniforms(counters, keys)))

    @property
    def mean_us(self) -> float:
        return self.mean_ms * 1000


@dataclass(frozen=True)
class LogNormal(Distribution):
    """Given by its median and 99th percentile, as latencies are usually reported."""

    median_ms: float
    p99_ms: float
    kind: ClassVar[str] = "lognormal"
    keys: ClassVar[tuple[str, ...]] = ("median_ms", "p99_ms")

    @property
    def sigma(self) -> float:
        return math.log(self.p99_ms / self.median_ms) / Z99

    def sample_us(self, stream, counters, keys=None):
        mu = math.log(self.median_ms * 1000)
        return _rint(np.exp(mu + self.sigma * stream.normals(counters, keys).astype(np.float64)))

    @property
    def mean_us(self) -> float:
        return self.median_ms * 1000 * math.exp(self.sigma**2 / 2)


@dataclass(frozen=True)
class Uniform(Distribution):
    low_ms: float
    high_ms: float
    kind: ClassVar[str] = "uniform"
    keys: ClassVar[tuple[str, ...]] = ("low_ms", "high_ms")

    def sample_us(self, stream, counters, keys=None):
        u = stream.uniforms(counters, keys)
        return _rint((self.low_ms + (self.high_ms - self.low_ms) * u) * 1000)

    @property
    def mean_us(self) -> float:
        return (self.low_ms + self.high_ms) * 500


@dataclass(frozen=True)
class Empirical(Distribution):
    """Values observed elsewhere (e.g. a histogram of a real metric), drawn with their weights."""

    ms: tuple[float, ...]
    weights: tuple[float, ...]
    kind: ClassVar[str] = "empirical"
    keys: ClassVar[tuple[str, ...]] = ("ms", "weights")

    def sample_us(self, stream, counters, keys=None):
        values = np.rint(np.asarray(self.ms) * 1000).astype(np.int64)
        cumulative = np.cumsum(self.weights)
        picks = np.searchsorted(cumulative, stream.uniforms(counters, keys) * cumulative[-1],
                                side="right")
        return values[np.minimum(picks, len(values) - 1)]

    @property
    def mean_us(self) -> float:
        return float(np.dot(self.ms, self.weights) / sum(self.weights) * 1000)

    def describe(self) -> dict:
        return {"dist": self.kind, "ms": list(self.ms), "weights": list(self.weights)}


KINDS: dict[str, type[Distribution]] = {
    cls.kind: cls for cls in (Constant, Exponential, LogNormal, Uniform, Empirical)
}
ZERO = Constant(0.0)


def parse_distribution(spec: object, where: str) -> Distribution:
    """A distribution from its config table, e.g. ``{dist = "lognormal", median_ms = 0.5,
    p99_ms = 5.0}``; ``ValueError`` naming ``where`` (the config key) when it is not one."""
    if not isinstance(spec, dict):
        raise ValueError(f"{where}: expected a table like {{ dist = \"constant\", ms = 1.0 }}")
    kind = spec.get("dist")
    if kind not in KINDS:
        raise ValueError(f"{where}.dist: expected one of {', '.join(KINDS)}, got {kind!r}")
    cls = KINDS[kind]
    unknown = sorted(set(spec) - {"dist", *cls.keys})
    if unknown:
        raise ValueError(f"{where}.{unknown[0]}: unknown key for a {kind} distribution "
                         f"(it takes {', '.join(cls.keys)})")
    missing = [k for k in cls.keys if k not in spec]
    if missing:
        raise ValueError(f"{where}.{missing[0]}: required for a {kind} distribution")
    if cls is Empirical:
        return _empirical(spec, where)
    values = {}
    for key in cls.keys:
        value = spec[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{where}.{key}: expected a number of milliseconds, got {value!r}")
        if value < 0:
            raise ValueError(f"{where}.{key}: must not be negative, got {value}")
        if value > MAX_DURATION_MS:
            raise ValueError(f"{where}.{key}: {value} ms is more than the limit of "
                             f"{MAX_DURATION_MS:.0f} ms (100 years)")
        values[key] = float(value)
    if cls is LogNormal:
        if values["median_ms"] <= 0:
            raise ValueError(f"{where}.median_ms: must be > 0 for a lognormal")
        if values["p99_ms"] < values["median_ms"]:
            raise ValueError(f"{where}.p99_ms: {values['p99_ms']} is below median_ms "
                             f"{values['median_ms']}")
    if cls is Uniform and values["high_ms"] < values["low_ms"]:
        raise ValueError(f"{where}.high_ms: {values['high_ms']} is below low_ms {values['low_ms']}")
    return cls(**values)


def _empirical(spec: dict, where: str) -> Empirical:
    ms, weights = spec["ms"], spec["weights"]
    for key, seq in (("ms", ms), ("weights", weights)):
        if not isinstance(seq, list) or not seq or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                and v >= 0 for v in seq):
            raise ValueError(f"{where}.{key}: expected a non-empty list of numbers >= 0")
    if max(ms) > MAX_DURATION_MS:
        raise ValueError(f"{where}.ms: {max(ms)} ms is more than the limit of "
                         f"{MAX_DURATION_MS:.0f} ms (100 years)")
    if len(ms) != len(weights):
        raise ValueError(f"{where}.weights: {len(weights)} weights for {len(ms)} values")
    if sum(weights) <= 0:
        raise ValueError(f"{where}.weights: must not all be zero")
    return Empirical(tuple(float(v) for v in ms), tuple(float(w) for w in weights))
