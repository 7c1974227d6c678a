"""Shared test helpers: run the command line in-process, find the shared real data; hypothesis
profiles.

Hypothesis profiles (``HYPOTHESIS_PROFILE``): ``ci``, the default and what ``.ci/run`` selects,
is derandomised (the same examples on every run) with each test's bounded number of examples;
``thorough`` is for a local hunt for bugs: random examples, twenty times as many
(``HYPOTHESIS_PROFILE=thorough pytest tests/test_consistency.py``).  A failure either finds is
pinned with ``@example`` in its test.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest
from hypothesis import settings

from replay.cli.main import main
from replay.trace.io import write_trace

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("REPLAY_SHARED_DATA", REPO.parent / "shared" / "data"))
SAMPLE_TRACE = REPO / "traces" / "sample.parquet"

settings.register_profile("ci", derandomize=True, deadline=None, database=None,
                          print_blob=True)
settings.register_profile("thorough", deadline=None)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
settings.load_profile(PROFILE)


def budget(examples: int) -> int:
    """A test's number of examples: as given, or twenty times as many under ``thorough``."""
    return examples * 20 if PROFILE == "thorough" else examples


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys):
    """Run ``replay ARGS...`` in this process and return its exit code, stdout and stderr."""

    def run(*args: str) -> Result:
        try:
            code = main([str(a) for a in args])
        except SystemExit as exit_:  # argparse usage errors and --help
            code = exit_.code if isinstance(exit_.code, int) else 1
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


def dist_info(root: Path, name: str, entry_points: str) -> Path:
    """An installed distribution ``name`` in ``root`` (put it on sys.path) whose entry points
    are ``entry_points``, the text of its entry_points.txt; returns its .dist-info folder."""
    info = root / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)
    return info


def shared_data(*parts: str) -> Path:
    """A path under the shared real data, or skip the test when that data is not here."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared data not available: {path}")
    return path


CUT_S = 120  # where the sample trace is cut to make a log of a running cluster


def cut_sample(path, bodies: bool = False):
    """The sample trace from ``CUT_S`` on (its node creates kept): a log begun while 1,376 of
    its pods ran.  With ``bodies``, each such pod's delete says its node and requests, as a
    RequestResponse-level log's delete does (its ``responseObject``)."""
    sample = pl.read_parquet(SAMPLE_TRACE)
    cut = sample["ts"].min() + dt.timedelta(seconds=CUT_S)
    node_creates = (pl.col("resource") == "nodes") & (pl.col("verb") == "create")
    kept = sample.filter((pl.col("ts") >= cut) | node_creates)
    if bodies:
        before = sample.filter(pl.col("resource") == "pods", pl.col("ts") < cut)
        said = before.filter(pl.col("subresource").is_null(), verb="create").select(
            "name", "cpu_milli", "memory_bytes", "gpu_milli").join(
            before.filter(subresource="binding").select("name", bound="node"), on="name",
            how="left")
        is_delete = (pl.col("resource") == "pods") & (pl.col("verb") == "delete") \
            & pl.col("subresource").is_null() & pl.col("cpu_milli_said").is_not_null()
        kept = kept.join(said, on="name", how="left", suffix="_said", maintain_order="left")
        kept = kept.with_columns(
            *(pl.when(is_delete).then(pl.col(f"{c}_said")).otherwise(c).alias(c)
              for c in ("cpu_milli", "memory_bytes", "gpu_milli")),
            pl.when(is_delete).then("bound").otherwise("node").alias("node"),
        ).select(sample.columns)
    write_trace(kept, path, source="test", source_args={})
    return sample, cut
