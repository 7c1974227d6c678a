"""Percentiles the shipped queries compute without ``quantile_cont``, bit for bit as it would.

``delay_cdf`` counts each role's delays and interpolates between two neighbours with
``quantile_between`` (views.sql), which must be DuckDB's own interpolation to the last bit: a
fused multiply-add, emulated in plain doubles.  The emulation is checked against exact rational
arithmetic, the interpolation against ``quantile_cont`` on two values, and the query against the
``quantile_cont`` it replaces on a run whose plain interpolation would differ.  And
``reaction_lag``'s write keys (views.sql) sort and read back as their (instant, rv).
"""

from __future__ import annotations

import datetime as dt
import functools
import math
from fractions import Fraction

import duckdb
import polars as pl
from hypothesis import example, given, settings
from hypothesis import strategies as st

from replay.analysis.catalog import load_query, views_sql
from replay.analysis.runs import open_runs, run_query, set_variables
from replay.api import run_replay
from replay.engine.config import load_config

from conftest import budget
from test_check import STRESS, godel_run_of_the_sample
from test_queries import sample_prefix


@functools.cache
def macros() -> duckdb.DuckDBPyConnection:
    """A connection with views.sql's scalar macros (its views and table macros need runs)."""
    con = duckdb.connect()
    for statement in duckdb.extract_statements(views_sql()):
        if "CREATE OR REPLACE MACRO" in statement.query and "AS TABLE" not in statement.query:
            con.execute(statement.query)
    return con


def exact_fma(a: float, b: float, c: float) -> float:
    """a * b + c rounded once (float() of a Fraction rounds to nearest, ties to even)."""
    return float(Fraction(a) * Fraction(b) + Fraction(c))


def doubles(low: int = -60, high: int = 60) -> st.SearchStrategy[float]:
    """Doubles of either sign with a full or a short mantissa (short ones make exact products
    and ties), far from overflow and underflow, or zero."""
    mantissas = st.one_of(st.integers(2**52, 2**53 - 1), st.integers(1, 2**12))
    finite = st.builds(lambda m, e, negative: (-1) ** negative * math.ldexp(m, e - 52),
                       mantissas, st.integers(low, high), st.booleans())
    return st.one_of(finite, st.just(0.0))


@settings(max_examples=budget(100), deadline=None)
@given(st.lists(st.tuples(doubles(), doubles(), doubles()), min_size=1, max_size=50),
       st.data())
@example([(1.0 + 2**-52, 1.0 - 2**-53, -1.0)], None)  # exact result far below either rounding
# a * b = 2^-53 - 2^-113: adding it to c lands on a tie in two roundings, just below it in one
# (what the rounding to odd is for)
@example([(1.0 + 2**-30, 2**-53 * (1.0 - 2**-30), 1.0 + 2**-52)], None)
def test_fused_multiply_add_rounds_once(triples, data):
    if data is not None:  # c = -a * b plus a little: the sum cancels, ties and near-ties
        tweak = data.draw(st.lists(doubles(-120, -40), min_size=len(triples),
                                   max_size=len(triples)))
        triples += [(a, b, -(a * b) + t) for (a, b, _), t in zip(triples, tweak)]
    got = macros().execute(
        "SELECT fused_multiply_add(a, b, c) FROM (SELECT unnest(?::DOUBLE[][]) AS t) "
        "CROSS JOIN LATERAL (SELECT t[1] AS a, t[2] AS b, t[3] AS c) ORDER BY ALL",
        [[list(t) for t in triples]]).fetchall()
    assert sorted(v for (v,) in got) == sorted(exact_fma(*t) for t in triples)


@settings(max_examples=budget(50), deadline=None)
@given(st.integers(0, 10**10), st.integers(0, 10**7),
       st.lists(st.floats(0, 1, exclude_min=True, exclude_max=True), min_size=1, max_size=30))
def test_quantile_between_is_quantile_conts_interpolation(lo_us, gap_us, fractions):
    """Between two delays in milliseconds (whole microseconds / 1000.0, as the queries divide),
    at any fraction of the way."""
    lo, hi = lo_us / 1000.0, (lo_us + gap_us) / 1000.0
    con = macros()
    (expected,) = con.execute(f"SELECT quantile_cont(x, {fractions!r}) "
                              "FROM (VALUES (?::DOUBLE), (?::DOUBLE)) AS t(x)", [lo, hi]).fetchone()
    got = [con.execute("SELECT quantile_between(?::DOUBLE, ?::DOUBLE, ?::DOUBLE)",
                       [lo, hi, d]).fetchone()[0] for d in fractions]
    assert got == expected


QUANTILE_CONT_CDF = """
SELECT run, watcher_role, unnest(cdf_fractions()) AS fraction,
       unnest(quantile_cont(end_to_end, cdf_fractions())) AS delay_ms, count(*) AS events
FROM delivery_delays
GROUP BY run, watcher_role
ORDER BY run, watcher_role, fraction
"""

PLAIN_INTERPOLATION = ("CREATE OR REPLACE MACRO quantile_between(lo, hi, d) AS "
                       "lo * (1 - d) + hi * d")


def test_delay_cdf_is_quantile_cont_bit_for_bit(tmp_path):
    """On a run where interpolating with two roundings would move some points by an ulp."""
    out = tmp_path / "run"
    run_replay(sample_prefix(tmp_path, seconds=20.0), load_config(model="godel"), out=out)
    con = open_runs([str(out)])
    expected = con.sql(QUANTILE_CONT_CDF).pl()
    got = run_query(con, load_query("delay_cdf"), {}).pl()
    assert got.height == expected.height > 300
    assert got.schema == expected.schema
    assert_bits_equal(got, expected)

    plain = duckdb.connect()
    plain.execute("SET VARIABLE run_dirs = ?", [[str(out)]])
    plain.execute(views_sql())
    plain.execute(PLAIN_INTERPOLATION)
    moved = plain.sql(load_query("delay_cdf").sql).pl()
    assert not moved["delay_ms"].equals(expected["delay_ms"])


STAGES = ("storage_to_cache", "cacher_queue", "watcher_queue", "network", "client_queue",
          "handler", "end_to_end")

# per_component_delay as it was written before it counted: delay_stats of every stage, each
# selected by quantile_cont among every delivery
DELAY_STATS_OF_EACH_STAGE = f"""
WITH per_role AS (
    SELECT run, watcher_role, count(*) AS events,
           [{", ".join(f"delay_stats({stage})" for stage in STAGES)}] AS stats
    FROM delivery_delays_us
    WHERE in_time_window(commit_ts) AND watcher_selected(watcher)
    GROUP BY run, watcher_role
), per_component AS (
    SELECT run, watcher_role, events, stats[7].mean_ms AS end_to_end_mean_ms,
           unnest({list(STAGES)!r}) AS component, unnest(range(1, 8)) AS position,
           unnest(stats, recursive := true)
    FROM per_role
)
SELECT run, watcher_role, component, events, mean_ms, percentiles[1] AS p50_ms,
       percentiles[2] AS p90_ms, percentiles[3] AS p99_ms, max_ms,
       mean_ms / nullif(end_to_end_mean_ms, 0) AS share
FROM per_component
ORDER BY run, watcher_role, position
"""


def test_per_component_delay_is_delay_stats_bit_for_bit(tmp_path):
    """Counted, per_component_delay is every stage's delay_stats to the last bit: on two runs
    at once (one whose watches are terminated again and again), and with each parameter."""
    godel = godel_run_of_the_sample(tmp_path, dt.timedelta(seconds=17.5), STRESS)
    observe = tmp_path / "observe"
    run_replay(tmp_path / "trace.parquet", load_config(model="observe"), out=observe)
    con = open_runs([str(godel), str(observe)])
    [(start,)] = con.execute("SELECT min(commit_ts) FROM deliveries").fetchall()
    for variables in ({}, {"watcher": "godel-scheduler-*"},
                      {"from_ts": start + dt.timedelta(seconds=2),
                       "to_ts": start + dt.timedelta(seconds=9)}):
        got = run_query(con, load_query("per_component_delay"), variables).pl()
        expected = con.sql(DELAY_STATS_OF_EACH_STAGE).pl()
        assert got.height == expected.height >= 7, variables
        assert got.schema == expected.schema
        assert_bits_equal(got, expected)
        set_variables(con, dict.fromkeys(variables))


delays = st.integers(-2_000, 2_000) | st.integers(-4 * 10**15, 4 * 10**15)


@settings(max_examples=budget(40), deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(["binder", "scheduler"]),
                          st.lists(delays, min_size=len(STAGES), max_size=len(STAGES))),
                min_size=1, max_size=60))
def test_counted_percentiles_are_quantile_conts(deliveries):
    """Whatever the delays (ties, one delivery, negative, far apart, a mean of 0), the counted
    per_component_delay answers what delay_stats does, bit for bit."""
    con = macros()
    con.execute(
        "CREATE OR REPLACE TABLE delivery_delays_us AS SELECT d.run, d.role AS watcher_role, "
        "d.role AS watcher, TIMESTAMPTZ '2026-01-01 00:00:00+00' AS commit_ts, "
        + ", ".join(f"d.us[{i}] AS {stage}" for i, stage in enumerate(STAGES, 1))
        + " FROM (SELECT unnest(?::STRUCT(run VARCHAR, role VARCHAR, us BIGINT[])[]) AS d)",
        [[{"run": run, "role": role, "us": us} for run, role, us in deliveries]])
    con.execute("CREATE OR REPLACE TABLE watchers AS SELECT DISTINCT run, watcher_role AS role "
                "FROM delivery_delays_us")
    got = con.sql(load_query("per_component_delay").sql).pl()
    assert_bits_equal(got, con.sql(DELAY_STATS_OF_EACH_STAGE).pl())


def assert_bits_equal(got: pl.DataFrame, expected: pl.DataFrame) -> None:
    """Same rows, in the same order, every float the same double (repr tells them apart)."""
    assert repr(got.rows()) == repr(expected.rows())


@settings(max_examples=budget(50), deadline=None)
@given(st.lists(st.tuples(st.integers(-2**62, 2**62), st.integers(0, 2**63 - 1)), min_size=2,
                max_size=20))
def test_write_keys_sort_as_their_instant_and_version(writes):
    """reaction_lag's maxima of write_key are the latest (instant, rv), before 1970 too, and
    the key reads back as both."""
    got = macros().execute(
        "SELECT write_key_us(key), write_key_rv(key) FROM ("
        "  SELECT write_key(make_timestamptz(w[1]), w[2]) AS key"
        "  FROM (SELECT unnest(?::BIGINT[][]) AS w)) ORDER BY key",
        [[list(w) for w in writes]]).fetchall()
    assert got == sorted(writes)
