"""What every model is: a name, a description, declared parameters, its watchers and a replay.

A model turns a trace and a run configuration into the run tables (``RunTables``).  Parameters are
declared with ``Param`` so that ``replay models`` can list them and a mistyped one is an error that
names it.  The engine owns time, ordering, randomness and the watch pipeline; a model never reads a
clock or a global random generator.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import polars as pl
import pyarrow as pa

from replay.engine.api import RunConfig, RunTables, WatcherSpec
from replay.errors import ReplayError
from replay.limits import MAX_DURATION_MS


@dataclass(frozen=True)
class Param:
    """A model parameter: its default (whose type is the parameter's type) and what it means.

    A number must be finite and within ``minimum``..``maximum``; a parameter named ``*_ms`` is a
    duration, at most ``MAX_DURATION_MS`` unless it says less, so that it fits in integer
    microseconds added to any time of a trace.
    """

    name: str
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None

    def __post_init__(self) -> None:
        if self.name.endswith("_ms") and self.maximum is None:
            object.__setattr__(self, "maximum", MAX_DURATION_MS)

    def parse(self, value: Any, model: str) -> Any:
        where = f"model {model!r} parameter {self.name!r}"
        kind = type(self.default)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if type(value) is not kind:
            raise ReplayError(f"{where}: expected {kind.__name__}, got {value!r}")
        if self.choices is not None and value not in self.choices:
            raise ReplayError(f"{where}: expected one of {', '.join(map(str, self.choices))}, "
                              f"got {value!r}")
        if kind is float and not math.isfinite(value):
            raise ReplayError(f"{where}: expected a finite number, got {value!r}")
        if self.minimum is not None and value < self.minimum:
            raise ReplayError(f"{where}: must be >= {self.minimum}, got {value!r}")
        if self.maximum is not None and value > self.maximum:
            raise ReplayError(f"{where}: must be <= {self.maximum:g}, got {value!r}")
        return value


class Model:
    """Base class of all models; subclasses set the class attributes and implement ``replay``."""

    name: ClassVar[str]
    description: ClassVar[str]
    params: ClassVar[tuple[Param, ...]] = ()
    # The trace columns the model reads (None: all); ``replay run`` reads only these, since
    # reading the others can cost as much as the replay
    trace_columns: ClassVar[tuple[str, ...] | None] = None

    def __init__(self, params: Mapping[str, Any] | None = None):
        self.settings = self.resolve(params or {})
        # What a replay found in its trace that bears on its numbers, one sentence each, added
        # while the tables are made (``replay run`` prints them as warnings)
        self.notes: list[str] = []

    @classmethod
    def resolve(cls, given: Mapping[str, Any]) -> dict[str, Any]:
        """Defaults overlaid with ``given``; an unknown or mistyped parameter is an error."""
        declared = {p.name: p for p in cls.params}
        unknown = sorted(set(given) - set(declared))
        if unknown:
            known = ", ".join(declared) or "none"
            raise ReplayError(f"model {cls.name!r} has no parameter {unknown[0]!r} "
                              f"(parameters: {known})")
        return {name: p.parse(given[name], cls.name) if name in given else p.default
                for name, p in declared.items()}

    def default_watchers(self, trace: pl.DataFrame) -> list[WatcherSpec]:
        """The watchers when the config lists none."""
        raise NotImplementedError

    def check_watchers(self, watchers: list[WatcherSpec], where: str) -> None:
        """Refuse a configured watchers list (from ``where``) that this model cannot replay
        with; by default any list will do."""

    def replay(self, trace: pl.DataFrame, config: RunConfig,
               watchers: list[WatcherSpec]) -> RunTables:
        """Replay ``trace`` with these ``watchers`` and return the run's tables."""
        raise NotImplementedError

    def tables(self, trace: pl.DataFrame, config: RunConfig,
               watchers: list[WatcherSpec]) -> Iterable[tuple[str, pa.Table | pl.DataFrame]]:
        """The run's tables as (name, table) pairs; a table may come in several parts.  A model
        that can give each table as soon as it is complete overrides this, so that ``replay
        run`` writes one while the next is computed; by default all come from ``replay``."""
        return self.replay(trace, config, watchers).items()
