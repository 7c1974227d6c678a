"""Time ``replay ingest`` on a large generated audit log and print events/s and peak memory.

    python benchmarks/ingest.py [--size 2G] [--log PATH] [--workers 2] [--repeat 3] [--compare]

Generates the log with ``make_audit_log.py`` unless ``--log`` names one (it is kept for reuse),
ingests it ``--repeat`` times, and prints for each run the wall time and the CPU time (user +
system) of this process and its worker processes, as events per second, the peak resident memory
of this process and the peak of this process and its workers together (sampled every 0.1 s), and
the load average before the run.  On a shared machine wall times grow with the load, and so does
CPU time, less; the best of several runs is the figure to quote.  ``--compare`` also times the
candidate JSON decoders on the first 200 MB of the log (decoding only, no rows), the numbers that
chose msgspec.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path

from common import TreeMemory, cpu_seconds, emit
from make_audit_log import parse_size, write_log

from replay.trace.audit import ingest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=parse_size, default=parse_size("2G"))
    parser.add_argument("--log", type=Path, help="audit log to use (made if missing)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1, help="ingest this many times")
    parser.add_argument("--compare", action="store_true", help="also time JSON decoders")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=Path(args.log).parent if args.log else None) as tmp:
        log = args.log or Path(tmp) / "audit.log"
        if not log.exists():
            write_log(log, args.size)
        for _ in range(args.repeat):
            run(log, Path(tmp) / "trace.parquet", args.workers)
        if args.compare:
            compare_decoders(log)


def run(log: Path, out: Path, workers: int) -> None:
    """Ingest ``log`` once and print wall and CPU time, events per second and peak memory."""
    load = os.getloadavg()[0]
    cpu_before = cpu_seconds()
    with TreeMemory() as memory:
        started = time.perf_counter()
        summary = ingest([str(log)], out, workers=workers)
        elapsed = time.perf_counter() - started
    cpu = cpu_seconds() - cpu_before
    me = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"ingest: {log.stat().st_size / 2**30:.2f} GiB, {summary.events:,} events -> "
          f"{summary.rows:,} rows, workers={workers}, load average before {load:.1f}")
    print(f"  wall {elapsed:.1f} s ({summary.events / elapsed:,.0f} events/s)  "
          f"cpu {cpu:.1f} s ({summary.events / cpu:,.0f} events per cpu-second)  "
          f"peak RSS {me:,.0f} MiB (with workers {memory.peak / 2**20:,.0f} MiB)", flush=True)
    emit(log_bytes=log.stat().st_size, events=summary.events, rows=summary.rows, seconds=elapsed,
         events_per_s=summary.events / elapsed, cpu_s=cpu, peak_rss_mib=me,
         tree_peak_rss_mib=memory.peak / 2**20)


def compare_decoders(log: Path, size: int = 200 * 2**20) -> None:
    """Events per second of each way to decode the log's lines (no filtering, no rows)."""
    import duckdb
    import msgspec
    import orjson
    import polars as pl

    from replay.trace.audit.event import Event, Head

    data = log.open("rb").read(size)
    data = data[:data.rfind(b"\n") + 1]
    sample = Path(tempfile.mkstemp(suffix=".json")[1])
    sample.write_bytes(data)
    lines = data.count(b"\n")
    candidates = {
        "json (stdlib dicts)": lambda: [json.loads(x) for x in data.splitlines()],
        "orjson (dicts)": lambda: [orjson.loads(x) for x in data.splitlines()],
        "msgspec Head struct, per line": lambda: [msgspec.json.Decoder(Head).decode(x)
                                                  for x in data.splitlines()],
        "msgspec Event struct, decode_lines": lambda: msgspec.json.Decoder(Event).decode_lines(data),
        "polars read_ndjson (4 columns)": lambda: pl.read_ndjson(
            sample, schema={"stage": pl.String, "verb": pl.String, "auditID": pl.String,
                            "stageTimestamp": pl.String}),
        "duckdb read_json (6 columns)": lambda: duckdb.sql(
            f"SELECT count(*) FROM read_json('{sample}', format='newline_delimited', columns="
            "{stage:'VARCHAR', verb:'VARCHAR', auditID:'VARCHAR', stageTimestamp:'VARCHAR', "
            "objectRef:'STRUCT(resource VARCHAR, name VARCHAR)', requestObject:'JSON'})").fetchall(),
    }
    for name, decode in candidates.items():
        started = time.perf_counter()
        decode()
        print(f"  {name:38s} {lines / (time.perf_counter() - started):>12,.0f} events/s")
    sample.unlink()


if __name__ == "__main__":
    main()
