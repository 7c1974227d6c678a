"""A file or directory whose name holds a glob's characters (``*``, ``?``, ``[``) is read as
itself, by every command.

DuckDB and polars read a path string as a glob: before, a run directory named ``r[1]`` was
queried as the run ``r1`` beside it, a trace named ``t[1].parquet`` was replayed as
``t1.parquet`` (under the manifest and checksum of ``t[1].parquet``), and with no such
neighbour, validation, CSV import and a sweep's resume said the file was not there.  Each case
here has such a neighbour, so that reading it instead is seen."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from replay.trace.synth import SynthSpec, synthesize

SMALL = SynthSpec(nodes=6, pods=40, arrival_rate=20.0, mean_lifetime=5.0)
DECOY = SynthSpec(nodes=2, pods=5, arrival_rate=20.0, mean_lifetime=5.0)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """``t[1].parquet`` (40 pods) beside ``t1.parquet`` (5 pods), which its glob matches."""
    folder = tmp_path_factory.mktemp("names")
    synthesize(SMALL, folder / "t[1].parquet")
    synthesize(DECOY, folder / "t1.parquet")
    return folder


@pytest.fixture(scope="module")
def runs(folder):
    """Runs named ``r[1]``, ``r*`` and ``r?`` of ``t[1].parquet`` (godel, omega, kube) beside
    ``r1`` and ``rx`` of the decoy (observe): every pattern matches a neighbour."""
    from replay.cli.main import main
    made = {"r[1]": "godel", "r*": "omega", "r?": "kube", "r1": "observe", "rx": "observe"}
    for name, model in made.items():
        trace = folder / ("t1.parquet" if name in ("r1", "rx") else "t[1].parquet")
        assert main(["run", str(trace), "--model", model, "--out", str(folder / name)]) == 0
    return made


def pods_in(run_dir: Path) -> int:
    return pq.read_metadata(run_dir / "pods.parquet").num_rows


def test_a_trace_is_replayed_itself(folder, runs):
    manifest = json.loads((folder / "r[1]" / "manifest.json").read_text())
    assert manifest["trace"]["path"].endswith("t[1].parquet")
    assert pods_in(folder / "r[1]") == 40 and pods_in(folder / "r1") == 5


def test_a_trace_alone_validates(cli, tmp_path, folder):
    shutil.copy(folder / "t[1].parquet", tmp_path / "t[1].parquet")
    result = cli("validate", tmp_path / "t[1].parquet")
    assert result.code == 0 and "valid trace v1" in result.out


@pytest.mark.parametrize("name", ["r[1]", "r*", "r?"])
def test_a_query_reads_that_run_only(cli, folder, runs, name, tmp_path):
    result = cli("query", folder / name, "conflict_rate", "--format", "csv")
    assert result.code == 0, result.err
    assert {line.split(",")[0] for line in result.out.splitlines()[1:]} == {name}
    sql = tmp_path / "pods.sql"
    sql.write_text("SELECT run, model, count(*) AS pods FROM pods GROUP BY ALL")
    pods = cli("query", folder / name, sql, "--format", "csv")
    assert pods.out.splitlines()[1:] == [f"{name},{runs[name]},40"], pods.err


def test_derive_and_check_read_that_run(cli, folder, runs):
    assert cli("derive", folder / "r[1]").code == 0
    assert cli("check", folder / "r[1]").code == 0


def test_report_reads_that_run(cli, folder, runs, tmp_path):
    pytest.importorskip("plotly", reason="the report extra is not installed")
    result = cli("report", folder / "r[1]", "--out", tmp_path / "r[1].html")
    assert result.code == 0, result.err
    assert "r[1]" in (tmp_path / "r[1].html").read_text()


def test_csv_files_are_imported(cli, tmp_path):
    pods = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
            "deletion_time,scheduled_time\np0,1000,1024,1,500,,LS,Running,0,10,1\n")
    nodes = "sn,cpu_milli,memory_mib,gpu,model\nn0,4000,8192,2,\n"
    for name, text in (("pods[1].csv", pods), ("nodes[1].csv", nodes),
                       ("pods1.csv", pods.replace("p0", "decoy")), ("nodes1.csv", nodes)):
        (tmp_path / name).write_text(text)
    out = tmp_path / "t[1].parquet"
    result = cli("import", "alibaba-gpu-2023", "--pods", tmp_path / "pods[1].csv",
                 "--nodes", tmp_path / "nodes[1].csv", "--out", out)
    assert result.code == 0, result.err
    assert "default/p0" in {f"{ns}/{n}" for ns, n in zip(
        *pq.read_table(out, columns=["namespace", "name"]).to_pydict().values())}


def test_a_sweep_resumes(cli, folder, tmp_path):
    sweep = tmp_path / "s[1].toml"
    sweep.write_text(f'trace = "{folder / "t[1].parquet"}"\nseeds = [1]\n'
                     f'[matrix]\nmodel = ["observe"]\n')
    (tmp_path / "sw1").mkdir()  # what sw[1]'s glob matches
    assert cli("sweep", sweep, "--out", tmp_path / "sw[1]").code == 0
    again = cli("sweep", sweep, "--out", tmp_path / "sw[1]", "--resume")
    assert again.code == 0 and "1 done" in again.out, again.err
