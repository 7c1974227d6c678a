"""A Parquet file's parts encoded apart and joined (``replay.parquetparts``) must be the file one
``pq.ParquetWriter`` writes from the same parts, byte for byte: the derived tables are written
so, and their bytes must not depend on how (the manifests' digests, the golden tables' hashes)."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay import parquetparts
from replay.engine.rundir import JoinedTableFile, TableFile, writer_options
from conftest import budget

TS = pa.timestamp("us", tz="UTC")


def _table(rows: int, columns: int, seed: int) -> pa.Table:
    """``columns`` columns of the kinds the run tables hold: sorted integers, times, plain and
    dictionary strings, doubles and flags, some with nulls."""
    rng = np.random.default_rng(seed)
    makers = [
        lambda: pa.array(np.sort(rng.integers(0, 10**9, rows))),
        lambda: pa.array(np.cumsum(rng.integers(0, 10**4, rows))).cast(TS),
        lambda: pa.array([None if rng.random() < 0.1 else f"pod-{rng.integers(50)}"
                          for _ in range(rows)]),
        lambda: pa.DictionaryArray.from_arrays(
            pa.array(rng.integers(0, 3, rows).astype(np.int32)), ["a", "b", "c"]),
        lambda: pa.array(rng.random(rows).round(rng.integers(0, 4))),
        lambda: pa.array(rng.random(rows) < 0.3),
        lambda: pa.array([None if rng.random() < 0.2 else int(v)
                          for v in rng.integers(-5, 5, rows)], pa.int64()),
    ]
    return pa.table({f"c{i}": makers[i % len(makers)]() for i in range(columns)})


def _one_writer(parts: list[pa.Table], options: dict, row_group_rows: int) -> bytes:
    sink = io.BytesIO()
    with pq.ParquetWriter(sink, parts[0].schema, **options) as writer:
        for part in parts:
            writer.write_table(part, row_group_size=row_group_rows)
    return sink.getvalue()


def _joined(parts: list[pa.Table], options: dict, row_group_rows: int) -> bytes:
    encoded = [parquetparts.encode(part, options, row_group_rows) for part in parts]
    return (parquetparts.MAGIC + b"".join(bytes(e.body) for e in encoded)
            + parquetparts.joined_footer([e.footer for e in encoded],
                                         [len(e.body) for e in encoded]))


@settings(max_examples=budget(60), deadline=None)
@given(sizes=st.lists(st.integers(0, 40), min_size=1, max_size=24),
       columns=st.integers(1, 17), row_group_rows=st.integers(1, 50), seed=st.integers(0, 99))
def test_parts_joined_are_the_one_writers_file(sizes, columns, row_group_rows, seed):
    """Parts of any size (empty ones too; larger than a row group, so a part makes several),
    up to 17 columns and hundreds of row groups: lists past 15 items and list headers past a
    signed byte's range in the footer."""
    table = _table(sum(sizes), columns, seed)
    parts, start = [], 0
    for size in sizes:
        parts.append(table.slice(start, size))
        start += size
    options = writer_options(table)
    joined = _joined(parts, options, row_group_rows)
    assert joined == _one_writer(parts, options, row_group_rows)
    assert pq.read_table(io.BytesIO(joined)).equals(pq.read_table(io.BytesIO(
        _one_writer([table], options, 1 << 20))))


def test_a_footer_read_and_written_again_is_its_bytes():
    encoded = parquetparts.encode(_table(100, 17, 1), writer_options(_table(1, 17, 1)), 3)
    data = parquetparts.joined_footer([encoded.footer], [len(encoded.body)])
    footer, end = parquetparts._read_struct(memoryview(data), 0)
    assert end == len(data) - 8 and footer == encoded.footer


@pytest.mark.parametrize("encoders", [1, 2, 3])
def test_a_joined_table_file_writes_the_table_files_bytes(tmp_path, encoders):
    """``JoinedTableFile`` (the derived tables') against ``TableFile`` (one writer), and each
    one's digest against its file."""
    import hashlib

    table = _table(5_000, 9, 4)
    parts = [table.slice(start, 700) for start in range(0, 5_000, 700)]
    files = {"one": TableFile(tmp_path / "one.parquet"),
             "joined": JoinedTableFile(tmp_path / "joined.parquet", ahead=2, encoders=encoders)}
    for file in files.values():
        for part in parts:
            file.add(part)
        file.close()
    data = {name: file.path.read_bytes() for name, file in files.items()}
    assert data["joined"] == data["one"] == _one_writer(parts, writer_options(table), 1 << 20)
    assert files["joined"].digest == files["one"].digest == {
        "bytes": len(data["one"]), "sha256": hashlib.sha256(data["one"]).hexdigest()}


def test_an_abandoned_joined_table_file_leaves_no_thread_and_closes_its_file(tmp_path):
    import threading

    file = JoinedTableFile(tmp_path / "t.parquet", encoders=2)
    for _ in range(6):
        file.add(_table(20_000, 9, 5))
    file.abandon()
    assert not [t for t in threading.enumerate() if t.name.startswith("replay-table-")]
    assert file._file is None or file._file.closed
