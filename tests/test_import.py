"""`replay import alibaba-gpu-2023` on the real trace, and the importers' CSV errors."""

from __future__ import annotations

import sys

import polars as pl
import pytest

from replay.trace.importers import importers
from replay.trace.validate import validate

from conftest import dist_info, shared_data


def alibaba(cli, out, *extra):
    folder = shared_data("alibaba-gpu-v2023")
    return cli("import", "alibaba-gpu-2023", "--pods", folder / "openb_pod_list_default.csv",
               "--nodes", folder / "openb_node_list_all_node.csv", "--out", out, *extra)


def test_alibaba_trace_counts_and_validates(cli, tmp_path):
    out = tmp_path / "ali.parquet"
    result = alibaba(cli, out)
    assert result.code == 0, result.err
    assert "1,523 create nodes, 8,152 create pods, 8,152 delete pods" in result.out
    assert validate(out) == []
    assert cli("validate", out).code == 0
    trace = pl.read_parquet(out)
    creates = trace.filter(verb="create", resource="pods")
    assert creates["scheduled_ts"].null_count() == 897  # the pods that never ran
    assert trace["ts"].min().isoformat() == "2023-01-01T00:00:00+00:00"
    pod = creates.filter(name="openb-pod-0001").row(0, named=True)  # num_gpu 1, gpu_milli 460
    assert (pod["cpu_milli"], pod["memory_bytes"], pod["gpu_milli"]) == (6000, 12288 * 2**20, 460)
    node = trace.filter(resource="nodes").row(0, named=True)
    assert node["name"] == node["node"] == "openb-node-0000" and node["gpu_milli"] == 0
    assert creates["gpu_milli"].max() == 8000  # eight whole GPUs
    first = alibaba(cli, tmp_path / "again.parquet", "--start", "2023-01-01T00:00:00Z")
    assert first.code == 0 and (tmp_path / "again.parquet").read_bytes() == out.read_bytes()


def test_start_moves_the_epoch(cli, tmp_path):
    out = tmp_path / "ali.parquet"
    assert alibaba(cli, out, "--start", "2024-06-01T12:00:00").code == 0
    assert pl.read_parquet(out)["ts"].min().isoformat() == "2024-06-01T12:00:00+00:00"


@pytest.mark.parametrize("start, first", [
    ("2024-06-01T12:00:00.25", "2024-06-01T12:00:00.250000+00:00"),
    ("1969-12-31T23:59:59.5", "1969-12-31T23:59:59.500000+00:00")])
def test_a_start_with_a_fraction_of_a_second_is_kept(cli, tmp_path, start, first):
    """Before 1970 too, where truncating the float timestamp moved it half a second."""
    out = tmp_path / "ali.parquet"
    assert alibaba(cli, out, "--start", start).code == 0
    assert pl.read_parquet(out)["ts"].min().isoformat() == first


PODS_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
               "deletion_time,scheduled_time\n")


def import_small(cli, tmp_path, pods, nodes):
    """``replay import`` of the two CSV files given as text; the result and the trace's path."""
    (tmp_path / "pods.csv").write_text(pods)
    (tmp_path / "nodes.csv").write_text(nodes)
    out = tmp_path / "t.parquet"
    return cli("import", "alibaba-gpu-2023", "--pods", tmp_path / "pods.csv", "--nodes",
               tmp_path / "nodes.csv", "--out", out), out


@pytest.mark.parametrize("nodes, message", [
    ("sn,cpu_milli,memory_mib,model\nn0,1000,1024,\n", "no column 'gpu' in the header"),
    ("sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,0,\nn1,lots,1024,0,\n",
     "nodes.csv:3: column cpu_milli: 'lots' is not an integer"),
    ("sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,-1,\n", "nodes.csv:2: column gpu is negative"),
    ("sn,cpu_milli,memory_mib,gpu,model\nn0,,1024,1,\n", "nodes.csv:2: column cpu_milli is empty"),
    (b"PAR1\x15\x00\x15", "nodes.csv: not text (byte 5), so not a CSV file"),  # a trace
    (b"sn,cpu\xc0_milli", "nodes.csv: not text (byte 6), so not a CSV file"),
    ("sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,1,\nn1,1,1,1,\nn0,2000,1024,1,\n",
     "nodes.csv:4: column sn: 'n0' names the object of line 2 again"),
    ('sn,cpu_milli,memory_mib,gpu,model\n"",1000,1024,1,\n', "nodes.csv:2: column sn is empty"),
    ("sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,3000000000,\n",
     "nodes.csv:2: column gpu is 3000000000: too large: the trace's value would overflow its "
     "32-bit column"),
    ("sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,1,\nn,1,1000,1024,1,\n",
     "nodes.csv:3: 6 fields, but the header names 5 (a comma in an unquoted value?)"),
    (b"\xef\xbb\xbfsn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,1,\nn,1,1000,1024,1,\n",
     "nodes.csv:3: 6 fields"),
])
def test_csv_errors_name_file_line_and_column(cli, tmp_path, nodes, message):
    (tmp_path / "nodes.csv").write_bytes(nodes if isinstance(nodes, bytes) else nodes.encode())
    (tmp_path / "pods.csv").write_text(PODS_HEADER + "p0,1000,1024,1,500,,LS,Running,0,10,1\n")
    out = tmp_path / "t.parquet"
    result = cli("import", "alibaba-gpu-2023", "--pods", tmp_path / "pods.csv", "--nodes",
                 tmp_path / "nodes.csv", "--out", out)
    assert result.code == 1 and message in result.err and result.err.count("\n") == 1
    assert not out.exists()


@pytest.mark.parametrize("pods, message", [
    ("p0,1000,1024,1,500,,LS,Running,0,10,1\np0,1000,1024,1,500,,LS,Running,5,20,6\n",
     "pods.csv:3: column name: 'p0' names the object of line 2 again"),
    ("p0,1000,1024,3000000000,1,,LS,Running,0,10,1\n", "pods.csv:2: column num_gpu is 3000000000"),
])
def test_pod_rows_that_are_not_one_pod_each(cli, tmp_path, pods, message):
    result, out = import_small(cli, tmp_path, PODS_HEADER + pods,
                               "sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,1,\n")
    assert result.code == 1 and message in result.err and "Traceback" not in result.err
    assert not out.exists()


def test_lists_with_a_header_alone_give_an_empty_trace(cli, tmp_path):
    result, out = import_small(cli, tmp_path, PODS_HEADER, "sn,cpu_milli,memory_mib,gpu,model\n")
    assert result.code == 0, result.err
    assert pl.read_parquet(out).height == 0 and validate(out) == []


def test_missing_file_and_registry(cli, tmp_path):
    result = cli("import", "alibaba-gpu-2023", "--pods", tmp_path / "no.csv", "--nodes",
                 tmp_path / "no.csv", "--out", tmp_path / "t.parquet")
    assert result.code == 1 and "no.csv: no such file" in result.err
    assert "alibaba-gpu-2023" in importers()[0]
    assert cli("import", "alibaba-gpu-2023", "--help").code == 0


PLUGIN = '''
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from replay.trace.importers.base import Imported, Importer


@dataclass(frozen=True)
class Options:
    nodes: int = field(metadata={"help": "how many nodes"})


class Tiny(Importer[Options]):
    name = "tiny"
    help = "a few nodes"
    description = "A few node creates at time zero."
    options = Options

    def inputs(self, options):
        return []

    def source_args(self, options):
        return {"nodes": str(options.nodes)}

    def rows(self, options):
        rows = pl.DataFrame({"ts": [0] * options.nodes, "verb": "create", "resource": "nodes",
                             "name": [f"n{i}" for i in range(options.nodes)],
                             "component": "kubelet", "code": 201})
        rows = rows.with_columns(pl.col("ts").cast(pl.Datetime("us", "UTC")),
                                 pl.col("code").cast(pl.Int32))
        return Imported(rows, [f"{options.nodes} nodes and no pods"])
'''


def test_an_importer_plugin_gets_typed_options_and_returns_warnings(cli, tmp_path, monkeypatch):
    (tmp_path / "tiny_importer.py").write_text(PLUGIN)
    info = dist_info(tmp_path, "tiny-importer", "[replay.importers]\ntiny = tiny_importer:Tiny\n"
                     "broken = no_such_module:Importer\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found, warnings = importers()
    assert "tiny" in found and any("'broken' cannot be loaded" in w for w in warnings)
    (tmp_path / "tiny_again.py").write_text("from tiny_importer import Tiny\n\n\n"
                                            "class Again(Tiny):\n    pass\n")
    with (info / "entry_points.txt").open("a") as points:
        points.write("ali = replay.trace.importers.alibaba_gpu_2023:AlibabaGpu2023\n"
                     "again = tiny_again:Again\n")
    found, warnings = importers()
    assert "importer 'again' (tiny_again:Again) is not used: tiny_importer.Tiny has its name " \
        "'tiny' (built-ins come first, then packages by name, each in its own order)" in warnings
    assert not any("'ali'" in w for w in warnings)  # the built-in itself, under another name
    sys.modules.pop("tiny_again", None)
    result = cli("import", "tiny", "--nodes", "3", "--out", tmp_path / "t.parquet")
    assert result.code == 0, result.err
    assert "wrote" in result.out and "3 create nodes" in result.out
    assert "replay: warning: 3 nodes and no pods" in result.err
    assert cli("validate", tmp_path / "t.parquet").code == 0
    assert cli("import", "tiny", "--nodes", "x", "--out", tmp_path / "u.parquet").code == 2
    no_code = ",\n                                 pl.col(\"code\").cast(pl.Int32)"
    (tmp_path / "tiny_importer.py").write_text(
        PLUGIN.replace(', "code": 201', "").replace(no_code, ""))
    sys.modules.pop("tiny_importer", None)
    bad = cli("import", "tiny", "--nodes", "2", "--out", tmp_path / "v.parquet")
    assert bad.code == 1 and "importer 'tiny': " in bad.err and "'code'" in bad.err
    assert not (tmp_path / "v.parquet").exists()
    sys.modules.pop("tiny_importer", None)
    (tmp_path / "tiny_importer.py").write_text(PLUGIN.replace('"create"', '"creat"'))
    bad = cli("import", "tiny", "--nodes", "2", "--out", tmp_path / "w.parquet")
    assert bad.code == 1 and "importer 'tiny': verb not one of create, update" in bad.err
    assert not (tmp_path / "w.parquet").exists()  # what `replay validate` would refuse
    sys.modules.pop("tiny_importer", None)
