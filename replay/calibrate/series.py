"""Histogram series as Prometheus exposes them, and the arithmetic calibration needs on them.

A series is one label set of one histogram family: its buckets' upper bounds (``le``, in seconds,
the last ``+Inf``), their cumulative counts, and ``_sum`` and ``_count`` when known.  Counters
only grow while the component runs, so the histogram of an interval is the later scrape minus the
earlier one (``since``); a count that fell means the component restarted in between (a counter
reset), and then only the later scrape's counts belong to the interval, from the restart on.
Series of one family with the same buckets add up (``merged``), as PromQL's ``sum by (le)`` does.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np

from replay.engine.distributions import Histogram

Labels = tuple[tuple[str, str], ...]  # sorted (name, value) pairs, without le


@dataclass(frozen=True)
class Series:
    """One label set of a histogram family: bucket bounds in seconds and cumulative counts."""

    family: str
    labels: Labels
    le: tuple[float, ...]
    cumulative: tuple[float, ...]
    sum: float | None = None
    count: float | None = None
    interval: str = ""  # the time its counts cover, in words

    @property
    def observations(self) -> float:
        return self.cumulative[-1] if self.cumulative else 0.0

    @property
    def label_map(self) -> dict[str, str]:
        return dict(self.labels)

    def selector(self) -> str:
        """``family{name="value",...}``, as PromQL writes the series."""
        return selector_of(self.family, [self.labels])

    def since(self, earlier: Series, interval: str) -> tuple[Series, bool]:
        """This series minus ``earlier`` (the same series in an earlier scrape) over
        ``interval``, and whether the counter was reset in between (then this series alone,
        counted since the restart)."""
        deltas = np.subtract(self.cumulative, earlier.cumulative) if self.le == earlier.le \
            else None
        if deltas is None or (deltas < 0).any() or _fell(self.count, earlier.count):
            return replace(self, interval=f"{interval}, since a restart in between"), True
        return replace(self, cumulative=tuple(float(v) for v in deltas),
                       sum=_minus(self.sum, earlier.sum),
                       count=_minus(self.count, earlier.count), interval=interval), False

    def histogram(self) -> Histogram:
        """The series as the run config's ``histogram`` distribution, in milliseconds.

        The ``+Inf`` bucket's observations are drawn up to ``max_ms``: where ``_sum`` is known,
        the bound that gives them the mean ``_sum`` leaves for them (the finite buckets counted at
        their midpoints), else twice the last finite bound.
        """
        finite = [b for b in self.le if math.isfinite(b)]
        counts = np.diff(np.r_[0.0, self.cumulative])
        if len(counts) == len(finite):  # no +Inf bucket: nothing above the last bound
            counts = np.r_[counts, 0.0]
        counts = np.maximum(counts, 0.0)  # float noise of differenced counters
        le_ms = tuple(float(f"{b * 1000:.9g}") for b in finite)
        return Histogram(le_ms, tuple(float(c) for c in counts), self._max_ms(le_ms, counts))

    def _max_ms(self, le_ms: tuple[float, ...], counts: np.ndarray) -> float | None:
        above = counts[-1]
        if above <= 0:
            return None
        last = le_ms[-1] if le_ms else 0.0
        if self.sum is not None:
            midpoints = (np.r_[0.0, le_ms[:-1]] + np.asarray(le_ms)) / 2
            left_ms = self.sum * 1000 - float(np.dot(counts[:-1], midpoints))
            top = 2 * left_ms / above - last  # the uniform on (last, top] has mean left/above
            if top > last:
                return float(f"{top:.6g}")
        return 2 * last if last > 0 else 1.0

    def mean_ms(self) -> float:
        """The mean observation: exact from ``_sum`` and ``_count``, else the histogram's."""
        if self.sum is not None and self.count:
            return self.sum * 1000 / self.count
        return self.histogram().mean_us / 1000


def _fell(now: float | None, before: float | None) -> bool:
    return now is not None and before is not None and now < before


def _minus(now: float | None, before: float | None) -> float | None:
    return None if now is None or before is None else now - before


def layouts(series: Iterable[Series]) -> dict[tuple[float, ...], list[Series]]:
    """The series grouped by their bucket bounds, the layout with the most observations first."""
    groups: dict[tuple[float, ...], list[Series]] = {}
    for one in series:
        groups.setdefault(one.le, []).append(one)
    return dict(sorted(groups.items(),
                       key=lambda item: (-sum(s.observations for s in item[1]), item[0])))


def merged(series: list[Series]) -> Series:
    """Series of one family with the same buckets summed into one (``sum by (le)``), keeping
    the labels they share."""
    cumulative = np.sum([s.cumulative for s in series], axis=0)
    sums = [s.sum for s in series]
    counts = [s.count for s in series]
    shared = tuple(sorted(set.intersection(*(set(s.labels) for s in series))))
    return Series(series[0].family, shared, series[0].le, tuple(float(v) for v in cumulative),
                  _total(sums), _total(counts),
                  "; ".join(dict.fromkeys(s.interval for s in series)))


def _total(values: list[float | None]) -> float | None:
    """The sum of ``values``; None when one of them is unknown."""
    known = [v for v in values if v is not None]
    return float(sum(known)) if len(known) == len(values) else None


def selector_of(family: str, label_sets: list[Labels]) -> str:
    """The PromQL selector of exactly the series of these label sets: ``name="v"`` where they
    agree, ``name=~"a|b"`` where they differ."""
    names = sorted({name for labels in label_sets for name, _ in labels})
    matchers = []
    for name in names:
        values = sorted({dict(labels).get(name, "") for labels in label_sets})
        quoted = "|".join(_escaped(v) for v in values)
        matchers.append(f'{name}="{quoted}"' if len(values) == 1 else f'{name}=~"{quoted}"')
    return f"{family}{{{','.join(matchers)}}}" if matchers else family


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
