"""The columns of trace format v1, in one place for the writers, the validator and the docs.

``traces/README.md`` holds the same table for readers; a test keeps the two in step.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

TRACE_VERSION = 1

# Key-value metadata of the Parquet file.
META_VERSION = "replay.trace_version"
META_SOURCE = "replay.source"  # synth, audit, alibaba-gpu-2023, ...
META_SOURCE_ARGS = "replay.source_args"  # JSON: how the source was produced (arguments, files)
META_CREATED_BY = "replay.created_by"  # "replay <version>"

TIMESTAMP = pa.timestamp("us", tz="UTC")

WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
READ_VERBS = ("get", "list", "watch")
VERBS = WRITE_VERBS + READ_VERBS


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    nullable: bool
    doc: str
    # a column a trace may leave out (added to format v1 after its first files, which lack it):
    # where it is absent, every value is null
    optional: bool = False


COLUMNS: tuple[Column, ...] = (
    Column("ts", TIMESTAMP, False,
           "When the write took effect (audit `stageTimestamp` at ResponseComplete)."),
    Column("received_ts", TIMESTAMP, True,
           "When the API server received the request (`requestReceivedTimestamp`)."),
    Column("verb", pa.string(), False,
           "create, update, patch, delete or deletecollection (get, list, watch only with "
           "`replay ingest --keep-reads`)."),
    Column("resource", pa.string(), False,
           "pods, nodes, leases, ...; a resource of a group Kubernetes does not build in is "
           "RESOURCE.GROUP (`nodes.longhorn.io`)."),
    Column("subresource", pa.string(), True, "binding, status, eviction, ..."),
    Column("namespace", pa.string(), True, "Namespace of the object; null for cluster-scoped ones."),
    Column("name", pa.string(), False, "Name of the object (empty for collection writes)."),
    Column("uid", pa.string(), True, "UID of the object, when known."),
    Column("node", pa.string(), True,
           "The node a pod is bound to (binding target), or the node's own name for node writes."),
    Column("cpu_milli", pa.int64(), True, "Pod request or node allocatable, in millicores."),
    Column("memory_bytes", pa.int64(), True, "Pod request or node allocatable, in bytes."),
    Column("gpu_milli", pa.int64(), True, "Pod request or node allocatable, in thousandths of a GPU."),
    Column("code", pa.int32(), False, "HTTP status of the write (201, 200, 409, ...)."),
    Column("component", pa.string(), False,
           "Who wrote it: kube-scheduler, kubelet, controller-manager, godel-scheduler, "
           "godel-binder, godel-dispatcher, workload, user, ..."),
    Column("user", pa.string(), True, "Authenticated user name."),
    Column("user_agent", pa.string(), True, "HTTP user agent of the client."),
    Column("audit_id", pa.string(), True, "Audit ID of the request."),
    Column("scheduler_name", pa.string(), True, "The pod's `spec.schedulerName`."),
    Column("group", pa.string(), True, "Gang or pod group the pod belongs to."),
    Column("priority", pa.int32(), True, "The pod's priority."),
    Column("phase", pa.string(), True,
           "A pod's `status.phase` as its status write sets it, or as its delete found it: "
           "Pending, Running, Succeeded, Failed or Unknown.", optional=True),
    Column("max_pods", pa.int64(), True,
           "A node's allocatable `pods` (`status.allocatable.pods`: the kubelet's `--max-pods`, "
           "110 by default), how many pods the schedulers and the kubelet let run on it at once; "
           "null for other objects and where a node write does not say it (the node keeps the "
           "limit its earlier writes said; none said: no limit).", optional=True),
)
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")

COLUMN_NAMES = tuple(c.name for c in COLUMNS)
BY_NAME = {c.name: c for c in COLUMNS}
RESOURCE_COLUMNS = ("cpu_milli", "memory_bytes", "gpu_milli")
COUNT_COLUMNS = (*RESOURCE_COLUMNS, "max_pods")  # integers that cannot be negative
# the pods a node runs at once when no write of the trace said its ``max_pods`` (a larger one
# counts as this: no limit either)
NO_POD_LIMIT = 2**31 - 1

REQUIRED = tuple(c for c in COLUMNS if not c.optional)
# the schema of a trace with the columns every trace has (an optional one is written only by a
# source that has its values)
SCHEMA = pa.schema([pa.field(c.name, c.type, nullable=c.nullable) for c in REQUIRED])


def markdown_table() -> str:
    """The column table as it appears in ``traces/README.md``."""
    rows = ["| column | type | null | meaning |", "| --- | --- | --- | --- |"]
    for c in COLUMNS:
        doc = f"Optional: a trace may leave it out (all null). {c.doc}" if c.optional else c.doc
        rows.append(f"| `{c.name}` | {c.type} | {'yes' if c.nullable else 'no'} | {doc} |")
    return "\n".join(rows)
