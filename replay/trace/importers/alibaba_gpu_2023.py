"""Alibaba's 2023 GPU cluster trace (``cluster-trace-gpu-v2023``, Weng et al., USENIX ATC 2023).

Mapping (``traces/README.md``, "Recorded traces", has the same in a table):

- one ``create nodes`` per row of the node list, at the trace start, named by ``sn``, with
  allocatable ``cpu_milli``, ``memory_mib`` x 2^20 bytes and ``gpu`` x 1000 gpu_milli;
- one ``create pods`` per pod at ``creation_time``, with its requests: ``cpu_milli``,
  ``memory_mib`` x 2^20, and ``num_gpu`` x ``gpu_milli`` (``gpu_milli`` is the share of each GPU:
  below 1000 only for pods that share one GPU, 1000 for pods with several whole GPUs);
- one ``delete pods`` per pod at ``deletion_time``.  Every pod has one; pods that never ran
  (``Pending``, no ``scheduled_time``) were withdrawn then, and pods still alive when the trace was
  taken share the last deletion time, 12,902,960 s, which marks the end of the trace.

Times are whole seconds after the trace start, which the data does not date: ``--start`` (default
2023-01-01T00:00:00Z) sets it.  The trace says when a pod was scheduled but not where, so there is
no binding; ``scheduled_ts`` (an extra column on pod creates, null for pods never scheduled)
keeps the recorded time for comparison with a replay's placements.  Extra columns ``num_gpu``
(GPUs of a node, GPUs a pod asks for) and ``gpu_model`` (a node's model, a pod's ``gpu_spec``)
keep what ``gpu_milli`` alone cannot say.  Pods are in namespace ``default``, written by
``workload``; nodes are created by their ``kubelet`` (user ``system:node:NAME``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import polars as pl

from replay.errors import ReplayError
from replay.limits import INT32_MAX, INT64_MAX, TRACE_END
from replay.trace.importers.base import Imported, Importer
from replay.trace.importers.csvfile import read_csv
from replay.times import epoch_us

START = datetime(2023, 1, 1, tzinfo=timezone.utc)
MIB = 2**20
NAMESPACE = "default"

NODE_COLUMNS: dict[str, pl.DataType] = {
    "sn": pl.String(), "cpu_milli": pl.Int64(), "memory_mib": pl.Int64(), "gpu": pl.Int64(),
    "model": pl.String()}
POD_COLUMNS: dict[str, pl.DataType] = {
    "name": pl.String(), "cpu_milli": pl.Int64(), "memory_mib": pl.Int64(), "num_gpu": pl.Int64(),
    "gpu_milli": pl.Int64(), "gpu_spec": pl.String(), "creation_time": pl.Int64(),
    "deletion_time": pl.Int64(), "scheduled_time": pl.Int64()}
NOT_NULL = {"sn", "name", "cpu_milli", "memory_mib", "gpu", "num_gpu", "gpu_milli",
            "creation_time", "deletion_time"}


@dataclass(frozen=True)
class AlibabaOptions:
    pods: Path = field(metadata={
        "metavar": "CSV", "help": "openb_pod_list_*.csv (name, cpu_milli, memory_mib, num_gpu, "
        "gpu_milli, gpu_spec, creation_time, deletion_time, scheduled_time)"})
    nodes: Path = field(metadata={
        "metavar": "CSV", "help": "openb_node_list_*.csv (sn, cpu_milli, memory_mib, gpu, model)"})
    start: datetime = field(default=START, metadata={
        "help": "the time of second 0 of the trace, ISO 8601 (UTC if no offset)"})


class AlibabaGpu2023(Importer[AlibabaOptions]):
    name = "alibaba-gpu-2023"
    help = "import Alibaba's 2023 GPU cluster trace (openb_pod_list, openb_node_list)"
    description = ("Import Alibaba's cluster-trace-gpu-v2023: node creates at the trace start, a "
                   "pod create at each creation_time and a pod delete at each deletion_time, with "
                   "the recorded scheduled_time kept in the extra column scheduled_ts.")
    options = AlibabaOptions

    def inputs(self, options: AlibabaOptions) -> list[Path]:
        return [options.pods, options.nodes]

    def source_args(self, options: AlibabaOptions) -> dict[str, str]:
        return {"pods": options.pods.name, "nodes": options.nodes.name,
                "start": options.start.isoformat()}

    def rows(self, options: AlibabaOptions) -> Imported:
        """Node creates, then pod creates and deletes, each in file order (``run_import``
        sorts)."""
        start_us = epoch_us(options.start)
        pods_csv, nodes_csv = str(options.pods), str(options.nodes)
        nodes = _in_range(_checked(read_csv(nodes_csv, NODE_COLUMNS), nodes_csv, "sn"),
                          nodes_csv, start_us)
        pods = _in_range(_checked(read_csv(pods_csv, POD_COLUMNS), pods_csv, "name"), pods_csv,
                         start_us)
        _deleted_after_created(pods, pods_csv)
        return Imported(pl.concat([_node_creates(nodes, start_us), _pod_writes(pods, start_us)],
                                  how="diagonal_relaxed"), [])


def _checked(frame: pl.DataFrame, path: str, key: str) -> pl.DataFrame:
    """``frame``, unless a required value is missing, a number is negative, or two rows name
    the same object in column ``key`` (file:line: column)."""
    for name in frame.columns:
        column = frame[name]
        bad = column.is_null() if name in NOT_NULL else pl.repeat(False, len(frame), eager=True)
        if column.dtype == pl.String and name in NOT_NULL:
            bad = bad | (column == "").fill_null(False)  # a quoted "" is no name either
        if column.dtype.is_integer():
            bad = bad | (column < 0).fill_null(False)
        if bad.any():
            row = bad.arg_true()[0]
            what = "is empty" if column[row] in (None, "") else f"is negative ({column[row]})"
            raise ReplayError(f"{path}:{row + 2}: column {name} {what}")
    again = frame[key].is_duplicated() & ~frame[key].is_first_distinct()
    if again.any():
        row = again.arg_true()[0]
        first = (frame[key] == frame[key][row]).arg_true()[0]
        raise ReplayError(f"{path}:{row + 2}: column {key}: {frame[key][row]!r} names the object "
                          f"of line {first + 2} again (each row is one object)")
    return frame


def _in_range(frame: pl.DataFrame, path: str, start_us: int) -> pl.DataFrame:
    """``frame``, unless a value would overflow the trace's column it is scaled into (memory in
    MiB times 2^20, a pod's GPUs times its share; seconds times 10^6 after the start, which
    must also end before ``TRACE_END``) or kept in (GPUs in the 32-bit ``num_gpu``): polars would
    wrap it around without a word, or fail with a traceback."""
    last_s = (epoch_us(TRACE_END) - 1 - start_us) // 10**6
    bounds = {"memory_mib": INT64_MAX // MIB, "gpu": INT32_MAX, "num_gpu": INT32_MAX,
              **{name: last_s for name in ("creation_time", "deletion_time", "scheduled_time")}}
    for name, bound in bounds.items():
        if name in frame.columns:
            _refuse_first(frame, path, name, frame[name] > bound,
                          f"on or after {TRACE_END.date().isoformat()} from --start"
                          if "time" in name else "too large: the trace's value would overflow "
                          f"its {'32' if bound == INT32_MAX else '64'}-bit column")
    if "num_gpu" in frame.columns:
        share = frame["gpu_milli"]
        too_many = (share > 0) & (frame["num_gpu"] > INT64_MAX // share.clip(lower_bound=1))
        _refuse_first(frame, path, "num_gpu", too_many,
                      "too large: num_gpu x gpu_milli overflows a 64-bit integer")
    return frame


def _deleted_after_created(pods: pl.DataFrame, path: str) -> None:
    _refuse_first(pods, path, "deletion_time",
                  pods["deletion_time"] < pods["creation_time"],
                  "before the pod's creation_time")


def _refuse_first(frame: pl.DataFrame, path: str, name: str, bad: pl.Series, what: str) -> None:
    bad = bad.fill_null(False)
    if bad.any():
        row = bad.arg_true()[0]
        raise ReplayError(f"{path}:{row + 2}: column {name} is {frame[name][row]}: {what}")


def _node_creates(nodes: pl.DataFrame, start_us: int) -> pl.DataFrame:
    return nodes.select(
        ts=_time(pl.lit(0), start_us), verb=pl.lit("create"), resource=pl.lit("nodes"),
        name=pl.col("sn"), node=pl.col("sn"), cpu_milli=pl.col("cpu_milli"),
        memory_bytes=pl.col("memory_mib") * MIB, gpu_milli=pl.col("gpu") * 1000,
        code=pl.lit(201, pl.Int32), component=pl.lit("kubelet"),
        user=pl.lit("system:node:") + pl.col("sn"), num_gpu=pl.col("gpu").cast(pl.Int32),
        gpu_model=pl.col("model"))


def _pod_writes(pods: pl.DataFrame, start_us: int) -> pl.DataFrame:
    """All pod creates, then all deletes: at equal times (after the stable sort) creates come first."""
    common = dict(resource=pl.lit("pods"), namespace=pl.lit(NAMESPACE), name=pl.col("name"),
                  component=pl.lit("workload"))
    creates = pods.select(
        ts=_time(pl.col("creation_time"), start_us), verb=pl.lit("create"), **common,
        cpu_milli=pl.col("cpu_milli"), memory_bytes=pl.col("memory_mib") * MIB,
        gpu_milli=pl.col("num_gpu") * pl.col("gpu_milli"), code=pl.lit(201, pl.Int32),
        scheduled_ts=_time(pl.col("scheduled_time"), start_us),
        num_gpu=pl.col("num_gpu").cast(pl.Int32), gpu_model=pl.col("gpu_spec"))
    deletes = pods.select(ts=_time(pl.col("deletion_time"), start_us), verb=pl.lit("delete"),
                          **common, code=pl.lit(200, pl.Int32))
    return pl.concat([creates, deletes], how="diagonal_relaxed")


def _time(seconds: pl.Expr, start_us: int) -> pl.Expr:
    return (seconds * 10**6 + start_us).cast(pl.Datetime("us", "UTC"))
