"""Run configuration: profiles, overrides and errors that name the key."""

from __future__ import annotations

import re

import pytest

from replay.engine.config import (PROFILES, STAGES, ClientQueue, ServerSettings, config_from_table,
                                  from_description, load_config, parse_override, read_toml)
from replay.engine.distributions import (KINDS, Constant, Exponential, LogNormal, Uniform,
                                         parse_distribution)
from replay.errors import ReplayError

from conftest import REPO

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def write(tmp_path, text):
    path = tmp_path / "run.toml"
    path.write_text(text)
    return path


def documented_config() -> dict:
    """The example configuration of docs/config.md, which says it holds the default profile."""
    text = (REPO / "docs" / "config.md").read_text()
    return tomllib.loads(re.search(r"```toml\n(.*?)```", text, re.S).group(1))


def test_the_default_profile_is_the_documented_one():
    documented = documented_config()["stages"]
    assert {stage: {param: parse_distribution(spec, f"{stage}.{param}")
                    for param, spec in params.items()}
            for stage, params in documented.items()} == PROFILES["default"]
    assert load_config().stages == PROFILES["default"]
    assert load_config().watchers is None and load_config().seed == 0


def test_every_distribution_and_stage_is_documented():
    text = (REPO / "docs" / "config.md").read_text()
    assert {kind for kind in re.findall(r"^\| `(\w+)` \|", text, re.M)} >= set(KINDS)
    assert set(documented_config()["stages"]) == set(STAGES)
    assert all(d.is_zero for params in PROFILES["zero"].values() for d in params.values())


def test_a_recorded_configuration_is_the_same_configuration():
    """A run's manifest records ``describe()``; reading it back gives the configuration."""
    config = load_config(overrides=["schedulers=3"], model="godel", seed=5)
    assert from_description(config.describe()) == config


def test_file_overrides_profile_and_watchers(tmp_path):
    path = write(tmp_path, """
seed = 7
profile = "zero"
[model]
name = "observe"
[stages.handler]
service = { dist = "exponential", mean_ms = 0.3 }
[[watchers]]
name = "scheduler"
role = "scheduler"
resources = ["pods", "nodes"]
replicas = 2
[watchers.stages.network]
latency = { dist = "constant", ms = 2.0 }
""")
    config = load_config(path, overrides=["schedulers=3", "policy=most-allocated"])
    assert config.seed == 7 and config.model == "observe"
    assert config.model_params == {"schedulers": 3, "policy": "most-allocated"}
    assert config.stages["handler"]["service"] == Exponential(0.3)
    assert config.stages["network"]["latency"] == Constant(0.0)
    assert [w.name for w in config.watchers] == ["scheduler-0", "scheduler-1"]
    assert config.costs(config.watchers[0])["network"]["latency"] == Constant(2.0)
    assert load_config(path, seed=9, model="kube").seed == 9


def test_the_api_server_under_load_per_resource_and_watcher(tmp_path):
    path = write(tmp_path, """
[stages.watcher_queue]
buffer = 50
[dispatch]
timeout_budget_ms = 20
[watch_cache]
capacity = 5000
[list]
per_object = { dist = "constant", ms = 0.02 }
[reflector]
relist_backoff = { dist = "constant", ms = 100 }
[resources.pods.stages.storage_to_cache]
service = { dist = "constant", ms = 0.3 }
[resources.pods.stages.handler]
service = { dist = "constant", ms = 0.2 }
[resources.pods.dispatch]
budget_refill_ms_per_s = 5
[resources.pods.stages.watcher_queue]
buffer = 7
[[watchers]]
name = "a"
client_queue = "workqueue"
[watchers.stages.watcher_queue]
buffer = 3
[watchers.stages.handler]
service = { dist = "constant", ms = 0.9 }
[[watchers]]
name = "b"
role = "scheduler"
[[watchers]]
name = "c"
role = "scheduler"
terminal_pods = true
""")
    config = load_config(path)
    a, b, c = config.watchers
    assert (a.client_queue, a.buffer) == (ClientQueue.WORKQUEUE, 3)
    assert (b.client_queue, b.buffer) == (ClientQueue.FIFO, None)
    # an observer's informer selects every pod, a scheduler's non-terminal pods, unless told
    assert [w.sees_terminal_pods for w in config.watchers] == [True, False, True]
    assert config.server == ServerSettings(buffer=50, capacity=5000, timeout_budget_ms=20.0,
                                           list_per_object=Constant(0.02))
    assert config.server_for("pods") == ServerSettings(
        buffer=7, capacity=5000, timeout_budget_ms=20.0, budget_refill_ms_per_s=5.0,
        list_per_object=Constant(0.02))
    assert config.server_for("nodes") == config.server
    assert config.reflector.relist_backoff == Constant(100.0)
    assert config.reflector.rewatch_delay == Constant(0.0)
    # the watcher's own costs over the resource's over the run's
    assert config.costs(a, "pods")["handler"]["service"] == Constant(0.9)
    assert config.costs(b, "pods")["handler"]["service"] == Constant(0.2)
    assert config.costs(b, "nodes")["handler"]["service"] == Exponential(0.1)
    assert config.costs(resource="pods")["storage_to_cache"]["service"] == Constant(0.3)
    described = config.describe()
    assert described["resources"]["pods"]["stages"]["watcher_queue"]["buffer"] == 7
    assert described["watch_cache"] == {"capacity": 5000}
    assert described["watchers"][0]["client_queue"] == "workqueue"
    assert [w.get("terminal_pods") for w in described["watchers"]] == [None, None, True]


def test_upstream_defaults_and_the_zero_profile(tmp_path):
    config = load_config()
    assert config.server == ServerSettings(buffer=None, capacity=None, timeout_budget_ms=100.0,
                                           budget_refill_ms_per_s=50.0,
                                           list_per_object=Constant(0.01))
    assert config.reflector.relist_backoff == Uniform(800.0, 1600.0)
    assert config.describe()["stages"]["watcher_queue"]["buffer"] == "upstream"
    zero = load_config(write(tmp_path, 'profile = "zero"'))
    assert zero.server.list_per_object == Constant(0.0)
    assert zero.reflector.relist_backoff == Constant(0.0)
    assert zero.server.timeout_budget_ms == 100.0  # not a cost: upstream's still


@pytest.mark.parametrize("text, message", [
    ("[stages.watcher_queue]\nbuffer = 0", "stages.watcher_queue.buffer: expected an integer >= 1"),
    ("[stages.handler]\nbuffer = 3", "stages.handler.buffer: unknown key"),
    ("[watch_cache]\ncapacity = 1.5", "watch_cache.capacity: expected an integer >= 1"),
    ("[dispatch]\ntimeout_budget_ms = -1", "dispatch.timeout_budget_ms: expected a number >= 0"),
    ("[dispatch]\nbudget = 1", "dispatch.budget: unknown key"),
    ("[list]\nper_object = 3", "list.per_object: expected a table"),
    ("[reflector]\nbackoff = { dist = \"constant\", ms = 1 }", "reflector.backoff: unknown key"),
    ("[resources.pods.stagez]\nx = 1", "resources.pods.stagez: unknown key"),
    ("[resources.pods.watch_cache]\ncapacity = 0", "resources.pods.watch_cache.capacity"),
    ("[[watchers]]\nname = \"a\"\nclient_queue = \"lifo\"",
     "watchers[0].client_queue: expected one of fifo, delta_fifo, workqueue"),
    ("[[watchers]]\nname = \"a\"\nterminal_pods = \"no\"",
     "watchers[0].terminal_pods: expected true or false"),
    ("[[watchers]]\nname = \"a\"\n[watchers.stages.watcher_queue]\nbuffer = -2",
     "watchers[0].stages.watcher_queue.buffer: expected an integer >= 1"),
])
def test_errors_under_load_name_the_key(tmp_path, text, message):
    with pytest.raises(ReplayError, match="run.toml") as err:
        load_config(write(tmp_path, text))
    assert message in str(err.value)


@pytest.mark.parametrize("text, message", [
    ("sede = 1", "sede: unknown key"),
    ("[stages.netwrk]\nlatency = { dist = \"constant\", ms = 1 }", "stages.netwrk: unknown stage"),
    ("[stages.network]\nlatncy = { dist = \"constant\", ms = 1 }", "stages.network.latncy: unknown key"),
    ("[stages.network]\nlatency = { dist = \"constant\", ms = -1 }", "stages.network.latency.ms: must not be negative"),
    ("[stages.network]\nlatency = { dist = \"lognormal\", median_ms = 2, p99_ms = 1 }",
     "stages.network.latency.p99_ms: 1.0 is below median_ms 2.0"),
    ("[stages.network]\nlatency = { dist = \"gamma\", ms = 1 }", "stages.network.latency.dist: expected one of"),
    ("[stages.handler]\nservice = { dist = \"exponential\" }", "stages.handler.service.mean_ms: required"),
    ("[stages.handler]\nservice = { dist = \"empirical\", ms = [1, 2], weights = [1] }",
     "stages.handler.service.weights: 1 weights for 2 values"),
    ("profile = \"fast\"", "profile: expected one of default, zero"),
    ("[[watchers]]\nname = \"a\"\nrole = \"king\"", "watchers[0].role: expected one of"),
    ("[[watchers]]\nrole = \"observer\"", "watchers[0].name: required"),
    ("[[watchers]]\nname = \"a\"\n[watchers.stages.cacher_queue]\nservice = { dist = \"constant\", ms = 1 }",
     "watchers[0].stages.cacher_queue: this stage is one queue per resource shared by all watchers"),
    ("[[watchers]]\nname = \"a\"\n[[watchers]]\nname = \"a\"", "the name 'a' is used twice"),
    ("watchers = []", "watchers: an empty list, which would replay to no one"),
    ("[[watchers]]\nname = \"a\"\nresources = []", "watchers[0].resources: expected a non-empty"),
    ("seed = [", "not valid TOML"),
])
def test_errors_name_the_key(tmp_path, text, message):
    with pytest.raises(ReplayError, match="run.toml") as err:
        load_config(write(tmp_path, text))
    assert message in str(err.value)


def test_a_byte_order_mark_is_not_part_of_the_file(tmp_path):
    """Windows' editors start a UTF-8 file with one; tomllib refused it ("Invalid statement")."""
    path = tmp_path / "run.toml"
    path.write_bytes(b"\xef\xbb\xbfseed = 3\n[model]\nname = \"kube\"\n")
    config = load_config(path)
    assert config.seed == 3 and config.model == "kube"


def test_missing_config_file(tmp_path):
    with pytest.raises(ReplayError, match="no such config file"):
        load_config(tmp_path / "nope.toml")


@pytest.mark.parametrize("item, expected", [
    ("schedulers=3", ("schedulers", 3)), ("rate=0.5", ("rate", 0.5)),
    ("policy=most-allocated", ("policy", "most-allocated")), ("flag=true", ("flag", True)),
    ("name_list=[1, 2]", ("name_list", [1, 2])),
])
def test_override_values_are_toml(item, expected):
    assert parse_override(item) == expected


@pytest.mark.parametrize("item", ["novalue", "=3", "name=kube"])
def test_bad_overrides(item):
    with pytest.raises(ReplayError):
        parse_override(item)


def test_dotted_keys_change_one_parameter_of_the_resolved_configuration(tmp_path):
    table = read_toml(write(tmp_path, """
[model]
name = "godel"
schedulers = 2
[stages.handler]
service = { dist = "constant", ms = 0.3 }
"""))
    config = config_from_table(table, {"stages.network.latency.p99_ms": 20,
                                       "stages.handler.service.ms": 0.5,
                                       "model.schedulers": 4, "model.name": "omega"})
    assert config.stages["network"]["latency"] == LogNormal(0.5, 20.0)  # the profile's median
    assert config.stages["handler"]["service"] == Constant(0.5)
    assert config.model == "omega" and config.model_params == {"schedulers": 4}
    assert table["model"]["schedulers"] == 2 and "network" not in table["stages"]
    zero = config_from_table({}, {"profile": "zero", "stages.network.latency.ms": 1})
    assert zero.stages["network"]["latency"] == Constant(1.0)


@pytest.mark.parametrize(("keys", "message"), [
    ({"stages.network.latency.p99_ms": 0.1}, "stages.network.latency.p99_ms: 0.1 is below median_ms 0.5"),
    ({"stages.netwrk.latency.p99_ms": 1}, "stages.netwrk: unknown stage"),
    ({"stages.network.latency.mean_ms": 1}, "stages.network.latency.mean_ms: unknown key for a lognormal"),
    ({"seed.x": 1}, "seed: not a table, so seed.x cannot be set"),
    ({"model..x": 1}, "'model..x': not a key"),
    ({"colour": "red"}, "colour: unknown key"),
])
def test_a_bad_dotted_key_is_named(keys, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        config_from_table({"seed": 3}, keys)
