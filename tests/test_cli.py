"""The command line's conventions: --help everywhere, one-line errors, python -m replay."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import SAMPLE_TRACE
from replay.cli.main import build_parser, command_names


def subcommands() -> list[str]:
    return sorted(command_names(build_parser()))


@pytest.mark.parametrize("command", subcommands())
def test_every_command_has_help(cli, command):
    result = cli(command, "--help")
    assert result.code == 0
    assert f"usage: replay {command}" in result.out


def test_python_dash_m_runs_the_cli():
    done = subprocess.run([sys.executable, "-m", "replay", "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "synth" in done.stdout


def test_the_cli_starts_without_the_engine_or_numba():
    """A command imports what it runs when it runs: building the parser, as every command does
    first, loads neither numba nor the models and their engine (half of ``replay query``'s
    1.3 s on a small run, before)."""
    done = subprocess.run([sys.executable, "-c", (
        "import sys; from replay.cli.main import build_parser; build_parser(); "
        "print(sorted(m for m in ('numba', 'replay.models', 'replay.engine.api', "
        "'replay.calibrate', 'replay.sweep') if m in sys.modules))")],
        capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_bad_input_is_one_line_without_traceback(tmp_path):
    junk = tmp_path / "junk.parquet"
    junk.write_text("hello")
    done = subprocess.run([sys.executable, "-m", "replay", "validate", str(junk)],
                          capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "not a readable Parquet file" in done.stderr
    assert "Traceback" not in done.stderr


def test_validate_exit_status_follows_the_verdict(cli, tmp_path):
    from test_trace_format import rows, write

    good = write(tmp_path / "good.parquet", rows())
    bad = write(tmp_path / "bad.parquet", rows(cpu_milli=[-1, -1, -1]))
    assert cli("validate", good).code == 0
    result = cli("validate", bad)
    assert result.code == 1 and "negative cpu_milli" in result.out


def test_replay_trace_runs_and_answers(cli, tmp_path, monkeypatch):
    """``replay TRACE``: the default model into the default run directory, then the headline
    answers; run again, it replaces that run directory; run options work after the trace."""
    monkeypatch.chdir(tmp_path)
    first = cli(SAMPLE_TRACE)
    assert first.code == 0, first.err
    assert "wrote runs/sample-observe" in first.out
    for headline in ("per_component_delay:", "conflict_rate:", "stale_capacity_by_role:"):
        assert headline in first.out
    again = cli(SAMPLE_TRACE, "--model", "oracle", "-p", "policy=most-allocated")
    assert again.code == 0, again.err and "wrote runs/sample-oracle" in again.out
    assert cli(SAMPLE_TRACE).code == 0  # replaces runs/sample-observe


def test_replay_trace_refuses_what_replay_run_refuses(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    missing = cli(tmp_path / "nope.parquet")
    assert missing.code == 1 and missing.err.count("\n") == 1 and "no such file" in missing.err
    (tmp_path / "runs" / "sample-observe").mkdir(parents=True)
    (tmp_path / "runs" / "sample-observe" / "mine.txt").write_text("keep me")
    taken = cli(SAMPLE_TRACE)
    assert taken.code == 1 and "not a run directory" in taken.err
    assert (tmp_path / "runs" / "sample-observe" / "mine.txt").read_text() == "keep me"


def test_help_shows_replay_trace_first(cli):
    result = cli("--help")
    assert result.code == 0 and result.out.startswith("usage: replay TRACE")


def test_a_misspelt_command_is_a_usage_error_not_a_missing_trace(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    typo = cli("rnu", "t.parquet")
    assert typo.code == 2 and "'rnu' is neither a command nor a trace file (did you mean " \
        "'run'?)" in typo.err
    word = cli("frobnicate")
    assert word.code == 2 and "(commands: synth, ingest, import," in word.err
    assert cli("t.parquet").err.endswith("t.parquet: no such file\n")  # a path: a trace
    (tmp_path / "rnu").write_bytes(b"not parquet")
    assert "rnu: not a readable Parquet file" in cli("rnu").err  # a file of that name: a trace
    helped = cli("help")
    assert helped.code == 0 and helped.out.startswith("usage: replay TRACE")


def test_characters_the_terminal_lacks_are_escaped_not_a_traceback():
    done = subprocess.run([sys.executable, "-m", "replay", "models"], capture_output=True,
                          text=True, env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert done.returncode == 0 and "G\\xf6del" in done.stdout, done.stderr


def test_a_current_directory_that_is_not_utf8_is_one_line(tmp_path):
    here = os.fsencode(tmp_path) + b"/d\xff"
    os.mkdir(here)
    done = subprocess.run([sys.executable, "-m", "replay", "run", str(SAMPLE_TRACE), "--out", "r"],
                          cwd=here, capture_output=True, text=True, errors="replace")
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "the current directory " in done.stderr and "d\\xff: not UTF-8" in done.stderr
    assert os.listdir(here) == []


@pytest.mark.parametrize("args", [
    ["synth", "--out", "-"], ["ingest", "a.log", "--out", "-"], ["run", "t.parquet", "--out", "-"],
    ["t.parquet", "--out", "-"], ["report", "run", "--out", "-"],
    ["report", "run", "--out", "r.html", "--static", "-"], ["sweep", "s.toml", "--out", "-"],
    ["calibrate", "a.prom", "--out", "-"],
    ["import", "alibaba-gpu-2023", "--pods", "p.csv", "--nodes", "n.csv", "--out", "-"],
])
def test_an_output_of_dash_is_refused_not_a_file_named_dash(cli, tmp_path, monkeypatch, args):
    """``-`` reads as standard output; it became a file (or a run directory) named ``-``."""
    monkeypatch.chdir(tmp_path)
    result = cli(*args)
    assert result.code == 2
    assert "- is standard output, where this command cannot write" in result.err
    assert list(tmp_path.iterdir()) == []


def test_query_out_dash_is_standard_output(cli, tmp_path, monkeypatch):
    run = tmp_path / "run"
    assert cli("run", SAMPLE_TRACE, "--model", "oracle", "--out", run).code == 0
    monkeypatch.chdir(tmp_path)
    result = cli("query", run, "conflict_rate", "--format", "csv", "--out", "-")
    assert result.code == 0 and result.out.startswith("run,scheduler,attempts")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
