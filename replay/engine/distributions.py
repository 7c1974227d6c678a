"""Delay distributions, given in milliseconds in the config, sampled in integer microseconds.

Samples come from counter-based ``replay.rng.Stream`` draws, one per (stage, parameter, watcher,
write), so the vectorised and the step-by-step pipelines draw the same delay for the same delivery.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from replay.limits import MAX_DURATION_MS
from replay.rng import Keys, Stream, kernels

Ints = npt.NDArray[np.int64]
UInts = npt.NDArray[np.uint64]

Z99 = 2.3263478740408408  # the standard normal's 99th percentile


class Distribution:
    """A delay distribution given in milliseconds that samples integer microseconds."""

    kind: ClassVar[str]
    keys: ClassVar[tuple[str, ...]]  # required in the config
    optional: ClassVar[tuple[str, ...]] = ()

    def sample_us(self, stream: Stream, counters: UInts, keys: Keys | None = None) -> Ints:
        """One sample per counter; ``keys`` are per-watcher stream keys (``Stream.watcher_keys``)."""
        raise NotImplementedError

    @property
    def mean_us(self) -> float:
        raise NotImplementedError

    @property
    def is_zero(self) -> bool:
        return False

    def describe(self) -> dict[str, Any]:
        return {"dist": self.kind, **{k: getattr(self, k) for k in self.keys}}


def _rint(values: npt.NDArray[np.float64], scale: float = 1.0) -> Ints:
    """``values * scale``, in microseconds, as integers; a draw from the far tail of a
    distribution is capped at ``MAX_DURATION_MS`` rather than wrapped around to a negative
    delay.  One compiled pass (``replay.rngkernel``): draws come by the million, and the
    scaling, the cap, the rounding and the conversion were a pass over memory each."""
    out: Ints = np.empty(len(values), dtype=np.int64)
    kernels().rounded_us(values, scale, out)
    return out


@dataclass(frozen=True)
class Constant(Distribution):
    ms: float
    kind: ClassVar[str] = "constant"
    keys: ClassVar[tuple[str, ...]] = ("ms",)

    def sample_us(self, stream: Stream, counters: UInts, keys: Keys | None = None) -> Ints:
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

    def sample_us(self, stream: Stream, counters: UInts, keys: Keys | None = None) -> Ints:
        out = np.log(stream.uniforms(counters, keys))
        return _rint(out, -self.mean_ms * 1000)

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

    def sample_us(self, stream: Stream, counters: UInts, keys: Keys | None = None) -> Ints:
        out = stream.normals(counters, keys, self.sigma, math.log(self.median_ms * 1000))
        return _rint(np.exp(out, out=out))

    @property
    def mean_us(self) -> float:
        return self.median_ms * 1000 * math.exp(self.sigma**2 / 2)


@dataclass(frozen=True)
class Uniform(Distribution):
    low_ms: float
    high_ms: float
    kind: ClassVar[str] = "uniform"
    keys: ClassVar[tuple[str, ...]] = ("low_ms", "high_ms")

    def sample_us(self, stream: Stream, counters: UInts, keys: Keys | None = None) -> Ints:
        out = stream.uniforms(counters, keys)
        out *= self.high_ms - self.low_ms
        out += self.low_ms
        return _rint(out, 1000)

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

    def sample_us(self, stream: Stream, counters: UInts, keys: Keys | None = None) -> Ints:
        values: Ints = np.rint(np.asarray(self.ms) * 1000).astype(np.int64)
        cumulative = np.cumsum(self.weights)
        picks = np.searchsorted(cumulative, stream.uniforms(counters, keys) * cumulative[-1],
                                side="right")
        out: Ints = values[np.minimum(picks, len(values) - 1)]
        return out

    @property
    def mean_us(self) -> float:
        return float(np.dot(self.ms, self.weights) / sum(self.weights) * 1000)

    def describe(self) -> dict[str, Any]:
        return {"dist": self.kind, "ms": list(self.ms), "weights": list(self.weights)}


@dataclass(frozen=True)
class Histogram(Distribution):
    """Observations counted in buckets, as a Prometheus histogram exposes them.

    A draw picks a bucket with probability proportional to its count, then a value uniformly
    within it: linear interpolation, the rule PromQL's ``histogram_quantile`` applies, so the
    draws' quantiles are what a dashboard shows for the same buckets.  The first bucket starts at
    0 (durations are never negative); the ``+Inf`` bucket, whose observations are above the last
    bound, runs up to ``max_ms``.  Held normalised: finite bounds, one count per bucket, the last
    count being the ``+Inf`` bucket's.
    """

    le_ms: tuple[float, ...]
    counts: tuple[float, ...]
    max_ms: float | None = None
    kind: ClassVar[str] = "histogram"
    keys: ClassVar[tuple[str, ...]] = ("le_ms", "counts")
    optional: ClassVar[tuple[str, ...]] = ("cumulative", "max_ms")

    @property
    def _edges_ms(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """Each bucket's lower and upper bound (the ``+Inf`` bucket's upper is ``max_ms``)."""
        bounds = np.asarray(self.le_ms, dtype=np.float64)
        top = self.max_ms if self.max_ms is not None else (bounds[-1] if len(bounds) else 0.0)
        return np.r_[0.0, bounds], np.r_[bounds, top]

    def quantiles_ms(self, q: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """The inverse of the distribution function at ``q`` (in [0, 1]): where the draws come
        from, and the quantiles a report prints."""
        counts = np.asarray(self.counts, dtype=np.float64)
        cumulative = np.cumsum(counts)
        target = np.asarray(q, dtype=np.float64) * cumulative[-1]
        last = np.flatnonzero(counts > 0)[-1]  # q = 1 would land past it
        bucket = np.minimum(np.searchsorted(cumulative, target, side="right"), last)
        lower, upper = self._edges_ms
        within = (target - (cumulative[bucket] - counts[bucket])) / counts[bucket]
        out: npt.NDArray[np.float64] = lower[bucket] + (upper[bucket] - lower[bucket]) * np.clip(
            within, 0.0, 1.0)
        return out

    def sample_us(self, stream: Stream, counters: UInts, keys: Keys | None = None) -> Ints:
        return _rint(self.quantiles_ms(stream.uniforms(counters, keys)), 1000)

    @property
    def mean_us(self) -> float:
        lower, upper = self._edges_ms
        return float(np.dot(self.counts, (lower + upper) / 2) / sum(self.counts) * 1000)

    @property
    def is_zero(self) -> bool:
        nonempty = np.flatnonzero(np.asarray(self.counts) > 0)
        return bool(self._edges_ms[1][nonempty[-1]] * 1000 < 0.5)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"dist": self.kind, "le_ms": list(self.le_ms), "counts": list(self.counts),
               "cumulative": False}
        return out if self.max_ms is None else {**out, "max_ms": self.max_ms}


KINDS: dict[str, type[Distribution]] = {
    cls.kind: cls for cls in (Constant, Exponential, LogNormal, Uniform, Empirical, Histogram)
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
    unknown = sorted(set(spec) - {"dist", *cls.keys, *cls.optional})
    if unknown:
        raise ValueError(f"{where}.{unknown[0]}: unknown key for a {kind} distribution "
                         f"(it takes {', '.join(cls.keys + cls.optional)})")
    missing = [k for k in cls.keys if k not in spec]
    if missing:
        raise ValueError(f"{where}.{missing[0]}: required for a {kind} distribution")
    if cls is Empirical:
        return _empirical(spec, where)
    if cls is Histogram:
        return _histogram(spec, where)
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


def _empirical(spec: dict[str, Any], where: str) -> Empirical:
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


def _histogram(spec: dict[str, Any], where: str) -> Histogram:
    """A ``histogram`` from its table: ``le_ms`` (the buckets' upper bounds, increasing; the last
    may be ``inf``), ``counts`` (one per bound, plus optionally one for the ``+Inf`` bucket;
    cumulative unless ``cumulative = false``) and ``max_ms`` (where the ``+Inf`` bucket ends)."""
    le, counts = spec["le_ms"], spec["counts"]
    cumulative = spec.get("cumulative", True)
    if not isinstance(cumulative, bool):
        raise ValueError(f"{where}.cumulative: expected true or false, got {cumulative!r}")
    if not isinstance(le, list) or not le or not all(_is_number(v) and v >= 0 for v in le):
        raise ValueError(f"{where}.le_ms: expected a non-empty list of bucket bounds >= 0")
    finite = le[:-1] if math.isinf(le[-1]) else le
    if any(math.isinf(v) for v in finite) or any(b <= a for a, b in zip(finite, finite[1:])):
        raise ValueError(f"{where}.le_ms: bounds must increase, and only the last may be inf")
    if not isinstance(counts, list) or not all(_is_number(v) and math.isfinite(v) and v >= 0
                                               for v in counts):
        raise ValueError(f"{where}.counts: expected a list of counts >= 0")
    if len(counts) not in {len(le), len(finite) + 1}:
        raise ValueError(f"{where}.counts: {len(counts)} counts for {len(le)} bounds (one per "
                         "bound, or one more for the +Inf bucket)")
    if cumulative:
        for i in range(1, len(counts)):
            if counts[i] < counts[i - 1]:
                raise ValueError(f"{where}.counts: counts[{i}] = {counts[i]} is below "
                                 f"counts[{i - 1}] = {counts[i - 1]}; cumulative counts never "
                                 "decrease (cumulative = false takes counts per bucket)")
        counts = [counts[0]] + [b - a for a, b in zip(counts, counts[1:])]
    counts = [float(c) for c in counts] + [0.0] * (len(finite) + 1 - len(counts))
    if sum(counts) <= 0:
        raise ValueError(f"{where}.counts: no observations (every count is zero)")
    max_ms = spec.get("max_ms")
    if max_ms is not None and (not _is_number(max_ms) or not math.isfinite(max_ms)
                               or max_ms <= (finite[-1] if finite else 0)):
        raise ValueError(f"{where}.max_ms: expected a number above the last finite bound, "
                         f"got {max_ms!r}")
    if counts[-1] > 0 and max_ms is None:
        raise ValueError(f"{where}.max_ms: required: the +Inf bucket holds {counts[-1]:g} "
                         "observations, and max_ms says how far above the last bound they go")
    return Histogram(tuple(float(v) for v in finite), tuple(counts),
                     None if max_ms is None else float(max_ms))


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not (
        isinstance(value, float) and math.isnan(value))
