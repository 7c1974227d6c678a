"""The sweep file: traces, a base run configuration, seeds, and a matrix of values to try.

Expanded into points, each one replay: a trace, a model, one value of every swept key and a seed.
``model`` chooses the model, ``model.NAME`` sets its parameter NAME, any other dotted key is a
run-config key (``stages.network.latency.p99_ms``), set as ``replay run --config`` would read it.
Everything is checked before anything runs, with one-line errors naming the file and the key.
``docs/sweeps.md`` documents the format.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq

from replay import models
from replay.api import choose_model
from replay.engine.config import RunConfig, config_from_table, read_toml
from replay.errors import ReplayError
from replay.models.base import Model
from replay.sweep.memory import estimate_bytes
from replay.trace.validate import read_trace

FILE_KEYS = ("trace", "traces", "config", "seeds", "matrix", "exclude")
MODEL = "model"  # the matrix key that chooses the model
MODEL_PARAM = "model."  # prefix of the keys that set a model parameter
SCALARS: dict[type, pl.DataType] = {str: pl.String(), int: pl.Int64(), float: pl.Float64(),
                                    bool: pl.Boolean()}
NAME_CHARACTERS = re.compile(r"[^A-Za-z0-9._+-]")
MAX_NAME = 200  # a directory name; most file systems allow 255 bytes


@dataclass(frozen=True)
class Point:
    """One replay of a sweep.  ``values`` holds the value of every swept key but ``model``, by
    its column name (dots replaced by underscores), in the matrix's order."""

    name: str  # its run directory's name: the same point always gets the same name
    trace: str  # as the sweep file gives it
    trace_path: Path  # absolute
    model: str
    values: Mapping[str, Any]
    seed: int
    config: RunConfig
    memory_bytes: int  # estimated peak memory of its replay (replay.sweep.memory)


@dataclass(frozen=True)
class Sweep:
    path: Path
    points: tuple[Point, ...]
    columns: Mapping[str, pl.DataType]  # the swept keys but model, by column name, typed


def column_of(key: str) -> str:
    """A swept key's column name: ``stages.network.latency.p99_ms`` -> ``stages_network_latency_p99_ms``."""
    return key.replace(".", "_")


def load_sweep(path: str | os.PathLike) -> Sweep:
    """Read, check and expand the sweep file at ``path``: every point with its configuration,
    model and memory estimate.  Reads each trace once (to check it, to pick a model where
    none is given, and to count the watchers a point's model would give it)."""
    path = Path(path)
    raw = read_toml(path, "sweep file")
    try:
        return _expand(path, raw)
    except ValueError as err:
        raise ReplayError(f"{path}: {err}") from None


@dataclass(frozen=True)
class _Spec:
    traces: tuple[str, ...]
    base: dict[str, Any]  # the base run config's TOML table
    seeds: tuple[int, ...]
    matrix: dict[str, list[Any]]  # dotted key -> values, in the file's order
    exclude: tuple[dict[str, Any], ...]


def _expand(path: Path, raw: dict[str, Any]) -> Sweep:
    spec = _parse(path, raw)
    folder = path.parent
    columns = _columns(spec.matrix)
    labels = _labels([key for key in spec.matrix if key != MODEL])
    trace_labels = _trace_labels(spec.traces)
    points: list[Point] = []
    paths = _trace_paths(folder, spec.traces)
    for trace in spec.traces:
        facts = _TraceFacts(paths[trace], trace)
        for combination in _combinations(spec.matrix):
            for seed in spec.seeds:
                if not any(_matches(rule, trace, combination, seed) for rule in spec.exclude):
                    points.append(_point(spec, facts, trace_labels[trace], labels, columns,
                                         combination, seed))
    if not points:
        raise ValueError("exclude: leaves out every point; nothing would run")
    _check_names(points)
    return Sweep(path, tuple(points), columns)


def _trace_paths(folder: Path, traces: tuple[str, ...]) -> dict[str, Path]:
    """Each trace's resolved path; two names of one file (``t.parquet``, ``./t.parquet``) are
    refused, as a value listed twice is: they would replay the same points twice."""
    paths: dict[str, Path] = {}
    for trace in traces:
        path = (folder / trace).resolve()
        same = next((given for given, seen in paths.items() if seen == path), None)
        if same is not None:
            raise ValueError(f"traces: {same!r} and {trace!r} are the same file")
        paths[trace] = path
    return paths


def _parse(path: Path, raw: dict[str, Any]) -> _Spec:
    unknown = sorted(set(raw) - set(FILE_KEYS))
    if unknown:
        raise ValueError(f"{unknown[0]}: unknown key (expected {', '.join(FILE_KEYS)})")
    traces = _traces(raw)
    base: dict[str, Any] = {}
    if "config" in raw:
        if not isinstance(raw["config"], str):
            raise ValueError("config: expected the path of a run config file")
        base = read_toml(path.parent / raw["config"])
    matrix = _matrix(raw.get("matrix", {}))
    seeds = _seeds(raw, base)
    exclude = _exclude(raw.get("exclude", []), matrix, traces)
    return _Spec(traces, base, seeds, matrix, exclude)


def _traces(raw: dict[str, Any]) -> tuple[str, ...]:
    if ("trace" in raw) == ("traces" in raw):
        raise ValueError("give the trace to replay: trace = \"FILE\" or traces = [\"FILE\", ...]")
    traces = [raw["trace"]] if "trace" in raw else raw["traces"]
    key = "trace" if "trace" in raw else "traces"
    if not isinstance(traces, list) or not traces or not all(isinstance(t, str) and t
                                                             for t in traces):
        raise ValueError(f"{key}: expected a trace file's path, or a non-empty list of them")
    _no_repeats(traces, key)
    return tuple(traces)


def _seeds(raw: dict[str, Any], base: dict[str, Any]) -> tuple[int, ...]:
    if "seeds" not in raw:
        return (config_from_table(base).seed,)
    seeds = raw["seeds"]
    if not isinstance(seeds, list) or not seeds or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
        raise ValueError("seeds: expected a non-empty list of integers >= 0")
    _no_repeats(seeds, "seeds")
    return tuple(seeds)


def _matrix(raw: Any) -> dict[str, list[Any]]:
    if not isinstance(raw, dict):
        raise ValueError("matrix: expected a table of keys and the values to sweep")
    matrix = dict(_flattened(raw))
    for key, values in matrix.items():
        where = f"matrix.{key}"
        if key == "seed":
            raise ValueError(f"{where}: sweep seeds with seeds = [...]")
        if key == f"{MODEL_PARAM}name":
            raise ValueError(f"{where}: choose the model with {MODEL} = [...]")
        if not isinstance(values, list) or not values:
            raise ValueError(f"{where}: expected a non-empty list of values")
        if not all(type(v) in SCALARS for v in values):
            raise ValueError(f"{where}: values are strings, numbers or booleans (sweep one "
                             "parameter of a distribution, e.g. stages.network.latency.p99_ms)")
        kinds = {type(v) for v in values}
        if len(kinds) > 1 and kinds != {int, float}:
            raise ValueError(f"{where}: values of one type expected, got {values!r}")
        if key == MODEL and kinds != {str}:
            raise ValueError(f"{where}: expected model names")
        _no_repeats(values, where)
    if MODEL in matrix:
        for name in matrix[MODEL]:
            _load_model(name, f"matrix.{MODEL}")
    return matrix


def _flattened(table: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Dotted keys: TOML reads ``model.schedulers = [...]`` as a table in a table."""
    for key, value in table.items():
        if isinstance(value, dict):
            yield from _flattened(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _exclude(raw: Any, matrix: dict[str, list[Any]],
             traces: tuple[str, ...]) -> tuple[dict[str, Any], ...]:
    if not isinstance(raw, list) or not all(isinstance(rule, dict) for rule in raw):
        raise ValueError("exclude: expected tables ([[exclude]])")
    rules = []
    for i, rule in enumerate(raw):
        rule = dict(_flattened(rule))
        if not rule:
            raise ValueError(f"exclude[{i}]: empty: it would exclude every point")
        for key, value in rule.items():
            choices = (matrix.get(key) if key not in ("trace", "seed")
                       else list(traces) if key == "trace" else None)
            if key != "seed" and choices is None:
                raise ValueError(f"exclude[{i}].{key}: not a swept key (swept: "
                                 f"{', '.join(['trace', 'seed', *matrix])})")
            if choices is not None and not any(_same(value, c) for c in choices):
                raise ValueError(f"exclude[{i}].{key}: {value!r} is not one of its values "
                                 f"{choices!r}")
        rules.append(rule)
    return tuple(rules)


def _matches(rule: dict[str, Any], trace: str, combination: dict[str, Any], seed: int) -> bool:
    here = {**combination, "trace": trace, "seed": seed}
    return all(_same(here[key], value) for key, value in rule.items())


def _combinations(matrix: dict[str, list[Any]]) -> Iterator[dict[str, Any]]:
    for values in itertools.product(*matrix.values()):
        yield dict(zip(matrix, values))


def _columns(matrix: dict[str, list[Any]]) -> dict[str, pl.DataType]:
    columns: dict[str, pl.DataType] = {}
    for key, values in matrix.items():
        if key == MODEL:
            continue
        column = column_of(key)
        if column in columns or column in ("point", "trace", "model", "seed", "status",
                                           "error", "wall_seconds", "peak_memory_bytes"):
            raise ValueError(f"matrix.{key}: its column name {column!r} is taken")
        kinds = {type(v) for v in values}
        columns[column] = pl.Float64() if kinds == {int, float} else SCALARS[kinds.pop()]
    return columns


class _TraceFacts:
    """What the points of one trace need from it, read once: its rows, and the trace itself to
    pick a default model and count the watchers a model gives it."""

    def __init__(self, path: Path, given: str):
        self.path, self.given = path, given
        try:
            self.rows = pq.read_metadata(path).num_rows
        except FileNotFoundError:
            raise ValueError(f"trace {given!r}: no such file ({path})") from None
        except OSError as err:
            raise ValueError(f"trace {given!r}: cannot read it ({err})") from None
        self._frame: pl.DataFrame | None = None
        self._watchers: dict[tuple, int] = {}

    @property
    def frame(self) -> pl.DataFrame:
        if self._frame is None:
            self._frame = read_trace(self.path)
        return self._frame

    def model(self, name: str | None) -> str:
        return choose_model(name, self.frame, self.given).name if name is None else name

    def watchers(self, model: type[Model], config: RunConfig) -> int:
        """Watchers that see every write (a kubelet sees its node's only): what a point's
        memory grows with."""
        if config.watchers is not None:
            return sum(w.node is None for w in config.watchers)
        key = (model.name, repr(sorted(config.model_params.items())))
        if key not in self._watchers:
            given = model(config.model_params).default_watchers(self.frame)
            self._watchers[key] = sum(w.node is None for w in given)
        return self._watchers[key]


def _point(spec: _Spec, facts: _TraceFacts, trace_label: str, labels: dict[str, str],
           columns: dict[str, pl.DataType], combination: dict[str, Any], seed: int) -> Point:
    keys = {(f"{MODEL_PARAM}name" if key == MODEL else key): value
            for key, value in combination.items()}
    model_name = facts.model(keys.get(f"{MODEL_PARAM}name", _base_model(spec.base)))
    swept = ", ".join(f"{key} = {value!r}" for key, value in combination.items())
    where = f"the point {swept or 'of the base config'}, seed {seed}"
    try:
        config = config_from_table(spec.base, keys)
    except ValueError as err:
        raise ValueError(f"{err} ({where})") from None
    config = dataclasses.replace(config, seed=seed, model=model_name)
    model = _load_model(model_name, f"trace {facts.given!r}")
    _check_params(model, config, combination, where)
    values = {column_of(key): float(value) if columns[column_of(key)] == pl.Float64 else value
              for key, value in combination.items() if key != MODEL}
    name = "-".join([trace_label, model_name,
                     *(f"{labels[key]}_{_name_part(value)}"
                       for key, value in combination.items() if key != MODEL),
                     f"seed_{seed}"])
    return Point(name, facts.given, facts.path, model_name, values, seed, config,
                 estimate_bytes(facts.rows, facts.watchers(model, config)))


def _base_model(base: dict[str, Any]) -> str | None:
    table = base.get("model", {})
    return table.get("name") if isinstance(table, dict) else None


def _check_params(model: type[Model], config: RunConfig, combination: dict[str, Any],
                  where: str) -> None:
    declared = {p.name for p in model.params}
    for key in combination:
        param = key.removeprefix(MODEL_PARAM)
        if key.startswith(MODEL_PARAM) and param not in declared:
            raise ValueError(f"matrix.{key}: model {model.name!r} has no parameter {param!r} "
                             f"({where}); leave such points out with [[exclude]]")
    try:
        model.resolve(config.model_params)
    except ReplayError as err:
        raise ValueError(f"{err} ({where})") from None


def _load_model(name: str, where: str) -> type[Model]:
    try:
        return models.load(name)
    except ReplayError as err:
        raise ValueError(f"{where}: {err}") from None


def _labels(keys: list[str]) -> dict[str, str]:
    """Each key's shortest dotted suffix that no other key ends with, dots made underscores:
    ``schedulers`` for ``model.schedulers``, ``p99_ms`` for ``stages.network.latency.p99_ms``."""
    labels = {}
    for key in keys:
        parts = key.split(".")
        for size in range(1, len(parts) + 1):
            suffix = parts[-size:]
            if size == len(parts) or not any(
                    other != key and other.split(".")[-size:] == suffix for other in keys):
                labels[key] = "_".join(suffix)
                break
    return labels


def _trace_labels(traces: tuple[str, ...]) -> dict[str, str]:
    """A trace's file stem; where two traces share a stem, with a digest of the path given."""
    stems = [Path(t).stem for t in traces]
    return {trace: stem if stems.count(stem) == 1
            else f"{stem}-{hashlib.sha256(trace.encode()).hexdigest()[:8]}"
            for trace, stem in zip(traces, stems)}


def _name_part(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return NAME_CHARACTERS.sub("_", str(value))


def _check_names(points: list[Point]) -> None:
    seen: dict[str, Point] = {}
    for point in points:
        if len(point.name.encode()) > MAX_NAME:
            raise ValueError(f"the point name {point.name!r} is longer than {MAX_NAME} bytes: "
                             "sweep fewer keys at once")
        if point.name in seen:
            raise ValueError(f"two points are both named {point.name!r}: values that differ "
                             "only in characters a directory name cannot hold")
        seen[point.name] = point


def _no_repeats(values: list[Any], where: str) -> None:
    for i, value in enumerate(values):
        if any(_same(value, other) for other in values[:i]):
            raise ValueError(f"{where}: {value!r} is listed twice")


def _same(a: Any, b: Any) -> bool:
    """Equal as TOML values: 5 and 5.0 are, true and 1 are not."""
    numbers = (int, float)
    return a == b and (type(a) is type(b) or (type(a) in numbers and type(b) in numbers))
