"""The run configuration: seed, model, the watch pipeline's stage costs, what the API server and
the clients do under load, and the watchers.

A TOML file (every time in milliseconds, every key optional) is laid over a profile:
``default`` holds realistic costs, ``zero`` makes every stage free so that a study can switch on one
stage at a time.  Each resource can have costs and settings of its own (``[resources.NAME]``), each
watcher its own per-watcher costs, buffer and client queue.  Unknown keys, negative times and
impossible parameters are errors that name the key.  See ``docs/config.md`` for the full reference.
"""

from __future__ import annotations

import copy
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any

from replay.engine.distributions import (Constant, Distribution, Exponential, LogNormal, Uniform,
                                         parse_distribution)
from replay.errors import ReplayError, unreadable
from replay.limits import INT64_MAX, MAX_WATCHERS

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

# Stage name -> its parameters, in pipeline order.  The first two are the API server's queues, one
# per resource (its watch cache), shared by all watchers; the rest exist once per watcher and
# resource it watches (one watch, and one informer, per resource).
STAGES: dict[str, tuple[str, ...]] = {
    "storage_to_cache": ("latency", "service"),
    "cacher_queue": ("service", "per_watcher"),
    "watcher_queue": ("service",),
    "network": ("latency",),
    "handler": ("service",),
}
SHARED_STAGES = ("storage_to_cache", "cacher_queue")
ROLES = ("scheduler", "binder", "dispatcher", "kubelet", "observer")
# the roles whose pod informer selects pods not yet in a terminal phase by default:
# ``status.phase!=Succeeded,status.phase!=Failed`` (kube-scheduler's ``newPodInformer``,
# pkg/scheduler/scheduler.go; Gödel's scheduler, binder and dispatcher share its selector,
# ``newPodInformer`` in kubewharf/godel-scheduler pkg/util/cmd/informerfactory.go)
NON_TERMINAL_ROLES = ("scheduler", "binder", "dispatcher")

PROFILES: dict[str, dict[str, dict[str, Distribution]]] = {
    "default": {
        "storage_to_cache": {"latency": Constant(1.0), "service": Exponential(0.02)},
        "cacher_queue": {"service": Constant(0.005), "per_watcher": Constant(0.001)},
        "watcher_queue": {"service": Constant(0.01)},
        "network": {"latency": LogNormal(0.5, 5.0)},
        "handler": {"service": Exponential(0.1)},
    },
    "zero": {stage: {p: Constant(0.0) for p in params} for stage, params in STAGES.items()},
}

StageCosts = Mapping[str, Mapping[str, Distribution]]


class ClientQueue(str, Enum):
    """How a watcher's client queues the events of one watch in front of its handler."""

    FIFO = "fifo"  # one entry per event, in arrival order (a shared informer's processorListener,
    # client-go's RealFIFO): today's strict per-event queue
    DELTA_FIFO = "delta_fifo"  # client-go's DeltaFIFO feeding the handler directly: one entry per
    # object key, all of a key's queued deltas popped together and handled one by one
    WORKQUEUE = "workqueue"  # a controller's workqueue: a key added while queued is queued once,
    # and one handling reads the latest state


@dataclass(frozen=True)
class ServerSettings:
    """What one resource's watch cache does under load (docs/config.md gives the upstream source
    of every default): the watchers' buffers (None: upstream's rule), the window of events it
    keeps for re-watches (None: upstream's rule), its dispatcher's time budget for blocked
    watchers, and what serving a LIST costs per object."""

    buffer: int | None = None  # events per channel of a watcher's watch
    capacity: int | None = None  # events in the watch cache's window
    timeout_budget_ms: float = 100.0  # time_budget.go: maxBudget
    budget_refill_ms_per_s: float = 50.0  # time_budget.go: refreshPerSecond
    list_per_object: Distribution = Constant(0.01)


@dataclass(frozen=True)
class ReflectorSettings:
    """What a client's reflector does when the server closes its watch (reflector.go): it watches
    again from its last resource version after ``rewatch_delay`` (at once, upstream), and after a
    "410 Gone" lists again after ``relist_backoff`` (its backoff's first step: 800 ms with jitter
    1.0)."""

    rewatch_delay: Distribution = Constant(0.0)
    relist_backoff: Distribution = Uniform(800.0, 1600.0)


SERVER_PROFILES = {"default": ServerSettings(),
                   "zero": ServerSettings(list_per_object=Constant(0.0))}
REFLECTOR_PROFILES = {"default": ReflectorSettings(),
                      "zero": ReflectorSettings(Constant(0.0), Constant(0.0))}


@dataclass(frozen=True)
class ResourceSettings:
    """``[resources.NAME]``: one resource's own stage costs and server settings, over the run's."""

    stages: StageCosts = field(default_factory=dict)
    server: Mapping[str, Any] = field(default_factory=dict)  # the ServerSettings fields it sets


@dataclass(frozen=True)
class WatcherSpec:
    """One informer: who it is, what it watches, and any stage costs of its own.

    ``node`` restricts a kubelet to its own node and the pods bound to it; ``buffer`` sets its
    watches' buffers (None: the resource's); ``client_queue`` how its client queues events;
    ``terminal_pods`` whether its pod watch selects pods in a terminal phase (None: its role's
    default, ``sees_terminal_pods``).
    """

    name: str
    role: str
    resources: tuple[str, ...] = ("pods", "nodes")
    node: str | None = None
    stages: StageCosts = field(default_factory=dict)
    client_queue: ClientQueue = ClientQueue.FIFO
    buffer: int | None = None
    terminal_pods: bool | None = None

    @property
    def sees_terminal_pods(self) -> bool:
        """Whether its pod watch selects pods in phase ``Succeeded`` or ``Failed``: a watch
        that does not sees a pod's write setting that phase as the pod's deletion (the watch
        cache sends a DELETED event for an object that stops matching its selector) and none
        of the pod's writes after it."""
        if self.terminal_pods is not None:
            return self.terminal_pods
        return self.role not in NON_TERMINAL_ROLES

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "role": self.role,
                               "resources": list(self.resources)}
        if self.node is not None:
            out["node"] = self.node
        if self.stages:
            out["stages"] = _describe_stages(self.stages)
        if self.client_queue != ClientQueue.FIFO:
            out["client_queue"] = self.client_queue.value
        if self.buffer is not None:
            out["buffer"] = self.buffer
        if self.terminal_pods is not None:
            out["terminal_pods"] = self.terminal_pods
        return out


@dataclass(frozen=True)
class RunConfig:
    seed: int = 0
    profile: str = "default"
    model: str | None = None
    model_params: Mapping[str, Any] = field(default_factory=dict)
    stages: StageCosts = field(default_factory=lambda: copy.deepcopy(PROFILES["default"]))
    watchers: tuple[WatcherSpec, ...] | None = None  # None: the model picks them
    source: str | None = None  # the TOML file it was read from, if any (an input of the run)
    server: ServerSettings = ServerSettings()
    reflector: ReflectorSettings = ReflectorSettings()
    resources: Mapping[str, ResourceSettings] = field(default_factory=dict)

    def costs(self, watcher: WatcherSpec | None = None, resource: str | None = None) -> StageCosts:
        """The stage costs that apply to ``watcher``'s watch of ``resource``: the watcher's own
        overrides over the resource's, over the run's."""
        layers = [own.stages for own in (self.resources.get(resource) if resource else None,
                                         watcher) if own is not None and own.stages]
        if not layers:
            return self.stages
        merged = {stage: dict(params) for stage, params in self.stages.items()}
        for stages in layers:
            for stage, params in stages.items():
                merged[stage].update(params)
        return merged

    def server_for(self, resource: str) -> ServerSettings:
        """The server settings of ``resource``'s watch cache: its own over the run's."""
        own = self.resources.get(resource)
        return replace(self.server, **own.server) if own is not None and own.server else self.server

    def describe(self) -> dict[str, Any]:
        """The resolved configuration, as recorded in a run's manifest."""
        out: dict[str, Any] = {"seed": self.seed, "profile": self.profile,
                               "model": {"name": self.model, **self.model_params},
                               **_describe_server(self.server.__dict__, self.stages),
                               "reflector": {k: d.describe() for k, d in
                                             self.reflector.__dict__.items()}}
        if self.resources:
            out["resources"] = {name: _describe_server(own.server, own.stages)
                                for name, own in sorted(self.resources.items())}
        if self.watchers is not None:
            out["watchers"] = [w.describe() for w in self.watchers]
        return out


def _describe_stages(stages: StageCosts) -> dict[str, Any]:
    return {s: {p: d.describe() for p, d in params.items()} for s, params in stages.items()}


# ServerSettings field -> (config table, key in it)
SERVER_KEYS = {"capacity": ("watch_cache", "capacity"),
               "timeout_budget_ms": ("dispatch", "timeout_budget_ms"),
               "budget_refill_ms_per_s": ("dispatch", "budget_refill_ms_per_s"),
               "list_per_object": ("list", "per_object")}


def _describe_server(settings: Mapping[str, Any], stages: StageCosts) -> dict[str, Any]:
    """Stage costs and server settings as the config's tables hold them (upstream's rule as
    "upstream"); the buffer goes with its stage, watcher_queue."""
    out: dict[str, Any] = {"stages": _describe_stages(stages)} if stages else {}
    for name, value in settings.items():
        if name == "buffer":
            out.setdefault("stages", {}).setdefault("watcher_queue", {})["buffer"] = (
                "upstream" if value is None else value)
            continue
        table, key = SERVER_KEYS[name]
        out.setdefault(table, {})[key] = (value.describe() if isinstance(value, Distribution)
                                          else "upstream" if value is None else value)
    return out


def load_config(path: str | os.PathLike[str] | None = None, *, overrides: Sequence[str] = (),
                seed: int | None = None, model: str | None = None) -> RunConfig:
    """The configuration from ``path`` (or the default profile), with ``-p KEY=VALUE`` model
    parameter ``overrides``, ``seed`` and ``model`` from the command line on top."""
    where = str(path) if path is not None else "command line"
    raw: dict[str, Any] = {}
    if path is not None:
        raw = read_toml(path)
    try:
        config = _build(raw)
    except ValueError as err:
        raise ReplayError(f"{where}: {err}") from None
    params = dict(config.model_params)
    for item in overrides:
        key, value = parse_override(item)
        params[key] = value
    if seed is not None and not _is_seed(seed):
        raise ReplayError(f"--seed: expected an integer from 0 to {INT64_MAX}, got {seed!r}")
    return replace(config, seed=config.seed if seed is None else seed,
                   model=model or config.model, model_params=params,
                   source=str(path) if path is not None else None)


def _is_seed(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and 0 <= value <= INT64_MAX


def from_description(described: Mapping[str, Any]) -> RunConfig:
    """The configuration that ``RunConfig.describe`` described (a run's manifest records it), to
    replay the same run again."""
    try:
        return _build(_without_upstream(copy.deepcopy(dict(described))))
    except ValueError as err:
        raise ReplayError(f"the recorded configuration: {err}") from None


def _without_upstream(table: dict[str, Any]) -> dict[str, Any]:
    """``table`` without the settings ``describe`` records as "upstream" (upstream's rule: what
    a setting left out means)."""
    return {key: _without_upstream(value) if isinstance(value, dict) else value
            for key, value in table.items() if value != "upstream"}


def parse_override(item: str) -> tuple[str, Any]:
    """``KEY=VALUE`` with VALUE read as a TOML value (``3``, ``0.5``, ``true``, ``"x"``, ``[1, 2]``)
    and taken as a plain string when it is not one (``policy=most-allocated``)."""
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ReplayError(f"-p {item!r}: expected KEY=VALUE")
    if key == "name":
        raise ReplayError("-p name=...: choose the model with --model")
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        value = text
    return key, value


def read_toml(path: str | os.PathLike[str], kind: str = "config file") -> dict[str, Any]:
    """The TOML table of the ``kind`` of file at ``path`` (a run config, a sweep file), not yet
    checked (``config_from_table`` checks a run config's).  A byte order mark at its start, as
    Windows' editors write, is not part of the TOML (tomllib refuses it)."""
    path = Path(path)
    try:
        return tomllib.loads(path.read_text(encoding="utf-8-sig"))
    except FileNotFoundError:
        raise ReplayError(f"{path}: no such {kind}") from None
    except tomllib.TOMLDecodeError as err:
        raise ReplayError(f"{path}: not valid TOML: {err}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise unreadable(path, kind, err) from None


def config_from_table(table: Mapping[str, Any],
                      keys: Mapping[str, Any] | None = None) -> RunConfig:
    """The configuration a file holding ``table`` describes, with each dotted key of ``keys``
    set as if the file said it: ``model.schedulers``, ``stages.network.latency.p99_ms``.

    A key inside a stage's distribution that the table does not give changes the profile's
    distribution (``stages.network.latency.p99_ms = 20`` keeps the default lognormal's median),
    and ``profile`` takes effect before the other keys.  ``table`` is not modified.  Raises
    ``ValueError`` naming the key, with the same messages as a config file's errors.
    """
    raw = copy.deepcopy(dict(table))
    keys = dict(keys or {})
    if "profile" in keys:
        raw["profile"] = keys.pop("profile")
    for key, value in keys.items():
        _set_key(raw, key, value)
    return _build(raw)


def _set_key(table: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    if not all(parts):
        raise ValueError(f"{key!r}: not a key (names joined by dots)")
    if parts[0] == "stages" and len(parts) > 3:
        _own_distribution(table, parts[1], parts[2])
    here = table
    for depth, part in enumerate(parts[:-1]):
        here = here.setdefault(part, {})
        if not isinstance(here, dict):
            raise ValueError(f"{'.'.join(parts[:depth + 1])}: not a table, so {key} cannot be set")
    here[parts[-1]] = value


def _own_distribution(table: dict[str, Any], stage: str, param: str) -> None:
    """Copy the profile's distribution of ``stage.param`` into ``table`` unless it gives one,
    so that a key inside it changes one of the distribution's parameters.  Anything invalid on
    the way is left for ``_build`` to name."""
    profile, stages = table.get("profile", "default"), table.setdefault("stages", {})
    if profile not in PROFILES or stage not in STAGES or param not in STAGES[stage]:
        return
    if isinstance(stages, dict) and isinstance(stages.setdefault(stage, {}), dict):
        stages[stage].setdefault(param, PROFILES[profile][stage][param].describe())


def _build(raw: dict[str, Any]) -> RunConfig:
    _no_unknown(raw, {"seed", "profile", "model", "stages", "watchers", "dispatch", "watch_cache",
                      "list", "reflector", "resources"}, "")
    seed = raw.get("seed", 0)
    if not _is_seed(seed):
        raise ValueError(f"seed: expected an integer from 0 to {INT64_MAX}, got {seed!r}")
    profile = raw.get("profile", "default")
    if profile not in PROFILES:
        raise ValueError(f"profile: expected one of {', '.join(PROFILES)}, got {profile!r}")
    model_table = raw.get("model", {})
    if not isinstance(model_table, dict):
        raise ValueError("model: expected a table")
    model_params = dict(model_table)
    model = model_params.pop("name", None)
    if model is not None and not isinstance(model, str):
        raise ValueError(f"model.name: expected a string, got {model!r}")
    stages = copy.deepcopy(PROFILES[profile])
    own_stages, server = _server_tables(raw, "")
    for stage, params in own_stages.items():
        stages[stage].update(params)
    watchers = None
    if "watchers" in raw:
        watchers = _watchers(raw["watchers"])
    return RunConfig(seed=seed, profile=profile, model=model, model_params=model_params,
                     stages=stages, watchers=watchers,
                     server=replace(SERVER_PROFILES[profile], **server),
                     reflector=_reflector(raw.get("reflector", {}), REFLECTOR_PROFILES[profile]),
                     resources=_resources(raw.get("resources", {})))


def _server_tables(raw: dict[str, Any],
                   where: str) -> tuple[dict[str, dict[str, Distribution]], dict[str, Any]]:
    """The stage costs and server settings of the run (``where`` empty) or of one resource:
    ``stages``, ``dispatch``, ``watch_cache`` and ``list``."""
    prefix = f"{where}." if where else ""
    stages, server = _stage_tables(raw.get("stages", {}), f"{prefix}stages", shared_ok=True)
    for table, keys in (("dispatch", ("timeout_budget_ms", "budget_refill_ms_per_s")),
                        ("watch_cache", ("capacity",)), ("list", ("per_object",))):
        values = raw.get(table, {})
        if not isinstance(values, dict):
            raise ValueError(f"{prefix}{table}: expected a table")
        _no_unknown(values, set(keys), f"{prefix}{table}")
        for key, value in values.items():
            at = f"{prefix}{table}.{key}"
            if key == "per_object":
                server["list_per_object"] = parse_distribution(value, at)
            elif key == "capacity":
                server["capacity"] = _count(value, at)
            else:
                server[key] = _milliseconds(value, at)
    return stages, server


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where}: expected an integer >= 1, got {value!r}")
    return value


def _milliseconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (value >= 0) \
            or value == float("inf"):
        raise ValueError(f"{where}: expected a number >= 0, got {value!r}")
    return float(value)


def _reflector(raw: Any, base: ReflectorSettings) -> ReflectorSettings:
    if not isinstance(raw, dict):
        raise ValueError("reflector: expected a table")
    _no_unknown(raw, {"rewatch_delay", "relist_backoff"}, "reflector")
    return replace(base, **{key: parse_distribution(value, f"reflector.{key}")
                            for key, value in raw.items()})


def _resources(raw: Any) -> dict[str, ResourceSettings]:
    if not isinstance(raw, dict):
        raise ValueError("resources: expected a table of resources ([resources.pods])")
    out = {}
    for name, tables in raw.items():
        where = f"resources.{name}"
        if not isinstance(tables, dict):
            raise ValueError(f"{where}: expected a table")
        _no_unknown(tables, {"stages", "dispatch", "watch_cache", "list"}, where)
        stages, server = _server_tables(tables, where)
        out[name] = ResourceSettings(stages, server)
    return out


def _stage_tables(raw: Any, where: str,
                  shared_ok: bool) -> tuple[dict[str, dict[str, Distribution]], dict[str, Any]]:
    """Stage costs, and the settings a stage's table may also hold (``watcher_queue``'s
    ``buffer``)."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected a table of stages")
    out, settings = {}, {}
    for stage, params in raw.items():
        if stage not in STAGES:
            raise ValueError(f"{where}.{stage}: unknown stage (stages are {', '.join(STAGES)})")
        if not shared_ok and stage in SHARED_STAGES:
            raise ValueError(f"{where}.{stage}: this stage is one queue per resource shared by "
                             "all watchers and cannot be set per watcher")
        if not isinstance(params, dict):
            raise ValueError(f"{where}.{stage}: expected a table")
        extra = {"buffer"} if stage == "watcher_queue" else set()
        _no_unknown(params, set(STAGES[stage]) | extra, f"{where}.{stage}")
        if "buffer" in params:
            settings["buffer"] = _count(params["buffer"], f"{where}.{stage}.buffer")
        out[stage] = {p: parse_distribution(d, f"{where}.{stage}.{p}") for p, d in params.items()
                      if p not in extra}
    return out, settings


def _watchers(raw: Any) -> tuple[WatcherSpec, ...]:
    if not isinstance(raw, list):
        raise ValueError("watchers: expected an array of tables ([[watchers]])")
    if not raw:
        raise ValueError("watchers: an empty list, which would replay to no one (leave it out "
                         "for the model's own watchers)")
    out: list[WatcherSpec] = []
    for i, item in enumerate(raw):
        where = f"watchers[{i}]"
        if not isinstance(item, dict):
            raise ValueError(f"{where}: expected a table")
        _no_unknown(item, {"name", "role", "resources", "node", "replicas", "stages",
                           "client_queue", "terminal_pods"}, where)
        name, role = item.get("name"), item.get("role", "observer")
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}.name: required, a non-empty string")
        if role not in ROLES:
            raise ValueError(f"{where}.role: expected one of {', '.join(ROLES)}, got {role!r}")
        resources = item.get("resources", ["pods", "nodes"])
        if not isinstance(resources, list) or not resources or not all(
                isinstance(r, str) for r in resources):
            raise ValueError(f"{where}.resources: expected a non-empty list of resource names")
        node = item.get("node")
        if node is not None and not isinstance(node, str):
            raise ValueError(f"{where}.node: expected a node name")
        replicas = item.get("replicas", 1)
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
            raise ValueError(f"{where}.replicas: expected an integer >= 1")
        if len(out) + replicas > MAX_WATCHERS:
            raise ValueError(f"{where}.replicas: {replicas:,} would make more than "
                             f"{MAX_WATCHERS:,} watchers, the limit")
        stages, settings = _stage_tables(item.get("stages", {}), f"{where}.stages", shared_ok=False)
        queues = [q.value for q in ClientQueue]
        client_queue = item.get("client_queue", ClientQueue.FIFO.value)
        if client_queue not in queues:
            raise ValueError(f"{where}.client_queue: expected one of {', '.join(queues)}, "
                             f"got {client_queue!r}")
        terminal_pods = item.get("terminal_pods")
        if terminal_pods is not None and not isinstance(terminal_pods, bool):
            raise ValueError(f"{where}.terminal_pods: expected true or false")
        names = [name] if replicas == 1 else [f"{name}-{k}" for k in range(replicas)]
        out += [WatcherSpec(n, role, tuple(resources), node, stages, ClientQueue(client_queue),
                            settings.get("buffer"), terminal_pods) for n in names]
    seen: set[str] = set()
    for watcher in out:
        if watcher.name in seen:
            raise ValueError(f"watchers: the name {watcher.name!r} is used twice")
        seen.add(watcher.name)
    return tuple(out)


def _no_unknown(table: dict[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        prefix = f"{where}." if where else ""
        raise ValueError(f"{prefix}{unknown[0]}: unknown key (expected {', '.join(sorted(allowed))})")
