"""The application layer: what the commands do, as library calls a notebook can make.

    from replay.api import load_config, run_replay
    result = run_replay("traces/sample.parquet", load_config(), out="runs/sample-observe")

``run_replay`` reads a trace, picks the model and its watchers, replays, writes the run directory
and derives its tables.  While a replay runs, glibc's malloc keeps freed memory for reuse
(``replay.memory``), gives what it holds free back before the derivation (and a what-if replay
once its loop has ended: ``Simulation.tables``), and gives it all back afterwards.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from replay import jit, memory, models
from replay.arrays import ranked
from replay.analysis.derive import derive
from replay.engine.config import RunConfig, WatcherSpec, load_config
from replay.engine.api import node_names
from replay.engine.rundir import check_replaceable, conform_table, sha256_of, write_run
from replay.errors import ReplayError
from replay.limits import MAX_DELIVERIES, MAX_WATCHERS
from replay.models.base import Model
from replay.outputs import check_output
from replay.progress import progress
from replay.trace.io import source_of
from replay.trace.schema import TRACE_VERSION
from replay.trace.validate import read_trace

__all__ = ["RunResult", "check_watchers", "choose_model", "default_out", "load_config",
           "run_replay"]

DEFAULT_WHAT_IF_MODEL = "kube"


@dataclass
class RunResult:
    out: Path
    model: str
    rows: dict[str, int]
    watchers: int
    delay_by_role: pl.DataFrame  # role, deliveries, p50_ms, p99_ms of end-to-end delay
    conflicts: int
    attempts: int
    unschedulable: int  # attempts that found no room in their view
    seconds: dict[str, float]  # wall time of "replay" (reading, replaying, writing) and "derive"
    extra: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what bears on the numbers (``Model.notes``)


def has_bindings(trace: pl.DataFrame) -> bool:
    return trace.select(((pl.col("resource") == "pods") & (pl.col("subresource") == "binding"))
                        .any()).item()


def choose_model(name: str | None, trace: pl.DataFrame, trace_path: str) -> type[Model]:
    """The model to run: ``name``, else ``observe`` when the trace records bindings (it replays
    them), else the default what-if model, which makes its own."""
    if name is None:
        name = "observe" if has_bindings(trace) else DEFAULT_WHAT_IF_MODEL
        if name not in models.registered():
            what_if = [n for n in models.registered() if n != "observe"]
            raise ReplayError(f"{trace_path}: records no bindings to observe; choose a what-if "
                              f"model with --model ({', '.join(what_if) or 'none installed'})")
    return models.load(name)


def default_out(trace_path: str | os.PathLike, model: str) -> Path:
    return Path("runs") / f"{Path(trace_path).stem}-{model}"


def run_replay(trace_path: str | os.PathLike, config: RunConfig,
               out: str | os.PathLike | None = None, force: bool = False,
               manifest_extra: Mapping[str, Any] | None = None) -> RunResult:
    """Replay the trace at ``trace_path`` under ``config`` and write the run directory.

    ``manifest_extra`` adds top-level entries to its manifest (``replay sweep`` records there
    what each point swept, for the ``runs`` view); the tables do not depend on it."""
    seconds = {"replay": -time.perf_counter()}
    with progress(4, "replay", unit="step") as bar, _reusing_freed_memory() as release_memory:
        bar.set_postfix_str("reading the trace")
        trace, model_class = _read(trace_path, config.model)
        model = model_class(config.model_params)
        out = Path(out) if out is not None else default_out(trace_path, model_class.name)
        check_output(out, [trace_path, config.source], directory=True)
        check_replaceable(out, force)
        watchers = (list(config.watchers) if config.watchers is not None
                    else model.default_watchers(trace))
        check_watchers(watchers, trace, str(trace_path), configured=config.watchers is not None)
        if config.watchers is not None:
            model.check_watchers(watchers, str(config.source or "the configuration"))
            model.notes += _unknown_nodes(watchers, trace, str(trace_path))
        seconds["replay"] -= _seconds(jit.initialize)  # after the checks: a refusal is quick
        bar.update()
        bar.set_postfix_str(f"replaying through {model_class.name}, writing the run directory")
        manifest = {**_manifest(trace_path, config, model_class, model.settings, len(watchers)),
                    **(manifest_extra or {})}
        summary: dict = {}
        tables = _summarised(model.tables(trace, config, watchers), summary)
        notes = getattr(model, "notes", [])  # (added to as the tables are made)
        del trace, model  # the tables hold them until the last is written, and no longer

        def derive_tables(run_dir: Path) -> dict[str, int]:
            seconds["derive"] = -time.perf_counter()
            seconds["replay"] -= seconds["derive"]
            bar.update(2)
            bar.set_postfix_str("deriving the capacity windows")
            release_memory()  # for DuckDB
            return derive(run_dir)

        rows = write_run(out, tables, manifest, force=force, derive=derive_tables)
        seconds["derive"] += time.perf_counter()
        bar.update()
    outcomes = summary["outcomes"]
    return RunResult(out, model_class.name, rows, len(watchers), summary["delay"],
                     outcomes.get("conflict", 0), rows["attempts"],
                     outcomes.get("unschedulable", 0), seconds, notes=notes)


def _seconds(step: Callable[[], object]) -> float:
    """How long ``step`` took: the replay's clock leaves it out."""
    started = time.perf_counter()
    step()
    return time.perf_counter() - started


def check_watchers(watchers: list[WatcherSpec], trace: pl.DataFrame, trace_path: str,
                   configured: bool = True) -> None:
    """Refuse watchers that would make the replay wrong or endless: a configured watcher whose
    resources name nothing the trace holds (``pod`` for ``pods`` would silently receive
    nothing), more than ``MAX_WATCHERS``, or more than ``MAX_DELIVERIES`` deliveries to
    watchers of the whole cluster (a node's watchers receive only their node's writes)."""
    if len(watchers) > MAX_WATCHERS:
        raise ReplayError(f"{len(watchers):,} watchers, more than the limit of {MAX_WATCHERS:,}")
    rows = dict(trace.group_by("resource").len().iter_rows())
    if configured:
        for watcher in watchers:
            if not any(resource in rows for resource in watcher.resources):
                raise ReplayError(
                    f"watcher {watcher.name!r}: its resources ({', '.join(watcher.resources)}) "
                    f"name nothing in {trace_path}, which holds "
                    f"{', '.join(sorted(rows)) or 'no rows'}")
    cluster_wide = Counter(w.resources for w in watchers if w.node is None)
    deliveries = sum(count * sum(rows.get(r, 0) for r in resources)
                     for resources, count in cluster_wide.items())
    if deliveries > MAX_DELIVERIES:
        raise ReplayError(
            f"this replay would make about {deliveries:,} deliveries ({sum(cluster_wide.values()):,} "
            f"watchers of the whole cluster, {trace.height:,} rows), more than the limit of "
            f"{MAX_DELIVERIES:,}; use fewer watchers or a shorter trace")


def _unknown_nodes(watchers: list[WatcherSpec], trace: pl.DataFrame, trace_path: str) -> list[str]:
    """A note for each watcher bound to a node the trace never names (``node_names``: a node or a
    binding's target), which receives nothing: a misspelt ``node-7`` for ``node-007``.  (A
    note, not an error: a watcher that receives nothing is a case the queries must answer.)"""
    bound = [w for w in watchers if w.node is not None]
    if not bound or not {"resource", "subresource", "verb", "name", "node"} <= set(trace.columns):
        return []
    named = node_names(trace)  # (sorted)
    some = ", ".join(named[:3]) + (", ..." if len(named) > 3 else "")
    known = set(named)
    return [f"watcher {w.name!r}: its node {w.node!r} is not in {trace_path}, which names "
            f"{len(named):,} nodes{f' ({some})' if named else ''}: it receives nothing"
            for w in bound if w.node not in known]


@contextlib.contextmanager
def _reusing_freed_memory() -> Iterator[Callable[[], None]]:
    """Keep the memory that numpy frees for its next arrays while a replay runs, and ask for no
    huge pages for them (``replay.memory``); yields the function that gives back what is free
    before the derivation, which keeps freed memory in its turn."""
    def release() -> None:
        gc.collect()  # a simulation's objects refer to each other
        memory.give_back()

    with memory.keeping_freed_memory(), memory.without_huge_pages():
        try:
            yield release
        finally:
            gc.collect()


def _read(trace_path: str | os.PathLike,
          name: str | None) -> tuple[pl.DataFrame, type[Model]]:
    """The trace (only the columns the model reads) and the model to run it through.  Without a
    name the guess is ``observe``, right for any trace with bindings.  A model is looked up once
    when the guess stands (each lookup reads every installed distribution's entry points)."""
    guess = models.load(name or "observe")
    trace = read_trace(trace_path, columns=_columns(guess))
    if name is not None or has_bindings(trace):
        return trace, guess
    model_class = choose_model(name, trace, str(trace_path))
    return read_trace(trace_path, columns=_columns(model_class)), model_class


def _columns(model_class: type[Model]) -> list[str] | None:
    columns = model_class.trace_columns
    return list(columns) if columns is not None else None


def _summarised(tables: Iterable[tuple[str, pa.Table | pl.DataFrame]],
                into: dict) -> Iterator[tuple[str, pa.Table | pl.DataFrame]]:
    """``tables`` as they pass; once the last has passed, while the last ones are still being
    written, ``into`` gets the run's end-to-end delay by role and its attempts' outcomes.  Of
    the deliveries only each one's delay is kept, by role, as each part passes (8 bytes a
    delivery rather than the whole table until the end: a gigabyte at a million pods)."""
    delays: dict[str, list[np.ndarray]] = {}
    attempts: list[pa.Table | pl.DataFrame] = []
    for name, table in tables:
        yield name, table
        if name == "deliveries":
            _add_delays(table, delays)
        elif name == "attempts":
            attempts.append(table)
    into["delay"] = _delay_by_role(delays)
    into["outcomes"] = _outcomes(attempts)


def _manifest(trace_path, config: RunConfig, model_class, settings: dict, watchers: int) -> dict:
    described = config.describe()
    described["model"] = {"name": model_class.name, **settings}
    return {
        "trace": {"path": str(trace_path), "sha256": sha256_of(trace_path),
                  "trace_version": TRACE_VERSION, "metadata": source_of(trace_path)},
        "model": {"name": model_class.name, "params": settings},
        "seed": config.seed,
        "watchers": watchers,
        "config": described,
    }


def _add_delays(part: pa.Table | pl.DataFrame, delays: dict[str, list[np.ndarray]]) -> None:
    """The end-to-end delay of each of a part's deliveries, appended to its role's."""
    part = conform_table("deliveries", part)
    listed = _where(part.column("source")).get("list", False)
    if listed is None:
        return  # a watcher's first list (observe): no delay (views.sql: delivery_delays_us)
    delay_us = _minus_us(part.column("applied_ts"), part.column("commit_ts"))
    for role, at in _where(part.column("role")).items():
        if isinstance(listed, np.ndarray):
            at = ~listed if at is None else at & ~listed
        delays.setdefault(role, []).append(delay_us if at is None else delay_us[at])


def _delay_by_role(delays: dict[str, list[np.ndarray]]) -> pl.DataFrame:
    """Per watcher role: deliveries, p50_ms and p99_ms of the end-to-end delay."""
    summary = []
    for role, parts in sorted(delays.items()):
        n = sum(len(part) for part in parts)
        if n:
            summary.append((role, n, *_nearest_ms(parts, (0.5, 0.99))))
    return pl.DataFrame(summary, schema={"role": pl.String, "deliveries": pl.UInt32,
                                         "p50_ms": pl.Float64, "p99_ms": pl.Float64},
                        orient="row")


def _outcomes(attempts: list[pa.Table | pl.DataFrame]) -> dict[str, int]:
    """How many attempts ended in each outcome (``bound``, ``conflict``, ...)."""
    counts: dict[str, int] = {}
    for part in attempts:
        outcome = conform_table("attempts", part).column("outcome")
        for value, at in _where(outcome).items():
            counts[value] = counts.get(value, 0) + (len(outcome) if at is None
                                                    else int(np.sum(at)))
    return counts


def _where(column: pa.ChunkedArray) -> dict[str, np.ndarray | None]:
    """For each value of a string column, where the column holds it: a boolean mask, or None
    if it holds nothing else.

    A part of observe's deliveries (a million, sorted by watcher) nearly always has one role:
    that is found from the codes' least and greatest, without counting them (counting cast
    each part's codes to 64 bits first, 0.2 s of the 1M-pod observe replay's main thread)."""
    array = column.combine_chunks()
    if not pa.types.is_dictionary(array.type):
        array = array.dictionary_encode()
    codes, labels = array.indices.to_numpy(zero_copy_only=False), array.dictionary.to_pylist()
    if len(codes) and codes.min() == codes.max():
        return {labels[codes[0]]: None}
    count = np.bincount(codes, minlength=len(labels))
    where: dict[str, np.ndarray | None] = {}
    for label in set(labels):
        mine = [i for i, other in enumerate(labels) if other == label]
        if count[mine].sum() == len(codes):
            where[label] = None
        elif count[mine].sum():
            where[label] = codes == mine[0] if len(mine) == 1 else np.isin(codes, mine)
    return where


def _minus_us(later: pa.ChunkedArray, earlier: pa.ChunkedArray) -> np.ndarray:
    """``later - earlier`` (timestamp columns) in integer microseconds, into one new array, a
    chunk of ``earlier`` at a time (observe's ``commit_ts`` comes in chunks)."""
    minuend = _us(later)
    out = np.empty(len(minuend), dtype=np.int64)
    at = 0
    for chunk in earlier.chunks:
        size = len(chunk)
        np.subtract(minuend[at:at + size], chunk.view(pa.int64()).to_numpy(zero_copy_only=False),
                    out=out[at:at + size])
        at += size
    return out


def _us(column: pa.ChunkedArray) -> np.ndarray:
    """A timestamp column as integer microseconds (no copy of a column in one chunk)."""
    chunks = [chunk.view(pa.int64()).to_numpy(zero_copy_only=False) for chunk in column.chunks]
    return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)


def _nearest_ms(parts: list[np.ndarray], quantiles: tuple[float, ...]) -> list[float]:
    """The ``quantiles`` of the delays in ``parts`` (µs) in ms, by the nearest rank as polars'
    ``"nearest"`` picks it: index (n - 1) q, rounded half up (``ranked``: without joining the
    parts)."""
    n = sum(len(part) for part in parts)
    ranks = [math.floor((n - 1) * q + 0.5) for q in quantiles]
    return [float(value) / 1000 for value in ranked(parts, ranks)]
