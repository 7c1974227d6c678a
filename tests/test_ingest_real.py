"""`replay ingest` on real audit logs from public repositories (../shared/data/audit-samples/)."""

from __future__ import annotations

import json

import polars as pl

from replay.trace.validate import validate

from conftest import shared_data

WRITES = {"create", "update", "patch", "delete", "deletecollection"}
MALFORMED = "fal_01_003.json"


def falco_files():
    return sorted(p for p in shared_data("audit-samples", "falco").glob("*.json")
                  if p.name != MALFORMED)


def expected_rows(paths) -> list[tuple]:
    """(verb, resource, code) of each write's ResponseComplete, found with the json module.

    Some samples hold the same event (same auditID) in two files: it counts once.
    """
    rows = {}
    for path in paths:
        for line in path.read_text().splitlines():
            if line.strip():
                e = json.loads(line)
                if e["stage"] == "ResponseComplete" and e["verb"] in WRITES:
                    row = (e["verb"], e["objectRef"]["resource"], e["responseStatus"]["code"])
                    rows.setdefault(e["auditID"], row)
    return list(rows.values())


def test_every_valid_falco_event_is_read(cli, tmp_path):
    files = falco_files()
    out = tmp_path / "falco.parquet"
    result = cli("ingest", *files, "--out", out)
    assert result.code == 0, result.err
    events = sum(1 for p in files for line in p.read_text().splitlines() if line.strip())
    assert f"from {events} audit events" in result.out
    trace = pl.read_parquet(out)
    assert sorted(trace.select("verb", "resource", "code").rows()) == sorted(expected_rows(files))
    assert validate(out) == []
    assert "ResponseStarted 2" in result.err  # exec and attach


def test_falco_pod_bodies_give_requests_and_scheduler(cli, tmp_path):
    out = tmp_path / "pods.parquet"
    path = shared_data("audit-samples", "falco", "create_nginx_pod_privileged.json")
    assert cli("ingest", path, "--out", out).code == 0
    row = pl.read_parquet(out).row(0, named=True)
    assert (row["cpu_milli"], row["memory_bytes"], row["gpu_milli"]) == (0, 0, 0)  # BestEffort
    assert row["scheduler_name"] == "default-scheduler"
    assert row["component"] == "controller-manager"  # the replicaset-controller account
    assert row["name"] == "nginx-deployment-5cdcc99dbf-rgw6z"  # from the response: generateName


def test_malformed_falco_file_is_reported_by_file_and_line(cli, tmp_path):
    out = tmp_path / "x.parquet"
    result = cli("ingest", *falco_files()[:3], shared_data("audit-samples", "falco", MALFORMED),
                 "--out", out)
    assert result.code == 1
    assert result.err.startswith("replay: error: ") and f"{MALFORMED}:1: not an audit event" in result.err
    assert "key kind" in result.err and result.err.count("\n") == 1
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_cloud_logging_wrappers_are_named(cli, tmp_path):
    log = shared_data("audit-samples", "elastic-test-audit.log")
    out = tmp_path / "x.parquet"
    result = cli("ingest", log, "--out", out)
    assert result.code == 1 and "elastic-test-audit.log:4: not an audit event: a Google Cloud" in result.err
    assert not out.exists()
    skipped = cli("ingest", log, "--skip-bad-lines", "--keep-reads", "--out", out)
    assert skipped.code == 0
    assert "bad lines skipped: 2" in skipped.err and "from 3 audit events" in skipped.out
    # the three plain events share one auditID: kept once, the first
    assert pl.read_parquet(out)["ts"].dt.strftime("%Y-%m-%d").to_list() == ["2025-03-04"]


def test_old_logs_without_stage_timestamps_use_timestamp(cli, tmp_path):
    log = shared_data("audit-samples", "audit2rbac-demo.log")
    out = tmp_path / "rbac.parquet"
    result = cli("ingest", log, "--keep-reads", "--out", out)
    assert result.code == 0, result.err
    trace = pl.read_parquet(out)
    assert "from 37 audit events" in result.out and "non-resource request): 23" in result.err
    assert trace.height == 14 and trace.filter(pl.col("code") == 403).height == 11
    assert validate(out) == []
