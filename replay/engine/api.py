"""The engine's API for models: everything a model imports from ``replay.engine``.

A model (built-in or a plugin) imports only from here, from ``replay.models.base`` and
``replay.models.whatif``, and from the layers below the engine (``replay.trace``, ``replay.rng``,
``replay.arrays``); ``tests/test_model_api.py`` checks that the built-in models do.  The classes'
public methods and attributes (no leading underscore) are the API; docs/models.md is its
reference.  Records (``Pod``, ``Attempt``, ``Write``) are read, never assigned, by models: the
engine is their only writer, so it may later keep them as columns without changing a model.

What-if models (discrete events, one write at a time):

- ``Simulation``: time and timers (``now``, ``at``, ``after`` returning a cancellable ``Timer``;
  ``call_at``, ``call_after`` for one never cancelled; ``deadlines`` for times to live),
  watchers' ``View``s, reactions to applied writes, commits, attempts, messages between peers;
- ``Scheduler``: the scheduling loop every what-if model shares (queue, backoff, attempts, node
  selection by a ``NodeSelector`` or ``GodelNodeSelector``, assume/forget); ``Assumptions``:
  assume/forget with a time to live, for a component that is not a scheduler (Gödel's binder);
  ``Worker``: a one-at-a-time work loop; ``Gathering``: gangs gathered until complete;
  ``Client``: a component's rate-limited API client;
- records and enums: ``Pod``, ``Attempt``, ``Write``, ``WriteKind``, ``Outcome``, ``Reason``,
  ``Request``, ``Allocatable``, ``NEVER``, ``NO_NODE``.

Vectorised models (the whole trace at once, like ``observe``): ``Pipeline`` (its ``streams``,
``scan``), ``Scan`` (a scan written a part at a time, with its terminations and re-lists),
``Streams``, ``STAGE_COLUMNS``, ``SOURCES`` (``Source`` names them), ``LISTED_CODE`` (a listed
object's event's status), ``capacities``, ``match``, ``node_index``, ``watchers_table``,
``view_lag_us``, ``OUTCOMES``.

Every model: ``RunConfig``, ``WatcherSpec``, ``RunTables``.
"""

from __future__ import annotations

from replay.engine.assumed import Assumptions
from replay.engine.client import Client
from replay.engine.cluster import (NEVER, NO_NODE, Allocatable, Attempt, Outcome, Pod, Reason,
                                   Request, Write, WriteKind)
from replay.engine.config import RunConfig, WatcherSpec
from replay.engine.core import Timer
from replay.engine.gangs import Gathering
from replay.engine.pipeline import (LISTED_CODE, SOURCES, STAGE_COLUMNS, Pipeline, Scan, Source,
                                    view_lag_us)
from replay.engine.rundir import OUTCOMES, RunTables
from replay.engine.scheduler import GIVES_BACK, OnAssumed, Scheduler
from replay.engine.selection import (POLICIES, GodelNodeSelector, Indices, NodeSelector,
                                     SelectorFactory)
from replay.engine.simulation import Simulation
from replay.engine.view import Snapshot, View
from replay.engine.watchcache import capacities
from replay.engine.watchers import Streams, match, node_index, watchers_table
from replay.engine.worker import Worker
from replay.engine.workload import node_names

__all__ = [
    "GIVES_BACK", "LISTED_CODE", "NEVER", "NO_NODE", "OUTCOMES", "POLICIES", "SOURCES",
    "STAGE_COLUMNS",
    "Allocatable", "Assumptions", "Attempt", "Client", "Gathering", "GodelNodeSelector", "Indices",
    "NodeSelector", "OnAssumed", "Outcome", "Pipeline", "Pod", "Reason", "Request", "RunConfig",
    "RunTables", "Scan", "Scheduler", "SelectorFactory", "Simulation", "Snapshot", "Source",
    "Streams",
    "Timer", "View", "WatcherSpec", "Worker", "Write", "WriteKind", "capacities", "match",
    "node_index", "node_names", "view_lag_us",
    "watchers_table",
]
