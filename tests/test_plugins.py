"""Third-party models: the example in docs/models.md, installed as a package's entry point."""

from __future__ import annotations

import re
import sys

import polars as pl

from replay import models

from conftest import REPO, SAMPLE_TRACE, dist_info


def install_example(root):
    """A package with the docs' example model and an entry point naming it, on sys.path."""
    code = re.search(r"```python\n(.*?)```", (REPO / "docs" / "models.md").read_text(), re.S)
    package = root / "first_fit_example"
    package.mkdir()
    (package / "__init__.py").write_text(code.group(1))
    dist_info(root, "first-fit-example",
              "[replay.models]\nfirst-fit = first_fit_example:FirstFitModel\n")


def test_a_plugin_model_is_found_listed_and_run(cli, tmp_path, monkeypatch):
    install_example(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert "first-fit" in models.registered()
        listed = cli("models").out
        assert "first-fit: One scheduler binding each pod" in listed
        assert "think_ms = 2.0: time to decide one pod" in listed
        result = cli("run", SAMPLE_TRACE, "--model", "first-fit", "-p", "think_ms=5",
                     "--out", tmp_path / "run")
        assert result.code == 0, result.err
        attempts = pl.read_parquet(tmp_path / "run" / "attempts.parquet")
        bound = attempts.filter(pl.col("outcome") == "bound")
        assert bound.height > 4000
        assert ((bound["decided_ts"] - bound["started_ts"]).dt.total_microseconds() == 5000).all()
        assert bound["forgotten_ts"].is_not_null().all()
    finally:
        sys.modules.pop("first_fit_example", None)


def test_a_broken_plugin_is_one_line(cli, tmp_path, monkeypatch):
    dist_info(tmp_path, "broken", "[replay.models]\nbroken = no_such_module:Model\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    result = cli("run", SAMPLE_TRACE, "--model", "broken", "--out", tmp_path / "run")
    assert result.code == 1 and "model 'broken'" in result.err and "failed to load" in result.err
    assert "broken: cannot be loaded" in cli("models").out


def test_a_name_two_packages_register_is_refused(cli, tmp_path, monkeypatch):
    """A plugin that registers a built-in's name would run in its place, or not, by the order of
    sys.path: neither runs, and both packages are named."""
    dist_info(tmp_path, "squatter", "[replay.models]\ngodel = squatter:Model\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    result = cli("run", SAMPLE_TRACE, "--model", "godel", "--out", tmp_path / "run")
    assert result.code == 1 and not (tmp_path / "run").exists()
    assert "model 'godel' is registered by k8s-watch-replay (replay.models.godel:GodelModel) " \
        "and squatter (squatter:Model): uninstall one" in result.err
    assert "godel: cannot be loaded: model 'godel' is registered by" in cli("models").out
    assert cli("run", SAMPLE_TRACE, "--model", "kube", "--out", tmp_path / "kube").code == 0
