"""``replay run`` as a library call: read a trace, pick the model and watchers, replay, write.

    from replay.engine.config import load_config
    from replay.engine.run import run_replay
    result = run_replay("traces/sample.parquet", load_config(), out="runs/sample-observe")
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from replay import models
from replay.engine.config import RunConfig
from replay.engine.rundir import RunTables, conform_table, sha256_of, write_run
from replay.errors import ReplayError
from replay.progress import progress
from replay.trace.io import read_trace, source_of
from replay.trace.schema import TRACE_VERSION

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
    extra: dict = field(default_factory=dict)


def has_bindings(trace: pl.DataFrame) -> bool:
    return trace.filter((pl.col("resource") == "pods") & (pl.col("subresource") == "binding")
                        ).height > 0


def choose_model(name: str | None, trace: pl.DataFrame, trace_path: str) -> type[models.Model]:
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
               out: str | os.PathLike | None = None, force: bool = False) -> RunResult:
    """Replay the trace at ``trace_path`` under ``config`` and write the run directory."""
    with progress(4, "replay", unit="step") as bar:
        bar.set_postfix_str("reading the trace")
        trace = read_trace(trace_path)
        model_class = choose_model(config.model, trace, str(trace_path))
        model = model_class(config.model_params)
        out = Path(out) if out is not None else default_out(trace_path, model_class.name)
        if out.exists() and not force:
            raise ReplayError(f"{out}: already exists; choose another --out or pass --force")
        watchers = (list(config.watchers) if config.watchers is not None
                    else model.default_watchers(trace))
        bar.update()
        bar.set_postfix_str(f"replaying through {model_class.name}")
        tables = model.replay(trace, config, watchers)
        bar.update()
        bar.set_postfix_str("writing the run directory")
        manifest = _manifest(trace_path, config, model_class, model.settings, len(watchers))
        rows = write_run(out, tables, manifest, force=force)
        bar.update()
    return _summarise(out, model_class.name, rows, len(watchers), tables)


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


def _summarise(out: Path, model: str, rows: dict[str, int], watchers: int,
               tables: RunTables) -> RunResult:
    deliveries = pl.from_arrow(conform_table("deliveries", tables.deliveries).select(
        ["role", "commit_ts", "applied_ts"]))
    delay = (deliveries
             .with_columns(ms=(pl.col("applied_ts") - pl.col("commit_ts")).dt.total_microseconds()
                           / 1000)
             .group_by("role")
             .agg(deliveries=pl.len(), p50_ms=pl.col("ms").quantile(0.5, "nearest"),
                  p99_ms=pl.col("ms").quantile(0.99, "nearest"))
             .sort("role"))
    attempts = pl.from_arrow(conform_table("attempts", tables.attempts).select(["outcome"]))
    conflicts = attempts.filter(pl.col("outcome") == "conflict").height
    return RunResult(out, model, rows, watchers, delay, conflicts, attempts.height)
