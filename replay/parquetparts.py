"""One Parquet file whose parts are encoded apart, on several threads, and joined: the same bytes
as one ``pq.ParquetWriter`` given the same parts in order.

pyarrow's writer encodes on the thread that calls it, one row group after another (Arrow's C++
writer can encode a row group's columns on several threads, but pyarrow does not expose it).
Everything in a Parquet file is a row group's own, its pages, dictionaries, statistics and
checksums, except the footer (the Thrift-encoded ``FileMetaData``), which lists every row group
and where each column chunk starts in the file.  So each part is written as a file of its own,
in memory (``encode``); the body of each, the bytes between its leading ``PAR1`` and its footer,
is appended to the real file in order; and the footer is the parts' footers made one
(``joined_footer``): their row groups listed in order, each offset moved by the bytes before
its part, the rows summed.  That is what the one writer would have written, byte for byte
(``tests/test_parquetparts.py`` compares the two), for the run directory's settings: a page
index, bloom filters or encryption, none of which it uses, the writer puts after every row
group, and a joined file would hold them between its parts instead (still a valid file, not the
same bytes).

The footer is read and written here in Thrift's compact protocol, with no schema: a struct is
kept as its fields in order, each with its number, wire type and value, so that writing it again
gives its bytes back, and only the offsets named below are changed (parquet.thrift's numbers).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

MAGIC = b"PAR1"
# parquet.thrift's field numbers: FileMetaData's rows and row groups; a RowGroup's columns and
# its offset; a ColumnChunk's metadata and its offsets; a ColumnMetaData's offsets.  An offset of
# 0 is one the writer did not set (a file's first byte is MAGIC's)
_FILE_ROWS, _FILE_ROW_GROUPS = 3, 4
_GROUP_COLUMNS, _GROUP_OFFSET = 1, 5
_CHUNK_META = 3
_CHUNK_OFFSETS = (2, 4, 6)  # file_offset, offset_index_offset, column_index_offset
# data_page_offset, index_page_offset, dictionary_page_offset, bloom_filter_offset
_META_OFFSETS = (9, 10, 11, 14)


class Wire(IntEnum):
    """Thrift's compact protocol: the type of a field as written on the wire."""

    STOP = 0
    TRUE = 1
    FALSE = 2
    BYTE = 3
    I16 = 4
    I32 = 5
    I64 = 6
    DOUBLE = 7
    BINARY = 8
    LIST = 9
    SET = 10
    MAP = 11
    STRUCT = 12


# a struct: its fields in the order written, each [number, wire type, value]; a list's value is
# (element type, elements); a flag's value is a bool
Struct = list[list[Any]]


@dataclass(frozen=True)
class EncodedPart:
    """One part written as a file of its own: its row groups' bytes and its footer, read."""

    body: memoryview
    footer: Struct


def encode(part: pa.Table, options: dict[str, Any], row_group_rows: int) -> EncodedPart:
    """``part`` written, in memory, as ``pq.ParquetWriter(..., **options).write_table(part,
    row_group_size=row_group_rows)`` writes it (pyarrow releases the GIL while it encodes)."""
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, part.schema, **options) as writer:
        writer.write_table(part, row_group_size=row_group_rows)
    data = memoryview(sink.getvalue()).cast("B")  # (pyarrow's buffers give signed bytes)
    (length,) = struct.unpack_from("<i", data, len(data) - 8)
    footer_start = len(data) - 8 - length
    footer, end = _read_struct(data, footer_start)
    if end != len(data) - 8 or bytes(data[:4]) != MAGIC:
        raise ValueError("pyarrow wrote a Parquet file this module cannot read")
    return EncodedPart(data[4:footer_start], footer)


def joined_footer(footers: Sequence[Struct], sizes: Sequence[int]) -> bytes:
    """The footer of the file made of the parts' bodies in order, after MAGIC, given each
    part's footer and its body's size: the first part's footer with every part's row groups,
    moved to where their bytes now are, and the rows of all; then its length and MAGIC."""
    joined = [list(field) for field in footers[0]]  # (its row groups are replaced, not copied)
    groups: list[Struct] = []
    rows = before = 0
    for footer, size in zip(footers, sizes, strict=True):
        for group in _value(footer, _FILE_ROW_GROUPS)[1]:
            groups.append(_moved(group, before))
        rows += _value(footer, _FILE_ROWS)
        before += size
    _set(joined, _FILE_ROWS, rows)
    _set(joined, _FILE_ROW_GROUPS, (Wire.STRUCT, groups))
    out = bytearray()
    _write_struct(out, joined)
    return bytes(out) + struct.pack("<i", len(out)) + MAGIC


def _moved(group: Struct, by: int) -> Struct:
    """A copy of row group ``group`` with every offset it records ``by`` bytes later.  Only the
    structs on the way to an offset are copied, the rest (statistics, encodings, paths) shared:
    a deep copy of every part's row groups was two thirds of joining a footer, which a
    derived table's writer does alone after its last part (0.14 s for the 135 row groups of the
    1M-pod observe run's capacity windows)."""
    group = _shifted(group, (_GROUP_OFFSET,), by)
    columns = _field(group, _GROUP_COLUMNS)
    kind, chunks = columns[2]
    columns[2] = (kind, [_moved_chunk(chunk, by) for chunk in chunks])
    return group


def _moved_chunk(chunk: Struct, by: int) -> Struct:
    chunk = _shifted(chunk, _CHUNK_OFFSETS, by)
    meta = _field(chunk, _CHUNK_META)
    meta[2] = _shifted(meta[2], _META_OFFSETS, by)
    return chunk


def _shifted(fields: Struct, numbers: tuple[int, ...], by: int) -> Struct:
    """A copy of a struct's fields (their values shared) with the offsets ``numbers`` that are
    set moved ``by``."""
    return [[number, wire, value + by if number in numbers and value else value]
            for number, wire, value in fields]


def _field(fields: Struct, number: int) -> list[Any]:
    """The field ``number`` of a struct, as [number, wire type, value]."""
    for field in fields:
        if field[0] == number:
            return field
    raise ValueError(f"a Parquet footer without its field {number}")


def _value(fields: Struct, number: int) -> Any:
    return _field(fields, number)[2]


def _set(fields: Struct, number: int, value: Any) -> None:
    _field(fields, number)[2] = value


# -- Thrift's compact protocol ----------------------------------------------------------------
def _read_struct(data: memoryview, at: int) -> tuple[Struct, int]:
    fields: Struct = []
    number = 0
    while True:
        header = data[at]
        at += 1
        if header == Wire.STOP:
            return fields, at
        wire, delta = header & 0x0F, header >> 4
        if delta:
            number += delta
        else:
            raw, at = _read_varint(data, at)
            number = _unzigzag(raw)
        value, at = _read_value(data, at, wire)
        fields.append([number, Wire(wire), value])


def _read_value(data: memoryview, at: int, wire: int) -> tuple[Any, int]:
    if wire in (Wire.TRUE, Wire.FALSE):
        return wire == Wire.TRUE, at
    if wire == Wire.BYTE:
        return data[at], at + 1
    if wire in (Wire.I16, Wire.I32, Wire.I64):
        raw, at = _read_varint(data, at)
        return _unzigzag(raw), at
    if wire == Wire.DOUBLE:
        return bytes(data[at:at + 8]), at + 8
    if wire == Wire.BINARY:
        size, at = _read_varint(data, at)
        return bytes(data[at:at + size]), at + size
    if wire in (Wire.LIST, Wire.SET):
        return _read_list(data, at)
    if wire == Wire.STRUCT:
        return _read_struct(data, at)
    raise ValueError(f"a Parquet footer with a Thrift field of wire type {wire}")


def _read_list(data: memoryview, at: int) -> tuple[tuple[Wire, list[Any]], int]:
    header = data[at]
    at += 1
    size, element = header >> 4, Wire(header & 0x0F)
    if size == 15:
        size, at = _read_varint(data, at)
    items: list[Any] = []
    for _ in range(size):
        if element in (Wire.TRUE, Wire.FALSE):  # a flag in a list is a byte of its own
            items.append(data[at] == Wire.TRUE)
            at += 1
        else:
            item, at = _read_value(data, at, element)
            items.append(item)
    return (element, items), at


def _read_varint(data: memoryview, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def _unzigzag(raw: int) -> int:
    return (raw >> 1) ^ -(raw & 1)


def _write_struct(out: bytearray, fields: Struct) -> None:
    previous = 0
    for number, wire, value in fields:
        if wire in (Wire.TRUE, Wire.FALSE):
            wire = Wire.TRUE if value else Wire.FALSE
        if 0 < number - previous <= 15:
            out.append((number - previous) << 4 | wire)
        else:
            out.append(wire)
            _write_varint(out, _zigzag(number))
        if wire not in (Wire.TRUE, Wire.FALSE):
            _write_value(out, wire, value)
        previous = number
    out.append(Wire.STOP)


def _write_value(out: bytearray, wire: Wire, value: Any) -> None:
    if wire == Wire.BYTE:
        out.append(value)
    elif wire in (Wire.I16, Wire.I32, Wire.I64):
        _write_varint(out, _zigzag(value))
    elif wire == Wire.DOUBLE:
        out += value
    elif wire == Wire.BINARY:
        _write_varint(out, len(value))
        out += value
    elif wire in (Wire.LIST, Wire.SET):
        element, items = value
        if len(items) < 15:
            out.append(len(items) << 4 | element)
        else:
            out.append(0xF0 | element)
            _write_varint(out, len(items))
        for item in items:
            if element in (Wire.TRUE, Wire.FALSE):
                out.append(Wire.TRUE if item else Wire.FALSE)
            else:
                _write_value(out, element, item)
    elif wire == Wire.STRUCT:
        _write_struct(out, value)
    else:
        raise ValueError(f"a Parquet footer with a Thrift field of wire type {wire}")


def _write_varint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)


def _zigzag(value: int) -> int:
    return (value << 1) ^ (value >> 63)
