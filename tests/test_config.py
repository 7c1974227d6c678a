"""Run configuration: profiles, overrides and errors that name the key."""

from __future__ import annotations

import pytest

from replay.engine.config import load_config, parse_override
from replay.engine.distributions import Constant, Exponential, LogNormal
from replay.errors import ReplayError


def write(tmp_path, text):
    path = tmp_path / "run.toml"
    path.write_text(text)
    return path


def test_defaults_are_the_documented_profile():
    config = load_config()
    assert config.stages["network"]["latency"] == LogNormal(0.5, 5.0)
    assert config.stages["storage_to_cache"]["service"] == Exponential(0.02)
    assert config.watchers is None and config.seed == 0


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
    ("seed = [", "not valid TOML"),
])
def test_errors_name_the_key(tmp_path, text, message):
    with pytest.raises(ReplayError, match="run.toml") as err:
        load_config(write(tmp_path, text))
    assert message in str(err.value)


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
