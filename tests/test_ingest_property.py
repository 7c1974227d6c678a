"""Hypothesis: ingest keeps exactly the writes' ResponseComplete events, once, with their values."""

from __future__ import annotations

import math
from fractions import Fraction

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay.trace.audit import ingest

from audit_events import event, pod, write_log
from conftest import budget

WRITES = ("create", "update", "patch", "delete", "deletecollection")
LEVELS = ("None", "Metadata", "Request", "RequestResponse")
STAGES = ("RequestReceived", "ResponseStarted", "ResponseComplete", "Panic")
OPTIONAL = ("userAgent", "requestReceivedTimestamp", "kind", "apiVersion", "responseStatus",
            "auditID", "user")
SUFFIX = {"": 1, "m": Fraction(1, 1000), "k": 1000, "M": 10**6, "G": 10**9, "Ki": 2**10,
          "Mi": 2**20, "Gi": 2**30}


@st.composite
def quantities(draw) -> tuple[object, Fraction]:
    """A quantity in one of Kubernetes' notations, and its exact value."""
    number = draw(st.integers(0, 4096))
    notation = draw(st.sampled_from(("suffix", "exponent", "decimal", "json")))
    if notation == "json":
        return number, Fraction(number)
    if notation == "exponent":
        exp = draw(st.integers(-3, 3))
        return f"{number}e{exp}", number * Fraction(10) ** exp
    if notation == "decimal":
        return f"{number / 4:.2f}", Fraction(number, 4)
    suffix = draw(st.sampled_from(sorted(SUFFIX)))
    return f"{number}{suffix}", number * Fraction(SUFFIX[suffix])


@st.composite
def audit_events(draw, index: int) -> tuple[dict, dict | None]:
    """An event and, when ingest must keep it, what its row must hold."""
    verb = draw(st.sampled_from(WRITES + ("get", "list", "watch", "impersonate")))
    stage = draw(st.sampled_from(STAGES))
    level = draw(st.sampled_from(LEVELS))
    cpu, cpu_value = draw(quantities())
    memory, memory_value = draw(quantities())
    body = pod([{"requests": {"cpu": cpu, "memory": memory}}]) if level in LEVELS[2:] else None
    e = event(verb=verb, stage=stage, level=level, name=f"p{index}", second=index / 10,
              audit_id=f"a{draw(st.integers(0, 30))}", request=body, code=draw(st.sampled_from((200, 201, 409))))
    for key in draw(st.sets(st.sampled_from(OPTIONAL))):
        e.pop(key, None)
    if draw(st.booleans()):
        del e["objectRef"]["name"]  # then the name comes from requestURI
    kept = stage == "ResponseComplete" and verb in WRITES and "responseStatus" in e
    if not kept:
        return e, None
    with_body = body is not None and verb in ("create", "update")
    return e, {"name": f"p{index}", "verb": verb, "code": e["responseStatus"]["code"],
               "audit_id": e.get("auditID"),
               "cpu_milli": math.ceil(cpu_value * 1000) if with_body else None,
               "memory_bytes": math.ceil(memory_value) if with_body else None}


@st.composite
def logs(draw):
    n = draw(st.integers(1, 25))
    return [draw(audit_events(i)) for i in range(n)]


@settings(max_examples=budget(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(log=logs())
def test_ingest_keeps_what_it_should(tmp_path_factory, log):
    folder = tmp_path_factory.mktemp("prop")
    path = write_log(folder / "a.log", [e for e, _ in log])
    summary = ingest([str(path)], folder / "t.parquet", workers=1)
    expected, seen = [], set()
    for _, row in log:
        if row is not None and (row["audit_id"] is None or row["audit_id"] not in seen):
            expected.append(row)
            seen.add(row["audit_id"])
    got = pl.read_parquet(folder / "t.parquet").select(list(expected[0]) if expected else ["name"])
    assert got.to_dicts() == expected
    assert summary.events == len(log) and summary.rows == len(expected)
